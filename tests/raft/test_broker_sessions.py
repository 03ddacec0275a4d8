"""BrokerSessions (pure): a takeover starts every session afresh; times never go back."""

from __future__ import annotations

from kanal.raft.broker_sessions import BrokerSessions


def test_takeover_starts_every_session_at_the_takeover_time_and_forgets_older_times():
    sessions = BrokerSessions()
    sessions.touch(1, 1_000)
    sessions.touch(9, 1_000)  # a broker the new image no longer has
    sessions.start_all([1, 2, 3], 50_000)
    assert dict(sessions.last_heartbeat_ms) == {1: 50_000, 2: 50_000, 3: 50_000}


def test_touch_never_moves_a_session_back_and_ensure_only_fills_gaps():
    sessions = BrokerSessions()
    sessions.start_all([1], 5_000)
    sessions.touch(1, 4_000)  # a late, older heartbeat
    assert sessions.last_heartbeat_ms[1] == 5_000
    sessions.ensure([1, 2], 6_000)
    assert dict(sessions.last_heartbeat_ms) == {1: 5_000, 2: 6_000}
