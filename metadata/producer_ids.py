"""Producer-id block allocation: brokers hand out producer ids (InitProducerId) from blocks they get here.

Each allocation hands the requesting broker the next PRODUCER_ID_BLOCK_SIZE ids and writes one
ProducerIdsRecord with the new counter, so an id is never handed out twice, even across controller
failovers. Any registered broker with its current epoch may ask, fenced or not (a broker that is catching
up may already answer InitProducerId); anything else is STALE_BROKER_EPOCH.
"""

from __future__ import annotations

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.ids import BrokerId
from kanal.metadata.image import MetadataImage
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

PRODUCER_ID_BLOCK_SIZE = 1000
# Producer ids are int64 on the wire; the last block must fit below this.
PRODUCER_ID_MAX = (1 << 63) - 1


def decide_allocate_producer_ids(
    image: MetadataImage,
    request: controller_pb2.AllocateProducerIdsRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[controller_pb2.AllocateProducerIdsResponse]:
    """Give the broker the block [next_producer_id, next_producer_id + PRODUCER_ID_BLOCK_SIZE)."""
    stamp = Stamp(now_ms, principal, request_id)
    reg = image.brokers.get(BrokerId(request.broker_id))
    if reg is None or reg.broker_epoch != request.broker_epoch:
        return Decision([], controller_pb2.AllocateProducerIdsResponse(error=ErrorCode.STALE_BROKER_EPOCH))
    first = image.next_producer_id
    if first > PRODUCER_ID_MAX - PRODUCER_ID_BLOCK_SIZE:
        return Decision([], controller_pb2.AllocateProducerIdsResponse(error=ErrorCode.UNKNOWN_SERVER_ERROR))
    record = stamp.record(
        producer_ids=metadata_pb2.ProducerIdsRecord(
            broker_id=reg.broker_id,
            broker_epoch=reg.broker_epoch,
            next_producer_id=first + PRODUCER_ID_BLOCK_SIZE,
        )
    )
    return Decision(
        [record],
        controller_pb2.AllocateProducerIdsResponse(
            first_producer_id=first, block_size=PRODUCER_ID_BLOCK_SIZE
        ),
    )
