"""`kanal mirror`'s configuration: one flow from flags, or flows from a TOML file, validated in one place.

The file (every key but a flow's `source`/`target` and a cluster's `bootstrap` optional):

    [clusters.east]
    bootstrap = "10.0.0.1:9092"
    command-config = "east-client.toml"   # kanal's client config file (TLS, user, password)
    kind = "kanal"                         # or "kafka": any Kafka-protocol cluster, read with librdkafka
                                           # (its command-config is then librdkafka's key=value properties)
    [clusters.west]
    bootstrap = "10.0.1.1:9092"

    [[flows]]
    source = "east"
    target = "west"
    topics = "orders|payments"             # a regular expression a whole topic name matches (default ".*")
    groups = ".*"                          # groups whose offsets are translated
    replication-policy = "default"         # "east.orders" on west; "identity" keeps names
    sync-group-offsets = true              # commit translated offsets on the target for idle groups
    sync-topic-configs = true
    sync-topic-acls = true
    refresh-interval-ms = 5000             # new topics and partitions, configs, ACLs
    commit-interval-ms = 100               # how long a transaction stays open at most (it commits sooner
                                           # once a poll finds nothing more to copy)
    checkpoint-interval-ms = 1000          # group offsets translated and written
    heartbeat-interval-ms = 1000
    offset-lag-max = 100                   # a sync at least every this many source offsets
    replication-factor = -1                # of the remote topics created (-1: the target's default)
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kanal.deploy.mirror.naming import POLICIES, ReplicationPolicy, check_alias

SOURCE_KINDS = ("kanal", "kafka")


@dataclass(frozen=True)
class ClusterConfig:
    alias: str
    bootstrap: str
    command_config: Path | None = None
    kind: str = "kanal"

    def __post_init__(self) -> None:
        check_alias(self.alias)
        if not self.bootstrap:
            raise ValueError(f"cluster {self.alias}: bootstrap is empty")
        if self.kind not in SOURCE_KINDS:
            raise ValueError(
                f"cluster {self.alias}: kind {self.kind!r}, not one of {', '.join(SOURCE_KINDS)}")
        if self.command_config is not None and not self.command_config.is_file():
            raise ValueError(f"cluster {self.alias}: command-config {self.command_config} is not a file")


@dataclass(frozen=True)
class FlowConfig:
    source: ClusterConfig
    target: ClusterConfig
    topics: str = ".*"
    groups: str = ".*"
    replication_policy: str = "default"
    sync_group_offsets: bool = True
    sync_topic_configs: bool = True
    sync_topic_acls: bool = True
    refresh_interval_ms: int = 5_000
    commit_interval_ms: int = 100
    checkpoint_interval_ms: int = 1_000
    heartbeat_interval_ms: int = 1_000
    offset_lag_max: int = 100
    replication_factor: int = -1
    topics_pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)
    groups_pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.target.kind != "kanal":
            raise ValueError(f"flow {self.name}: the target must be a kanal cluster ({self.target.alias} is "
                             f"{self.target.kind})")
        for name in ("topics", "groups"):
            try:
                object.__setattr__(self, f"{name}_pattern", re.compile(getattr(self, name)))
            except re.error as exc:
                raise ValueError(f"flow {self.name}: {name} {getattr(self, name)!r}: {exc}") from None
        for name, low, high in (("refresh_interval_ms", 100, 3_600_000), ("commit_interval_ms", 1, 60_000),
                                ("checkpoint_interval_ms", 100, 3_600_000),
                                ("heartbeat_interval_ms", 100, 3_600_000), ("offset_lag_max", 1, 1 << 31)):
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(
                    f"flow {self.name}: {name.replace('_', '-')} {value} is outside {low}-{high}")
        if self.replication_factor == 0 or self.replication_factor < -1:
            raise ValueError(f"flow {self.name}: replication-factor {self.replication_factor}: >= 1, or -1")
        self.policy  # noqa: B018 - validates the policy name and the aliases

    @property
    def name(self) -> str:
        return f"{self.source.alias}->{self.target.alias}"

    @property
    def id(self) -> str:
        """The flow's name in ids and topic names (no `>`)."""
        return f"{self.source.alias}-to-{self.target.alias}"

    @property
    def policy(self) -> ReplicationPolicy:
        if self.replication_policy not in POLICIES:
            raise ValueError(f"flow {self.name}: replication-policy {self.replication_policy!r}, not one of "
                             f"{', '.join(POLICIES)}")
        return ReplicationPolicy(self.replication_policy, self.source.alias, self.target.alias)


_FLOW_KEYS = {f.replace("_", "-"): f for f in FlowConfig.__dataclass_fields__
              if f not in ("source", "target", "topics_pattern", "groups_pattern")}
_CLUSTER_KEYS = {"bootstrap", "command-config", "kind"}


def load_config(path: Path) -> list[FlowConfig]:
    """The flows of a TOML file; ValueError naming the file and the key for anything wrong."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    unknown = set(data) - {"clusters", "flows"}
    if unknown:
        raise ValueError(f"{path}: unknown sections {sorted(unknown)} (clusters, flows)")
    clusters: dict[str, ClusterConfig] = {}
    for alias, table in (data.get("clusters") or {}).items():
        if not isinstance(table, dict) or set(table) - _CLUSTER_KEYS:
            raise ValueError(f"{path}: clusters.{alias}: keys are {sorted(_CLUSTER_KEYS)}")
        command_config = table.get("command-config")
        try:
            clusters[alias] = ClusterConfig(
                alias, str(table.get("bootstrap", "")),
                (path.parent / command_config) if command_config else None, str(table.get("kind", "kanal")))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    flows = []
    for i, table in enumerate(data.get("flows") or []):
        where = f"{path}: flows[{i}]"
        unknown = set(table) - set(_FLOW_KEYS) - {"source", "target"}
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        try:
            source, target = clusters[table["source"]], clusters[table["target"]]
        except KeyError as exc:
            raise ValueError(f"{where}: source and target must name clusters of [clusters] ({exc})") from None
        options = {_FLOW_KEYS[k]: v for k, v in table.items() if k in _FLOW_KEYS}
        for key, value in options.items():
            want = FlowConfig.__dataclass_fields__[key].type  # "bool", "int" or "str" (postponed annotations)
            ok = {"bool": isinstance(value, bool), "str": isinstance(value, str),
                  "int": isinstance(value, int) and not isinstance(value, bool)}[str(want)]
            if not ok:
                kind = {"bool": "true or false", "int": "an integer", "str": "a string"}[str(want)]
                raise ValueError(f"{where}: {key.replace('_', '-')} = {value!r}: must be {kind}")
        try:
            flows.append(FlowConfig(source, target, **options))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if not flows:
        raise ValueError(f"{path}: no [[flows]]")
    names = [f.name for f in flows]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: a flow is given twice ({names})")
    return flows
