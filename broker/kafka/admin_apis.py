"""Kafka's admin APIs on the Broker service (which forwards them to the active controller with the
caller's principal): CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, DescribeCluster, CreateAcls, DescribeAcls, DeleteAcls.

Kafka numbers its enums differently from kanal's metadata.proto; the maps are here:

| Kafka | kanal |
|---|---|
| config resource TOPIC 2, BROKER 4 | CONFIG_RESOURCE_TOPIC 1, CONFIG_RESOURCE_BROKER 2 |
| ACL resource ANY 1, TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5 | 0 (any), 1, 2, 3, 4 |
| ACL operation ANY 1, ALL 2 ... IDEMPOTENT_WRITE 12 | 0 (any), 1 ... 11 |
| ACL permission ANY 1, DENY 2, ALLOW 3 | 0 (any), DENY 2, ALLOW 1 |
| pattern ANY 1, MATCH 2, LITERAL 3, PREFIXED 4 | filter ANY 0, MATCH 3; LITERAL 1, PREFIXED 2 |

Kafka's AlterConfigs (not incremental) replaces a resource's whole configuration: keys it leaves out go
back to their defaults, so they are deleted here."""

from __future__ import annotations

from typing import Any

from kanal.broker.kafka import errors
from kanal.broker.kafka.call import Call, CallRefused, Response
from kanal.broker.kafka.data_apis import _host_port
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

_CONFIG_TYPE_TO_KANAL = {2: metadata_pb2.CONFIG_RESOURCE_TOPIC, 4: metadata_pb2.CONFIG_RESOURCE_BROKER}
_CONFIG_TYPE_TO_KAFKA = {v: k for k, v in _CONFIG_TYPE_TO_KANAL.items()}
_PERMISSION_TO_KANAL: dict[int, Any] = {
    1: 0,
    2: metadata_pb2.ACL_PERMISSION_DENY,
    3: metadata_pb2.ACL_PERMISSION_ALLOW,
}
_PERMISSION_TO_KAFKA = {metadata_pb2.ACL_PERMISSION_DENY: 2, metadata_pb2.ACL_PERMISSION_ALLOW: 3}
_PATTERN_TO_KANAL: dict[int, Any] = {
    3: metadata_pb2.ACL_PATTERN_LITERAL,
    4: metadata_pb2.ACL_PATTERN_PREFIXED,
}
_PATTERN_TO_KAFKA = {v: k for k, v in _PATTERN_TO_KANAL.items()}
_PATTERN_FILTER_TO_KANAL = {
    1: admin_pb2.AclFilter.ANY,
    2: admin_pb2.AclFilter.MATCH,
    3: admin_pb2.AclFilter.LITERAL,
    4: admin_pb2.AclFilter.PREFIXED,
}
# DescribeConfigs' config_source
_SOURCE_DYNAMIC_TOPIC = 1
_SOURCE_DEFAULT = 5
_INCREMENTAL_SET, _INCREMENTAL_DELETE = 0, 1


def _timeout_ms(req: Any) -> int:
    value = getattr(req, "timeout", None)
    return int(value.total_seconds() * 1000) if value is not None else 0


async def _forward(call: Call, method: str, request: Any) -> tuple[Any, tuple[int, str]]:
    """The reply, or None and the Kafka error and message of a refusal of the whole call."""
    try:
        return await call.blocking(method, request), (0, "")
    except CallRefused as exc:
        return None, (errors.kafka_code(exc.code), exc.message)


def _unanswered(whole: tuple[int, str]) -> tuple[int, str]:
    """The error of an item the reply does not name: the whole call's refusal, if that was it."""
    return whole if whole[0] else (errors.UNKNOWN_SERVER_ERROR, "not answered")


async def create_topics(call: Call, req: Any) -> Response:
    request = admin_pb2.CreateTopicsRequest(validate_only=bool(getattr(req, "validate_only", False)))
    refused = {}
    for t in req.topics:
        if t.assignments:
            refused[t.name] = (
                errors.kafka_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                "kanal places replicas itself: give num_partitions and replication_factor",
            )
            continue
        request.topics.add(
            name=t.name,
            partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            configs=[admin_pb2.ConfigEntry(key=c.name, value=c.value or "") for c in t.configs],
        )
    reply, whole = await _forward(call, "CreateTopics", request) if request.topics else (None, (0, ""))
    results = {r.name: r for r in reply.results} if reply is not None else {}
    out = []
    for t in req.topics:
        r = results.get(t.name)
        if r is not None:
            out.append(
                {
                    "name": t.name,
                    "topic_id": r.topic_id or None,
                    "error_code": errors.kafka_code(r.error),
                    "error_message": r.error_message or None,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                }
            )
        else:
            code, message = refused.get(t.name) or _unanswered(whole)
            out.append(
                {
                    "name": t.name,
                    "error_code": code,
                    "error_message": message,
                    "num_partitions": -1,
                    "replication_factor": -1,
                }
            )
    return {"throttle_time": 0, "topics": out}


async def delete_topics(call: Call, req: Any) -> Response:
    names = [t.name for t in req.topics] if call.api_version >= 6 else list(req.topic_names)
    reply, whole = await _forward(call, "DeleteTopics", admin_pb2.DeleteTopicsRequest(names=names))
    results = {r.name: r for r in reply.results} if reply is not None else {}
    out = []
    for name in names:
        r = results.get(name)
        code, message = (
            (errors.kafka_code(r.error), r.error_message or None)
            if r is not None
            else _unanswered(whole)
        )
        out.append({"name": name, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "responses": out}


async def create_partitions(call: Call, req: Any) -> Response:
    request = admin_pb2.CreatePartitionsRequest(
        validate_only=bool(req.validate_only),
        targets=[admin_pb2.CreatePartitionsRequest.Target(name=t.name, count=t.count) for t in req.topics],
    )
    reply, whole = await _forward(call, "CreatePartitions", request)
    results = {r.name: r for r in reply.results} if reply is not None else {}
    out = []
    for t in req.topics:
        r = results.get(t.name)
        code, message = (
            (errors.kafka_code(r.error), r.error_message or None)
            if r is not None
            else _unanswered(whole)
        )
        out.append({"name": t.name, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "results": out}


async def describe_configs(call: Call, req: Any) -> Response:
    results = []
    for resource in req.resources:
        kanal_type = _CONFIG_TYPE_TO_KANAL.get(resource.resource_type)
        base = {
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        if kanal_type is None:
            results.append(
                {
                    **base,
                    "error_code": errors.INVALID_REQUEST,
                    "error_message": f"kanal has no config resource type {resource.resource_type}",
                }
            )
            continue
        reply, whole = await _forward(
            call,
            "DescribeConfigs",
            admin_pb2.DescribeConfigsRequest(
                resources=[admin_pb2.ConfigResource(type=kanal_type, name=resource.resource_name)]
            ),
        )
        if reply is None:
            results.append({**base, "error_code": whole[0], "error_message": whole[1]})
            continue
        r = reply.results[0]
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        results.append(
            {
                **base,
                "error_code": errors.kafka_code(r.error),
                "error_message": r.error_message or None,
                "configs": [
                    {
                        "name": e.key,
                        "value": e.value,
                        "read_only": False,
                        "config_source": _SOURCE_DEFAULT if e.is_default else _SOURCE_DYNAMIC_TOPIC,
                        "is_default": e.is_default,
                        "is_sensitive": False,
                        "synonyms": (),
                    }
                    for e in r.entries
                    if keys is None or e.key in keys
                ],
            }
        )
    return {"throttle_time": 0, "results": results}


async def _alter(
    call: Call, kafka_type: int, name: str, ops: list[admin_pb2.AlterConfigOp], validate_only: bool
) -> Response:
    base = {"resource_type": kafka_type, "resource_name": name}
    kanal_type = _CONFIG_TYPE_TO_KANAL.get(kafka_type)
    if kanal_type is None:
        return {
            **base,
            "error_code": errors.INVALID_REQUEST,
            "error_message": f"kanal has no config resource type {kafka_type}",
        }
    reply, whole = await _forward(
        call,
        "AlterConfigs",
        admin_pb2.AlterConfigsRequest(
            validate_only=validate_only,
            changes=[
                admin_pb2.AlterConfigsRequest.Change(
                    resource=admin_pb2.ConfigResource(type=kanal_type, name=name), ops=ops
                )
            ],
        ),
    )
    if reply is None:
        return {**base, "error_code": whole[0], "error_message": whole[1]}
    r = reply.results[0]
    return {**base, "error_code": errors.kafka_code(r.error), "error_message": r.error_message or None}


async def alter_configs(call: Call, req: Any) -> Response:
    out = []
    for resource in req.resources:
        ops = [
            admin_pb2.AlterConfigOp(key=c.name, op=admin_pb2.AlterConfigOp.SET, value=c.value or "")
            for c in resource.configs
        ]
        kanal_type = _CONFIG_TYPE_TO_KANAL.get(resource.resource_type)
        if kanal_type is not None:  # the keys left out go back to their defaults
            current, _ = await _forward(
                call,
                "DescribeConfigs",
                admin_pb2.DescribeConfigsRequest(
                    resources=[admin_pb2.ConfigResource(type=kanal_type, name=resource.resource_name)]
                ),
            )
            given = {c.name for c in resource.configs}
            if current is not None and current.results:
                ops += [
                    admin_pb2.AlterConfigOp(key=e.key, op=admin_pb2.AlterConfigOp.DELETE)
                    for e in current.results[0].entries
                    if not e.is_default and e.key not in given
                ]
        out.append(
            await _alter(call, resource.resource_type, resource.resource_name, ops, bool(req.validate_only))
        )
    return {"throttle_time": 0, "responses": out}


async def incremental_alter_configs(call: Call, req: Any) -> Response:
    out = []
    for resource in req.resources:
        ops = []
        unsupported = [
            c.name
            for c in resource.configs
            if c.config_operation not in (_INCREMENTAL_SET, _INCREMENTAL_DELETE)
        ]
        if unsupported:
            out.append(
                {
                    "resource_type": resource.resource_type,
                    "resource_name": resource.resource_name,
                    "error_code": errors.INVALID_REQUEST,
                    "error_message": f"APPEND and SUBTRACT are not supported (keys {unsupported})",
                }
            )
            continue
        for c in resource.configs:
            op = (
                admin_pb2.AlterConfigOp.SET
                if c.config_operation == _INCREMENTAL_SET
                else admin_pb2.AlterConfigOp.DELETE
            )
            ops.append(admin_pb2.AlterConfigOp(key=c.name, op=op, value=c.value or ""))
        out.append(
            await _alter(call, resource.resource_type, resource.resource_name, ops, bool(req.validate_only))
        )
    return {"throttle_time": 0, "responses": out}


async def describe_cluster(call: Call, req: Any) -> Response:
    reply, whole = await _forward(call, "DescribeCluster", admin_pb2.DescribeClusterRequest())
    if reply is None:
        return {
            "throttle_time": 0,
            "error_code": whole[0],
            "error_message": whole[1],
            "cluster_id": "",
            "controller_id": -1,
            "brokers": [],
        }
    image = call.server.metadata.image
    brokers = []
    for b in reply.brokers:
        registration = image.brokers.get(b.broker_id)
        if b.fenced or registration is None or not registration.kafka_endpoint:
            continue
        host, port = _host_port(registration.kafka_endpoint)
        brokers.append({"broker_id": b.broker_id, "host": host, "port": port, "rack": b.rack or None})
    # Kafka clients send controller-bound admin calls to this id: a broker, which forwards them.
    controller = call.server.config.broker_id
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": reply.cluster_id,
        "controller_id": controller,
        "brokers": brokers,
        "cluster_authorized_operations": -2147483648,
    }


def _acl_filter(f: Any) -> admin_pb2.AclFilter:
    out = admin_pb2.AclFilter(
        resource_type=max(0, f.resource_type_filter - 1),
        pattern_filter=_PATTERN_FILTER_TO_KANAL.get(f.pattern_type_filter, admin_pb2.AclFilter.LITERAL),
        operation=max(0, f.operation - 1),
        permission=_PERMISSION_TO_KANAL.get(f.permission_type, 0),
    )
    if f.resource_name_filter is not None:
        out.resource_name = f.resource_name_filter
    if f.principal_filter is not None:
        out.principal = f.principal_filter
    if f.host_filter is not None:
        out.host = f.host_filter
    return out


def _kafka_acl(entry: Any) -> Response:
    return {
        "resource_type": entry.resource_type + 1,
        "resource_name": entry.resource_name,
        "pattern_type": _PATTERN_TO_KAFKA.get(entry.pattern_type, 3),
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation + 1,
        "permission_type": _PERMISSION_TO_KAFKA.get(entry.permission, 3),
    }


async def create_acls(call: Call, req: Any) -> Response:
    request = admin_pb2.CreateAclsRequest(
        creations=[
            metadata_pb2.AccessControlEntry(
                resource_type=max(0, c.resource_type - 1),
                resource_name=c.resource_name,
                pattern_type=_PATTERN_TO_KANAL.get(c.resource_pattern_type, 0),
                principal=c.principal,
                host=c.host,
                operation=max(0, c.operation - 1),
                permission=_PERMISSION_TO_KANAL.get(c.permission_type, 0),
            )
            for c in req.creations
        ]
    )
    reply, whole = await _forward(call, "CreateAcls", request)
    if reply is None:
        return {
            "throttle_time": 0,
            "results": [{"error_code": whole[0], "error_message": whole[1]} for _ in req.creations],
        }
    return {
        "throttle_time": 0,
        "results": [
            {"error_code": errors.kafka_code(r.error), "error_message": r.error_message or None}
            for r in reply.results
        ],
    }


async def describe_acls(call: Call, req: Any) -> Response:
    reply, whole = await _forward(
        call, "DescribeAcls", admin_pb2.DescribeAclsRequest(filter=_acl_filter(req))
    )
    if reply is None:
        return {"throttle_time": 0, "error_code": whole[0], "error_message": whole[1], "resources": []}
    grouped: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for entry in reply.acls:
        acl = _kafka_acl(entry)
        key = (acl["resource_type"], acl["resource_name"], acl["pattern_type"])
        grouped.setdefault(key, []).append(
            {k: acl[k] for k in ("principal", "host", "operation", "permission_type")}
        )
    return {
        "throttle_time": 0,
        "error_code": errors.kafka_code(reply.error),
        "error_message": reply.error_message or None,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in grouped.items()
        ],
    }


async def delete_acls(call: Call, req: Any) -> Response:
    reply, whole = await _forward(
        call, "DeleteAcls", admin_pb2.DeleteAclsRequest(filters=[_acl_filter(f) for f in req.filters])
    )
    if reply is None:
        return {
            "throttle_time": 0,
            "filter_results": [{"error_code": whole[0], "error_message": whole[1]} for _ in req.filters],
        }
    return {
        "throttle_time": 0,
        "filter_results": [
            {
                "error_code": errors.kafka_code(r.error),
                "error_message": r.error_message or None,
                "matching_acls": [{"error_code": 0, **_kafka_acl(e)} for e in r.deleted],
            }
            for r in reply.results
        ],
    }
