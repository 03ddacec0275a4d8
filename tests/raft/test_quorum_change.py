"""Controller quorum changes on real controller processes: AddVoter / RemoveVoter under metadata writes,
the refusals (nothing changed), and a restart that keeps the new voter set."""

from __future__ import annotations

import grpc

from kanal.v1 import admin_pb2, controller_pb2, operations_pb2
from kanal.v1.error import ErrorCode

LONG_SESSIONS = ["--session-timeout-ms", "600000"]
# Snapshots (pysyncobj dumps with the membership) every few KiB of metadata, so a restart loads one.
SMALL_SNAPSHOTS = ["--metadata-snapshot-interval-bytes", "4096"]


def describe(q, i) -> admin_pb2.DescribeQuorumResponse:
    return q.stub(i).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=2)


def voter_ids(q, i) -> list[int]:
    return sorted(v.controller_id for v in describe(q, i).voters)


def image_voters(q, i) -> list[int]:
    """The voter set in controller i's committed image (its VoterSetRecord; [] before any change)."""
    snapshot = (
        q.stub(i).DescribeMetadataImage(controller_pb2.DescribeMetadataImageRequest(), timeout=5).snapshot
    )
    found = [r.voter_set for r in snapshot.records if r.WhichOneof("record") == "voter_set"]
    return sorted(v.controller_id for v in found[-1].voters) if found else []


def add_voter(q, via: int, new: int, timeout_s: float = 20.0) -> operations_pb2.AddVoterResponse:
    return q.stub(via).AddVoter(
        operations_pb2.AddVoterRequest(controller_id=new, raft_endpoint=f"127.0.0.1:{q.raft_port[new]}",
                                       grpc_endpoint=q.endpoint(new)),
        timeout=timeout_s,
    )


def remove_voter(q, via: int, gone: int, timeout_s: float = 20.0) -> operations_pb2.RemoveVoterResponse:
    return q.stub(via).RemoveVoter(operations_pb2.RemoveVoterRequest(controller_id=gone), timeout=timeout_s)


def converged(q, ids: list[int], expected: list[int]) -> bool:
    """Every controller in `ids` reports `expected` as the voters, in its image and in DescribeQuorum, and
    a leader among them."""
    for i in ids:
        quorum = describe(q, i)
        if sorted(v.controller_id for v in quorum.voters) != expected or quorum.leader_id not in expected:
            return False
        if image_voters(q, i) != expected:
            return False
    return True


def retry_change(call, wait):
    """A quorum change is refused while an election runs (no active controller): retry those answers only."""

    def attempt():
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return None
            raise

    return wait(attempt, 60, "the quorum change answered")


def test_add_a_fourth_and_remove_an_original_under_topic_creations(
    quorum_factory, fake_brokers_factory, admin_writer_factory, topics_that_exist, wait
):
    q = quorum_factory(size=4, voters=3, extra_args=[*LONG_SESSIONS, *SMALL_SNAPSHOTS])
    q.wait_active()
    fake_brokers_factory(q).register_live([1])
    writer = admin_writer_factory(q)
    with writer.writing(seconds_max=120, requests_max=3_000):
        wait(lambda: len(writer.acked) >= 10, 60, f"writes before the change: {writer!r}")
        q.start(4)
        # Not SERVING yet (no leader hears it before it is a voter): its gRPC answering is enough.
        wait(lambda: describe(q, 4), 60, "controller 4 answers")
        reply = retry_change(lambda: add_voter(q, 1, 4), wait)
        assert reply.error == ErrorCode.NONE, reply.error_message
        assert list(reply.voter_ids) == [1, 2, 3, 4]
        wait(lambda: converged(q, [1, 2, 3, 4], [1, 2, 3, 4]), 60, "every controller sees 4 voters")
        acked_with_four = len(writer.acked)
        wait(lambda: len(writer.acked) >= acked_with_four + 10, 60, f"writes with 4 voters: {writer!r}")
        # Remove an original voter that is not the active controller (the active one is refused).
        active = q.wait_active()
        gone = next(i for i in (1, 2, 3) if i != active)
        stay = [i for i in (1, 2, 3, 4) if i != gone]
        reply = retry_change(lambda: remove_voter(q, stay[0], gone), wait)
        assert reply.error == ErrorCode.NONE, reply.error_message
        assert list(reply.voter_ids) == stay
        wait(lambda: converged(q, stay, stay), 60, f"the voters are {stay}")
        assert q.stop(gone) == 0
        acked_after = len(writer.acked)
        wait(
            lambda: len(writer.acked) >= acked_after + 10, 60, f"writes without controller {gone}: {writer!r}"
        )
    acked = writer.all_names(writer.acked)
    written = writer.all_names(writer.acked + writer.failed + writer.unknown)
    for i in stay:
        end = q.end_offset(q.wait_active())
        wait(lambda i=i, e=end: q.end_offset(i) >= e, 30, f"controller {i} caught up")
        existing = topics_that_exist(q, i, written)
        writer.check(existing)
        assert acked <= existing, f"controller {i} lacks acknowledged topics {sorted(acked - existing)[:5]}"

    # A restart of every voter with its original command line (1 and 2 still name controller 3 in --peers)
    # keeps the new voter set: from the journal and the snapshots, not from --peers.
    for i in stay:
        assert q.stop(i) == 0
    for i in stay:
        q.start(i)
    wait(lambda: converged(q, stay, stay), 60, f"after the restart the voters are {stay}")
    active = q.wait_active()
    reply = q.stub(active).CreateTopics(
        admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(name="after-restart", partitions=1,
                                                                        replication_factor=1)]),
        timeout=10,
    )
    assert [r.error for r in reply.results] == [0]
    for i in stay:
        assert acked <= topics_that_exist(q, i, acked), f"controller {i} lost topics in the restart"


def test_bad_quorum_changes_are_refused_and_change_nothing(quorum_factory, kanal_error_code, wait):
    q = quorum_factory(size=4, voters=3, extra_args=LONG_SESSIONS)
    active = q.wait_active()
    q.wait_all_serving()
    other = next(i for i in (1, 2, 3) if i != active)
    refusals = {
        "already a voter": lambda: add_voter(q, other, 2),
        "not running": lambda: add_voter(q, other, 4),  # controller 4 was never started
        "unknown voter": lambda: remove_voter(q, other, 9),
        "the active controller": lambda: remove_voter(q, other, active),
    }
    for what, call in refusals.items():
        reply = call()
        assert reply.error == ErrorCode.INVALID_QUORUM_CHANGE, (what, reply)
        assert reply.error_message, what
        assert list(reply.voter_ids) == [1, 2, 3], what
    # Without a majority of live members after the removal: kill one voter that is not active, then ask to
    # remove the other standby (leaving the active one and a dead one).
    dead = other
    q.kill(dead)
    wait(lambda: not next(v for v in describe(q, active).voters if v.controller_id == dead).reachable, 30,
         f"the active controller sees controller {dead} gone")
    last = next(i for i in (1, 2, 3) if i not in (active, dead))
    reply = retry_change(lambda: remove_voter(q, active, last), wait)
    assert reply.error == ErrorCode.INVALID_QUORUM_CHANGE, reply
    assert "not a majority" in reply.error_message
    # Nothing changed: no voter set record, the same voters everywhere still running.
    for i in (active, last):
        assert image_voters(q, i) == []
        assert voter_ids(q, i) == [1, 2, 3]
