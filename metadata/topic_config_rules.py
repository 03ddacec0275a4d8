"""Topic config rules between keys: what a topic's effective configs must keep together, and which changes
of them are refused (INVALID_CONFIG naming the topic and the keys). topic_config.py checks each key
alone; these are Kafka's rules for tiered storage (KIP-405, LogConfig.validateTopicLogConfigValues).

Rules, for one topic going from `before` (None for a new topic) to `after`:

1. remote.storage.enable cannot go from true to false: setting it false, deleting it, or changing the
   default it came from. Segments already uploaded would be left in remote storage with nothing reading,
   retaining or deleting them (Kafka refuses it too; its 3.9 `remote.log.delete.on.disable` is not here).
   Deleting the topic is the way out.
With remote.storage.enable=true:
2. the topic is not internal (__consumer_offsets, __transaction_state): the coordinators replay them from
   the local log;
3. cleanup.policy does not compact (`compact` or `compact,delete`): a remote segment is never rewritten,
   so a compacted topic cannot be tiered;
4. local.retention.ms <= retention.ms when retention.ms is limited: -2 ("as retention.ms") always fits,
   -1 (no local limit) only fits retention.ms=-1. The same for local.retention.bytes and retention.bytes.
   As in Kafka, 4 is checked only with remote storage on: without it the local.* keys mean nothing, and
   a default such as local.retention.ms=1 day must not refuse every untiered topic that keeps less.
Schema validation (value.schema.validation, key.schema.validation: broker/schema_validation.py):
5. an internal topic's own configs do not turn it on: kanal itself writes those topics, in records no
   schema registry frames. (A cluster default of true reaches them, and brokers ignore it there.)

Scopes. A topic's effective value of a key is its own, else its broker's default, else the cluster
default, else the built-in default (config_resource.py), and brokers build each log from all four levels
(broker/storage/log_config.py refuses a tiered LogConfig breaking rule 4). So the rules hold in every
scope: the cluster default alone, and each broker resource layered on it. `check_topic_change` checks a
topic's own change (or creation) in every scope; `check_defaults_change` checks a default change in the
scopes it reaches (the cluster default: all of them; broker b's: b's) for every topic whose effective
values of the rule keys it changes, so a default cannot do what a topic's own key may not.

Some keys are per topic or the cluster default, never one broker's (CLUSTER_WIDE_KEYS): remote.storage.enable
(below, `check_defaults_change`) and the schema validation keys, which the partition's leader applies: a
record must not be stored or refused by which broker happens to lead, so brokers read those two from the
topic and the cluster default only, and no broker resource may set them.

Cost: a topic change costs O(scopes), a default change that touches a rule key O(topics x scopes); one that
touches no rule key costs nothing. Everything here is pure: texts in, KanalError out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from kanal.metadata.topic_config import (
    LOCAL_RETENTION_AS_TOTAL,
    TOPIC_CONFIG_KEYS,
    read_stored_topic_config,
)
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import INTERNAL_TOPICS

REMOTE_STORAGE_ENABLE = "remote.storage.enable"
# (local key, total key) pairs of rule 4.
_LOCAL_WITHIN_TOTAL = (("local.retention.ms", "retention.ms"), ("local.retention.bytes", "retention.bytes"))
SCHEMA_VALIDATION_KEYS = ("value.schema.validation", "key.schema.validation")
# Keys a topic or the cluster default may set, but no single broker's resource (module docstring).
CLUSTER_WIDE_KEYS = (REMOTE_STORAGE_ENABLE, *SCHEMA_VALIDATION_KEYS)
# The keys the rules read: a change that moves none of them cannot break a rule.
RULE_KEYS = frozenset(
    {REMOTE_STORAGE_ENABLE, "cleanup.policy", *(key for pair in _LOCAL_WITHIN_TOTAL for key in pair)}
)
# The broker resource of the cluster default (image.CLUSTER_DEFAULT_BROKER; not imported, to stay pure).
_CLUSTER = ""


def check_topic_config_rules(topic: str, before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> None:
    """Raise INVALID_CONFIG, naming `topic` and the keys, when `after` breaks a rule or going from `before`
    to it does. Both are typed effective values of the rule keys in one scope (effective_topic_configs, or
    `rule_values`); `before` is None for a new topic."""
    if before is not None and before[REMOTE_STORAGE_ENABLE] and not after[REMOTE_STORAGE_ENABLE]:
        _refuse(
            f"topic {topic!r}: remote.storage.enable cannot be turned off once it is true (setting it "
            f"false, deleting it, or changing the default it comes from); delete the topic instead"
        )
    if not after[REMOTE_STORAGE_ENABLE]:
        return
    if topic in INTERNAL_TOPICS:
        _refuse(f"topic {topic!r} is internal: remote.storage.enable=true is not allowed on it")
    policy = after["cleanup.policy"]
    if policy.compacts:
        _refuse(
            f"topic {topic!r}: remote.storage.enable=true with cleanup.policy={policy}: a compacted topic "
            f"cannot be tiered (remote segments are never rewritten); use cleanup.policy=delete"
        )
    for local_key, total_key in _LOCAL_WITHIN_TOTAL:
        local, total = after[local_key], after[total_key]
        if total is None or local == LOCAL_RETENTION_AS_TOTAL:
            continue
        if local is None:
            _refuse(
                f"topic {topic!r}: {local_key}=-1 (no limit) with {total_key}={total}: the local part of a "
                f"tiered log cannot outlast the whole log; use -2 (as {total_key}) or a value <= {total}"
            )
        if local > total:
            _refuse(
                f"topic {topic!r}: {local_key}={local} is above {total_key}={total}: the local part of a "
                f"tiered log cannot outlast the whole log"
            )


def rule_values(texts: Mapping[str, str]) -> dict[str, Any]:
    """Typed effective values of the rule keys from a scope's merged texts (defaults filled in)."""
    return {
        key: read_stored_topic_config(key, texts[key]) if key in texts else TOPIC_CONFIG_KEYS[key].default
        for key in RULE_KEYS
    }


def check_topic_change(
    topic: str,
    before: Mapping[str, str] | None,
    after: Mapping[str, str],
    defaults: Mapping[str, Mapping[str, str]],
) -> None:
    """A topic's own config texts change from `before` (None: the topic is being created) to `after`;
    `defaults` are the broker resources' texts ("" the cluster default). Checks every scope."""
    if topic in INTERNAL_TOPICS:
        for key in SCHEMA_VALIDATION_KEYS:
            if key in after and read_stored_topic_config(key, after[key]):
                _refuse(f"topic {topic!r} is internal: {key}=true is not allowed on it (kanal writes its "
                        f"records, which no schema registry frames)")
    for scope in _scopes(defaults):
        layer = _layer(defaults, scope)
        _check_scope(topic, scope, None if before is None else {**layer, **before}, {**layer, **after})


def check_defaults_change(
    resource: str,
    before: Mapping[str, str],
    after: Mapping[str, str],
    defaults: Mapping[str, Mapping[str, str]],
    topics: Iterable[tuple[str, Mapping[str, str]]],
) -> None:
    """Broker resource `resource` ("" the cluster default) changes its texts from `before` to `after`;
    `defaults` are every broker resource's texts before the change, `topics` each topic's own texts.
    Checks each topic in each scope the change reaches.

    remote.storage.enable may be a cluster default but not one broker's: the controller decides uploads by
    the topic and the cluster default, so a broker of its own mind would tier logs whose uploads are
    refused, and tiering would come and go with the partition's leadership. The schema validation keys
    neither: whether a record is refused would depend on which broker leads its partition."""
    for key in CLUSTER_WIDE_KEYS:
        if resource != _CLUSTER and before.get(key) != after.get(key):
            raise KanalError(ErrorCode.INVALID_CONFIG,
                             f"{key} is set per topic or as the cluster default, not on broker {resource}")
    if all(before.get(key) == after.get(key) for key in RULE_KEYS):
        return
    changed = {**defaults, resource: after}
    scopes = _scopes(changed) if resource == _CLUSTER else [resource]
    for topic, own in topics:
        for scope in scopes:
            old, new = _layer(defaults, scope), _layer(changed, scope)
            try:
                _check_scope(topic, scope, {**old, **own}, {**new, **own})
            except KanalError as exc:
                source = "the cluster default" if resource == _CLUSTER else f"broker {resource}'s defaults"
                raise KanalError(
                    exc.code, f"changing {source}: {exc.message}; a topic's own value wins over any default"
                ) from None


def _scopes(defaults: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The cluster scope first, then each broker resource, in a fixed order."""
    return [_CLUSTER, *sorted(name for name in defaults if name != _CLUSTER)]


def _layer(defaults: Mapping[str, Mapping[str, str]], scope: str) -> dict[str, str]:
    """The default texts a topic sees in `scope`: the cluster default, then the scope's broker over it."""
    layer = dict(defaults.get(_CLUSTER, {}))
    if scope != _CLUSTER:
        layer.update(defaults.get(scope, {}))
    return layer


def _check_scope(
    topic: str, scope: str, before: Mapping[str, str] | None, after: Mapping[str, str]
) -> None:
    if before is not None and all(before.get(key) == after.get(key) for key in RULE_KEYS):
        return  # nothing a rule reads moved here
    try:
        check_topic_config_rules(topic, None if before is None else rule_values(before), rule_values(after))
    except KanalError as exc:
        if scope == _CLUSTER:
            raise
        raise KanalError(exc.code, f"{exc.message} (on broker {scope}, with its defaults)") from None


def _refuse(message: str) -> NoReturn:
    raise KanalError(ErrorCode.INVALID_CONFIG, message)
