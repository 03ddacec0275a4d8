"""ProducerConfig: a producer's settings, typed and validated (unknown keys are a TypeError, bad values
INVALID_CONFIG). Names follow Kafka's with units spelled out; defaults are Kafka's where they suit a
Python client that pays ~0.25 ms per gRPC call (bigger batches: one call should carry many records)."""

from __future__ import annotations

from dataclasses import dataclass

from kanal.clients.config_checks import (
    bad_config,
    check_bool,
    check_callable,
    check_int,
    check_security,
    check_str,
    parse_bootstrap,
)
from kanal.clients.serialization import Serializer
from kanal.security.channel_security import ClientSecurity
from kanal.v1 import records_pb2
from kanal.v1.client_id import check_client_id

CODECS = {
    "none": records_pb2.COMPRESSION_NONE,
    "gzip": records_pb2.COMPRESSION_GZIP,
    "snappy": records_pb2.COMPRESSION_SNAPPY,
    "lz4": records_pb2.COMPRESSION_LZ4,
    "zstd": records_pb2.COMPRESSION_ZSTD,
}
ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}
REQUEST_TIMEOUT_MS_DEFAULT = 30_000
DELIVERY_TIMEOUT_MS_DEFAULT = 120_000


def delivery_timeout_covering(request_timeout_ms: int, linger_ms: int) -> int:
    """The default delivery timeout, or request + linger when that is longer (the least the config allows):
    what a command with a --request-timeout-ms flag gives its producer."""
    return max(DELIVERY_TIMEOUT_MS_DEFAULT, request_timeout_ms + linger_ms)


@dataclass(frozen=True)
class ProducerConfig:
    # host:port[,host:port...] of brokers to learn the cluster from.
    bootstrap: str
    # 0: fire and forget; 1: the leader stored it; "all": every in-sync replica has it.
    acks: str = "all"
    # A partition's batch is sent once it holds this many bytes of records (batch.size).
    batch_size_bytes: int = 512 * 1024
    # ...or once its first record has waited this long (linger.ms).
    linger_ms: int = 5
    # Codec for whole batches: none, gzip, snappy, lz4, zstd.
    compression: str = "none"
    # Produce calls in flight at once, per broker (max.in.flight.requests.per.connection). Each
    # partition has at most one call in flight, so order within a partition always holds.
    max_in_flight: int = 5
    # Sealed batches of one partition one call may carry, appended by the broker in order: the
    # partition's pipeline depth (one 512 KiB batch in flight per partition left a broker half idle).
    partition_batches_per_call_max: int = 2
    # Give up on a record this long after produce() was called (delivery.timeout.ms).
    delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS_DEFAULT
    # One Produce call's deadline (request.timeout.ms).
    request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT
    # Wait between retries of a failed batch (retry.backoff.ms).
    retry_backoff_ms: int = 100
    # Metadata is asked for again once it is this old, even when no error called for it
    # (metadata.max.age.ms): a leader that moved while the old one still answers is found this way.
    metadata_max_age_ms: int = 300_000
    # Bytes of records buffered (not yet acknowledged) before produce() blocks (buffer.memory).
    buffer_memory_bytes: int = 64 * 1024 * 1024
    # How long produce() may block on a full buffer or missing metadata (max.block.ms).
    max_block_ms: int = 60_000
    # Idempotence: the leader drops retried duplicates, so a retry never writes a record twice.
    enable_idempotence: bool = True
    # Largest single record (key + value + headers), bytes.
    record_bytes_max: int = 1024 * 1024
    client_id: str = "kanal-producer"
    # Run produce()'s per-record work in C when the extension is built (kanal.clients.producer.NATIVE;
    # same behaviour and bytes). False keeps the pure-Python path, as does a custom partitioner.
    use_native_path: bool = True
    # TLS files and credentials (kanal.security.channel_security.ClientSecurity; Kafka's security.protocol,
    # ssl.*
    # and sasl.*); None: plaintext.
    security: ClientSecurity | None = None
    # Transactions (transactional.id): set, the producer writes in transactions (init_transactions,
    # begin_transaction, ..., clients/transactions.py); at most 255 characters; needs idempotence.
    transactional_id: str = ""
    # How long the coordinator lets a transaction stay open before aborting it (transaction.timeout.ms),
    # in [1, the brokers' transaction_timeout_ms_max (900000 by default)].
    transaction_timeout_ms: int = 60_000
    # Serializers (key.serializer, value.serializer): `(obj, ctx) -> bytes | None`, ctx a
    # kanal.clients.serialization.SerializationContext; confluent-kafka's registry serializers fit as they
    # are. produce() calls them on every record before anything else; None: keys and values are bytes
    # (or str) already. See clients/serialization.py for the rules.
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None

    def __post_init__(self) -> None:
        parse_bootstrap(self.bootstrap)
        check_callable("key_serializer", self.key_serializer)
        check_callable("value_serializer", self.value_serializer)
        check_security(self.security)
        check_str("client_id", self.client_id)
        check_client_id(self.client_id)
        check_bool("enable_idempotence", self.enable_idempotence)
        check_bool("use_native_path", self.use_native_path)
        if str(self.acks) not in ACKS:
            bad_config(f"acks must be 0, 1 or all, got {self.acks!r}")
        if self.compression not in CODECS:
            bad_config(f"compression must be one of {', '.join(CODECS)}, got {self.compression!r}")
        check_int("batch_size_bytes", self.batch_size_bytes, 1, 64 << 20)
        check_int("linger_ms", self.linger_ms, 0, 60_000)
        check_int("max_in_flight", self.max_in_flight, 1, 64)
        check_int("partition_batches_per_call_max", self.partition_batches_per_call_max, 1, 64)
        check_int("request_timeout_ms", self.request_timeout_ms, 100, 600_000)
        check_int(
            "delivery_timeout_ms",
            self.delivery_timeout_ms,
            self.request_timeout_ms + self.linger_ms,
            86_400_000,
        )
        check_int("retry_backoff_ms", self.retry_backoff_ms, 0, 60_000)
        check_int("metadata_max_age_ms", self.metadata_max_age_ms, 100, 86_400_000)
        check_int("buffer_memory_bytes", self.buffer_memory_bytes, self.batch_size_bytes, 1 << 40)
        check_int("max_block_ms", self.max_block_ms, 0, 3_600_000)
        check_int("record_bytes_max", self.record_bytes_max, 1, 64 << 20)
        check_str("transactional_id", self.transactional_id)
        check_int("transaction_timeout_ms", self.transaction_timeout_ms, 1, 900_000)
        if len(self.transactional_id) > 255:
            bad_config(f"transactional_id is {len(self.transactional_id)} characters; at most 255")
        if self.transactional_id and not self.enable_idempotence:
            bad_config("transactional_id needs enable_idempotence (as in Kafka)")
        if self.enable_idempotence and self.acks_value != -1:
            bad_config("enable_idempotence needs acks=all (as in Kafka); set enable_idempotence=False "
                       "for acks 0 or 1")

    @property
    def acks_value(self) -> int:
        return ACKS[str(self.acks)]

    @property
    def codec(self) -> int:
        return CODECS[self.compression]

