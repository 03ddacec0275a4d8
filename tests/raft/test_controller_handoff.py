"""SIGTERM of the active controller under writes: it hands Raft leadership to another voter before it exits
(pysyncobj's TimeoutNow transfer, ControllerServer._hand_off_leadership), exits 0, loses no acknowledged
write, and the quorum goes on with a new active controller."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.cluster

LONG_SESSIONS = ["--session-timeout-ms", "600000"]
HANDED_OVER = re.compile(r"handed Raft leadership over: controller (\d+) leads")


def test_sigterm_of_the_active_controller_hands_leadership_over_and_loses_nothing(
    quorum_factory, fake_brokers_factory, admin_writer_factory, topics_that_exist, wait
):
    q = quorum_factory(extra_args=LONG_SESSIONS)
    first = q.wait_active()
    fake_brokers_factory(q).register_live([1, 2, 3])
    writer = admin_writer_factory(q, topics_per_request=2)
    with writer.writing():
        wait(lambda: len(writer.acked) >= 30, 30, f"30 acknowledged writes ({writer!r})")
        assert q.stop(first, timeout_s=30) == 0  # SIGTERM while writes flow
        handed = HANDED_OVER.findall(q.log_path(first).read_text(errors="replace"))
        assert handed, f"controller {first} exited without handing leadership over:\n{q.tail(first)}"
        successor = int(handed[-1])
        assert successor != first and successor in q.ids
        acked_at_stop = len(writer.acked)
        assert q.wait_active(30) == successor
        wait(
            lambda: len(writer.acked) >= acked_at_stop + 30,
            30,
            f"30 writes accepted after the stop ({writer!r})",
        )

    q.start(first)  # back on its data, as a follower
    q.wait_all_serving()
    wait(q.registrations_done, 30, "every controller's directory id recorded")

    def common_end():
        ends = {q.end_offset(i) for i in q.ids}
        return ends.pop() if len(ends) == 1 else None

    wait(common_end, 30, "all three metadata logs at the same end offset")
    names = writer.all_names(writer.acked + writer.failed + writer.unknown)
    for i in q.ids:
        writer.check(topics_that_exist(q, i, names))
    batches = {i: q.fetch_all(i) for i in q.ids}
    assert batches[1] == batches[2] == batches[3]
