"""What a mirrored topic is called on the target, which topics a flow leaves alone, and the loop rule.

Two policies, as MirrorMaker 2's:

- `default`: a source topic `t` of the cluster aliased `A` is the remote topic `A.t` on the target, so its
  name says where its data came from. A flow A->B never mirrors a topic that came from B (`B.t` on A): that
  is what keeps A->B and B->A from copying each other's copies for ever.
- `identity`: names are kept (a migration, or one-way disaster recovery). The name cannot say where a
  record came from, so each mirrored record carries the header `kanal.mirror.path`: the aliases of the
  clusters it was copied from, comma-separated, oldest first. A flow drops a record whose path already
  names its target.

Internal topics are never mirrored: kanal's and Kafka's own (`__` prefix), MirrorMaker's and kanal
mirror's (`.internal` suffix, `mm2-` prefix, `kanal-mirror.` prefix). `heartbeats` is mirrored under the
default policy (as `A.heartbeats`: the heartbeats that crossed a flow prove it works end to end) and left
alone under identity, where its copy would land in the target's own `heartbeats`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

POLICIES = ("default", "identity")
SEPARATOR = "."
PATH_HEADER = "kanal.mirror.path"
HEARTBEATS_TOPIC = "heartbeats"
ALIAS_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")  # no separator in an alias: `A.t` must split one way


def check_alias(alias: str) -> str:
    if not ALIAS_PATTERN.fullmatch(alias):
        raise ValueError(f"cluster alias {alias!r}: 1-64 letters, digits, '-' or '_' (no '.')")
    return alias


def is_internal(topic: str) -> bool:
    return topic.startswith(("__", "mm2-", "kanal-mirror.")) or topic.endswith(".internal")


@dataclass(frozen=True)
class ReplicationPolicy:
    name: str
    source_alias: str
    target_alias: str

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise ValueError(f"replication policy {self.name!r}: one of {', '.join(POLICIES)}")
        check_alias(self.source_alias)
        check_alias(self.target_alias)
        if self.source_alias == self.target_alias:
            raise ValueError(f"a flow's source and target aliases must differ (both {self.source_alias!r})")

    def remote_topic(self, topic: str) -> str:
        return f"{self.source_alias}{SEPARATOR}{topic}" if self.name == "default" else topic

    def origin(self, topic: str) -> str | None:
        """The alias a (default-policy) remote topic came from; None for a topic local to its cluster."""
        head, sep, _ = topic.partition(SEPARATOR)
        return head if sep and ALIAS_PATTERN.fullmatch(head) else None

    def mirrors(self, topic: str, topics_pattern: re.Pattern[str]) -> bool:
        """Whether this flow copies source topic `topic`: it matches the flow's pattern, is not internal,
        and did not come from the target (under the default policy, `B.t` is B's data on its way back)."""
        if is_internal(topic) or not topics_pattern.fullmatch(topic):
            return False
        if self.name == "identity":
            return topic != HEARTBEATS_TOPIC
        return self.origin(topic) != self.target_alias

    @property
    def tracks_path(self) -> bool:
        """Whether each copy carries the path header (identity), so path_after must see every record."""
        return self.name == "identity"

    def path_after(self, headers: Sequence[tuple[str, bytes | None]] | None) -> bytes | None:
        """Identity policy: the path header a mirrored record gets, or None when the record already came
        through the target (drop it). Default policy: b"" (no header added; the names stop loops)."""
        if self.name == "default":
            return b""
        path: list[str] = []
        for key, value in headers or ():
            if key == PATH_HEADER and value:
                path = value.decode("utf-8", "replace").split(",")
        if self.target_alias in path:
            return None
        return ",".join([*path, self.source_alias]).encode()

    def offset_syncs_topic(self) -> str:
        """On the target: where the flow writes offset syncs, in the transactions that carry the data."""
        return f"kanal-mirror.{self.source_alias}.offset-syncs.internal"

    def checkpoints_topic(self) -> str:
        """On the target: translated group offsets (MirrorMaker 2's `A.checkpoints.internal`)."""
        return f"{self.source_alias}.checkpoints.internal"

    def transactional_id(self, flow_name: str) -> str:
        return f"kanal-mirror-{flow_name}"

    def positions_group(self, flow_name: str) -> str:
        """The target-side group whose committed offsets, written in each transaction, are the source
        positions mirrored so far (keyed by the remote topic and the partition, which is the source's)."""
        return f"kanal-mirror-{flow_name}.positions"
