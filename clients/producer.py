"""Producer: send records to kanal, batched per partition, with retries and idempotence.

    producer = Producer(ProducerConfig(bootstrap="127.0.0.1:9092"))
    future = producer.produce("orders", b"value", key=b"customer-7")
    producer.flush()
    future.result().offset

produce() places the record (explicit partition; else murmur3 of the key, as every kanal client does;
else a sticky partition that changes when its batch is sealed), appends it to the accumulator and returns
at once. A background sender thread drains sealed or lingered batches, groups them by leader, and sends one
Produce call per broker carrying batches for many partitions (at most max_in_flight calls per broker; a
partition is in one call at a time, with up to partition_batches_per_call_max of its batches, which the
broker appends in order and answers with each stored batch's base offset). A failed call is the KanalError
it stands for (clients/error_boundary.py: kanal's error trailer, else the gRPC status). Retriable errors
(leader moved, broker down, timeouts, not enough replicas) refresh metadata and retry the same bytes after
retry_backoff_ms until delivery_timeout_ms, and a batch still failing then fails with the last of them:
the batches a call did not store go back, in order, to the head of their partition before it may send
again, so nothing overtakes them. A non-retriable refusal (TOPIC_AUTHORIZATION_FAILED, INVALID_REQUEST...)
fails its batch at once, with that code; a whole call refused that way fails every batch it carried. With
idempotence the leader drops a retried batch it already has, so each record is written once.

When the C extension is built (NATIVE) and no custom partitioner is given, `produce` is the C
`Appender.produce` (clients/_producer_fast.c): the common case (bytes or None value and key, no headers, a
known topic, an open batch with room in buffer memory) is done there, and every other call is handed,
unchanged, to the Python `Producer.produce` below, which stays the reference. `Producer.native` and the
repr say which path a producer runs; KANAL_PRODUCER_PURE_PYTHON=1 or `use_native_path=False` turn C off.

Serializers (`ProducerConfig.key_serializer` / `value_serializer`, clients/serialization.py) run first in
produce() and produce_many(), on every record, so what they return is what the partitioner, the size
limit and the batch see. Without them produce() pays one attribute check; with them on the C path,
`produce` is `_produce_serialized`, which serializes and hands the bytes to C (whose fallback, the Python
produce(), then does not serialize again).
"""

from __future__ import annotations

import functools
import logging
import operator
import random
import threading
import time
import types
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Self, SupportsIndex

from kanal.clients.call_pool import CallPool
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.error_boundary import call, retrying
from kanal.clients.produce_request import encode_produce_request
from kanal.clients.producer_batch import (
    NATIVE,
    NATIVE_IMPORT_ERROR,
    DeliveryCallback,
    ProducerBatch,
    RecordFuture,
    RecordFutures,
    RecordMetadata,
    native,
    uint32_array,
)
from kanal.clients.producer_config import ProducerConfig
from kanal.clients.record_accumulator import NativeAppender, RecordAccumulator
from kanal.clients.serialization import (
    KEY,
    VALUE,
    Headers,
    RecordSerializationError,
    SerializationContext,
    Serializer,
)
from kanal.clients.throttle import BrokerThrottles
from kanal.clients.transactions import TransactionAbortableError, TransactionManager, TxnState
from kanal.v1 import broker_pb2
from kanal.v1.batch import ATTR_TRANSACTIONAL, encode_batch_parts, frame_batch_parts
from kanal.v1.error import ErrorCode, KanalError, is_retriable
from kanal.v1.partitioning import partition_for_key

log = logging.getLogger(__name__)

Partitioner = Callable[[str, bytes | None, int], int]  # (topic, key, partition count) -> partition
# A key or value as produce() takes it: bytes (a str is UTF-8 encoded) or None; with a serializer, whatever
# the serializer takes (hence Any).
RecordData = bytes | str | None | Any
_RECORD_OVERHEAD_BYTES = 16
_METADATA_REFRESH_MIN_S = 0.05
# Record timestamps are ms since the epoch in an int64, never negative (Kafka refuses negative ones too).
# Keeping them in [0, 2^63 - 1] also keeps every in-batch delta, and its zigzag varint, inside 64 bits.
_TIMESTAMP_MS_MAX = (1 << 63) - 1
_EPOCH_MAX = (1 << 31) - 1  # records.proto: producer_epoch is an int32 >= 0
# Refusals that mean the broker's sequence for this producer and partition is not the one the batch
# follows (see _resolve and _new_epoch).
_SEQUENCE_ERRORS = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID})
__all__ = ["NATIVE", "NATIVE_IMPORT_ERROR", "Producer", "ProducerConfig", "RecordFuture", "RecordFutures",
           "RecordMetadata"]


def _as_bytes(value: bytes | bytearray | memoryview | str | None, what: str) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


def _encoded(batch: ProducerBatch) -> tuple[bytes, ...]:
    """A batch's encoded pieces, which Producer._encode made before the batch was put in a request."""
    if batch.encoded is None:
        raise RuntimeError(f"{batch!r} is being sent unencoded")
    return batch.encoded


def _checked_timestamp(timestamp: object) -> int:
    """An explicit record timestamp as an int in [0, 2^63 - 1], or INVALID_REQUEST: caught here, in
    produce(), rather than when the sender encodes the batch, where it would fail every record with it."""
    try:
        if not isinstance(timestamp, SupportsIndex):
            raise TypeError
        ms = operator.index(timestamp)
    except TypeError:
        raise KanalError(
            ErrorCode.INVALID_REQUEST,
            f"timestamp must be an int of ms since the epoch, not {type(timestamp).__name__}",
        ) from None
    if not 0 <= ms <= _TIMESTAMP_MS_MAX:
        raise KanalError(
            ErrorCode.INVALID_REQUEST, f"timestamp {ms} is outside [0, 2^63 - 1] ms since the epoch"
        )
    return ms


def _checked_partition(partition: object, topic: str, count: int, *, chosen: bool = False) -> int:
    """An explicit partition (or one a custom partitioner `chosen`) as an int of the topic, else a clear
    error at produce(): a float or a str let through would fail on the sender thread, and with it every
    buffered record."""
    whose = "the partitioner's " if chosen else ""
    try:
        if not isinstance(partition, SupportsIndex):
            raise TypeError
        index = operator.index(partition)
    except TypeError:
        raise TypeError(f"{whose}partition must be an int or None, not {type(partition).__name__}") from None
    if not 0 <= index < count:
        raise KanalError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"{topic} has no partition {index}"
            + (f" (the partitioner chose it; {count} partitions)" if chosen else ""),
        )
    return index


def _checked_headers(headers: Sequence[tuple[str, bytes | None]]) -> tuple[tuple[str, bytes | None], ...]:
    """Headers as (str key, bytes or None value) pairs; a str value is UTF-8 encoded. Checked here, so a
    bad header is a clear error at produce() with nothing queued."""
    out = []
    for header in headers:
        if not isinstance(header, tuple | list) or len(header) != 2:
            raise TypeError(f"a header must be a (key, value) pair, not {header!r}")
        key, value = header
        if not isinstance(key, str):
            raise TypeError(f"a header key must be a str, not {type(key).__name__}")
        out.append((key, _as_bytes(value, "a header value")))
    return tuple(out)


def _serialized(serializer: Serializer, obj: object, ctx: SerializationContext) -> bytes | None:
    """`serializer(obj, ctx)`, which must give bytes or None; any failure as RecordSerializationError (the
    clients' one error type, the serializer's exception its cause)."""
    try:
        data = serializer(obj, ctx)
    except Exception as exc:  # a foreign library's error, translated at the boundary (and raised)
        raise RecordSerializationError(ctx.topic, ctx.field, exc) from exc
    if data is not None and not isinstance(data, bytes | bytearray | memoryview):
        raise RecordSerializationError(ctx.topic, ctx.field, TypeError(
            f"the serializer returned {type(data).__name__}, not bytes or None"))
    return bytes(data) if data is not None and type(data) is not bytes else data


def _by_partition(batches: list[ProducerBatch]) -> dict[tuple[str, int], list[ProducerBatch]]:
    """Batches grouped by partition, each group in its order in `batches` (the partition's order)."""
    out: dict[tuple[str, int], list[ProducerBatch]] = {}
    for batch in batches:
        out.setdefault((batch.topic, batch.partition), []).append(batch)
    return out


class Producer:
    def __init__(self, config: ProducerConfig, *, partitioner: Partitioner | None = None,
                 rng: random.Random | None = None, metadata: ClusterMetadata | None = None) -> None:
        """`metadata`: a ClusterMetadata to use instead of one made from config.bootstrap (tests give a
        stand-in; the producer closes it on close())."""
        self.config = config
        self._metadata = metadata or ClusterMetadata(
            config.bootstrap,
            request_timeout_ms=config.request_timeout_ms,
            security=config.security,
            client_id=config.client_id,
        )
        self._throttles = BrokerThrottles()  # quota throttles the brokers asked for (throttle.py)
        # The C path only knows the built-in partitioners (murmur3 of the key, sticky without one).
        # A subclass that overrides produce() keeps the Python path: the C shortcut below would bypass it.
        self.native = (NATIVE and config.use_native_path and partitioner is None
                       and type(self).produce is Producer.produce)
        self._accumulator = RecordAccumulator(
            batch_size_bytes=config.batch_size_bytes, linger_ms=config.linger_ms,
            buffer_memory_bytes=config.buffer_memory_bytes, delivery_timeout_ms=config.delivery_timeout_ms,
            native=self.native,
        )
        self._future = native.RecordFuture if self.native and native is not None else RecordFuture
        self._partitioner = partitioner
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        self._partition_counts: dict[str, int] = {}
        self._in_flight_calls: dict[str, int] = defaultdict(int)
        self._calls_lock = threading.Lock()
        # Held from drain to submit, by the sender thread and by reply threads that send (_send_ready), so
        # the in-flight count _sendable reads cannot be passed by two senders at once (max_in_flight).
        self._send_lock = threading.Lock()
        self._producer_id = 0
        self._producer_epoch = 0
        self._sequences: dict[tuple[str, int], int] = defaultdict(int)
        # The epoch a partition's batches carry when it is not the producer's own: see _new_epoch.
        self._epochs: dict[tuple[str, int], int] = {}
        self._last_refresh_s = 0.0
        # Sends of batches (retries included) and retries alone, for metrics() (Kafka's record-send-total and
        # record-retry-total, per batch here). Written under _send_lock.
        self._batch_sends = 0
        self._batch_retries = 0
        self._closed = False
        self._running = True
        self._record_bytes_max = config.record_bytes_max
        self._max_block_s = config.max_block_ms / 1000
        # Serializers: produce_many() applies them whenever set; the Python produce() only when it is the
        # producer's produce (on the C path _produce_serialized does it, and C falls back to produce()).
        self._serializing = config.key_serializer is not None or config.value_serializer is not None
        self._produce_serializes = self._serializing and not self.native
        self._metadata.refresh()  # fail fast on an unreachable bootstrap
        self._last_refresh_s = time.monotonic()
        self._metadata_max_age_s = config.metadata_max_age_ms / 1000
        self._txn: TransactionManager | None = None
        if config.transactional_id:
            # The id and epoch come from init_transactions(), which fences older producers of the id.
            self._txn = TransactionManager(
                self._metadata,
                config.transactional_id,
                config.transaction_timeout_ms,
                request_timeout_ms=config.request_timeout_ms,
                max_block_ms=config.max_block_ms,
                retry_backoff_ms=config.retry_backoff_ms,
            )
        elif config.enable_idempotence:
            self._init_producer_id()
        # One thread per call the sender may have in flight to each of a few brokers; more calls queue.
        self._calls = CallPool(min(64, config.max_in_flight * 4), "kanal-producer-call")
        self._appender: NativeAppender | None = None
        if self.native:
            # An instance attribute shadows the method: callers reach C in one call; C calls the method
            # below (the same arguments) for everything uncommon.
            self._appender = self._accumulator.native_appender(
                partition_counts=self._partition_counts, sticky=self._sticky, randrange=self._rng.randrange,
                fallback=types.MethodType(Producer.produce, self), record_bytes_max=config.record_bytes_max,
                max_block_s=self._max_block_s)
            self.produce = (  # type: ignore[method-assign]
                self._produce_serialized if self._serializing else self._appender.produce)
        self._sender = threading.Thread(target=self._run_sender, name="kanal-producer-sender", daemon=True)
        self._sender.start()

    def __repr__(self) -> str:
        return (f"<Producer {self.config.client_id} pid={self._producer_id} "
                f"path={'native' if self.native else 'python'} {self._accumulator!r}>")

    def metrics(self) -> dict[str, float]:
        """produce_batch_send_count (batches sent, retries included), produce_batch_retry_count (sends of a
        batch after its first), and the quota metrics: produce_throttle_count (replies that carried a
        throttle), produce_throttle_time_ms_total / _avg / _max (Kafka's produce-throttle-time-avg/max)."""
        return {"produce_batch_send_count": self._batch_sends,
                "produce_batch_retry_count": self._batch_retries, **self._throttles.metrics("produce")}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the caller's side ----

    def produce(self, topic: str, value: RecordData, key: RecordData = None,
                partition: int | None = None, headers: Sequence[tuple[str, bytes | None]] | None = None,
                timestamp: int | None = None, on_delivery: DeliveryCallback | None = None) -> RecordFuture:
        """Queue one record; returns a future of its RecordMetadata. Raises at once for a closed
        producer, an unknown topic or partition, or a record over record_bytes_max. With serializers (the
        config's), `value` and `key` are what they take, and a failing one is RecordSerializationError."""
        timestamp = self._checked_call(timestamp, on_delivery)
        if self._produce_serializes:
            value, key, headers = self._serialize(topic, value, key, headers)
        # This runs once per record: the common case (bytes values, no headers) takes the short path.
        if value.__class__ is not bytes and value is not None:
            value = _as_bytes(value, "value")
        if key.__class__ is not bytes and key is not None:
            key = _as_bytes(key, "key")
        count = self._partition_counts.get(topic) or self._partition_count(topic)
        if partition is None:
            if self._partitioner is not None:
                partition = _checked_partition(
                    self._partitioner(topic, key, count), topic, count, chosen=True
                )
            elif key is not None:
                partition = partition_for_key(key, count)
            else:
                partition = self._sticky.get(topic)
                if partition is None:
                    partition = self._sticky[topic] = self._rng.randrange(count)
        elif partition.__class__ is not int or not 0 <= partition < count:
            partition = _checked_partition(partition, topic, count)
        size = _RECORD_OVERHEAD_BYTES + (len(value) if value else 0) + (len(key) if key else 0)
        if headers:
            headers = _checked_headers(headers)
            size += sum(len(k.encode()) + (len(v) if v else 0) for k, v in headers)
        else:
            headers = ()
        if size > self._record_bytes_max:
            raise self._too_large(size)
        batch, index, sealed = self._accumulator.append(
            topic,
            partition,
            value,
            key,
            time.time_ns() // 1_000_000 if timestamp is None else timestamp,
            headers,
            size,
            self._max_block_s,
            on_delivery,
        )
        if sealed and key is None and partition == self._sticky.get(topic):
            self._sticky[topic] = self._rng.randrange(
                count
            )  # sticky partitioner: move on once a batch is full
        return self._future(batch, index)

    def _produce_serialized(self, topic: str, value: RecordData, key: RecordData = None,
                            partition: int | None = None,
                            headers: Sequence[tuple[str, bytes | None]] | None = None,
                            timestamp: int | None = None, on_delivery: DeliveryCallback | None = None
                            ) -> RecordFuture:
        """produce() on the C path with serializers: serialize, then the C produce()."""
        if self._appender is None:
            raise RuntimeError("_produce_serialized runs only on the C path")
        self._checked_call(timestamp, on_delivery)  # a closed producer calls no serializer (a registry)
        value, key, headers = self._serialize(topic, value, key, headers)
        future: RecordFuture = self._appender.produce(topic, value, key, partition, headers, timestamp,
                                                      on_delivery)
        return future

    def _serialize(self, topic: str, value: object, key: object,
                   headers: Sequence[tuple[str, bytes | None]] | None
                   ) -> tuple[bytes | None, bytes | None, Headers | None]:
        """(value, key, headers) serialized: the key first, then the value (as confluent-kafka's
        SerializingProducer), both with the record's headers as a list they may append to."""
        record_headers: Headers = list(headers) if headers else []
        config = self.config
        if config.key_serializer is not None:
            key = _serialized(config.key_serializer, key, SerializationContext(topic, KEY, record_headers))
        if config.value_serializer is not None:
            value = _serialized(config.value_serializer, value,
                                SerializationContext(topic, VALUE, record_headers))
        return value, key, record_headers or None  # type: ignore[return-value]  # _serialized checked them

    def _serialize_many(self, topic: str, values: Sequence[object], keys: Sequence[object] | None
                        ) -> tuple[list[bytes | None], list[bytes | None] | None]:
        """produce_many()'s records serialized (no headers: ctx.headers is None)."""
        if isinstance(values, str | bytes) or (keys is not None and isinstance(keys, str | bytes)):
            raise TypeError("produce_many takes sequences of values and keys; for one record, call produce()")
        config = self.config
        key_list: list[bytes | None] | None = None
        if config.key_serializer is not None:
            key_context = SerializationContext(topic, KEY)
            key_list = [_serialized(config.key_serializer, k, key_context)
                        for k in (keys if keys is not None else [None] * len(values))]
        elif keys is not None:
            key_list = list(keys)  # type: ignore[arg-type]  # produce_many's own checks follow
        if config.value_serializer is None:
            return list(values), key_list  # type: ignore[arg-type]  # produce_many's own checks follow
        value_context = SerializationContext(topic, VALUE)
        return [_serialized(config.value_serializer, v, value_context) for v in values], key_list

    def produce_many(
        self,
        topic: str,
        values: Sequence[RecordData],
        keys: Sequence[RecordData] | None = None,
        *,
        partition: int | None = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> RecordFutures:
        """Queue many records of one topic in one call; returns their futures (a RecordFutures), in order.

        Record i has value values[i] and key keys[i] (no keys: all None) and is placed as produce() would
        place it (`partition` for all, else murmur3 of its key, else the sticky partition). All records
        get one timestamp: `timestamp`, or the time of the call. Every record is checked before any is
        queued, so a bad one (type, size, length of keys) is an error with nothing queued. The records
        are queued together, without other threads' records between them; the call blocks (back-pressure)
        until buffer memory has room for all of them, so it may hold at most buffer_memory_bytes.

        This is the bulk path: one produce() call per record costs the caller ~0.4 µs in CPython, a
        produce_many of a thousand records ~0.1 µs per record (docs/architecture.md, Measured). With
        serializers, `values` and `keys` are what they take: every record is serialized first."""
        if self._serializing:
            values, keys = self._serialize_many(topic, values, keys)
        if self._appender is not None:
            placed = self._appender.produce_many(topic, values, keys, partition, timestamp, on_delivery)
            if placed is not None:  # the common case, done in C; else the code below does it (and raises)
                placed_batches, owners, indexes = placed
                return RecordFutures(
                    placed_batches, memoryview(owners).cast("I"), memoryview(indexes).cast("I")
                )
        timestamp = self._checked_call(timestamp, on_delivery)
        if isinstance(values, str | bytes) or (keys is not None and isinstance(keys, str | bytes)):
            raise TypeError("produce_many takes sequences of values and keys; for one record, call produce()")
        value_list = [v if v is None or isinstance(v, bytes) else _as_bytes(v, "value") for v in values]
        if keys is None:
            key_list: list[bytes | None] = [None] * len(value_list)
        else:
            key_list = [k if k is None or isinstance(k, bytes) else _as_bytes(k, "key") for k in keys]
            if len(key_list) != len(value_list):
                raise ValueError(f"produce_many got {len(value_list)} values and {len(key_list)} keys")
        count = self._partition_counts.get(topic) or self._partition_count(topic)
        if partition is not None:
            partition = _checked_partition(partition, topic, count)
        sizes = [_RECORD_OVERHEAD_BYTES + (len(v) if v else 0) + (len(k) if k else 0)
                 for v, k in zip(value_list, key_list)]
        for size in sizes:
            if size > self._record_bytes_max:
                raise self._too_large(size)
        total = sum(sizes)
        if total > self.config.buffer_memory_bytes:
            raise KanalError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"produce_many of {total} bytes is over buffer_memory_bytes "
                             f"({self.config.buffer_memory_bytes}): split it")
        # Partitions that do not depend on the order of sealing are chosen before the lock is taken (a
        # custom partitioner is the caller's code); None marks a record for the sticky partition.
        if partition is not None:
            chosen: list[int | None] = [partition] * len(value_list)
        elif self._partitioner is not None:
            chosen = [_checked_partition(self._partitioner(topic, k, count), topic, count, chosen=True)
                      for k in key_list]
        else:
            chosen = [None if k is None else partition_for_key(k, count) for k in key_list]
        timestamp_ms = time.time_ns() // 1_000_000 if timestamp is None else timestamp
        batches: list[ProducerBatch] = []
        numbers: dict[int, int] = {}  # id(batch) -> its place in batches
        owners, indexes = uint32_array(), uint32_array()
        accumulator, sticky = self._accumulator, self._sticky
        with accumulator.lock:
            accumulator.wait_for_space(total, self._max_block_s)
            for value, key, size, part in zip(value_list, key_list, sizes, chosen):
                is_sticky = part is None
                if part is None:
                    part = sticky.get(topic)
                    if part is None:
                        part = sticky[topic] = self._rng.randrange(count)
                batch, index, sealed = accumulator.append_locked(
                    topic, part, value, key, timestamp_ms, (), size, on_delivery
                )
                if sealed and is_sticky:
                    sticky[topic] = self._rng.randrange(
                        count
                    )  # sticky partitioner: move on once a batch is full
                number = numbers.get(id(batch))
                if number is None:
                    number = numbers[id(batch)] = len(batches)
                    batches.append(batch)
                owners.append(number)
                indexes.append(index)
        return RecordFutures(batches, owners, indexes)

    # ---- transactions (clients/transactions.py) ----

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise KanalError(ErrorCode.INVALID_TXN_STATE, "this producer has no transactional_id")
        return self._txn

    def init_transactions(self) -> None:
        """Get the transactional id's producer id and a new epoch: every older producer of the id is
        fenced, and a transaction it left open is aborted first. Call once, before the first transaction."""
        txn = self._transactions()
        txn.require(TxnState.UNINITIALIZED)
        self._take_producer_id(*txn.init())

    def _take_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        with self._send_lock:
            self._producer_id, self._producer_epoch = producer_id, producer_epoch
            self._sequences.clear()
            self._epochs.clear()

    def begin_transaction(self) -> None:
        self._transactions().begin()

    def send_offsets_to_transaction(self, offsets: dict[tuple[str, int], int], group_id: str) -> None:
        """Commit the consumer group's `offsets` (next offset to read, per partition) with this
        transaction: they become the group's committed offsets when it commits, never if it aborts.

        The records produced so far are sent now, without their linger: their partitions join the
        transaction in the group's AddPartitionsToTxn, and their Produce runs beside the TxnOffsetCommit
        (clients/transactions.py), so the commit that follows waits for less."""
        txn = self._transactions()
        txn.join_group(group_id, self._accumulator.buffered_partitions())
        self._accumulator.begin_flush()
        try:
            txn.send_offsets(offsets, group_id)
        finally:
            self._accumulator.end_flush()

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Send everything of the transaction, then commit it. TransactionAbortableError when a record of
        it failed (abort it), TransactionFatalError when the producer was fenced."""
        txn = self._transactions()
        txn.require(TxnState.IN_TRANSACTION)
        if not self.flush(timeout_s):
            raise TransactionAbortableError(
                ErrorCode.REQUEST_TIMED_OUT, "records not acknowledged in time: abort"
            )
        txn.require(TxnState.IN_TRANSACTION)  # a fatal failure of a batch shows here
        if txn.failed:
            raise TransactionAbortableError(
                ErrorCode.INVALID_TXN_STATE, "a record of the transaction failed: abort it"
            )
        txn.end(commit=True)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Abort the transaction: none of its records or offsets will ever be visible to read_committed
        readers. After a failed record the producer also takes a new epoch (its sequences restart)."""
        txn = self._transactions()
        txn.require(TxnState.IN_TRANSACTION)
        self.flush(timeout_s)
        failed = txn.failed
        txn.end(commit=False)
        if failed:
            self._take_producer_id(*txn.init(reinit=True))

    def _checked_call(self, timestamp: object, on_delivery: object) -> int | None:
        """What produce() and produce_many() check of every call: an open producer, the timestamp (an int
        in [0, 2^63 - 1] ms, returned) and a callable on_delivery; INVALID_REQUEST otherwise."""
        if self._closed:
            raise KanalError(ErrorCode.INVALID_REQUEST, "the producer is closed")
        if self._txn is not None and not self._txn.in_transaction():
            raise KanalError(
                ErrorCode.INVALID_TXN_STATE,
                "a transactional producer sends only inside a transaction (begin_transaction)",
            )
        if timestamp is not None and (
            timestamp.__class__ is not int or not 0 <= timestamp <= _TIMESTAMP_MS_MAX
        ):
            timestamp = _checked_timestamp(timestamp)
        if on_delivery is not None and not callable(on_delivery):
            raise KanalError(ErrorCode.INVALID_REQUEST, f"on_delivery must be callable, not {on_delivery!r}")
        return timestamp

    def _too_large(self, size: int) -> KanalError:
        return KanalError(ErrorCode.MESSAGE_TOO_LARGE,
                          f"record of {size} bytes is over record_bytes_max ({self._record_bytes_max})")

    def _partition_count(self, topic: str) -> int:
        count = len(self._metadata.partitions(topic))
        self._partition_counts[topic] = count
        return count

    def flush(self, timeout_s: float | None = None) -> bool:
        """Send everything buffered now and wait until it is acknowledged (or failed)."""
        self._accumulator.begin_flush()
        try:
            return self._accumulator.wait_all_done(timeout_s)
        finally:
            self._accumulator.end_flush()

    def close(self, timeout_s: float | None = 30.0) -> None:
        """Flush, then stop the sender. Records not delivered by the timeout fail with REQUEST_TIMED_OUT."""
        if self._closed:
            return
        self._mark_closed()
        self.flush(timeout_s)
        self._running = False
        with self._accumulator.wakeup:
            self._accumulator.wakeup.notify_all()
        self._sender.join(timeout=5)
        self._calls.close(wait=True)
        for batch in self._accumulator.abort_all(KanalError(ErrorCode.REQUEST_TIMED_OUT, "producer closed")):
            self._finish(batch, -1, KanalError(ErrorCode.REQUEST_TIMED_OUT, "the producer was closed"))
        self._metadata.close()

    # ---- the sender ----

    def _init_producer_id(self) -> None:
        """The idempotent producer's id and epoch, retried while retriable until max_block_ms; a refusal
        (CLUSTER_AUTHORIZATION_FAILED: no IDEMPOTENT_WRITE and no WRITE on any topic) is raised at once."""
        def attempt(_remaining_s: float) -> broker_pb2.InitProducerIdResponse:
            reply = call(self._metadata.any_stub().InitProducerId, broker_pb2.InitProducerIdRequest(),
                         timeout_s=self.config.request_timeout_ms / 1000, what="InitProducerId")
            if reply.error != ErrorCode.NONE:
                raise KanalError(reply.error, reply.error_message or "InitProducerId failed")
            return reply

        reply = retrying(attempt, timeout_s=self.config.max_block_ms / 1000,
                         backoff_s=self.config.retry_backoff_ms / 1000)
        self._producer_id, self._producer_epoch = reply.producer_id, reply.producer_epoch
        self._sequences.clear()
        self._epochs.clear()

    def _run_sender(self) -> None:
        try:
            self._sender_loop()
        except Exception as exc:  # a bug: fail every waiting record loudly instead of hanging them forever
            log.exception("the producer's sender thread failed")
            self._fail_all(exc)

    def _mark_closed(self) -> None:
        self._closed = True
        if self._appender is not None:
            self._appender.closed = 1  # every later call goes to the Python produce(), which raises

    def _fail_all(self, exc: Exception) -> None:
        self._mark_closed()
        error = KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the producer's sender failed: {exc!r}")
        for batch in self._accumulator.abort_all(error):
            self._finish(batch, -1, error)

    def _sender_loop(self) -> None:
        acc = self._accumulator
        while True:
            with self._send_lock:
                now = time.monotonic()
                if now - self._last_refresh_s >= self._metadata_max_age_s:
                    self._maybe_refresh()
                batches, sleep_s = acc.drain(now, self._sendable, self.config.partition_batches_per_call_max)
                if batches:
                    self._send(batches, now)
            if batches:
                continue
            for batch in acc.expired(now):
                self._finish(batch, -1, self._expiry_error(batch))
            if not self._running and acc.unfinished == 0:
                return
            throttle_end_s = self._throttles.next_end_s(now)
            if (
                throttle_end_s is not None
            ):  # batches may wait for a broker's throttle: look again when it ends
                sleep_s = min(sleep_s, throttle_end_s)
            with acc.wakeup:
                acc.wakeup.wait(sleep_s if self._running else 0.01)

    def _sendable(self, key: tuple[str, int]) -> bool:
        endpoint = self._metadata.leader_endpoint(*key)
        if endpoint is None:
            self._maybe_refresh()
            return False
        if self._throttles.until_s(endpoint) > time.monotonic():
            return False  # the broker throttled us (quota): nothing to it until the throttle is over
        return self._in_flight_calls[endpoint] < self.config.max_in_flight

    def _maybe_refresh(self) -> None:
        now = time.monotonic()
        if now - self._last_refresh_s < _METADATA_REFRESH_MIN_S:
            return
        self._last_refresh_s = now
        try:
            view = self._metadata.refresh()
        except KanalError as exc:
            log.warning("metadata refresh failed: %s", exc)
            return
        # Partitions added to a topic are used from the next record on (the partitioner's count; the C path
        # reads the same dict). A topic the answer lacks keeps its count: one missing for a moment is no
        # reason to send its records elsewhere.
        for topic in list(self._partition_counts):
            parts = view.topics.get(topic)
            if parts:
                self._partition_counts[topic] = len(parts)

    def _send(self, batches: list[ProducerBatch], now: float) -> None:
        """Send drained batches, one call per leader; a partition's batches (up to
        partition_batches_per_call_max, consecutive in `batches`) travel in order in one call."""
        by_leader: dict[str, dict[tuple[str, int], list[ProducerBatch]]] = defaultdict(dict)
        if self._txn is not None and not self._join_transaction(batches):
            return
        for key, group in _by_partition(batches).items():
            live = []
            for batch in group:
                if now > batch.deadline_s:
                    self._finish(batch, -1, batch.error or KanalError(
                        ErrorCode.REQUEST_TIMED_OUT, f"not acknowledged within delivery_timeout_ms "
                                                     f"({self.config.delivery_timeout_ms})"), release=False)
                else:
                    live.append(batch)
            if not live:
                self._accumulator.release(key)
                continue
            endpoint = self._metadata.leader_endpoint(*key)
            if endpoint is None:
                self._accumulator.requeue_all(live, now + self.config.retry_backoff_ms / 1000)
                continue
            for batch in live:
                self._encode(batch)
                batch.attempts += 1
                if batch.attempts > 1:
                    self._batch_retries += 1
            self._batch_sends += len(live)
            by_leader[endpoint][key] = live
        for endpoint, per_partition in by_leader.items():
            topics: dict[str, list[tuple[int, tuple[tuple[bytes, ...], ...]]]] = defaultdict(list)
            for (topic, partition), batches_of_partition in per_partition.items():
                topics[topic].append((partition, tuple(_encoded(b) for b in batches_of_partition)))
            request = encode_produce_request(
                self.config.acks_value, self.config.request_timeout_ms, topics.items()
            )
            with self._calls_lock:
                self._in_flight_calls[endpoint] += 1
            self._calls.submit(
                self._metadata.produce_call(endpoint),
                request,
                self.config.request_timeout_ms / 1000,
                functools.partial(self._on_reply, endpoint=endpoint, by_partition=per_partition),
                what=f"Produce to {endpoint}",
            )

    def _join_transaction(self, batches: list[ProducerBatch]) -> bool:
        """Add the batches' partitions to the transaction before they are sent; on failure they fail (the
        transaction must abort) and False is returned."""
        txn = self._txn
        if txn is None:
            return True
        keys = {(b.topic, b.partition) for b in batches}
        try:
            if not txn.in_transaction():
                raise KanalError(ErrorCode.INVALID_TXN_STATE, "records sent outside a transaction")
            txn.add_partitions(keys)
            return True
        except KanalError as exc:
            for batch in batches:
                self._finish(batch, -1, exc, release=False)
            for key in keys:
                self._accumulator.release(key)
            return False

    def _encode(self, batch: ProducerBatch) -> None:
        """The batch's producer bytes, made on its first send (the records were encoded as they came), as
        the pieces that join to them: the request is written around them with one copy."""
        idempotent = self.config.enable_idempotence
        key = (batch.topic, batch.partition)
        epoch = self._epochs.get(key, self._producer_epoch) if idempotent else 0
        if batch.encoded is not None and batch.producer_epoch == epoch:
            return  # a retry resends the same bytes; one from an older epoch takes new sequences (_new_epoch)
        n = batch.record_count
        if idempotent:
            batch.producer_id = self._producer_id
            batch.producer_epoch = epoch
            batch.base_sequence = self._sequences[key]
            self._sequences[key] = (batch.base_sequence + n) % (1 << 31)
        fields = {
            "record_count": n,
            "last_offset_delta": n - 1,
            "first_timestamp_ms": batch.first_timestamp_ms,
            "max_timestamp_ms": batch.max_timestamp_ms,
            "codec": self.config.codec,
            "producer_id": batch.producer_id,
            "producer_epoch": batch.producer_epoch,
            "base_sequence": batch.base_sequence if idempotent else 0,
            "attributes": ATTR_TRANSACTIONAL if self._txn is not None else 0,
        }
        if batch.encoded is None:
            batch.encoded = encode_batch_parts(batch.record_list(), **fields)
        else:  # moved to a new epoch (_new_epoch): the records were taken and compressed at the first send
            batch.encoded = frame_batch_parts(batch.encoded[1], **fields)

    def _new_epoch(self, key: tuple[str, int]) -> bool:
        """Start the partition over at sequence 0 in the next epoch. Its batches that already hold
        sequence numbers (those of its one call in flight, requeued together on a retry) carry the old
        epoch, so _encode gives them new ones, in order, on their next send.

        Why: a batch that took sequence numbers and then failed for good leaves a hole before the next
        batch's sequence, and the broker refuses every later batch of the partition as out of order. A
        newer epoch starting at sequence 0 is accepted whatever came before (broker/producer_state.py),
        as Kafka's idempotent producer does since KIP-360. Only this partition moves: the broker keeps
        the epoch per producer and partition. False, changing nothing, when the epoch (int32 on the
        wire) is spent."""
        epoch = self._epochs.get(key, self._producer_epoch)
        if epoch >= _EPOCH_MAX or self._txn is not None:
            # A transactional producer's epoch is the coordinator's: a failed batch makes the transaction
            # abort, and the abort takes a new epoch from the coordinator (abort_transaction).
            return False
        self._epochs[key] = epoch + 1
        self._sequences[key] = 0
        return True

    def _on_reply(self, reply: broker_pb2.ProduceResponse | None, error: KanalError | None, endpoint: str,
                  by_partition: dict[tuple[str, int], list[ProducerBatch]]) -> None:
        """A call's outcome; `by_partition`: the batches it carried, per partition in order."""
        with self._calls_lock:
            self._in_flight_calls[endpoint] -= 1
        if error is not None:  # the call failed as a whole (error_boundary.call made it a KanalError)
            if not error.retriable:
                for key, batches in by_partition.items():
                    self._refuse(key, batches, error)
                return
            for key, batches in by_partition.items():
                self._resolve(key, batches, [], error)
            self._force_refresh()
            return
        if reply is None:
            raise RuntimeError(f"a produce call to {endpoint} ended with neither a reply nor an error")
        if reply.throttle_time_ms > 0:
            self._throttles.on_reply(endpoint, reply.throttle_time_ms)
            with self._accumulator.wakeup:  # the sender sleeps until that throttle ends, then sends
                self._accumulator.wakeup.notify()
        results = {(t.topic, p.partition): p for t in reply.topics for p in t.partitions}
        refresh = False
        for key, batches in by_partition.items():
            result = results.get(key)
            if result is None:
                self._resolve(
                    key, batches, [], KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, "no result for the batch")
                )
                continue
            stored = list(result.batch_base_offsets)
            # A retry of a stored idempotent batch is answered NONE with its original offsets (broker.proto).
            ok = result.error == ErrorCode.NONE
            if ok and not stored and len(batches) == 1:
                stored = [result.base_offset]  # a broker that does not list offsets per batch
            error = None
            if not ok:
                error = KanalError(result.error, result.error_message or "produce failed")
                refresh |= result.error in (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    ErrorCode.FENCED_LEADER_EPOCH,
                )
            elif len(stored) < len(batches):
                error = KanalError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                   f"the broker answered for {len(stored)} of {len(batches)} batches")
            self._resolve(key, batches, stored[:len(batches)], error)
        if refresh:
            self._force_refresh()
        elif self._running:
            self._send_ready()

    def _resolve(self, key: tuple[str, int], batches: list[ProducerBatch], stored: list[int],
                 error: KanalError | None) -> None:
        """The outcome of one call for one partition's batches: the first len(stored) are stored at those
        base offsets; `error` is the outcome of the next one (the broker appends in order and stops at the
        first it refuses). That one is retried or failed by its error; the ones after it were not tried
        and go back whatever the error (an expired one fails at its next send). Retried batches return,
        in order, to the head of the partition, which is free again only once all are resolved, so no
        later batch of it can overtake them."""
        for batch, base_offset in zip(batches, stored):
            self._finish(batch, base_offset, None, release=False)
        rest = batches[len(stored):]
        if not rest:
            self._accumulator.release(key)
            return
        now = time.monotonic()
        error = error or KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, "no outcome for the batch")
        retriable = is_retriable(error.code)
        if retriable:
            for batch in rest:
                batch.error = error
        head, retry = rest[0], rest[1:]
        sequenced = self.config.enable_idempotence and head.encoded is not None
        if (sequenced and error.code in _SEQUENCE_ERRORS and head.base_sequence != 0
                and now < head.deadline_s and self._new_epoch(key)):
            # Refused, so not stored: the hole is before it (an earlier batch that failed for good with its
            # outcome unknown, or producer state the broker no longer has). It goes again first in the new
            # epoch, at sequence 0; a batch refused at sequence 0 has no hole before it and fails below.
            retry.insert(0, head)
            retriable = True
        elif retriable and now < head.deadline_s:
            retry.insert(0, head)
        else:
            self._finish(head, -1, error, release=False)
            if sequenced and not retriable and error.code != ErrorCode.UNKNOWN_SERVER_ERROR:
                # The broker refused it, so it is not stored: the batches behind it go on in a new epoch.
                # Otherwise its outcome is unknown (a timed-out acks=all batch may be in the log; an
                # UNKNOWN_SERVER_ERROR says nothing), so the later batches keep their sequences and are
                # deduplicated if it was stored; should it be missing, the next batch is refused as out
                # of order and takes the branch above.
                self._new_epoch(key)
        if retry:
            self._accumulator.requeue_all(
                retry, now + self.config.retry_backoff_ms / 1000 if retriable else now
            )
        else:
            self._accumulator.release(key)

    def _expiry_error(self, batch: ProducerBatch) -> KanalError:
        """A batch that waited past its delivery timeout for a leader to send to: it fails with the refusal
        of its last attempt when it had one (that says why: BROKER_NOT_AVAILABLE from a starting leader,
        say, whose refusal also dropped the leader until metadata named it again), else REQUEST_TIMED_OUT."""
        waited = f"not sent within delivery_timeout_ms ({self.config.delivery_timeout_ms})"
        if batch.error is not None:
            return KanalError(batch.error.code, f"{waited}; its last attempt: {batch.error.message}")
        return KanalError(ErrorCode.REQUEST_TIMED_OUT,
                          f"{waited}: no leader of {batch.topic}-{batch.partition} known")

    def _refuse(self, key: tuple[str, int], batches: list[ProducerBatch], error: KanalError) -> None:
        """The broker refused a whole call with a non-retriable error: none of its batches was stored, and
        sent again each would be refused the same way, so each fails with that error now. With idempotence
        the partition then moves to a new epoch, as after a batch refused alone (_resolve), so the batches
        after these are not refused as out of order; not after UNKNOWN_SERVER_ERROR, whose batches may be
        stored."""
        for batch in batches:
            self._finish(batch, -1, error, release=False)
        if self.config.enable_idempotence and error.code != ErrorCode.UNKNOWN_SERVER_ERROR:
            self._new_epoch(key)
        self._accumulator.release(key)

    def _send_ready(self) -> None:
        """Send what this reply made sendable (its partitions are free again) from the reply's own thread:
        CallPool runs the next call on it, where the sender thread would cost two more thread hand-offs per
        round trip (wake the sender, wake a pool thread). The sender thread still handles lingering,
        retries and everything a reply does not start."""
        try:
            with self._send_lock:
                now = time.monotonic()
                batches, _ = self._accumulator.drain(
                    now, self._sendable, self.config.partition_batches_per_call_max
                )
                if batches:
                    self._send(batches, now)
        except Exception as exc:  # a bug, as in the sender: fail every waiting record loudly
            log.exception("sending from a reply's thread failed")
            self._fail_all(exc)

    def _force_refresh(self) -> None:
        self._last_refresh_s = 0.0
        self._maybe_refresh()

    def _finish(self, batch: ProducerBatch, base_offset: int, error: KanalError | None,
                release: bool = True) -> None:
        """Complete a batch for good; `release=False` while more batches of its call are resolved."""
        if error is not None and self._txn is not None:
            self._txn.record_failed(error)
        try:
            batch.complete(base_offset, error)
        finally:
            self._accumulator.completed(batch, release)
