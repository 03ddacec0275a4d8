"""Kafka's consumer-group APIs on the Broker service: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups.

Groups are kanal's groups: one coordinator, one offsets topic, so offsets committed through either
protocol are the same offsets. Member metadata and assignments stay opaque bytes; the protocol type a
Kafka client names is stored with a `kafka/` prefix (group_protocol.py), so a kanal consumer and a Kafka
consumer (both say "consumer", in different encodings) never share a group: the second to join is
refused with INCONSISTENT_GROUP_PROTOCOL, as Kafka refuses a member of another protocol type."""

from __future__ import annotations

import asyncio
from typing import Any

from kanal.broker.kafka import errors
from kanal.broker.kafka.call import Call, CallRefused, Response
from kanal.broker.kafka.data_apis import _host_port, _ms
from kanal.broker.kafka.group_protocol import from_kanal, to_kanal
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode

_KEY_TYPE_TRANSACTION = 1


async def _find_one(call: Call, key: str, key_type: int) -> Response:
    request = broker_pb2.FindCoordinatorRequest(
        key=key,
        key_type=broker_pb2.COORDINATOR_TRANSACTION
        if key_type == _KEY_TYPE_TRANSACTION
        else broker_pb2.COORDINATOR_GROUP,
    )
    try:
        reply = await call.blocking("FindCoordinator", request)
    except CallRefused as exc:
        return {
            "key": key,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_code": errors.kafka_code(exc.code),
            "error_message": exc.message,
        }
    if reply.error != ErrorCode.NONE:
        return {
            "key": key,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_code": errors.kafka_code(reply.error),
            "error_message": reply.error_message or None,
        }
    broker = call.server.metadata.image.brokers.get(reply.node_id)
    if broker is None or not broker.kafka_endpoint:
        return {
            "key": key,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_code": errors.COORDINATOR_NOT_AVAILABLE,
            "error_message": f"broker {reply.node_id} has no Kafka listener",
        }
    host, port = _host_port(broker.kafka_endpoint)
    return {
        "key": key,
        "node_id": reply.node_id,
        "host": host,
        "port": port,
        "error_code": 0,
        "error_message": None,
    }


async def find_coordinator(call: Call, req: Any) -> Response:
    key_type = getattr(req, "key_type", 0)
    if call.api_version >= 4:
        found = await asyncio.gather(*(_find_one(call, key, key_type) for key in req.coordinator_keys))
        return {"throttle_time": 0, "coordinators": list(found)}
    one = await _find_one(call, req.key, key_type)
    return {"throttle_time": 0, **one}


def _group_error(reply: Any) -> int:
    return errors.kafka_code(reply.error)


async def join_group(call: Call, req: Any) -> Response:
    request = broker_pb2.JoinGroupRequest(
        group_id=req.group_id,
        session_timeout_ms=_ms(req.session_timeout),
        rebalance_timeout_ms=_ms(getattr(req, "rebalance_timeout", req.session_timeout)),
        member_id=req.member_id,
        group_instance_id=getattr(req, "group_instance_id", None) or "",
        protocol_type=to_kanal(req.protocol_type),
        client_id=call.client_id,
        protocols=[broker_pb2.GroupProtocol(name=p.name, metadata=p.metadata) for p in req.protocols],
    )
    reply = await call.aio("JoinGroup", request)
    return {
        "throttle_time": reply.throttle_time_ms,
        "error_code": _group_error(reply),
        "generation_id": reply.generation_id if reply.error == ErrorCode.NONE else -1,
        "protocol_type": from_kanal(reply.protocol_type) or None,
        "protocol_name": reply.protocol_name or None,
        "leader": reply.leader,
        "skip_assignment": reply.skip_assignment,
        "member_id": reply.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id or None,
                "metadata": m.metadata,
            }
            for m in reply.members
        ],
    }


async def sync_group(call: Call, req: Any) -> Response:
    request = broker_pb2.SyncGroupRequest(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=getattr(req, "group_instance_id", None) or "",
        protocol_type=to_kanal(getattr(req, "protocol_type", None) or ""),
        protocol_name=getattr(req, "protocol_name", None) or "",
        assignments=[
            broker_pb2.SyncGroupAssignment(member_id=a.member_id, assignment=a.assignment)
            for a in req.assignments
        ],
    )
    if not getattr(req, "protocol_type", None):
        request.ClearField("protocol_type")
    reply = await call.aio("SyncGroup", request)
    return {
        "throttle_time": reply.throttle_time_ms,
        "error_code": _group_error(reply),
        "protocol_type": from_kanal(reply.protocol_type) or None,
        "protocol_name": reply.protocol_name or None,
        "assignment": reply.assignment,
    }


async def heartbeat(call: Call, req: Any) -> Response:
    reply = await call.blocking(
        "Heartbeat",
        broker_pb2.HeartbeatRequest(
            group_id=req.group_id,
            generation_id=req.generation_id,
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None) or "",
        ),
    )
    return {"throttle_time": reply.throttle_time_ms, "error_code": _group_error(reply)}


async def leave_group(call: Call, req: Any) -> Response:
    if call.api_version >= 3:
        members = [(m.member_id, m.group_instance_id or "") for m in req.members]
    else:
        members = [(req.member_id, "")]
    reply = await call.blocking(
        "LeaveGroup",
        broker_pb2.LeaveGroupRequest(
            group_id=req.group_id,
            members=[
                broker_pb2.LeaveGroupRequest.Member(member_id=m, group_instance_id=i) for m, i in members
            ],
        ),
    )
    code = _group_error(reply)
    return {
        "throttle_time": reply.throttle_time_ms,
        "error_code": code,
        "members": [{"member_id": m, "group_instance_id": i or None, "error_code": code} for m, i in members],
    }


def add_committed_offsets(request: Any, topics: Any) -> None:
    """A Kafka OffsetCommit's or TxnOffsetCommit's topics (the same fields) into the kanal request's."""
    for topic in topics:
        out = request.topics.add(topic=topic.name)
        for p in topic.partitions:
            out.partitions.add(
                partition=p.partition_index,
                offset=p.committed_offset,
                leader_epoch=getattr(p, "committed_leader_epoch", -1),
                metadata=p.committed_metadata or "",
            )


def commit_response(topics: Any, whole: int, per_partition: dict[tuple[str, int], int],
                    throttle_ms: int) -> Response:
    """The answer to an OffsetCommit or TxnOffsetCommit: every partition asked about, with the error of
    the whole call when there is one, else its own (Kafka codes)."""
    return {
        "throttle_time": throttle_ms,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": whole or per_partition.get((t.name, p.partition_index), 0),
                    }
                    for p in t.partitions
                ],
            }
            for t in topics
        ],
    }


async def offset_commit(call: Call, req: Any) -> Response:
    request = broker_pb2.OffsetCommitRequest(
        group_id=req.group_id,
        generation_id=req.generation_id_or_member_epoch,
        member_id=req.member_id,
        group_instance_id=getattr(req, "group_instance_id", None) or "",
    )
    add_committed_offsets(request, req.topics)
    reply = await call.blocking("OffsetCommit", request)
    per_partition = {
        (t.topic, p.partition): errors.kafka_code(p.error) for t in reply.topics for p in t.partitions
    }
    return commit_response(req.topics, _group_error(reply), per_partition, reply.throttle_time_ms)


async def _fetch_group(call: Call, group_id: str, topics: Any, require_stable: bool) -> Response:
    request = broker_pb2.OffsetFetchRequest(group_id=group_id, require_stable=require_stable)
    for t in topics or ():
        request.topics.add(topic=t.name, partitions=list(t.partition_indexes))
    reply = await call.blocking("OffsetFetch", request)
    by_topic: dict[str, list[Response]] = {}
    for o in reply.offsets:
        by_topic.setdefault(o.topic, []).append(
            {
                "partition_index": o.partition,
                "committed_offset": o.offset,
                "committed_leader_epoch": o.leader_epoch,
                "metadata": o.metadata,
                "error_code": errors.kafka_code(o.error),
            }
        )
    return {
        "group_id": group_id,
        "error_code": _group_error(reply),
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }


async def offset_fetch(call: Call, req: Any) -> Response:
    stable = bool(getattr(req, "require_stable", False))
    if call.api_version >= 8:
        groups = await asyncio.gather(*(_fetch_group(call, g.group_id, g.topics, stable) for g in req.groups))
        return {"throttle_time": 0, "groups": list(groups)}
    one = await _fetch_group(call, req.group_id, req.topics, stable)
    return {"throttle_time": 0, "topics": one["topics"], "error_code": one["error_code"]}


async def describe_groups(call: Call, req: Any) -> Response:
    reply = await call.blocking(
        "DescribeGroups", broker_pb2.DescribeGroupsRequest(group_ids=list(req.groups))
    )
    return {
        "throttle_time": reply.throttle_time_ms,
        "groups": [
            {
                "error_code": errors.kafka_code(g.error),
                "group_id": g.group_id,
                "group_state": g.state,
                "protocol_type": from_kanal(g.protocol_type),
                "protocol_data": g.protocol_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id or None,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": b"",
                        "member_assignment": m.raw_assignment,
                    }
                    for m in g.members
                ],
                "authorized_operations": -2147483648,
            }
            for g in reply.groups
        ],
    }


async def list_groups(call: Call, req: Any) -> Response:
    reply = await call.blocking("ListGroups", broker_pb2.ListGroupsRequest())
    states = {s for s in (getattr(req, "states_filter", ()) or ())}
    return {
        "throttle_time": reply.throttle_time_ms,
        "error_code": 0,
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": from_kanal(g.protocol_type),
                "group_state": g.state,
                "group_type": "classic",
            }
            for g in reply.groups
            if not states or g.state in states
        ],
    }


async def delete_groups(call: Call, req: Any) -> Response:
    reply = await call.blocking(
        "DeleteGroups", broker_pb2.DeleteGroupsRequest(group_ids=list(req.groups_names))
    )
    return {
        "throttle_time": reply.throttle_time_ms,
        "results": [
            {"group_id": r.group_id, "error_code": errors.kafka_code(r.error)} for r in reply.results
        ],
    }
