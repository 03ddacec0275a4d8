"""LogConfig: the settings of one partition log, typed and validated, built from topic configs.

Durability: with flush_batches_max and flush_interval_ms both None (the default, as in Kafka) the log
never fsyncs on the append path; a machine crash can lose what the page cache held, and durability comes
from replication. Segments are always flushed when they roll and on close.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kanal.metadata.cleanup_policy import DELETE, CleanupPolicy
from kanal.metadata.topic_config import LOCAL_RETENTION_AS_TOTAL, effective_topic_configs
from kanal.v1.error import ErrorCode, KanalError


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One partition log's settings. Field names carry their unit; bounds are checked in __post_init__."""

    # Roll when the active segment would grow past this (bytes). 1 KiB .. 2 GiB (positions are u32).
    segment_bytes_max: int = 1024 * 1024 * 1024
    # Roll when a batch's timestamp is this far past the active segment's first batch (ms).
    segment_age_ms_max: int = 7 * 24 * 3600 * 1000
    # Roll when the offset index would hold more entries than this.
    segment_index_entries_max: int = (10 * 1024 * 1024) // 8
    # Write an index entry after at least this many log bytes (0: one per batch).
    index_interval_bytes: int = 4096
    # Largest producer batch accepted (bytes).
    batch_bytes_max: int = 1024 * 1024 + 12
    # Delete closed segments whose newest record is older than this (ms); None keeps them forever. With
    # remote_storage_enable this bounds the whole log, local and remote segments alike.
    retention_ms: int | None = 7 * 24 * 3600 * 1000
    # Delete oldest closed segments while the log is larger than this (bytes); None: no limit. With
    # remote_storage_enable this bounds the whole log, local and remote segments alike.
    retention_bytes: int | None = None
    # Tiered storage (remote.storage.enable): closed segments are copied to the cluster's remote storage;
    # retention_* then bound the whole log (local + remote) and local_retention_* the local part. Off, the
    # log is all local and local_retention_* are unused.
    remote_storage_enable: bool = False
    # With remote storage: an uploaded closed segment stays in this directory until its newest record is
    # older than this (ms); None: no limit. At most retention_ms when that is limited (topic config -2 is
    # retention_ms itself, resolved by from_topic_configs).
    local_retention_ms: int | None = 7 * 24 * 3600 * 1000
    # With remote storage: uploaded closed segments stay in this directory while the local part is at most
    # this large (bytes); None: no limit. At most retention_bytes when that is limited (-2: retention_bytes).
    local_retention_bytes: int | None = None
    # Retention deletes old segments, compaction keeps the latest record per key, or both
    # (cleanup.policy=compact,delete).
    cleanup_policy: CleanupPolicy = DELETE
    # Compaction removes a tombstone once its batch is older than this (ms).
    delete_retention_ms: int = 24 * 3600 * 1000
    # Compaction never touches batches younger than this (ms).
    compaction_lag_ms_min: int = 0
    # fsync after this many appended batches; None: never on the append path.
    flush_batches_max: int | None = None
    # fsync when the oldest unflushed append is older than this (ms); None: never on the append path.
    flush_interval_ms: int | None = None
    # Reject batches whose max timestamp is further than this from the broker clock (ms); None: any.
    timestamp_difference_ms_max: int | None = None

    def __post_init__(self) -> None:
        _check(1024 <= self.segment_bytes_max <= 1 << 31, "segment_bytes_max must be in [1 KiB, 2 GiB]")
        _check(self.segment_age_ms_max >= 1, "segment_age_ms_max must be >= 1")
        _check(self.segment_index_entries_max >= 8, "segment_index_entries_max must be >= 8")
        _check(self.index_interval_bytes >= 0, "index_interval_bytes must be >= 0")
        _check(
            64 <= self.batch_bytes_max < self.segment_bytes_max, "batch_bytes_max must be in [64, segment)"
        )
        _check(self.retention_ms is None or self.retention_ms >= 0, "retention_ms must be >= 0 or None")
        _check(
            self.retention_bytes is None or self.retention_bytes >= 0, "retention_bytes must be >= 0 or None"
        )
        _check(self.local_retention_ms is None or self.local_retention_ms >= 0,
               "local_retention_ms must be >= 0 or None")
        _check(self.local_retention_bytes is None or self.local_retention_bytes >= 0,
               "local_retention_bytes must be >= 0 or None")
        if self.remote_storage_enable:
            # The local part of a tiered log is a suffix of the whole log: it cannot be kept longer or
            # larger than the whole (the controller refuses such topic configs: topic_config_rules.py).
            _check(_within(self.local_retention_ms, self.retention_ms),
                   "local_retention_ms must be <= retention_ms with remote storage")
            _check(_within(self.local_retention_bytes, self.retention_bytes),
                   "local_retention_bytes must be <= retention_bytes with remote storage")
        # A text here (the type before issue 47) would read as neither policy: refuse it loudly.
        _check(isinstance(self.cleanup_policy, CleanupPolicy), "cleanup_policy must be a CleanupPolicy")
        _check(self.delete_retention_ms >= 0, "delete_retention_ms must be >= 0")
        _check(self.compaction_lag_ms_min >= 0, "compaction_lag_ms_min must be >= 0")
        _check(
            self.flush_batches_max is None or self.flush_batches_max >= 1, "flush_batches_max must be >= 1"
        )
        _check(
            self.flush_interval_ms is None or self.flush_interval_ms >= 0, "flush_interval_ms must be >= 0"
        )
        _check(self.timestamp_difference_ms_max is None or self.timestamp_difference_ms_max >= 0,
               "timestamp_difference_ms_max must be >= 0 or None")

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str]) -> LogConfig:
        """From a topic's text configs (unset keys take their defaults); INVALID_CONFIG when bad."""
        values = effective_topic_configs(configs)
        return cls(
            segment_bytes_max=values["segment.bytes"],
            segment_age_ms_max=values["segment.ms"],
            segment_index_entries_max=max(8, values["segment.index.bytes"] // 8),
            index_interval_bytes=values["index.interval.bytes"],
            batch_bytes_max=min(values["max.message.bytes"], values["segment.bytes"] - 1),
            retention_ms=values["retention.ms"],
            retention_bytes=values["retention.bytes"],
            remote_storage_enable=values["remote.storage.enable"],
            local_retention_ms=_local(values["local.retention.ms"], values["retention.ms"]),
            local_retention_bytes=_local(values["local.retention.bytes"], values["retention.bytes"]),
            cleanup_policy=values["cleanup.policy"],
            delete_retention_ms=values["delete.retention.ms"],
            compaction_lag_ms_min=values["min.compaction.lag.ms"],
            flush_batches_max=values["flush.messages"],
            flush_interval_ms=values["flush.ms"],
            timestamp_difference_ms_max=values["message.timestamp.difference.max.ms"],
        )


def _local(local: int | None, total: int | None) -> int | None:
    """A local.retention.* value with -2 ("as retention.*") resolved to the total's value."""
    return total if local == LOCAL_RETENTION_AS_TOTAL else local


def _within(local: int | None, total: int | None) -> bool:
    """local <= total, None being no limit."""
    return total is None or (local is not None and local <= total)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise KanalError(ErrorCode.INVALID_CONFIG, message)
