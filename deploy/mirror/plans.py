"""What a flow changes on its target, decided from what it read of both clusters (no I/O here): topics to
create or grow, configs to set, ACLs to add, group offsets to commit.

The rules are MirrorMaker 2's where it has one:

- a remote topic gets the source topic's partition count (never fewer: partitions only grow), and its
  partitions follow when the source's grow;
- topic configs set on the source (not its defaults) are set on the target, but for the ones that would
  change what the target's brokers do with the copy or that belong to the target's own operators
  (`CONFIGS_EXCLUDED_DEFAULT`; a flow can name more);
- only LITERAL topic ACLs are copied, renamed to the remote topic; an ALLOW for WRITE is never copied (only
  the flow writes a remote topic), and an ALLOW for ALL becomes an ALLOW for READ;
- a group's translated offsets are committed on the target only while the group has no active members
  there (a consumer of the target's own is never moved under it), and only forward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kanal.v1 import metadata_pb2

# Kafka's `config.properties.exclude` default for MirrorMaker 2, and kanal's configs that are about the
# target's own storage (its remote store is not the source's) or its brokers' checks.
CONFIGS_EXCLUDED_DEFAULT = (
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "remote.storage.enable",
    "local.retention.ms",
    "local.retention.bytes",
    "value.schema.validation",
    "key.schema.validation",
)


@dataclass(frozen=True)
class TopicChange:
    remote_topic: str
    partitions: int
    create: bool  # False: grow the existing remote topic to `partitions`


def plan_topics(source: Mapping[str, int], target: Mapping[str, int],
                remote_name: Mapping[str, str]) -> list[TopicChange]:
    """`source`: mirrored source topics and their partition counts; `target`: the target's topics;
    `remote_name`: source topic -> remote topic."""
    out = []
    for topic, partitions in sorted(source.items()):
        remote = remote_name[topic]
        have = target.get(remote)
        if have is None:
            out.append(TopicChange(remote, partitions, create=True))
        elif have < partitions:
            out.append(TopicChange(remote, partitions, create=False))
    return out


def plan_configs(source: Mapping[str, str], target: Mapping[str, str],
                 excluded: Iterable[str] = CONFIGS_EXCLUDED_DEFAULT) -> dict[str, str]:
    """`source`: the source topic's configs that are set (not defaults); `target`: the remote topic's set
    configs. Returns what to set. A config set on the target but not on the source is left as it is (the
    target's operator may have set it)."""
    skip = set(excluded)
    return {k: v for k, v in sorted(source.items()) if k not in skip and target.get(k) != v}


def remote_acl(entry: metadata_pb2.AccessControlEntry,
               remote_name: Mapping[str, str]) -> metadata_pb2.AccessControlEntry | None:
    """The target's copy of a source ACL, or None when it is not copied."""
    if (entry.resource_type != metadata_pb2.ACL_RESOURCE_TOPIC
            or entry.pattern_type != metadata_pb2.ACL_PATTERN_LITERAL
            or entry.resource_name not in remote_name):
        return None
    allow = entry.permission == metadata_pb2.ACL_PERMISSION_ALLOW
    if allow and entry.operation == metadata_pb2.ACL_OPERATION_WRITE:
        return None
    copy = metadata_pb2.AccessControlEntry()
    copy.CopyFrom(entry)
    copy.resource_name = remote_name[entry.resource_name]
    if allow and entry.operation == metadata_pb2.ACL_OPERATION_ALL:
        copy.operation = metadata_pb2.ACL_OPERATION_READ
    return copy


def plan_acls(source: Iterable[metadata_pb2.AccessControlEntry],
              target: Iterable[metadata_pb2.AccessControlEntry],
              remote_name: Mapping[str, str]) -> list[metadata_pb2.AccessControlEntry]:
    have = {entry.SerializeToString(deterministic=True) for entry in target}
    out = []
    for entry in source:
        copy = remote_acl(entry, remote_name)
        if copy is not None and copy.SerializeToString(deterministic=True) not in have:
            have.add(copy.SerializeToString(deterministic=True))
            out.append(copy)
    return out


def plan_group_offsets(translated: Mapping[tuple[str, int], int],
                       target_committed: Mapping[tuple[str, int], int],
                       target_group_active: bool) -> dict[tuple[str, int], int]:
    """Offsets to commit for one group on the target: only for a group with no active member there, and
    only where the translation is ahead of what the group has committed on the target."""
    if target_group_active:
        return {}
    return {tp: offset for tp, offset in sorted(translated.items())
            if offset > target_committed.get(tp, -1)}
