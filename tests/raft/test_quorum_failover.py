"""A real 3-controller quorum of processes: failover under writes, catch-up, and identical metadata logs."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster

# Fake brokers stay live without heartbeats for the whole test: these tests are about the quorum.
LONG_SESSIONS = ["--session-timeout-ms", "600000"]


def stop_all_active_last(q) -> None:
    """SIGTERM every controller, the active one last: an active controller stopped while others run hands
    leadership over, and the successor's takeover NoOp would then be in some files and not others."""
    active = q.active_id()
    for i in sorted(q.ids, key=lambda i: i == active):
        assert q.stop(i) == 0, f"controller {i} did not stop cleanly: {q.tail(i)}"  # SIGTERM: a clean stop


def test_failover_under_writes_loses_no_acknowledged_write(
    quorum_factory, fake_brokers_factory, admin_writer_factory, topics_that_exist, wait
):
    q = quorum_factory(extra_args=LONG_SESSIONS)
    first = q.wait_active()
    fake_brokers_factory(q).register_live([1, 2, 3])
    writer = admin_writer_factory(q, topics_per_request=2)
    with writer.writing():
        wait(lambda: len(writer.acked) >= 30, 30, f"30 acknowledged writes ({writer!r})")
        q.kill(first)  # SIGKILL the active controller while writes flow
        acked_at_kill = len(writer.acked)
        second = q.wait_active(30)
        assert second != first
        wait(
            lambda: len(writer.acked) >= acked_at_kill + 30,
            30,
            f"30 writes accepted by the new controller ({writer!r})",
        )

    q.start(first)  # the killed controller comes back and catches up
    q.wait_all_serving()
    def common_end():
        ends = {q.end_offset(i) for i in q.ids}
        return ends.pop() if len(ends) == 1 else None

    wait(q.registrations_done, 30, "every controller's directory id recorded")
    assert wait(common_end, 30, "all three metadata logs at the same end offset") > 0

    print(f"requests: {len(writer.acked)} acked, {len(writer.failed)} failed, {len(writer.unknown)} unknown")
    names = writer.all_names(writer.acked + writer.failed + writer.unknown)
    for i in q.ids:
        writer.check(topics_that_exist(q, i, names))
    batches = {i: q.fetch_all(i) for i in q.ids}
    assert batches[1] == batches[2] == batches[3]

    # Every controller's files hold the same records in the same order.
    stop_all_active_last(q)
    files = {i: q.read_log_files(i) for i in q.ids}
    assert files[1] == files[2] == files[3] == batches[1]
    epochs = [b.controller_epoch for b in files[1]]
    assert epochs == sorted(epochs) and len(set(epochs)) >= 2  # the failover shows in the log


def test_snapshot_install_fills_the_log_of_a_controller_that_was_away(
    quorum_factory, fake_brokers_factory, admin_writer_factory, topics_that_exist, wait
):
    # pysyncobj compacts its journal every 20 entries, so a controller that misses 150 of them can only
    # catch up from the leader's snapshot; its metadata log must still get every batch.
    q = quorum_factory(extra_args=[*LONG_SESSIONS, "--raft-compaction-entries", "20"])
    active = q.wait_active()
    fake_brokers_factory(q).register_live([1, 2, 3])
    away = next(i for i in q.ids if i != active)
    q.kill(away)
    writer = admin_writer_factory(q)
    # Settle first: a late election just after start can time out a write in flight (outcome unknown).
    wait(lambda: writer.write_once(timeout_s=10) == "acked", 30, "the quorum to accept a write")
    for _ in range(150):
        assert writer.write_once(timeout_s=10) == "acked"
    q.start(away)
    q.wait_all_serving()
    wait(q.registrations_done, 30, "every controller's directory id recorded")
    wait(
        lambda: len({q.end_offset(i) for i in q.ids}) == 1,
        60,
        "the returning controller to reach the others' end offset",
    )
    names = writer.all_names(writer.acked)
    assert topics_that_exist(q, away, names) == names
    assert q.fetch_all(away) == q.fetch_all(active)
    stop_all_active_last(q)
    output = q.log_path(away).read_text()
    assert "fetching metadata offsets" in output and "loaded <RaftSnapshot" in output
    assert q.read_log_files(away) == q.read_log_files(active)
