"""Without a majority of controllers nothing is written: writes fail within their deadline with a clear
error, nothing is half-applied, and only writes whose outcome was reported unknown may appear later."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster


def test_with_two_of_three_down_writes_fail_and_nothing_is_half_applied(
    quorum_factory, fake_brokers_factory, admin_writer_factory, topics_that_exist, wait
):
    q = quorum_factory(extra_args=["--session-timeout-ms", "600000", "--request-timeout-ms", "1500"])
    active = q.wait_active()
    fake_brokers_factory(q).register_live([1, 2, 3])
    writer = admin_writer_factory(q, topics_per_request=3)  # three topics per request: all or none
    # Just after start a late peer can call one more election, which times out writes in flight (their
    # outcome is unknown, which the final check allows). Once a write is acknowledged the quorum is settled.
    wait(lambda: writer.write_once() == "acked", 30, "the new quorum to accept a write")
    for _ in range(20):
        assert writer.write_once() == "acked"

    # The two standbys go away: the active controller is left alone and cannot commit anything.
    for i in q.ids:
        if i != active:
            q.kill(i)
    first = writer.write_once(timeout_s=2.5)
    assert first == "unknown"  # proposed, never committed: REQUEST_TIMED_OUT
    # It steps down after a few election timeouts; from then on writes fail at once, certainly unapplied.
    wait(
        lambda: writer.write_once(timeout_s=2.5) == "failed",
        30,
        "writes to fail with CONTROLLER_NOT_AVAILABLE",
    )
    for _ in range(5):
        assert writer.write_once(timeout_s=2.5) == "failed"
    failed_while_down = len(writer.failed)

    for i in q.ids:
        if i != active:
            q.start(i)
    q.wait_active()
    q.wait_all_serving()
    # The rejoining controllers may force one more election; once a write is acknowledged, every write
    # must be (none may fail any more).
    wait(lambda: writer.write_once(timeout_s=10) == "acked", 30, "the recovered quorum to accept a write")
    failed_before_recovery = len(writer.failed)
    for _ in range(5):
        assert writer.write_once(timeout_s=10) == "acked"
    assert len(writer.failed) == failed_before_recovery
    assert failed_while_down >= 6

    names = writer.all_names(writer.acked + writer.failed + writer.unknown)
    for i in q.ids:
        wait(lambda i=i: q.end_offset(i) == q.end_offset(q.wait_active()), 30, f"controller {i} caught up")
        existing = topics_that_exist(q, i, names)
        writer.check(existing)
        # The timed-out writes are exactly the ones whose fate was open; report which way they went.
        unknown_present = [g for g in writer.unknown if set(g) <= existing]
        print(
            f"controller {i}: {len(writer.unknown)} unknown-outcome requests, {len(unknown_present)} applied"
        )
