"""Topic configs: every key a topic accepts, with its type, default and bounds.

One table serves the controller (validating CreateTopics / AlterConfigs, rejecting unknown keys), the
broker (building each partition's LogConfig) and describe replies (effective values with defaults).
Values travel as text, as in Kafka; `parse_topic_config` turns one into a typed value or raises
INVALID_CONFIG naming the key and the accepted range.

Bounds (each key's `doc` says its own). Integers are ASCII decimal with an optional sign. Where a key
allows "no limit" (retention.ms, retention.bytes, flush.messages, flush.ms,
message.timestamp.difference.max.ms) that is exactly -1, as in Kafka; any other value below the key's
minimum is INVALID_CONFIG (so `retention.ms=-5` is refused, not read as "keep forever").
local.retention.ms and local.retention.bytes (tiered storage, Kafka's KIP-405) also take -2, their
default: "as retention.ms / retention.bytes"; it stays -2 (LOCAL_RETENTION_AS_TOTAL) in the typed value.

Each key is checked alone here. The rules between keys (remote.storage.enable with cleanup.policy, local
retention within the total) are topic_config_rules.py's, applied by CreateTopics and AlterConfigs.

Admission and reading. `parse_topic_config` is the admission rule: CreateTopics and AlterConfigs refuse
what it refuses. What the metadata log already holds is read with `read_stored_topic_config`, which also
takes a value an older version admitted under a looser rule (before the rule above, any integer below the
minimum of those keys meant "no limit", and integers of any key could be spelled as Python's int() reads
them, `1_000` or non-ASCII digits) and reads it as that version did: replaying an old log must never fail, nor
change what a topic does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kanal.metadata.cleanup_policy import DELETE, CleanupPolicy
from kanal.v1.error import ErrorCode, KanalError

MiB = 1024 * 1024
DAY_MS = 24 * 3600 * 1000
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class ConfigKey:
    """One topic config key: its name, how to parse it, its default and what it means."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str

    def default_text(self) -> str:
        return _to_text(self.default)


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class _Int:
    """The parser of an integer key: a value in [lo, hi]; with `unlimited`, -1 (Kafka's "no limit") means
    None."""

    lo: int
    hi: int = INT64_MAX
    unlimited: bool = False

    def __call__(self, text: str) -> int | None:
        if not _INTEGER.fullmatch(text.strip()):
            raise ValueError(f"{text!r} is not an integer")
        value = int(text.strip())
        if self.unlimited and value == -1:
            return None
        if not self.lo <= value <= self.hi:
            allowed = (
                f"-1 (no limit) or [{self.lo}, {self.hi}]" if self.unlimited else f"[{self.lo}, {self.hi}]"
            )
            raise ValueError(f"{value} is outside {allowed}")
        return value

    def before_bounds(self, text: str) -> int | None:
        """The rule values were admitted under before the bounds above: Python's int() syntax, and for the
        `unlimited` keys any integer below `lo` meant None. For reading stored values only."""
        value = int(text.strip())
        if self.unlimited and value < self.lo:
            return None
        if not self.lo <= value <= self.hi:
            raise ValueError(f"{value} is outside [{self.lo}, {self.hi}]")
        return value


# local.retention.ms / local.retention.bytes = -2: the local part may be as large as the whole log, i.e. the
# key takes the value of retention.ms / retention.bytes (Kafka's default for both). Kept as -2 in the typed
# value; LogConfig.from_topic_configs resolves it.
LOCAL_RETENTION_AS_TOTAL = -2


@dataclass(frozen=True)
class _LocalRetention:
    """The parser of local.retention.ms / local.retention.bytes: -2 (LOCAL_RETENTION_AS_TOTAL, the
    `retention.*` value), -1 (no limit: None) or a value in [0, INT64_MAX]. These keys are new with tiered
    storage, so no older rule was ever looser (read_stored_topic_config has no fallback for them)."""

    def __call__(self, text: str) -> int | None:
        if not _INTEGER.fullmatch(text.strip()):
            raise ValueError(f"{text!r} is not an integer")
        value = int(text.strip())
        if value == LOCAL_RETENTION_AS_TOTAL:
            return value
        if value == -1:
            return None
        if not 0 <= value <= INT64_MAX:
            raise ValueError(f"{value} is outside -2 (as retention), -1 (no limit) or [0, {INT64_MAX}]")
        return value


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return value

    return parse


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return value == "true"


TOPIC_CONFIG_KEYS: dict[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey(
            "cleanup.policy",
            CleanupPolicy.parse,
            DELETE,
            "delete: drop old segments by retention; compact: keep the latest value per key; "
            "compact,delete (either order): both, retention first, then compaction of what remains.",
        ),
        ConfigKey(
            "retention.ms",
            _Int(0, unlimited=True),
            7 * DAY_MS,
            "Delete a closed segment once its newest record is older than this; -1 keeps forever. "
            "-1 or >= 0.",
        ),
        ConfigKey(
            "retention.bytes",
            _Int(0, unlimited=True),
            None,
            "Delete the oldest closed segments while the partition is larger than this; -1: no limit. "
            "-1 or >= 0.",
        ),
        ConfigKey(
            "segment.bytes",
            _Int(1024, 1 << 31),
            1024 * MiB,
            "Roll to a new segment file when the active one would exceed this many bytes. 1 KiB .. 2 GiB.",
        ),
        ConfigKey(
            "segment.ms",
            _Int(1),
            7 * DAY_MS,
            "Roll when a batch's timestamp is this far past the active segment's first batch. >= 1.",
        ),
        ConfigKey(
            "segment.index.bytes",
            _Int(4096, 1 << 31),
            10 * MiB,
            "Roll when the active segment's offset index would exceed this many bytes. 4 KiB .. 2 GiB.",
        ),
        ConfigKey(
            "index.interval.bytes",
            _Int(0, 1 << 30),
            4096,
            "Add an index entry after this many log bytes (smaller: faster lookups, larger indexes). "
            "0 .. 1 GiB.",
        ),
        ConfigKey(
            "max.message.bytes",
            _Int(64, 1 << 30),
            1 * MiB + 12,
            "Largest batch, in bytes as sent by the producer, a partition accepts. 64 .. 1 GiB.",
        ),
        ConfigKey(
            "delete.retention.ms",
            _Int(0),
            DAY_MS,
            "Compacted topics: a tombstone is removed once its batch is older than this. >= 0.",
        ),
        ConfigKey(
            "min.compaction.lag.ms",
            _Int(0),
            0,
            "Compacted topics: records younger than this are never compacted away. >= 0.",
        ),
        ConfigKey(
            "flush.messages",
            _Int(1, unlimited=True),
            None,
            "fsync after this many batches; -1: never (durability comes from replication). -1 or >= 1.",
        ),
        ConfigKey(
            "flush.ms",
            _Int(0, unlimited=True),
            None,
            "fsync when the oldest unflushed batch is older than this; -1: never. -1 or >= 0.",
        ),
        ConfigKey(
            "min.insync.replicas",
            _Int(1, 1000),
            1,
            "acks=all fails with NOT_ENOUGH_REPLICAS when the ISR is smaller than this. 1 .. 1000.",
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            _bool,
            False,
            "Allow a replica outside the ISR to become leader (may lose acknowledged records).",
        ),
        ConfigKey(
            "message.timestamp.difference.max.ms",
            _Int(0, unlimited=True),
            None,
            "Reject batches whose timestamps are further than this from the broker clock; -1: no limit. "
            "-1 or >= 0.",
        ),
        ConfigKey(
            "follower.replication.throttled.rate",
            _Int(1, unlimited=True),
            None,
            "bytes/s a broker copies into each replica a reassignment is adding to it (-1: no limit); "
            "in-sync followers are never throttled",
        ),
        ConfigKey(
            "remote.storage.enable",
            _bool,
            False,
            "Tiered storage: copy closed segments to the cluster's remote storage; retention.ms/.bytes then "
            "bound the whole log (local and remote), local.retention.* the part kept on disk. Once true it "
            "cannot be turned off; not for compacted or internal topics.",
        ),
        ConfigKey(
            "local.retention.ms",
            _LocalRetention(),
            LOCAL_RETENTION_AS_TOTAL,
            "Tiered topics: how long a closed segment stays on the brokers' disks after its upload; -2: as "
            "retention.ms; -1: no limit (only if retention.ms is -1). -2, -1 or >= 0, at most retention.ms.",
        ),
        ConfigKey(
            "local.retention.bytes",
            _LocalRetention(),
            LOCAL_RETENTION_AS_TOTAL,
            "Tiered topics: how many bytes of uploaded segments a partition keeps on disk; -2: as "
            "retention.bytes; -1: no limit (only if retention.bytes is -1). -2, -1 or >= 0, at most "
            "retention.bytes.",
        ),
        ConfigKey(
            "value.schema.validation",
            _bool,
            False,
            "The leader refuses (INVALID_RECORD) a batch with a non-null record value that is not framed as "
            "the schema registry's clients write it (byte 0, a 4-byte schema id) with the id of a live "
            "version of subject <topic>-value (Confluent Server's confluent.value.schema.validation). Per "
            "topic or as the cluster default, never one broker's; never on internal topics.",
        ),
        ConfigKey(
            "key.schema.validation",
            _bool,
            False,
            "As value.schema.validation, for non-null record keys and subject <topic>-key "
            "(Confluent Server's confluent.key.schema.validation).",
        ),
        ConfigKey(
            "compression.type",
            _choice("producer", "none", "gzip", "snappy", "lz4", "zstd"),
            "producer",
            "Codec the topic keeps; 'producer' keeps what the producer sent (the broker never recompresses).",
        ),
    )
}


def _spec(key: str) -> ConfigKey:
    spec = TOPIC_CONFIG_KEYS.get(key)
    if spec is None:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"unknown topic config key {key!r}")
    return spec


def parse_topic_config(key: str, text: str) -> Any:
    """The typed value of one key, by the admission rule; INVALID_CONFIG for an unknown key or a bad value."""
    spec = _spec(key)
    try:
        return spec.parse(text)
    except ValueError as exc:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"bad value for {key}: {exc}") from None


def read_stored_topic_config(key: str, text: str) -> Any:
    """The typed value of a key as the metadata log holds it: by the admission rule, else by the older rule
    the value was admitted under (see the module docstring); INVALID_CONFIG when neither takes it."""
    try:
        return parse_topic_config(key, text)
    except KanalError:
        parse = _spec(key).parse
        if not isinstance(parse, _Int):
            raise  # no other kind of key changed its rule
        try:
            return parse.before_bounds(text)
        except ValueError:
            pass
        raise


def read_topic_configs(configs: Mapping[str, str]) -> dict[str, Any]:
    """Typed values of every stored key that is set (defaults are not filled in)."""
    return {key: read_stored_topic_config(key, text) for key, text in configs.items()}


def effective_topic_configs(configs: Mapping[str, str]) -> dict[str, Any]:
    """Typed values of every known key: the ones set (as stored), and defaults for the rest."""
    values = {name: spec.default for name, spec in TOPIC_CONFIG_KEYS.items()}
    values.update(read_topic_configs(configs))
    return values
