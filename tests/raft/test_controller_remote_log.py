"""AlterRemoteLog through a real controller quorum (tiered storage's remote-log metadata): a leader's
uploaded segments and start moves become records every controller applies; a resend writes nothing; a
deposed leader, a follower, a stale registration and a topic without remote storage are refused with
nothing written; a standby names the active controller; deleting the topic drops its remote log.
"""

from __future__ import annotations

import pytest

from kanal.metadata import MetadataImage, apply_batch, image_from_snapshot
from kanal.metadata.remote_log import REMOTE_STORAGE_ENABLE
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

from .conftest import wait_until

pytestmark = pytest.mark.cluster
E = ErrorCode
Item = controller_pb2.AlterRemoteLogRequest.Item
# What controllers write on their own at any time (leader no-ops, directory registrations).
_BACKGROUND_RECORDS = frozenset({"no_op", "controller_registration", "cluster_identity"})

@pytest.fixture
def tiered(quorum_factory, fake_brokers_factory):
    """A 3-controller quorum, brokers 1..3 live, topics "tiered" (remote storage on, 3 replicas) and
    "plain". Yields (quorum, brokers, active id, its stub)."""
    q = quorum_factory(3, ["--session-timeout-ms", "600000"])
    q.wait_active()
    brokers = fake_brokers_factory(q)
    brokers.register_live([1, 2, 3])
    q.wait_all_serving()
    wait_until(q.registrations_done, 60, "the controllers' directory registrations committed")
    stub = q.stub(q.wait_active())
    reply = stub.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
        admin_pb2.CreatableTopic(name="tiered", partitions=1, replication_factor=3,
                                 configs=[admin_pb2.ConfigEntry(key=REMOTE_STORAGE_ENABLE, value="true")]),
        admin_pb2.CreatableTopic(name="plain", partitions=1, replication_factor=1),
    ]), timeout=10)
    assert [r.error for r in reply.results] == [E.NONE, E.NONE], reply
    return q, brokers, q.wait_active(), stub


def image_of(q, i) -> MetadataImage:
    """Controller i's committed image (DescribeMetadataImage)."""
    request = controller_pb2.DescribeMetadataImageRequest()
    snapshot = q.stub(i).DescribeMetadataImage(request, timeout=5).snapshot
    return image_from_snapshot(snapshot)


def added(q, i, before) -> list[metadata_pb2.MetadataRecord]:
    return [r for batch in q.fetch_from(i, before) for r in batch.metadata_batch().records
            if r.WhichOneof("record") not in _BACKGROUND_RECORDS]


def segment(topic_id, base, end, *, leader_epoch, broker_id) -> metadata_pb2.RemoteLogSegmentRecord:
    return metadata_pb2.RemoteLogSegmentRecord(
        topic_id=topic_id, partition_id=0, base_offset=base, end_offset=end, size_bytes=end - base,
        meta_bytes=64, max_timestamp_ms=1_700_000_000_000, leader_epoch=leader_epoch, broker_id=broker_id,
        epochs=[metadata_pb2.RemoteLogEpochStart(epoch=leader_epoch, start_offset=base)],
    )


def test_alter_remote_log_through_the_quorum(tiered):
    q, brokers, active, stub = tiered
    image = image_of(q, active)
    topic = image.topics["tiered"]
    state = topic.partitions[0]
    leader, epoch = state.leader, state.leader_epoch
    follower = next(b for b in state.replicas if b != leader)

    def request(*items, broker=leader, broker_epoch=None):
        return controller_pb2.AlterRemoteLogRequest(
            broker_id=broker, broker_epoch=brokers.epochs[broker] if broker_epoch is None else broker_epoch,
            items=items)

    def upload(*bounds, topic_id=topic.topic_id, leader_epoch=epoch, broker=leader):
        return Item(topic_id=topic_id, partition_id=0, leader_epoch=leader_epoch,
                    segments_uploaded=controller_pb2.AlterRemoteLogRequest.SegmentsUploaded(segments=[
                        segment(topic_id, b, e, leader_epoch=leader_epoch, broker_id=broker)
                        for b, e in bounds]))

    # Recorded: one record per segment, stamped with the broker's principal, applied by every controller.
    before = q.end_offset(active)
    uploaded = request(upload((0, 100), (100, 200)))
    reply = stub.AlterRemoteLog(uploaded, timeout=10)
    assert reply.error == E.NONE and [(i.error, i.log_start_offset, i.end_offset) for i in reply.items] == [
        (E.NONE, 0, 200)]
    records = added(q, active, before)
    assert [r.WhichOneof("record") for r in records] == ["remote_log_segment"] * 2
    assert {r.principal for r in records} == {f"broker-{leader}"}
    for i in q.ids:
        wait_until(lambda i=i: image_of(q, i).remote_log(topic.topic_id, 0) is not None, 10,
                   f"controller {i} to apply the segments")
        remote = image_of(q, i).remote_log(topic.topic_id, 0)
        assert [(s.base_offset, s.end_offset) for s in remote.segments] == [(0, 100), (100, 200)]

    # A resend (the reply was lost) and every refusal write nothing.
    before = q.end_offset(active)
    resent = stub.AlterRemoteLog(uploaded, timeout=10)
    assert [(i.error, i.end_offset) for i in resent.items] == [(E.NONE, 200)]
    plain = image.topics["plain"]
    plain_leader, plain_epoch = plain.partitions[0].leader, plain.partitions[0].leader_epoch
    refusals = {
        E.FENCED_LEADER_EPOCH: request(upload((200, 300), leader_epoch=epoch + 1)),
        E.NOT_LEADER_OR_FOLLOWER: request(upload((200, 300), broker=follower), broker=follower),
        E.OFFSET_OUT_OF_RANGE: request(upload((250, 300))),
        E.INVALID_CONFIG: request(upload((0, 10), topic_id=plain.topic_id, leader_epoch=plain_epoch,
                                         broker=plain_leader), broker=plain_leader),
    }
    for code, refused in refusals.items():
        item = stub.AlterRemoteLog(refused, timeout=10).items[0]
        assert item.error == code and item.error_message, (code, item)
    stale = stub.AlterRemoteLog(request(upload((200, 300)), broker_epoch=brokers.epochs[leader] + 1_000_000),
                                timeout=10)
    assert stale.error == E.STALE_BROKER_EPOCH and not stale.items
    assert added(q, active, before) == []

    # A standby does not decide: it names the active controller.
    standby = next(i for i in q.ids if i != active)
    wait_until(lambda: q.stub(standby).AlterRemoteLog(uploaded, timeout=5).error == E.NOT_CONTROLLER, 30,
               "the standby to know the active controller")
    answer = q.stub(standby).AlterRemoteLog(uploaded, timeout=5)
    assert answer.active_controller.endpoint == q.endpoint(active)

    # Remote retention moves the start: the first segment leaves the remote log.
    moved = stub.AlterRemoteLog(request(Item(
        topic_id=topic.topic_id, partition_id=0, leader_epoch=epoch,
        new_log_start=controller_pb2.AlterRemoteLogRequest.NewLogStart(log_start_offset=150,
                                                                       reason="retention.ms"))), timeout=10)
    assert [(i.error, i.log_start_offset, i.end_offset) for i in moved.items] == [(E.NONE, 150, 200)]
    remote = image_of(q, active).remote_log(topic.topic_id, 0)
    assert (remote.log_start_offset, [(s.base_offset, s.end_offset) for s in remote.segments]) == (
        150, [(100, 200)])

    # The log replays to the image every controller holds, remote log included; deleting the topic drops it.
    replayed = MetadataImage()
    for batch in q.fetch_all(active):
        apply_batch(replayed, batch.metadata_batch(), batch.base_offset)
    assert replayed.remote_logs == image_of(q, active).remote_logs
    deleted = stub.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["tiered"]), timeout=10)
    assert deleted.results[0].error == 0
    for i in q.ids:
        wait_until(lambda i=i: "tiered" not in image_of(q, i).topics, 10, f"controller {i} to drop the topic")
        assert image_of(q, i).remote_logs == {}
