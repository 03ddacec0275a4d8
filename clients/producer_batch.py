"""ProducerBatch: one partition's records on their way to the broker, encoded as they arrive.

A record costs the producer Python work twice if it is first kept as an object and encoded when the batch
is sent; here `append` writes it straight into the pieces of the batch's serialized `RecordList` (the
bytes `kanal.v1.batch.encode_record_list` produces for the same records, byte for byte: each Record is
field 1 of the RecordList; offset_delta and timestamp_delta_ms are left out at 0, as proto3 does; key and
value are written whenever present, even empty; headers follow, a header's key left out when empty).
The value is kept by reference: it is copied once, when `record_list` joins the pieces at send time.
Only the timestamps are kept per record, for the RecordMetadata of futures and callbacks.

Not thread-safe: the accumulator's lock guards appends; once sealed, a batch is only read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kanal.v1 import records_pb2
from kanal.v1.batch import SMALL_VARINTS, varint
from kanal.v1.error import ErrorCode, KanalError

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


class ProducerBatch:
    __slots__ = (
        "_parts",
        "attempts",
        "base_offset",
        "base_sequence",
        "callbacks",
        "created_s",
        "deadline_s",
        "done",
        "encoded",
        "error",
        "first_timestamp_ms",
        "max_timestamp_ms",
        "partition",
        "producer_id",
        "record_count",
        "retry_at_s",
        "size_bytes",
        "timestamps",
        "topic",
    )

    def __init__(self, topic: str, partition: int, created_s: float, deadline_s: float) -> None:
        self.topic = topic
        self.partition = partition
        self._parts: list[bytes] | None = []  # the RecordList's pieces; None once joined
        self.record_count = 0
        self.timestamps: list[int] = []  # per record, absolute
        self.first_timestamp_ms = 0
        self.max_timestamp_ms = 0
        self.size_bytes = 0  # what the accumulator charged against buffer_memory_bytes
        self.created_s = created_s
        self.callbacks: list[tuple[int, DeliveryCallback]] = []
        self.done = threading.Event()
        self.base_offset = -1
        self.error: KanalError | None = None
        self.encoded: bytes | None = None  # encoded once, on first send; retries resend the same bytes
        self.base_sequence = -1
        self.producer_id = 0
        self.attempts = 0
        self.retry_at_s = 0.0
        self.deadline_s = deadline_s

    def __repr__(self) -> str:
        return (f"<ProducerBatch {self.topic}-{self.partition} records={self.record_count} "
                f"bytes={self.size_bytes} attempts={self.attempts}>")

    def append(self, value: bytes | None, key: bytes | None, timestamp_ms: int,
               headers: Sequence[tuple[str, bytes | None]]) -> int:
        """Encode one record at the end of the batch; returns its index (its offset delta)."""
        parts = self._parts
        if parts is None:
            raise KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{self!r} was already encoded; it takes no records")
        tail = _headers_field(headers) if headers else b""  # first: a bad header changes nothing
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
            parts += (_RECORD_PREFIX[size] if size < _TABLE_MAX else b"\x0a" + varint(size), head, value_prefix,
                      value, tail)
        else:
            parts += (_RECORD_PREFIX[size] if size < _TABLE_MAX else b"\x0a" + varint(size), head, value_prefix,
                      value)
        self.timestamps.append(timestamp_ms)
        self.record_count = index + 1
        return index

    def record_list(self) -> bytes:
        """The serialized RecordList of every record appended; the batch takes no more records after."""
        if self._parts is None:
            raise KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{self!r}: record_list() was already taken")
        data = b"".join(self._parts)
        self._parts = None  # the values are referenced no longer: only the joined copy stays
        return data

    def complete(self, base_offset: int, error: KanalError | None) -> None:
        self.base_offset = base_offset
        self.error = error
        self.done.set()
        for index, callback in self.callbacks:
            meta = None if error else RecordMetadata(self.topic, self.partition, base_offset + index,
                                                     self.timestamps[index])
            callback(error, meta)


class RecordFuture:
    """The outcome of one produce() call; cheap (two slots), resolved when its batch is acknowledged."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the acknowledgement; raises the KanalError the batch failed with."""
        if not self._batch.done.wait(timeout):
            raise KanalError(ErrorCode.REQUEST_TIMED_OUT, "the record was not acknowledged in time")
        batch = self._batch
        if batch.error is not None:
            raise batch.error
        return RecordMetadata(batch.topic, batch.partition, batch.base_offset + self._index,
                              batch.timestamps[self._index])
