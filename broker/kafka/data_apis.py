"""Kafka's data-path APIs on the Broker service: Produce, Fetch, ListOffsets, Metadata, InitProducerId.

Each handler takes the decoded Kafka request (kio's class for its version) and returns the response as a
dict of the Kafka field names (wire.build fills in what a version lacks), or None when Kafka sends no
response (Produce with acks=0). Batches are transcoded here (record_batch.py) and nowhere else."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kanal.broker.batch_validation import records_bytes_max
from kanal.broker.kafka import errors
from kanal.broker.kafka.call import Call, CallRefused, KafkaCallContext, Response
from kanal.broker.kafka.record_batch import entries_to_kafka, kafka_to_kanal, split_kafka_batches
from kanal.broker.storage.log_config import LogConfig
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError

_INTERNAL_PREFIX = "__"


def _records_bytes_max(call: Call, topic: str, partition: int) -> int:
    """How far a batch's records may decompress while transcoding: the leader's own bound (64 x the
    topic's max.message.bytes, batch_validation.py), so a small batch of zeros cannot make the broker
    allocate gigabytes before the leader refuses it. For a partition this broker does not host, the
    default topic's bound: Produce then answers for it as it answers any call (the ACL check first, so the
    answer does not tell an unauthorized client whether the topic exists)."""
    try:
        hosted = call.server.replicas.partition(topic, partition)
    except KanalError:
        return records_bytes_max(LogConfig().batch_bytes_max)
    return records_bytes_max(hosted.log.config.batch_bytes_max)


def _ms(value: Any) -> int:
    """A kio timedelta field (or a plain int) in milliseconds."""
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


async def produce(call: Call, req: Any) -> Response | None:
    request = broker_pb2.ProduceRequest(acks=req.acks, timeout_ms=max(0, _ms(req.timeout)))
    refused: dict[tuple[str, int], tuple[int, str]] = {}
    # Each partition's batches in both forms, for the batch cache once the leader has stored them.
    produced: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
    # A partition named twice would get one answer for two appends: every entry of it is refused.
    named = Counter((t.name, p.index) for t in req.topic_data for p in t.partition_data)
    order: list[tuple[str, list[int]]] = []
    for topic in req.topic_data:
        out = request.topics.add(topic=topic.name)
        order.append((topic.name, [p.index for p in topic.partition_data]))
        for part in topic.partition_data:
            try:
                if named[(topic.name, part.index)] > 1:
                    raise KanalError(ErrorCode.INVALID_REQUEST, "the partition is named twice in the request")
                if part.records is None:
                    raise KanalError(ErrorCode.INVALID_RECORD, "no records for the partition")
                bytes_max = _records_bytes_max(call, topic.name, part.index)
                kafka_batches = split_kafka_batches(part.records)
                batches = [kafka_to_kanal(b, records_bytes_max=bytes_max) for b in kafka_batches]
            except KanalError as exc:
                refused[(topic.name, part.index)] = (exc.code, exc.message)
                continue
            out.partitions.add(partition=part.index, batches=batches)
            produced[(topic.name, part.index)] = [(k, bytes(b)) for k, b in zip(batches, kafka_batches)]
    results: dict[tuple[str, int], Any] = {}
    throttle_ms = 0
    if any(t.partitions for t in request.topics):
        try:
            reply = await call.aio("Produce", request)
        except CallRefused as exc:  # the whole call (a starting broker): every partition says so
            for t in request.topics:
                for p in t.partitions:
                    refused[(t.topic, p.partition)] = (exc.code, exc.message)
        else:
            throttle_ms = reply.throttle_time_ms
            for topic_result in reply.topics:
                for result in topic_result.partitions:
                    key = (topic_result.topic, result.partition)
                    results[key] = result
                    if result.error == ErrorCode.NONE and key in produced:
                        call.batch_cache.put_produced(*key, result.base_offset, produced[key])
    if req.acks == 0:
        return None
    responses = []
    for name, partitions in order:
        answers = []
        for index in partitions:
            result = results.get((name, index))
            if result is None:
                code, message = refused.get((name, index), (ErrorCode.UNKNOWN_SERVER_ERROR, "not answered"))
                answers.append(
                    {
                        "index": index,
                        "error_code": errors.kafka_code(code),
                        "base_offset": -1,
                        "log_append_time": -1,
                        "log_start_offset": -1,
                        "error_message": message,
                    }
                )
                continue
            answer = {
                "index": index,
                "error_code": errors.kafka_code(result.error),
                "base_offset": result.base_offset if result.error == ErrorCode.NONE else -1,
                "log_append_time": -1,
                "log_start_offset": result.log_start_offset,
                "error_message": result.error_message or None,
            }
            if result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and result.current_leader >= 0:
                answer["current_leader"] = {"leader_id": result.current_leader, "leader_epoch": -1}
            answers.append(answer)
        responses.append({"name": name, "partition_responses": answers})
    return {"responses": responses, "throttle_time": throttle_ms}


async def fetch(call: Call, req: Any) -> Response:
    version = call.api_version
    if getattr(req, "session_id", 0):
        # kanal keeps no fetch sessions (KIP-227): every answer says session 0, so clients send full
        # fetches; a session id it never gave out is unknown.
        return {
            "error_code": errors.FETCH_SESSION_ID_NOT_FOUND,
            "session_id": 0,
            "responses": [],
            "throttle_time": 0,
        }
    isolation = getattr(req, "isolation_level", 0)
    request = broker_pb2.FetchRequest(
        max_wait_ms=max(0, _ms(req.max_wait)),
        min_bytes=max(0, req.min_bytes),
        max_bytes=max(0, getattr(req, "max_bytes", 0x7FFFFFFF)),
        isolation_level=broker_pb2.READ_COMMITTED if isolation == 1 else broker_pb2.READ_UNCOMMITTED,
        rack_id=getattr(req, "rack_id", "") or "",
    )
    for topic in req.topics:
        out = request.topics.add(topic=topic.topic)
        for part in topic.partitions:
            out.partitions.add(
                partition=part.partition,
                fetch_offset=part.fetch_offset,
                max_bytes=max(0, part.partition_max_bytes),
                current_leader_epoch=getattr(part, "current_leader_epoch", -1),
            )
    try:
        reply = await call.aio("Fetch", request)
    except CallRefused as exc:
        reply = _refused_everywhere(broker_pb2.FetchResponse(), request, exc.code)
    responses = []
    for topic in reply.topics:
        partitions = []
        for p in topic.partitions:
            answer: dict[str, Any] = {
                "partition_index": p.partition,
                "error_code": errors.kafka_code(p.error),
                "high_watermark": p.high_watermark if p.error == ErrorCode.NONE else -1,
                "last_stable_offset": p.last_stable_offset if p.error == ErrorCode.NONE else -1,
                "log_start_offset": p.log_start_offset if p.error == ErrorCode.NONE else -1,
                "aborted_transactions": (
                    [
                        {"producer_id": a.producer_id, "first_offset": a.first_offset}
                        for a in p.aborted_transactions
                    ]
                    if isolation == 1
                    else None
                ),
                # Follower fetching (v11+, a client with client.rack): the leader's choice, as gRPC's.
                "preferred_read_replica": (p.preferred_read_replica if p.HasField("preferred_read_replica")
                                           else -1),
                "records": (
                    entries_to_kafka(p.records, call.batch_cache.transcoder(topic.topic, p.partition))
                    if p.records
                    else b""
                ),
            }
            if p.error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER) and version >= 12:
                answer["current_leader"] = {"leader_id": -1, "leader_epoch": p.leader_epoch or -1}
            partitions.append(answer)
        responses.append({"topic": topic.topic, "partitions": partitions})
    return {"error_code": 0, "session_id": 0, "responses": responses, "throttle_time": reply.throttle_time_ms}


async def list_offsets(call: Call, req: Any) -> Response:
    request = broker_pb2.ListOffsetsRequest(
        isolation_level=broker_pb2.READ_COMMITTED
        if getattr(req, "isolation_level", 0) == 1
        else broker_pb2.READ_UNCOMMITTED
    )
    for topic in req.topics:
        out = request.topics.add(topic=topic.name)
        for part in topic.partitions:
            out.partitions.add(partition=part.partition_index, timestamp_ms=part.timestamp)
    try:
        reply = await call.aio("ListOffsets", request)
    except CallRefused as exc:
        reply = _refused_everywhere(broker_pb2.ListOffsetsResponse(), request, exc.code)
    return {
        "throttle_time": reply.throttle_time_ms,
        "topics": [
            {
                "name": t.topic,
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "error_code": errors.kafka_code(p.error),
                        "timestamp": p.timestamp_ms,
                        "offset": p.offset,
                        "leader_epoch": -1,
                        "old_style_offsets": (p.offset,) if p.offset >= 0 else (),
                    }
                    for p in t.partitions
                ],
            }
            for t in reply.topics
        ],
    }


def _refused_everywhere(reply: Any, request: Any, code: int) -> Any:
    """A Fetch or ListOffsets reply with `code` on every partition asked for (a whole-call refusal, which
    Kafka's clients read per partition)."""
    for topic in request.topics:
        out = reply.topics.add(topic=topic.topic)
        for part in topic.partitions:
            out.partitions.add(partition=part.partition, error=code)
    return reply


def _host_port(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


async def metadata(call: Call, req: Any) -> Response:
    wanted = None if req.topics is None else [t.name for t in req.topics if t.name is not None]
    if wanted == [] and call.api_version == 0:
        wanted = None  # v0: an empty list means every topic
    try:
        reply = await call.aio("Metadata", broker_pb2.MetadataRequest(topics=wanted or []))
    except CallRefused as exc:  # a starting broker: each topic asked for says so, and no broker is named
        return {
            "throttle_time": 0,
            "brokers": [],
            "cluster_id": None,
            "controller_id": -1,
            "topics": [
                {"error_code": errors.kafka_code(exc.code), "name": name, "partitions": []}
                for name in wanted or ()
            ],
        }
    image = call.server.metadata.image
    kafka_endpoints = {b.broker_id: b.kafka_endpoint for b in image.brokers.values() if b.kafka_endpoint}
    brokers = []
    for broker in reply.brokers:
        endpoint = kafka_endpoints.get(broker.broker_id)
        if endpoint:
            host, port = _host_port(endpoint)
            brokers.append(
                {"node_id": broker.broker_id, "host": host, "port": port, "rack": broker.rack or None}
            )
    topics = []
    if wanted != []:
        for t in reply.topics:
            topics.append(
                {
                    "error_code": errors.kafka_code(t.error),
                    "name": t.name,
                    "topic_id": t.topic_id or None,
                    "is_internal": t.is_internal or t.name.startswith(_INTERNAL_PREFIX),
                    "partitions": [
                        {
                            "error_code": errors.kafka_code(p.error),
                            "partition_index": p.partition,
                            "leader_id": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "replica_nodes": tuple(p.replicas),
                            "isr_nodes": tuple(p.isr),
                            "offline_replicas": tuple(r for r in p.replicas if r not in kafka_endpoints),
                        }
                        for p in t.partitions
                    ],
                    "topic_authorized_operations": -2147483648,
                }
            )
    # The controller Kafka's admin clients send CreateTopics and the like to: this broker, which forwards
    # them to the active controller (kanal's controllers speak no Kafka).
    return {
        "throttle_time": reply.throttle_time_ms,
        "brokers": brokers,
        "cluster_id": reply.cluster_id or None,
        "controller_id": call.server.config.broker_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }


async def init_producer_id(call: Call, req: Any) -> Response:
    request = broker_pb2.InitProducerIdRequest(
        transactional_id=req.transactional_id or "",
        producer_id=max(0, getattr(req, "producer_id", -1)),
        producer_epoch=max(0, getattr(req, "producer_epoch", -1)),
        transaction_timeout_ms=_ms(req.transaction_timeout),
    )
    reply = await call.blocking("InitProducerId", request)
    ok = reply.error == ErrorCode.NONE
    return {
        "throttle_time": reply.throttle_time_ms,
        "error_code": errors.kafka_code(reply.error),
        "producer_id": reply.producer_id if ok else -1,
        "producer_epoch": reply.producer_epoch if ok else -1,
    }


async def offset_for_leader_epoch(call: Call, req: Any) -> Response:
    """Where each asked leader epoch ends in this leader's log (Kafka's consumers check their position
    against it after a leader change, KIP-320): the largest epoch at or below the asked one, and the
    offset the next epoch starts at (the log end for the current epoch). DESCRIBE on the topic, as for
    ListOffsets."""
    server = call.server
    try:
        call.service._refuse_until_ready()
    except KanalError as exc:
        code = errors.kafka_code(exc.code)
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "topic": t.topic,
                    "partitions": [
                        {"partition": p.partition, "error_code": code, "leader_epoch": -1, "end_offset": -1}
                        for p in t.partitions
                    ],
                }
                for t in req.topics
            ],
        }
    allowed = {t.topic for t in req.topics}
    if server.gate.enabled:
        probe = broker_pb2.ListOffsetsRequest(
            topics=[broker_pb2.ListOffsetsRequest.TopicQuery(topic=t.topic) for t in req.topics]
        )
        admission = server.gate.admit("ListOffsets", probe, KafkaCallContext(call.peer))
        allowed = {t.topic for t in admission.request.topics} if admission.request is not None else set()
    topics = []
    for t in req.topics:
        answers = []
        for p in t.partitions:
            answer = {"partition": p.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
            if t.topic not in allowed:
                answer["error_code"] = errors.kafka_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                answers.append(answer)
                continue
            try:
                part = server.replicas.partition(t.topic, p.partition)
                with part.lock:
                    part.require_leader(getattr(p, "current_leader_epoch", -1))
                    found = part.log.end_offset_for_epoch(p.leader_epoch)
                if found is not None:
                    answer["leader_epoch"], answer["end_offset"] = found
            except KanalError as exc:
                answer["error_code"] = errors.kafka_code(exc.code)
            answers.append(answer)
        topics.append({"topic": t.topic, "partitions": answers})
    return {"throttle_time": 0, "topics": topics}
