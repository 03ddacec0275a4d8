"""Record batches and log entries as bytes: the helpers every part shares (producer, broker, metadata log,
consumer, Spark reader). The formats themselves are specified in records.proto; in short:

    producer bytes   a serialized RecordBatch without base_offset / partition_leader_epoch
    stored batch     producer bytes + 14-byte broker suffix:
                       0x09 <base_offset u64 LE> 0x15 <partition_leader_epoch i32 LE>
    log entry        <N u32 BE> <CRC-32 of the N bytes u32 BE> <N bytes: a stored batch>

Everything here is pure: bytes in, bytes or messages out.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from kanal.v1 import codecs, records_pb2
from kanal.v1.error import ErrorCode, KanalError

RecordBatch = records_pb2.RecordBatch
Record = records_pb2.Record

ENTRY_HEADER = struct.Struct(">II")
ENTRY_HEADER_BYTES = ENTRY_HEADER.size  # 8
BROKER_SUFFIX = struct.Struct("<BQBi")
BROKER_SUFFIX_BYTES = BROKER_SUFFIX.size  # 14
_SUFFIX_TAG_BASE_OFFSET = (1 << 3) | 1  # field 1, wire type 1 (64-bit)
_SUFFIX_TAG_LEADER_EPOCH = (2 << 3) | 5  # field 2, wire type 5 (32-bit)
CRC_HEADER = struct.Struct(">qiiqqiii")  # the 44-byte header the producer CRC covers
# A batch must hold at least one record; this bounds how many a batch may claim, so a damaged header
# cannot make a reader allocate for billions.
RECORDS_PER_BATCH_MAX = 1 << 24


def producer_crc(batch: RecordBatch) -> int:
    """The CRC-32 a producer puts in RecordBatch.crc (records.proto gives the covered bytes)."""
    header = CRC_HEADER.pack(
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.first_timestamp_ms,
        batch.max_timestamp_ms,
        batch.record_count,
        batch.last_offset_delta,
        batch.codec,
    )
    return zlib.crc32(batch.records, zlib.crc32(header))


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record as a producer hands it over, with an absolute timestamp."""

    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int = 0
    headers: Sequence[tuple[str, bytes | None]] = ()


def build_batch(
    records: Sequence[NewRecord],
    *,
    codec: int = records_pb2.COMPRESSION_NONE,
    producer_id: int = 0,
    producer_epoch: int = 0,
    base_sequence: int = 0,
) -> bytes:
    """Producer bytes for `records` (no broker suffix), CRC set. Offsets deltas are 0..n-1."""
    if not records:
        raise KanalError(ErrorCode.INVALID_RECORD, "a batch needs at least one record")
    first_ts = records[0].timestamp_ms
    record_list = records_pb2.RecordList()
    max_ts = first_ts
    for delta, rec in enumerate(records):
        max_ts = max(max_ts, rec.timestamp_ms)
        out = record_list.records.add(offset_delta=delta, timestamp_delta_ms=rec.timestamp_ms - first_ts)
        if rec.key is not None:
            out.key = rec.key
        if rec.value is not None:
            out.value = rec.value
        for hkey, hvalue in rec.headers:
            header = out.headers.add(key=hkey)
            if hvalue is not None:
                header.value = hvalue
    return encode_batch(
        record_list.SerializeToString(),
        record_count=len(records),
        last_offset_delta=len(records) - 1,
        first_timestamp_ms=first_ts,
        max_timestamp_ms=max_ts,
        codec=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def encode_batch(
    record_list_bytes: bytes,
    *,
    record_count: int,
    last_offset_delta: int,
    first_timestamp_ms: int,
    max_timestamp_ms: int,
    codec: int = records_pb2.COMPRESSION_NONE,
    producer_id: int = 0,
    producer_epoch: int = 0,
    base_sequence: int = 0,
) -> bytes:
    """Producer bytes around an already serialized RecordList (compressed here), CRC set."""
    batch = RecordBatch(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        first_timestamp_ms=first_timestamp_ms,
        max_timestamp_ms=max_timestamp_ms,
        record_count=record_count,
        last_offset_delta=last_offset_delta,
        codec=codec,  # type: ignore[arg-type]
        records=codecs.compress(codec, record_list_bytes),
    )
    batch.crc = producer_crc(batch)
    return batch.SerializeToString()


def with_broker_suffix(batch: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """The stored form of a batch: its bytes followed by the broker suffix."""
    return batch + BROKER_SUFFIX.pack(_SUFFIX_TAG_BASE_OFFSET, base_offset, _SUFFIX_TAG_LEADER_EPOCH, leader_epoch)


def read_broker_suffix(stored: bytes | memoryview) -> tuple[int, int]:
    """(base_offset, leader_epoch) of a stored batch without parsing it."""
    if len(stored) < BROKER_SUFFIX_BYTES:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"stored batch of {len(stored)} bytes has no broker suffix")
    tag1, base_offset, tag2, leader_epoch = BROKER_SUFFIX.unpack_from(stored, len(stored) - BROKER_SUFFIX_BYTES)
    if tag1 != _SUFFIX_TAG_BASE_OFFSET or tag2 != _SUFFIX_TAG_LEADER_EPOCH:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "stored batch does not end with a broker suffix")
    return base_offset, leader_epoch


def parse_batch(data: bytes | memoryview, *, verify_crc: bool = True) -> RecordBatch:
    """Parse a batch (producer bytes or stored) and check its header; CORRUPT_MESSAGE when damaged."""
    try:
        batch = RecordBatch.FromString(bytes(data) if isinstance(data, memoryview) else data)
    except DecodeError as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"batch does not parse: {exc}") from exc
    if verify_crc and producer_crc(batch) != batch.crc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "batch CRC does not match its contents")
    check_header(batch)
    return batch


def check_header(batch: RecordBatch) -> None:
    """Header rules every stored batch keeps; INVALID_RECORD when one is broken."""
    if not 1 <= batch.record_count <= RECORDS_PER_BATCH_MAX:
        raise KanalError(ErrorCode.INVALID_RECORD, f"record_count {batch.record_count} out of range")
    if not batch.record_count - 1 <= batch.last_offset_delta < RECORDS_PER_BATCH_MAX:
        raise KanalError(
            ErrorCode.INVALID_RECORD,
            f"last_offset_delta {batch.last_offset_delta} is below record_count - 1 ({batch.record_count - 1})",
        )
    if batch.max_timestamp_ms < batch.first_timestamp_ms:
        raise KanalError(ErrorCode.INVALID_TIMESTAMP, "max_timestamp_ms is before first_timestamp_ms")


def decode_records(batch: RecordBatch) -> list[Record]:
    """The records of a parsed batch (decompressed), checked against its header."""
    try:
        records = records_pb2.RecordList.FromString(codecs.decompress(batch.codec, batch.records)).records
    except DecodeError as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"records do not parse: {exc}") from exc
    if len(records) != batch.record_count:
        raise KanalError(
            ErrorCode.CORRUPT_MESSAGE, f"batch says {batch.record_count} records but holds {len(records)}"
        )
    return list(records)


def frame_entry(stored: bytes) -> bytes:
    """A log entry: entry header + stored batch."""
    return ENTRY_HEADER.pack(len(stored), zlib.crc32(stored)) + stored


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry inside a buffer: where it starts, how long it is, and its stored batch."""

    position: int
    size: int
    batch: memoryview

    @property
    def base_offset(self) -> int:
        return read_broker_suffix(self.batch)[0]


def iter_entries(buf: bytes | memoryview, *, verify_crc: bool = True) -> Iterator[Entry]:
    """Log entries of a buffer of concatenated entries, in order. A damaged or incomplete entry raises
    CORRUPT_MESSAGE with its position; the caller decides whether that is a torn tail or an error."""
    view = memoryview(buf)
    end = len(view)
    pos = 0
    while pos < end:
        if end - pos < ENTRY_HEADER_BYTES:
            raise CorruptEntry(pos, f"incomplete entry header ({end - pos} bytes)")
        length, crc = ENTRY_HEADER.unpack_from(view, pos)
        if length < BROKER_SUFFIX_BYTES or pos + ENTRY_HEADER_BYTES + length > end:
            raise CorruptEntry(pos, f"entry length {length} does not fit the {end - pos} bytes left")
        body = view[pos + ENTRY_HEADER_BYTES : pos + ENTRY_HEADER_BYTES + length]
        if verify_crc and zlib.crc32(body) != crc:
            raise CorruptEntry(pos, "entry CRC does not match")
        yield Entry(pos, ENTRY_HEADER_BYTES + length, body)
        pos += ENTRY_HEADER_BYTES + length


class CorruptEntry(KanalError):
    """A damaged log entry at `position` within the buffer that was being read."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(ErrorCode.CORRUPT_MESSAGE, f"log entry at byte {position}: {reason}")
        self.position = position
