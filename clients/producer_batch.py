"""ProducerBatch: one partition's records on their way to the broker, encoded as they arrive.

A record costs the producer Python work twice if it is first kept as an object and encoded when the batch
is sent; here each record is written straight into the batch's RecordList (the bytes
`kanal.v1.batch.encode_record_list` produces for the same records, byte for byte: each Record is field 1
of the RecordList; offset_delta and timestamp_delta_ms are left out at 0, as proto3 does; key and value
are written whenever present, even empty; headers follow, a header's key left out when empty). Only the
timestamps are kept per record, for the RecordMetadata of futures and callbacks.

Two implementations of the per-record part exist with the same interface and the same bytes: `RecordList`
here (pure Python: the value is kept by reference and copied once, when `take` joins the pieces) and
`kanal.clients._producer_fast.RecordList` (C: a growing buffer), used with the rest of the native path
when the extension is built (`NATIVE` says whether it is; KANAL_PRODUCER_PURE_PYTHON=1 turns it off).

Not thread-safe: the accumulator's lock guards appends; once sealed, a batch is only read.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kanal.clients.native_ext import load_optional
from kanal.v1 import records_pb2
from kanal.v1.batch import SMALL_VARINTS, varint
from kanal.v1.error import ErrorCode, KanalError

native, NATIVE_IMPORT_ERROR = load_optional("_producer_fast", "KANAL_PRODUCER_PURE_PYTHON")
NATIVE = native is not None  # whether the C hot path can be used (see clients/_producer_fast.c)

DeliveryCallback = Callable[[Any, "RecordMetadata | None"], None]  # (error or None, metadata or None)

# Lengths and deltas nearly always fit in two varint bytes (< 16384), so the field prefixes a record
# needs are table lookups: the record's own length prefix (field 1 of the RecordList, length-delimited),
# its offset_delta field (field 1, varint), and its value's prefix (field 4, length-delimited). The
# varints themselves are kanal.v1.batch's, so both encoders write the same bytes by construction.
_TABLE_MAX = len(SMALL_VARINTS)
_RECORD_PREFIX = [b"\x0a" + v for v in SMALL_VARINTS]
_OFFSET_DELTA_FIELD = [b""] + [b"\x08" + v for v in SMALL_VARINTS[1:]]  # 0 is the default: left out
_VALUE_PREFIX = [b"\x22" + v for v in SMALL_VARINTS]
_TIMESTAMP_DELTA_FIELD = [b""] + [b"\x10" + v for v in SMALL_VARINTS[1:]]  # field 2, zigzag varint


def _headers_field(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """A Record's field 5 entries. Headers are the rare case: protobuf itself writes them (a Record
    holding only headers serializes to exactly these bytes)."""
    return records_pb2.Record(headers=[records_pb2.RecordHeader(key=k, value=v) for k, v in headers]
                              ).SerializeToString()


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


class RecordList:
    """One batch's records encoded as they arrive, in pure Python (the C RecordList has the same interface
    and writes the same bytes). `size_bytes` is what the accumulator charged against buffer memory."""

    __slots__ = ("_parts", "first_timestamp_ms", "max_timestamp_ms", "record_count", "size_bytes",
                 "timestamps")

    def __init__(self) -> None:
        self._parts: list[bytes] | None = []  # the RecordList's pieces; None once joined
        self.record_count = 0
        self.timestamps: list[int] = []  # per record, absolute
        self.first_timestamp_ms = 0
        self.max_timestamp_ms = 0
        self.size_bytes = 0

    def __repr__(self) -> str:
        return f"<RecordList python records={self.record_count}>"

    @property
    def taken(self) -> bool:
        return self._parts is None

    def append(self, value: bytes | None, key: bytes | None, timestamp_ms: int, tail: bytes) -> int:
        """Encode one record at the end (tail: its encoded headers, b"" for none); returns its index."""
        parts = self._parts
        if parts is None:
            raise KanalError(ErrorCode.UNKNOWN_SERVER_ERROR,
                             "the batch's records were already encoded; it takes no more records")
        index = self.record_count
        if index:
            head = _OFFSET_DELTA_FIELD[index] if index < _TABLE_MAX else b"\x08" + varint(index)
            ts_delta = timestamp_ms - self.first_timestamp_ms
            if ts_delta:
                zigzag = (ts_delta << 1) ^ (ts_delta >> 63)
                head += _TIMESTAMP_DELTA_FIELD[zigzag] if zigzag < _TABLE_MAX else b"\x10" + varint(zigzag)
            if timestamp_ms > self.max_timestamp_ms:  # noqa: PLR1730 -- a compare is 3x cheaper than max()
                self.max_timestamp_ms = timestamp_ms
        else:
            head = b""
            self.first_timestamp_ms = self.max_timestamp_ms = timestamp_ms
        if key is not None:
            head += b"\x1a" + varint(len(key)) + key
        if value is not None:
            size = len(value)
            value_prefix = _VALUE_PREFIX[size] if size < _TABLE_MAX else b"\x22" + varint(size)
            size += len(head) + len(value_prefix)
        else:
            value_prefix = value = b""
            size = len(head)
        if tail:
            size += len(tail)
            parts += (
                _RECORD_PREFIX[size] if size < _TABLE_MAX else b"\x0a" + varint(size),
                head,
                value_prefix,
                value,
                tail,
            )
        else:
            parts += (
                _RECORD_PREFIX[size] if size < _TABLE_MAX else b"\x0a" + varint(size),
                head,
                value_prefix,
                value,
            )
        self.timestamps.append(timestamp_ms)
        self.record_count = index + 1
        return index

    def take(self) -> bytes:
        """The serialized RecordList; the list takes no more records after."""
        if self._parts is None:
            raise KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, "the batch's records were already taken")
        data = b"".join(self._parts)
        self._parts = None  # the values are referenced no longer: only the joined copy stays
        return data

    def timestamp(self, index: int) -> int:
        return self.timestamps[index]


class BufferMemory:
    """The accumulator's buffered bytes (the C BufferMemory has the same attribute); changed under its
    lock."""

    __slots__ = ("buffered_bytes",)

    def __init__(self) -> None:
        self.buffered_bytes = 0


class ProducerBatch:
    __slots__ = (
        "attempts",
        "base_offset",
        "base_sequence",
        "callbacks",
        "completed_s",
        "created_s",
        "deadline_s",
        "done",
        "encoded",
        "error",
        "partition",
        "producer_epoch",
        "producer_id",
        "records",
        "retry_at_s",
        "topic",
    )

    def __init__(self, topic: str, partition: int, created_s: float, deadline_s: float,
                 records: RecordList | None = None) -> None:
        self.topic = topic
        self.partition = partition
        # RecordList or the C one: Appender.produce() appends to it directly (it reads this slot by name).
        self.records = RecordList() if records is None else records
        self.created_s = created_s
        self.callbacks: list[tuple[int, DeliveryCallback]] = []
        self.done = threading.Event()
        self.completed_s = 0.0  # time.monotonic() of complete(): `kanal perf produce` times records by it
        self.base_offset = -1
        self.error: KanalError | None = None
        # Encoded once, on first send, as the pieces that join to the producer bytes
        # (kanal.v1.batch.encode_batch_parts); retries resend the same bytes.
        self.encoded: tuple[bytes, bytes, bytes] | None = None
        self.base_sequence = -1
        self.producer_id = 0
        self.producer_epoch = 0
        self.attempts = 0
        self.retry_at_s = 0.0
        self.deadline_s = deadline_s

    def __repr__(self) -> str:
        return (f"<ProducerBatch {self.topic}-{self.partition} records={self.records.record_count} "
                f"bytes={self.records.size_bytes} attempts={self.attempts}>")

    # Per batch (the records' own fields, read when the batch is sent or completed).
    @property
    def record_count(self) -> int:
        return self.records.record_count

    @property
    def first_timestamp_ms(self) -> int:
        return self.records.first_timestamp_ms

    @property
    def max_timestamp_ms(self) -> int:
        return self.records.max_timestamp_ms

    @property
    def timestamps(self) -> list[int]:
        return list(self.records.timestamps)

    @property
    def size_bytes(self) -> int:
        return self.records.size_bytes

    def append(self, value: bytes | None, key: bytes | None, timestamp_ms: int,
               headers: Sequence[tuple[str, bytes | None]]) -> int:
        """Encode one record at the end of the batch; returns its index (its offset delta)."""
        tail = _headers_field(headers) if headers else b""  # first: a bad header changes nothing
        return self.records.append(value, key, timestamp_ms, tail)

    def record_list(self) -> bytes:
        """The serialized RecordList of every record appended; the batch takes no more records after."""
        return self.records.take()

    def complete(self, base_offset: int, error: KanalError | None) -> None:
        self.base_offset = base_offset
        self.error = error
        self.completed_s = time.monotonic()
        self.done.set()
        if self.callbacks:
            timestamps = self.records.timestamps  # the C list builds a new list per read: read it once
            for index, callback in self.callbacks:
                meta = None if error else RecordMetadata(self.topic, self.partition, base_offset + index,
                                                         timestamps[index])
                callback(error, meta)

    def result_of(self, index: int, timeout: float | None) -> RecordMetadata:
        """Wait for the acknowledgement of record `index`; raises the KanalError the batch failed with.
        Both futures (RecordFuture here and the C one) call this."""
        if not self.done.wait(timeout):
            raise KanalError(ErrorCode.REQUEST_TIMED_OUT, "the record was not acknowledged in time")
        if self.error is not None:
            raise self.error
        return RecordMetadata(
            self.topic, self.partition, self.base_offset + index, self.records.timestamp(index)
        )


class RecordFuture:
    """The outcome of one produce() call; cheap (two slots), resolved when its batch is acknowledged.
    The native path returns `kanal.clients._producer_fast.RecordFuture`, with the same methods."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the acknowledgement; raises the KanalError the batch failed with."""
        return self._batch.result_of(self._index, timeout)


class RecordFutures(Sequence[RecordFuture]):
    """The outcomes of one produce_many() call, in record order. Record i is record `indexes[i]` of
    `batches[owners[i]]`; its RecordFuture is made when asked for, so a call of a thousand records makes
    no thousand objects (on the native path the two index arrays are filled by C)."""

    __slots__ = ("_batches", "_indexes", "_owners")

    def __init__(self, batches: list[ProducerBatch], owners: Sequence[int], indexes: Sequence[int]) -> None:
        self._batches = batches
        self._owners = owners
        self._indexes = indexes

    def __repr__(self) -> str:
        return f"<RecordFutures records={len(self._owners)} batches={len(self._batches)} done={self.done()}>"

    def __len__(self) -> int:
        return len(self._owners)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return RecordFuture(self._batches[self._owners[i]], self._indexes[i])

    def __iter__(self) -> Iterator[RecordFuture]:
        batches = self._batches
        return (RecordFuture(batches[o], i) for o, i in zip(self._owners, self._indexes))

    def batch_counts(self) -> list[tuple[ProducerBatch, int]]:
        """Each batch these records went into and how many of them it holds (a perf run's latencies)."""
        counts: dict[int, int] = {}
        for owner in self._owners:
            counts[owner] = counts.get(owner, 0) + 1
        return [(self._batches[owner], n) for owner, n in counts.items()]

    def done(self) -> bool:
        """Whether every record's batch is finished."""
        return all(b.done.is_set() for b in self._batches)

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        """Wait for every record (timeout: for all of them together); their RecordMetadata in order.
        Raises the KanalError of the first record whose batch failed (index the futures for the others)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for batch in self._batches:
            if not batch.done.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
                raise KanalError(ErrorCode.REQUEST_TIMED_OUT, "the records were not acknowledged in time")
        batches = self._batches
        return [batches[o].result_of(i, 0) for o, i in zip(self._owners, self._indexes)]


def uint32_array() -> array:
    """The index arrays of a RecordFutures built in Python."""
    return array("I")
