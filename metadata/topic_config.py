"""Topic configs: every key a topic accepts, with its type, default and bounds.

One table serves the controller (validating CreateTopics / AlterConfigs, rejecting unknown keys), the
broker (building each partition's LogConfig) and describe replies (effective values with defaults).
Values travel as text, as in Kafka; `parse_topic_configs` turns them into typed values or raises
INVALID_CONFIG naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

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


def _int(lo: int, hi: int = INT64_MAX, *, none_below: int | None = None) -> Callable[[str], int | None]:
    """A parser for an integer in [lo, hi]; with none_below, any value below it (Kafka's -1) means None."""

    def parse(text: str) -> int | None:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
        if none_below is not None and value < none_below:
            return None
        if not lo <= value <= hi:
            raise ValueError(f"{value} is outside [{lo}, {hi}]")
        return value

    return parse


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
        ConfigKey("cleanup.policy", _choice("delete", "compact"), "delete",
                  "delete: drop old segments by retention; compact: keep the latest value per key."),
        ConfigKey("retention.ms", _int(0, none_below=0), 7 * DAY_MS,
                  "Delete a closed segment once its newest record is older than this; -1 keeps forever."),
        ConfigKey("retention.bytes", _int(0, none_below=0), None,
                  "Delete the oldest closed segments while the partition is larger than this; -1: no limit."),
        ConfigKey("segment.bytes", _int(1024, 1 << 31), 1024 * MiB,
                  "Roll to a new segment file when the active one would exceed this many bytes."),
        ConfigKey("segment.ms", _int(1), 7 * DAY_MS,
                  "Roll when a batch's timestamp is this far past the active segment's first batch."),
        ConfigKey("segment.index.bytes", _int(4096, 1 << 31), 10 * MiB,
                  "Roll when the active segment's offset index would exceed this many bytes."),
        ConfigKey("index.interval.bytes", _int(0, 1 << 30), 4096,
                  "Add an index entry after this many log bytes (smaller: faster lookups, larger indexes)."),
        ConfigKey("max.message.bytes", _int(64, 1 << 30), 1 * MiB + 12,
                  "Largest batch, in bytes as sent by the producer, a partition accepts."),
        ConfigKey("delete.retention.ms", _int(0), DAY_MS,
                  "Compacted topics: a tombstone is removed once its batch is older than this."),
        ConfigKey("min.compaction.lag.ms", _int(0), 0,
                  "Compacted topics: records younger than this are never compacted away."),
        ConfigKey("flush.messages", _int(1, none_below=1), None,
                  "fsync after this many batches; -1: never (durability comes from replication)."),
        ConfigKey("flush.ms", _int(0, none_below=0), None,
                  "fsync when the oldest unflushed batch is older than this; -1: never."),
        ConfigKey("min.insync.replicas", _int(1, 1000), 1,
                  "acks=all fails with NOT_ENOUGH_REPLICAS when the ISR is smaller than this."),
        ConfigKey("unclean.leader.election.enable", _bool, False,
                  "Allow a replica outside the ISR to become leader (may lose acknowledged records)."),
        ConfigKey("message.timestamp.difference.max.ms", _int(0, none_below=0), None,
                  "Reject batches whose timestamps are further than this from the broker clock; -1: no limit."),
        ConfigKey("compression.type", _choice("producer", "none", "gzip", "snappy", "lz4", "zstd"), "producer",
                  "Codec the topic keeps; 'producer' keeps what the producer sent (the broker never recompresses)."),
    )
}


def parse_topic_config(key: str, text: str) -> Any:
    """The typed value of one key; INVALID_CONFIG for an unknown key or a bad value."""
    spec = TOPIC_CONFIG_KEYS.get(key)
    if spec is None:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"unknown topic config key {key!r}")
    try:
        return spec.parse(text)
    except ValueError as exc:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"bad value for {key}: {exc}") from None


def parse_topic_configs(configs: Mapping[str, str]) -> dict[str, Any]:
    """Typed values of every key that is set (defaults are not filled in)."""
    return {key: parse_topic_config(key, text) for key, text in configs.items()}


def effective_topic_configs(configs: Mapping[str, str]) -> dict[str, Any]:
    """Typed values of every known key: the ones set, and defaults for the rest."""
    values = {name: spec.default for name, spec in TOPIC_CONFIG_KEYS.items()}
    values.update(parse_topic_configs(configs))
    return values
