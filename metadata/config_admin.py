"""Config decisions: AlterConfigs (topic and broker resources) and DescribeConfigs (a read).

AlterConfigs: the ops of one resource are applied in order to a working copy and all of them take
effect or none (the first bad op fails the resource with INVALID_CONFIG, unknown topic with
UNKNOWN_TOPIC_OR_PARTITION, a bad broker name or a resource named twice with INVALID_REQUEST). The records
are the net difference between the old and the new configs, sorted by key (SET then DELETE of a key that
was not set writes nothing). DELETE of a known key that is not set is not an error. After the ops, the
rules between keys (topic_config_rules.py: remote.storage.enable never turned off, never with a compacting
cleanup.policy or on an internal topic, local.retention.* within retention.*) are checked on the result:
for a topic in every scope of defaults, for a broker resource (a default) on every topic whose effective
values it changes, each on top of the changes accepted earlier in the request. A breach fails the resource
with INVALID_CONFIG.

When a change switches unclean.leader.election.enable on for a topic (its own value, or the cluster
default for topics without one), the same batch elects leaders for its offline partitions that have a
live replica (CAUSE_UNCLEAN_ELECTION), as Kafka does on its next election pass.

DescribeConfigs lists every known key with its effective value. For a topic: its own value, else the
cluster default ("" broker resource), else the built-in default; is_default is true unless the topic sets
the key itself. For a broker: its own value, else the cluster default, else the built-in default.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from kanal.metadata.config_resource import (
    check_broker_resource_name,
    check_config_key,
    check_config_value,
    unclean_election_enabled,
)
from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.fencing import offline_election_records
from kanal.metadata.image import CLUSTER_DEFAULT_BROKER, MetadataImage
from kanal.metadata.topic_config import TOPIC_CONFIG_KEYS
from kanal.metadata.topic_config_rules import check_defaults_change, check_topic_change
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

_TOPIC = metadata_pb2.CONFIG_RESOURCE_TOPIC
_BROKER = metadata_pb2.CONFIG_RESOURCE_BROKER


def decide_alter_configs(
    image: MetadataImage,
    request: admin_pb2.AlterConfigsRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[admin_pb2.AlterConfigsResponse]:
    """Set and delete config keys, all-or-nothing per resource."""
    stamp = Stamp(now_ms, principal, request_id)
    records: list[metadata_pb2.MetadataRecord] = []
    results = []
    seen: set[tuple[int, str]] = set()
    new_topic_configs: dict[str, dict[str, str]] = {}
    new_cluster_defaults: dict[str, str] | None = None
    # The configs as the request's accepted changes so far leave them, for the rules between keys.
    planned = _PlannedConfigs(image)
    for change in request.changes:
        resource = change.resource
        try:
            if (resource.type, resource.name) in seen:
                raise KanalError(
                    ErrorCode.INVALID_REQUEST,
                    f"resource {resource.name!r} is named more than once in this request",
                )
            seen.add((resource.type, resource.name))
            current = _current_configs(image, resource)
            final = _run_ops(current, change.ops)
            planned.check(resource, final)
        except KanalError as exc:
            results.append(
                admin_pb2.ConfigResourceResult(resource=resource, error=exc.code, error_message=exc.message)
            )
            continue
        planned.accept(resource, final)
        results.append(admin_pb2.ConfigResourceResult(resource=resource))
        if request.validate_only:
            continue
        records.extend(_diff_records(stamp, resource, current, final))
        if resource.type == _TOPIC:
            new_topic_configs[resource.name] = final
        elif resource.name == CLUSTER_DEFAULT_BROKER:
            new_cluster_defaults = final
    records.extend(_unclean_elections(image, stamp, new_topic_configs, new_cluster_defaults))
    return Decision(records, admin_pb2.AlterConfigsResponse(results=results))


class _PlannedConfigs:
    """Topic and broker configs as the image holds them plus the changes this request has accepted, so each
    resource is checked against the rules between keys (topic_config_rules.py) on top of the ones before
    it: two changes that each pass alone cannot break a rule together. Only changed resources are copied."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.topics: dict[str, Mapping[str, str]] = {}
        self.defaults: dict[str, Mapping[str, str]] = dict(image.broker_configs)

    def check(self, resource: admin_pb2.ConfigResource, final: Mapping[str, str]) -> None:
        """INVALID_CONFIG when changing `resource` to `final` breaks a rule between keys."""
        if resource.type == _TOPIC:
            check_topic_change(resource.name, self._topic(resource.name), final, self.defaults)
        else:
            before = self.defaults.get(resource.name, {})
            check_defaults_change(resource.name, before, final, self.defaults, self._all_topics())

    def accept(self, resource: admin_pb2.ConfigResource, final: Mapping[str, str]) -> None:
        if resource.type == _TOPIC:
            self.topics[resource.name] = final
        else:
            self.defaults[resource.name] = final

    def _topic(self, name: str) -> Mapping[str, str]:
        planned = self.topics.get(name)
        return planned if planned is not None else self.image.topics[name].configs

    def _all_topics(self) -> Iterator[tuple[str, Mapping[str, str]]]:
        for name in self.image.topics:
            yield name, self._topic(name)


def _current_configs(image: MetadataImage, resource: admin_pb2.ConfigResource) -> dict[str, str]:
    if resource.type == _TOPIC:
        topic = image.topics.get(resource.name)
        if topic is None:
            raise KanalError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource.name!r} does not exist")
        return dict(topic.configs)
    if resource.type == _BROKER:
        check_broker_resource_name(resource.name)
        return dict(image.broker_configs.get(resource.name, {}))
    raise KanalError(ErrorCode.INVALID_REQUEST, f"unknown config resource type {resource.type}")


def _run_ops(current: Mapping[str, str], ops: list[admin_pb2.AlterConfigOp]) -> dict[str, str]:
    final = dict(current)
    for op in ops:
        check_config_key(op.key)
        if op.op == admin_pb2.AlterConfigOp.SET:
            check_config_value(op.key, op.value)
            final[op.key] = op.value
        elif op.op == admin_pb2.AlterConfigOp.DELETE:
            final.pop(op.key, None)
        else:
            raise KanalError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op.op} for {op.key!r}")
    return final


def _diff_records(
    stamp: Stamp, resource: admin_pb2.ConfigResource, current: Mapping[str, str], final: Mapping[str, str]
) -> list[metadata_pb2.MetadataRecord]:
    records = []
    for key in sorted(set(current) | set(final)):
        if current.get(key) == final.get(key):
            continue
        record = metadata_pb2.ConfigRecord(resource_type=resource.type, resource_name=resource.name, key=key)
        if key in final:
            record.value = final[key]
        records.append(stamp.record(config=record))
    return records


def _unclean_elections(
    image: MetadataImage,
    stamp: Stamp,
    new_topic_configs: Mapping[str, Mapping[str, str]],
    new_cluster_defaults: Mapping[str, str] | None,
) -> list[metadata_pb2.MetadataRecord]:
    cluster_before = image.broker_configs.get(CLUSTER_DEFAULT_BROKER, {})
    cluster_after = cluster_before if new_cluster_defaults is None else new_cluster_defaults
    candidates = image.topics if new_cluster_defaults is not None else new_topic_configs
    switched_on = [
        name
        for name in candidates
        if not unclean_election_enabled(image.topics[name].configs, cluster_before)
        and unclean_election_enabled(new_topic_configs.get(name, image.topics[name].configs), cluster_after)
    ]
    return offline_election_records(
        image, switched_on, stamp, "unclean.leader.election.enable switched on", unclean=True
    )


def describe_configs(
    image: MetadataImage, request: admin_pb2.DescribeConfigsRequest
) -> admin_pb2.DescribeConfigsResponse:
    """Every known key of each resource with its effective value (a read: no records)."""
    results = []
    cluster = image.broker_configs.get(CLUSTER_DEFAULT_BROKER, {})
    for resource in request.resources:
        try:
            own = _current_configs(image, resource)
        except KanalError as exc:
            results.append(
                admin_pb2.ResourceConfigs(resource=resource, error=exc.code, error_message=exc.message)
            )
            continue
        entries = []
        for key, spec in TOPIC_CONFIG_KEYS.items():
            if key in own:
                entries.append(admin_pb2.ConfigEntry(key=key, value=own[key]))
            else:
                value = cluster.get(key, spec.default_text())
                entries.append(admin_pb2.ConfigEntry(key=key, value=value, is_default=True))
        results.append(admin_pb2.ResourceConfigs(resource=resource, entries=entries))
    return admin_pb2.DescribeConfigsResponse(results=results)
