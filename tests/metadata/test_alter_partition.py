"""AlterPartition: ISR changes proposed by leaders."""

from __future__ import annotations

import pytest

from kanal.metadata import decide_alter_partition
from kanal.v1 import controller_pb2
from kanal.v1 import metadata_pb2 as m
from kanal.v1.error import ErrorCode

Item = controller_pb2.AlterPartitionRequest.Item


@pytest.fixture
def setup(cluster3):
    h = cluster3
    topic = h.create_topic("t", 2, 3)
    return h, topic


def request(h, broker_id, *items, broker_epoch=None):
    epoch = h.image.brokers[broker_id].broker_epoch if broker_epoch is None else broker_epoch
    return controller_pb2.AlterPartitionRequest(broker_id=broker_id, broker_epoch=epoch, items=items)


def item(topic, pid, new_isr, *, leader_epoch=None, partition_epoch=None, image=None, epochs=None) -> Item:
    """An AlterPartition item; with `image`, each member's current broker epoch (what a leader that saw
    it fetch sends), unless `epochs` gives them."""
    p = topic.partitions[pid]
    if epochs is None and image is not None:
        epochs = [image.brokers[b].broker_epoch if b in image.brokers else -1 for b in new_isr]
    return Item(
        topic_id=topic.topic_id,
        partition_id=pid,
        new_isr=new_isr,
        new_isr_broker_epochs=epochs or [],
        leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
        partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
    )


def decide(h, req):
    before = h.image.copy()
    decision = decide_alter_partition(h.image, req, **h.ctx())
    assert h.image == before
    return decision


def test_shrink_then_expand(setup) -> None:
    h, topic = setup
    p = topic.partitions[0]
    leader, f1, f2 = p.replicas
    decision = decide(h, request(h, leader, item(topic, 0, [leader, f1])))
    [record] = decision.records
    assert record.partition_change.cause == m.CAUSE_ISR_SHRINK
    assert not record.partition_change.HasField("leader")
    assert f"lagging: [{f2}]" in record.partition_change.reason
    [reply] = decision.reply.items
    assert (reply.error, list(reply.isr), reply.leader_epoch, reply.partition_epoch) == (
        ErrorCode.NONE,
        [leader, f1],
        0,
        1,
    )
    h.commit(decision)
    p = h.image.topics["t"].partitions[0]
    assert (p.isr, p.leader_epoch, p.partition_epoch) == ((leader, f1), 0, 1)
    decision = decide(h, request(h, leader, item(topic, 0, [leader, f1, f2], image=h.image)))
    assert decision.records[0].partition_change.cause == m.CAUSE_ISR_EXPAND
    h.commit(decision)
    assert h.image.topics["t"].partitions[0].partition_epoch == 2


def test_retry_of_an_applied_change_succeeds_without_records(setup) -> None:
    h, topic = setup
    p = topic.partitions[0]
    decision = decide(h, request(h, p.leader, item(topic, 0, list(p.isr))))
    assert decision.records == [] and decision.reply.items[0].error == ErrorCode.NONE


def test_rejections_write_nothing_and_report_the_state_in_force(setup) -> None:
    h, topic = setup
    p0, p1 = topic.partitions
    leader = p0.leader
    follower = next(b for b in p0.replicas if b != leader)
    cases = [
        (item(topic, 0, [leader], leader_epoch=p0.leader_epoch - 1), ErrorCode.FENCED_LEADER_EPOCH),
        (item(topic, 0, [leader], leader_epoch=p0.leader_epoch + 1), ErrorCode.FENCED_LEADER_EPOCH),
        (item(topic, 0, [leader], partition_epoch=p0.partition_epoch + 3), ErrorCode.INVALID_UPDATE_VERSION),
        (item(topic, 0, [follower]), ErrorCode.INELIGIBLE_REPLICA),  # leaves the leader out
        (item(topic, 0, [leader, 7]), ErrorCode.INELIGIBLE_REPLICA),  # not a replica
        (item(topic, 0, [leader, leader]), ErrorCode.INVALID_REQUEST),
        (item(topic, 0, []), ErrorCode.INELIGIBLE_REPLICA),
        (Item(topic_id="nope", partition_id=0, new_isr=[leader]), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (
            Item(topic_id=topic.topic_id, partition_id=9, new_isr=[leader]),
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ),
    ]
    for proposal, code in cases:
        decision = decide(h, request(h, leader, proposal))
        assert decision.records == []
        [reply] = decision.reply.items
        assert reply.error == code, (proposal, reply)
        if code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            assert (list(reply.isr), reply.partition_epoch) == (list(p0.isr), p0.partition_epoch)
    assert p1.leader != leader  # placement spreads leaders
    decision = decide(h, request(h, leader, item(topic, 1, [leader, p1.leader])))
    assert decision.reply.items[0].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert decision.records == []


def test_stale_partition_epoch_after_another_change(setup) -> None:
    h, topic = setup
    p = topic.partitions[0]
    leader, f1, _ = p.replicas
    first = item(topic, 0, [leader, f1])
    h.commit(decide(h, request(h, leader, first)))
    decision = decide(h, request(h, leader, first))  # based on partition epoch 0, now 1
    assert decision.reply.items[0].error == ErrorCode.INVALID_UPDATE_VERSION and decision.records == []


def test_fenced_replica_is_ineligible_and_a_replaced_leader_is_fenced(setup) -> None:
    h, topic = setup
    p = topic.partitions[0]
    leader, f1, f2 = p.replicas
    h.fence(f2)
    decision = decide(h, request(h, leader, item(topic, 0, [leader, f1, f2])))
    assert decision.reply.items[0].error == ErrorCode.INELIGIBLE_REPLICA
    assert decision.records == []
    old_epoch = h.image.topics["t"].partitions[0].leader_epoch
    h.fence(leader)
    h.heartbeat(leader)
    # The old leader still believes in its old epoch: it is fenced by the leader epoch check.
    decision = decide(h, request(h, leader, item(topic, 0, [leader], leader_epoch=old_epoch)))
    assert decision.reply.items[0].error == ErrorCode.FENCED_LEADER_EPOCH
    # With the current epoch it is simply not the leader any more.
    decision = decide(h, request(h, leader, item(h.image.topics["t"], 0, [leader])))
    assert decision.reply.items[0].error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_stale_broker_epoch_fails_the_whole_request(setup) -> None:
    h, topic = setup
    p = topic.partitions[0]
    decision = decide(h, request(h, p.leader, item(topic, 0, [p.leader]), broker_epoch=12345))
    assert decision.reply.error == ErrorCode.STALE_BROKER_EPOCH
    assert decision.records == [] and not decision.reply.items


def test_items_are_independent_and_duplicates_rejected(setup) -> None:
    h, topic = setup
    p0 = topic.partitions[0]
    leader = p0.leader
    items = [item(topic, 0, [leader]), item(topic, 0, list(p0.isr)), item(topic, 0, [leader], leader_epoch=9)]
    decision = decide(h, request(h, leader, *items))
    assert [i.error for i in decision.reply.items] == [
        ErrorCode.NONE,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
    ]
    assert len(decision.records) == 1
