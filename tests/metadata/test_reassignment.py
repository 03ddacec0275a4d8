"""Partition reassignment decisions (kanal.metadata.reassignment): start, catch-up, completion, cancel."""

from __future__ import annotations

import pytest

from kanal.metadata import (
    apply_batch,
    check_image,
    decide_alter_partition,
    image_from_snapshot,
    image_to_snapshot,
)
from kanal.metadata.reassignment import (
    decide_alter_partition_reassignments,
    decide_reassignment_progress,
    list_partition_reassignments,
)
from kanal.v1 import controller_pb2, metadata_pb2, operations_pb2
from kanal.v1.error import ErrorCode

_Target = operations_pb2.AlterPartitionReassignmentsRequest.Target


@pytest.fixture
def h(harness):
    harness.add_brokers(range(6))
    return harness


def reassign(h, *targets):
    request = operations_pb2.AlterPartitionReassignmentsRequest(targets=list(targets))
    return h.commit(decide_alter_partition_reassignments(h.image, request, **h.ctx()))


def progress(h):
    return h.commit(decide_reassignment_progress(h.image, now_ms=h.now_ms, request_id=f"progress-{h.now_ms}"))


def set_isr(h, name: str, partition_id: int, new_isr: list[int]) -> None:
    """The leader's AlterPartition: the listed replicas caught up (with their broker epochs, KIP-903)."""
    topic = h.image.topics[name]
    p = topic.partitions[partition_id]
    item = controller_pb2.AlterPartitionRequest.Item(
        topic_id=topic.topic_id, partition_id=partition_id, leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch, new_isr=new_isr,
        new_isr_broker_epochs=[h.image.brokers[b].broker_epoch for b in new_isr])
    request = controller_pb2.AlterPartitionRequest(
        broker_id=p.leader, broker_epoch=h.image.brokers[p.leader].broker_epoch, items=[item])
    reply = h.commit(decide_alter_partition(h.image, request, **h.ctx()))
    assert reply.items[0].error == ErrorCode.NONE, reply


def part(h, name="t", partition=0):
    return h.image.topics[name].partitions[partition]


def test_rf3_moves_to_three_other_brokers_in_kafka_order(h):
    h.create_topic("t", 1, 3)
    old = part(h).replicas
    new = tuple(b for b in range(6) if b not in old)
    reply = reassign(h, _Target(topic="t", partition=0, replicas=new))
    assert [r.error for r in reply.results] == [ErrorCode.NONE]
    p = part(h)
    assert p.replicas == new + old and p.adding_replicas == new and p.removing_replicas == old
    assert p.leader in old and p.isr == old  # nothing moves until the new replicas catch up
    assert progress(h) == []  # not in sync yet: nothing to complete
    set_isr(h, "t", 0, list(old) + list(new[:2]))
    assert progress(h) == []
    set_isr(h, "t", 0, list(old) + list(new))
    epoch = part(h).leader_epoch
    assert progress(h) == [("t", 0)]
    p = part(h)
    assert p.replicas == new and p.isr == new and not p.reassigning
    assert p.leader == new[0] and p.leader_epoch == epoch + 1  # the old leader handed over
    check_image(h.image)


def test_rf1_to_rf3_keeps_the_leader_when_it_stays(h):
    h.create_topic("t", 1, 1)
    (only,) = part(h).replicas
    others = [b for b in range(6) if b != only][:2]
    target = (only, *others)
    reassign(h, _Target(topic="t", partition=0, replicas=target))
    assert part(h).adding_replicas == tuple(others) and part(h).removing_replicas == ()
    set_isr(h, "t", 0, list(target))
    progress(h)
    p = part(h)
    assert p.replicas == target and p.leader == only and not p.reassigning


def test_reorder_or_shrink_onto_in_sync_replicas_completes_at_once(h):
    h.create_topic("t", 1, 3)
    a, b, c = part(h).replicas
    reassign(h, _Target(topic="t", partition=0, replicas=[c, b]))
    p = part(h)
    assert p.replicas == (c, b) and p.isr == tuple(x for x in (a, b, c) if x in (b, c)) and not p.reassigning
    assert p.leader in (b, c)


def test_cancel_goes_back_and_the_adding_replicas_leave(h):
    h.create_topic("t", 1, 2)
    old = part(h).replicas
    new = tuple(b for b in range(6) if b not in old)[:2]
    reassign(h, _Target(topic="t", partition=0, replicas=new))
    set_isr(h, "t", 0, list(old) + [new[0]])
    reply = reassign(h, _Target(topic="t", partition=0, cancel=True))
    assert reply.results[0].error == ErrorCode.NONE
    p = part(h)
    assert set(p.replicas) == set(old) and p.isr == old and not p.reassigning
    again = reassign(h, _Target(topic="t", partition=0, cancel=True)).results[0]
    assert again.error == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_survives_a_snapshot_mid_way(h):
    h.create_topic("t", 2, 2)
    old = part(h).replicas
    new = tuple(b for b in range(6) if b not in old)[:2]
    reassign(h, _Target(topic="t", partition=0, replicas=new))
    restored = image_from_snapshot(image_to_snapshot(h.image))
    assert restored == h.image and restored.topics["t"].partitions[0].adding_replicas == new
    check_image(restored)


def test_bad_targets_are_refused_and_change_nothing(h):
    h.create_topic("t", 1, 3)
    before = h.image.copy()
    reply = reassign(
        h,
        _Target(topic="t", partition=0, replicas=[0, 1, 9]),
        _Target(topic="t", partition=7, replicas=[0, 1, 2]),
        _Target(topic="nope", partition=0, replicas=[0]),
    )
    assert [(r.error, r.error_message) for r in reply.results] == [
        (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "t-0: unknown broker(s) [9] (registered: [0, 1, 2, 3, 4, 5])"),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "partition t-7 does not exist"),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "partition nope-0 does not exist"),
    ]
    dup = reassign(h, _Target(topic="t", partition=0, replicas=[3, 4, 3])).results[0]
    assert (
        dup.error == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "duplicate replica(s) [3]" in dup.error_message
    )
    empty = reassign(h, _Target(topic="t", partition=0, replicas=[])).results[0]
    assert empty.error == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    twice = reassign(
        h, _Target(topic="t", partition=0, cancel=True), _Target(topic="t", partition=0, cancel=True)
    )
    assert twice.results[1].error == ErrorCode.INVALID_REQUEST
    assert h.image == before


def test_another_target_while_one_is_in_progress(h):
    h.create_topic("t", 1, 1)
    (only,) = part(h).replicas
    a, b = [x for x in range(6) if x != only][:2]
    reassign(h, _Target(topic="t", partition=0, replicas=[a]))
    offset = h.image.next_offset
    assert reassign(h, _Target(topic="t", partition=0, replicas=[a])).results[0].error == ErrorCode.NONE
    assert h.image.next_offset == offset  # a retry writes nothing
    busy = reassign(h, _Target(topic="t", partition=0, replicas=[b])).results[0]
    assert busy.error == ErrorCode.REASSIGNMENT_IN_PROGRESS and f"reassigned to [{a}]" in busy.error_message


def test_list_shows_in_progress_and_named_partitions(h):
    h.create_topic("t", 2, 1)
    (only,) = part(h).replicas
    other = next(x for x in range(6) if x != only)
    reassign(h, _Target(topic="t", partition=0, replicas=[other]))
    listed = list_partition_reassignments(h.image, operations_pb2.ListPartitionReassignmentsRequest())
    assert [(s.topic, s.partition, list(s.adding_replicas)) for s in listed.partitions] == [("t", 0, [other])]
    named = list_partition_reassignments(h.image, operations_pb2.ListPartitionReassignmentsRequest(
        partitions=[operations_pb2.TopicPartitionRef(topic="t", partition=1),
                    operations_pb2.TopicPartitionRef(topic="t", partition=5)]))
    assert [s.error for s in named.partitions] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert list(named.partitions[0].replicas) == list(part(h, "t", 1).replicas)


def test_apply_refuses_a_record_that_puts_an_unsynced_replica_in_the_isr(h):
    h.create_topic("t", 1, 1)
    (only,) = part(h).replicas
    other = next(x for x in range(6) if x != only)
    topic = h.image.topics["t"]
    record = metadata_pb2.PartitionReassignmentRecord(topic_id=topic.topic_id, partition_id=0,
                                                      replicas=[only, other])
    record.isr.broker_ids.extend([only, other])
    batch = metadata_pb2.MetadataBatch(controller_epoch=1, records=[metadata_pb2.MetadataRecord(
        time_ms=1, principal="x", request_id="y", partition_reassignment=record)])
    before = h.image.copy()
    with pytest.raises(Exception, match="puts"):
        apply_batch(h.image, batch, h.image.next_offset)
    assert h.image == before
