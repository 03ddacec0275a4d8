"""Kafka's transaction APIs on the Broker service: AddPartitionsToTxn (the client versions, 0-3),
AddOffsetsToTxn, TxnOffsetCommit, EndTxn. InitProducerId is in data_apis.py.

kanal's transaction coordinator is Kafka's first design (KIP-98): the producer names its partitions
before it writes to them, the coordinator writes the markers. ApiVersions advertises no
`transaction.version` feature, so Kafka's 4.x clients use that protocol rather than KIP-890's."""

from __future__ import annotations

from typing import Any

from kanal.broker.kafka import errors
from kanal.broker.kafka.call import Call, CallRefused, Response
from kanal.broker.kafka.group_apis import add_committed_offsets, commit_response
from kanal.v1 import broker_pb2


def _producer(req: Any, prefix: str = "") -> broker_pb2.TxnProducer:
    return broker_pb2.TxnProducer(
        transactional_id=getattr(req, prefix + "transactional_id"),
        producer_id=getattr(req, prefix + "producer_id"),
        producer_epoch=getattr(req, prefix + "producer_epoch"),
    )


async def add_partitions_to_txn(call: Call, req: Any) -> Response:
    topics = req.v3_and_below_topics
    request = broker_pb2.AddPartitionsToTxnRequest(
        producer=_producer(req, "v3_and_below_"),
        topics=[broker_pb2.TopicPartitions(topic=t.name, partitions=list(t.partitions)) for t in topics],
    )
    try:
        reply = await call.blocking("AddPartitionsToTxn", request)
        whole = errors.kafka_code(reply.error)
        per = {(r.topic, r.partition): errors.kafka_code(r.error) for r in reply.results}
    except CallRefused as exc:
        whole, per = errors.kafka_code(exc.code), {}
    return {
        "throttle_time": 0,
        "error_code": whole,
        "results_by_topic_v3_and_below": [
            {
                "name": t.name,
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": per.get((t.name, p), whole)}
                    for p in t.partitions
                ],
            }
            for t in topics
        ],
    }


async def add_offsets_to_txn(call: Call, req: Any) -> Response:
    reply = await call.blocking(
        "AddOffsetsToTxn", broker_pb2.AddOffsetsToTxnRequest(producer=_producer(req), group_id=req.group_id)
    )
    return {"throttle_time": reply.throttle_time_ms, "error_code": errors.kafka_code(reply.error)}


async def txn_offset_commit(call: Call, req: Any) -> Response:
    request = broker_pb2.TxnOffsetCommitRequest(producer=_producer(req), group_id=req.group_id)
    add_committed_offsets(request, req.topics)
    try:
        reply = await call.blocking("TxnOffsetCommit", request)
        whole = errors.kafka_code(reply.error)
        per = {(r.topic, r.partition): errors.kafka_code(r.error) for r in reply.results}
    except CallRefused as exc:
        whole, per = errors.kafka_code(exc.code), {}
    return commit_response(req.topics, whole, per, 0)


async def end_txn(call: Call, req: Any) -> Response:
    reply = await call.blocking(
        "EndTxn", broker_pb2.EndTxnRequest(producer=_producer(req), commit=req.committed)
    )
    return {"throttle_time": reply.throttle_time_ms, "error_code": errors.kafka_code(reply.error)}
