"""The group coordinator on its runtime (coordinator_runtime.py), over a real replica manager without
sockets (tests/broker/coordinator_broker.py): a bug in its timer stops the process exactly as one in the
transaction coordinator's does (test_transaction_coordinator.py), through the injected hook and, for real,
with exit status 70. The loader's own tests are in test_group_loader.py."""

from __future__ import annotations

from tests.broker.coordinator_broker import (
    SESSION_TIMEOUT_MS,
    check_a_timer_bug_exits_a_real_process_with_70,
    check_a_timer_bug_stops_the_process,
    check_the_ticker_thread_stops_the_process_and_ends,
)


def test_an_unexpected_error_in_the_group_timer_stops_the_process(coordinators):
    check_a_timer_bug_stops_the_process(coordinators, "group", "session and join deadlines")


def test_the_group_ticker_thread_stops_the_process_and_ends(coordinators):
    check_the_ticker_thread_stops_the_process_and_ends(coordinators, "group")


def test_an_unexpected_error_in_the_group_timer_exits_the_process_with_70(tmp_path):
    check_a_timer_bug_exits_a_real_process_with_70("group", tmp_path)


def test_a_member_session_expires_by_the_injected_clock_alone(coordinators):
    coordinators.stable_member()
    coordinators.clock.advance(SESSION_TIMEOUT_MS - 1)
    coordinators.groups.tick()
    assert coordinators.group_state() == ("Stable", 1)
    coordinators.clock.advance(1)
    coordinators.groups.tick()
    assert coordinators.group_state() == ("Empty", 0)
    assert coordinators.stop.calls == []
