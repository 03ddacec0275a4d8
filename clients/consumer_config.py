"""ConsumerConfig: a consumer's settings, typed and validated (unknown keys are a TypeError, bad values
INVALID_CONFIG). Names follow Kafka's with units spelled out. Importable from `kanal.clients.consumer` too."""

from __future__ import annotations

from dataclasses import dataclass

from kanal.clients.assignors import ASSIGNORS
from kanal.clients.config_checks import (
    check_bool,
    check_callable,
    check_int,
    check_security,
    check_str,
    parse_bootstrap,
)
from kanal.clients.serialization import Deserializer
from kanal.security.channel_security import ClientSecurity
from kanal.v1 import broker_pb2
from kanal.v1.client_id import check_client_id
from kanal.v1.error import ErrorCode, KanalError

ISOLATION_LEVELS = {
    "read_uncommitted": broker_pb2.READ_UNCOMMITTED,
    "read_committed": broker_pb2.READ_COMMITTED,
}


@dataclass(frozen=True)
class ConsumerConfig:
    bootstrap: str
    # Where to start when a partition has no position or its position is out of range:
    # "earliest", "latest", or "none" (raise OFFSET_OUT_OF_RANGE from poll).
    auto_offset_reset: str = "latest"
    # Most records one poll() returns.
    max_poll_records: int = 500
    # A fetch waits until this many bytes are available (fetch.min.bytes)...
    fetch_min_bytes: int = 1
    # ...or this long (fetch.max.wait.ms).
    fetch_max_wait_ms: int = 500
    # Bytes one fetch may return over all partitions (fetch.max.bytes).
    fetch_max_bytes: int = 50 * 1024 * 1024
    # Bytes one fetch may return per partition (max.partition.fetch.bytes).
    partition_fetch_bytes_max: int = 1024 * 1024
    # Bytes of fetched, not yet polled records kept per partition before its fetching pauses.
    prefetch_bytes_max: int = 4 * 1024 * 1024
    # Longest wait for one call; also how long a partition's fetches may keep failing with a retriable
    # error (a broker down, a leader moving) before poll() raises that error (it fetches on after it).
    request_timeout_ms: int = 30_000
    # Pause before a fetch or offset lookup that failed with a retriable error is tried again
    # (retry.backoff.ms).
    retry_backoff_ms: int = 100
    client_id: str = "kanal-consumer"
    # ---- groups (used when group_id is set) ----
    # The consumer group (group.id); empty for a consumer without a group (assign() only, no commits).
    group_id: str = ""
    # Static membership (group.instance.id): a restart within the session keeps the partitions.
    group_instance_id: str = ""
    # The coordinator removes a member that sends no heartbeat for this long (session.timeout.ms).
    session_timeout_ms: int = 45_000
    # How often the background thread heartbeats (heartbeat.interval.ms); well below the session timeout.
    heartbeat_interval_ms: int = 3_000
    # Longest time between poll() calls before this member leaves the group (max.poll.interval.ms); also
    # the rebalance timeout: how long the coordinator waits for members to rejoin.
    max_poll_interval_ms: int = 300_000
    # Commit the positions of what poll() returned, at most this often, from poll() and close().
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    # Assignors offered, preferred first (partition.assignment.strategy): range, roundrobin,
    # cooperative-sticky. The group uses the first one that every member offers.
    partition_assignment_strategy: tuple[str, ...] = ("range", "cooperative-sticky")
    # How often a pattern subscription looks for new or removed topics (metadata.max.age.ms).
    metadata_max_age_ms: int = 300_000
    # Decode fetched records in C when the extension is built (kanal.clients.consumer.NATIVE; same records
    # and errors). False keeps the pure-Python path.
    use_native_path: bool = True
    # TLS files and credentials (kanal.security.channel_security.ClientSecurity); None: plaintext.
    security: ClientSecurity | None = None
    # "read_uncommitted": everything below the high-water mark, records of open and aborted transactions
    # included; "read_committed": only below the last stable offset, aborted transactions' records dropped
    # (isolation.level). Transaction markers are never returned either way.
    isolation_level: str = "read_uncommitted"
    # The consumer's rack or zone (client.rack; KIP-392). With it, a broker whose replica selector is
    # rack-aware may send this consumer to an in-sync replica in its rack, and the consumer reads the
    # partition there (falling back to the leader on any error from it, and asking the leader again after
    # metadata_max_age_ms). Empty: only leaders are read.
    client_rack: str = ""
    # Deserializers (key.deserializer, value.deserializer): `(bytes | None, ctx) -> obj`, ctx a
    # kanal.clients.serialization.SerializationContext; confluent-kafka's registry deserializers fit as they
    # are. poll() calls them on every record it returns; None: keys and values stay bytes. A failure is
    # raised by poll() and the record is not skipped (Consumer.poll).
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None

    def __post_init__(self) -> None:
        parse_bootstrap(self.bootstrap)
        check_callable("key_deserializer", self.key_deserializer)
        check_callable("value_deserializer", self.value_deserializer)
        check_security(self.security)
        for name in ("client_id", "group_id", "group_instance_id", "client_rack"):
            check_str(name, getattr(self, name))
        check_client_id(self.client_id)
        check_bool("enable_auto_commit", self.enable_auto_commit)
        check_bool("use_native_path", self.use_native_path)
        if self.isolation_level not in ISOLATION_LEVELS:
            raise KanalError(
                ErrorCode.INVALID_CONFIG,
                f"isolation_level must be one of {sorted(ISOLATION_LEVELS)}, got {self.isolation_level!r}",
            )
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise KanalError(ErrorCode.INVALID_CONFIG, "auto_offset_reset must be earliest, latest or none")
        for name, lo, hi in (
            ("max_poll_records", 1, 1_000_000),
            ("fetch_min_bytes", 0, 1 << 30),
            ("fetch_max_wait_ms", 0, 300_000),
            ("fetch_max_bytes", 1024, 1 << 30),
            ("partition_fetch_bytes_max", 1024, 1 << 30),
            ("prefetch_bytes_max", 1024, 1 << 32),
            ("request_timeout_ms", 100, 600_000),
            ("retry_backoff_ms", 0, 60_000),
            ("session_timeout_ms", 1, 3_600_000),
            ("heartbeat_interval_ms", 1, 3_600_000),
            ("max_poll_interval_ms", 1, 3_600_000),
            ("auto_commit_interval_ms", 1, 3_600_000),
            ("metadata_max_age_ms", 100, 86_400_000),
        ):
            check_int(name, getattr(self, name), lo, hi)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise KanalError(
                ErrorCode.INVALID_CONFIG, "heartbeat_interval_ms must be below session_timeout_ms"
            )
        unknown = [a for a in self.partition_assignment_strategy if a not in ASSIGNORS]
        if unknown or not self.partition_assignment_strategy:
            raise KanalError(
                ErrorCode.INVALID_CONFIG,
                f"partition_assignment_strategy must name assignors among "
                f"{sorted(ASSIGNORS)}, got {self.partition_assignment_strategy}",
            )
        if self.group_instance_id and not self.group_id:
            raise KanalError(ErrorCode.INVALID_CONFIG, "group_instance_id needs a group_id")
