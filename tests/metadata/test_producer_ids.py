"""Producer-id block allocation."""

from __future__ import annotations

from kanal.metadata import PRODUCER_ID_BLOCK_SIZE, decide_allocate_producer_ids
from kanal.v1 import controller_pb2
from kanal.v1.error import ErrorCode


def allocate(h, broker_id, epoch=None):
    epoch = h.image.brokers[broker_id].broker_epoch if epoch is None else epoch
    return decide_allocate_producer_ids(
        h.image,
        controller_pb2.AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=epoch),
        **h.ctx(f"broker-{broker_id}"),
    )


def test_blocks_never_overlap(cluster3) -> None:
    h = cluster3
    blocks = []
    for broker_id in (0, 1, 0, 2):
        reply = h.commit(allocate(h, broker_id))
        assert reply.error == ErrorCode.NONE and reply.block_size == PRODUCER_ID_BLOCK_SIZE == 1000
        blocks.append(reply.first_producer_id)
    assert blocks == [1, 1001, 2001, 3001]  # 0 is never handed out: it means "not idempotent"
    assert h.image.next_producer_id == 4001


def test_deciding_twice_without_applying_gives_the_same_block(cluster3) -> None:
    h = cluster3
    first, second = allocate(h, 0), allocate(h, 1)
    assert first.reply.first_producer_id == second.reply.first_producer_id == 1
    assert h.image.next_producer_id == 1


def test_stale_or_unknown_broker_gets_nothing(cluster3) -> None:
    h = cluster3
    unknown = decide_allocate_producer_ids(
        h.image, controller_pb2.AllocateProducerIdsRequest(broker_id=7, broker_epoch=0), **h.ctx()
    )
    for decision in (allocate(h, 0, epoch=999), unknown):
        assert decision.records == [] and decision.reply.error == ErrorCode.STALE_BROKER_EPOCH


def test_a_fenced_broker_may_allocate(cluster3) -> None:
    h = cluster3
    h.fence(2)
    reply = h.commit(allocate(h, 2))
    assert reply.error == ErrorCode.NONE and h.image.next_producer_id == 1 + PRODUCER_ID_BLOCK_SIZE
