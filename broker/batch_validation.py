"""The leader's validation of a produced batch, record by record, before it is stored (issue 17).

The header scan and the CRC (kanal.v1.batch.check_scanned) prove that the bytes are the ones the producer
sent; they do not prove that the records inside agree with the header. A batch whose records contradict
it used to be stored and broke every reader after it (duplicated or out-of-order offsets, a log end
jumping by millions, a partition that no consumer can read past). So the leader opens every produced
batch, as Kafka's log validator does, and refuses it unless all of these hold, checked in this order
(the first broken rule gives the error; nothing of the batch is stored):

  1. the producer CRC matches and the header rules hold (check_scanned)      CORRUPT_MESSAGE /
                                                                             INVALID_RECORD /
                                                                             INVALID_TIMESTAMP
  2. the codec is one this broker knows                                      UNSUPPORTED_COMPRESSION_TYPE
  3. offsets are dense: last_offset_delta = record_count - 1                 INVALID_RECORD
  4. first_timestamp_ms >= 0 and max_timestamp_ms >= 0                       INVALID_TIMESTAMP
  5. `records` decompresses with its codec                                   INVALID_RECORD
     ... to at most records_bytes_max(batch_bytes_max) bytes                 MESSAGE_TOO_LARGE
     (RECORDS_EXPANSION_MAX x the topic's max.message.bytes: 64 MiB by default)
  6. the RecordList walk (below), record after record                        INVALID_RECORD /
                                                                             INVALID_TIMESTAMP
  7. max_timestamp_ms equals the largest record timestamp                    INVALID_TIMESTAMP
  8. attributes hold only known bits; a client's Produce carries no CONTROL  INVALID_RECORD
     batch (markers come only from WriteTxnMarkers, `allow_control`), and a
     TRANSACTIONAL batch has a producer id (records.proto, TRANSACTIONS)

On a topic with value.schema.validation or key.schema.validation, the leader then checks the schema ids
of the records this returns (schema_validation.py), still before anything is stored.

The walk of a (decompressed) RecordList, strict where protobuf is lenient, so that anything it accepts
every protobuf parser reads the same way (and the consumer's decoders, clients/consumer.py and
clients/_consumer_fast.c, give exactly record_count records):
  - wire format: varints of at most 10 bytes and below 2^64; tags and lengths of at most 5 bytes and
    below 2^32; a length never past the end of its message;            INVALID_RECORD
  - only the fields of records.proto, each with its wire type: RecordList 0x0a (Record); Record 0x08
    offset_delta, 0x10 timestamp_delta_ms, 0x1a key, 0x22 value, 0x2a header; RecordHeader 0x0a key,
    0x12 value. Any other field (unknown, or a known number with another wire type, or a group) is
    refused: a produced batch has none, and an unknown field is where a reader and this check could
    disagree. A scalar field given twice keeps its last value, as in protobuf;   INVALID_RECORD
  - a header key is valid UTF-8 (it is a proto3 string);              INVALID_RECORD
  - record i (from 0) has offset_delta i: offsets dense and in order;  INVALID_RECORD
  - exactly record_count records;                                      INVALID_RECORD
  - every record timestamp, first_timestamp_ms + timestamp_delta_ms, lies in [0, 2^63 - 1].
                                                                       INVALID_TIMESTAMP
Within a record, its bytes are checked first, then its offset, then its timestamp; a record past
record_count is refused before its bytes are read.

One CRC pass, not two: rule 1 is checked here only when a later rule fails (so a batch damaged in transit
gets CORRUPT_MESSAGE, whatever else its damage breaks); when every later rule holds, the caller stores the
batch with Log.append, whose first step is the same check_scanned, before anything is written. So
`validate_produced_batch` followed by Log.append keeps all seven rules in the order above, and the CRC
over the payload (a third of the validation's cost) is computed once.

Why INVALID_RECORD and not CORRUPT_MESSAGE for records that do not parse: the CRC matched, so the bytes
are what the producer sent, and sending them again cannot help. CORRUPT_MESSAGE (retriable) stays for a
CRC mismatch: damage in transit.

Two implementations of the walk give the same answer (accept, or refuse with the same code) for every
input: `walk_record_list_python` here, the reference, and the C extension `kanal.broker._batch_walk`
(broker/_batch_walk.c), built by setup.py where a compiler is found; `walk_record_list` is the C
one when it loaded (`NATIVE`), else the Python one. KANAL_BATCH_WALK_PURE_PYTHON=1 keeps Python. The C
walk runs at memory speed (well under a second of CPU per GB of records), which keeps validation inside
the produce path's budget; the Python one costs ~1 us per record and is the fallback without a compiler.

Pure: bytes in, an answer or a KanalError out.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType

from kanal.v1 import records_pb2
from kanal.v1.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, ATTRIBUTES_KNOWN, BatchHeader, check_scanned
from kanal.v1.codecs import decompress_bounded
from kanal.v1.error import ErrorCode, KanalError

# How many times the topic's batch size limit (max.message.bytes) a batch's records may take once
# decompressed: 64 MiB with the default 1 MiB. Record data compresses 2-10x; a batch that expands more is
# either pathological or a decompression bomb, and the leader holds the output in memory while it walks.
RECORDS_EXPANSION_MAX = 64
INT64_MAX = (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_INT32_MAX = (1 << 31) - 1
_KNOWN_CODECS = frozenset(records_pb2.CompressionCodec.values())

# walk(record_list, record_count, first_timestamp_ms) -> the largest record timestamp.
RecordListWalk = Callable[[bytes | memoryview | bytearray, int, int], int]


def records_bytes_max(batch_bytes_max: int) -> int:
    """The most bytes a batch's records may decompress to, for a topic whose batches may be
    `batch_bytes_max` bytes."""
    return RECORDS_EXPANSION_MAX * batch_bytes_max


def validate_produced_batch(raw: bytes | memoryview, header: BatchHeader, batch_bytes_max: int,
                            walk: RecordListWalk | None = None, *, allow_control: bool = False
                            ) -> bytes | memoryview | None:
    """Refuse (KanalError, codes in the module docstring) a producer batch whose records do not match
    its header; when rules 2-7 hold, return its decompressed RecordList (what schema_validation.py
    scans next, so a batch is decompressed once), leaving rule 1 (CRC and header rules) to Log.append,
    which checks it before storing (see "One CRC pass" above). `header` is scan_batch(raw). A batch over
    `batch_bytes_max` is left alone (None): Log.append refuses it (MESSAGE_TOO_LARGE) before storing
    anything, and walking it first would only spend time. `allow_control` is for the broker's own
    transaction markers (WriteTxnMarkers); a client's Produce never passes it."""
    if len(raw) > batch_bytes_max:
        return None
    try:
        record_list = _validate_records(raw, header, batch_bytes_max, walk or walk_record_list)
        check_attributes(header, allow_control=allow_control)
    except KanalError:
        check_scanned(header, raw)  # damage in transit (CORRUPT_MESSAGE) wins over what it broke
        raise
    return record_list


def _validate_records(raw: bytes | memoryview, header: BatchHeader, batch_bytes_max: int,
                      walk: RecordListWalk) -> bytes | memoryview:
    """Rules 2 to 7 of the module docstring; the decompressed RecordList."""
    if header.codec not in _KNOWN_CODECS:
        raise KanalError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {header.codec}")
    if header.last_offset_delta != header.record_count - 1:
        raise KanalError(
            ErrorCode.INVALID_RECORD,
            f"a produced batch has dense offsets: last_offset_delta {header.last_offset_delta} must "
            f"be record_count - 1 ({header.record_count - 1})",
        )
    if header.first_timestamp_ms < 0 or header.max_timestamp_ms < 0:
        raise KanalError(ErrorCode.INVALID_TIMESTAMP,
                         f"negative batch timestamp (first {header.first_timestamp_ms}, "
                         f"max {header.max_timestamp_ms})")
    payload = memoryview(raw)[header.records_start : header.records_end]
    try:
        record_list = decompress_bounded(header.codec, payload, records_bytes_max(batch_bytes_max))
    except KanalError as exc:
        if exc.code != ErrorCode.CORRUPT_MESSAGE:
            raise
        # The CRC matched: these are the producer's own bytes, not damage in transit.
        raise KanalError(ErrorCode.INVALID_RECORD, exc.message) from None
    max_ts = walk(record_list, header.record_count, header.first_timestamp_ms)
    if max_ts != header.max_timestamp_ms:
        raise KanalError(
            ErrorCode.INVALID_TIMESTAMP,
            f"max_timestamp_ms {header.max_timestamp_ms} is not the largest record timestamp ({max_ts})",
        )
    return record_list


def check_attributes(header: BatchHeader, *, allow_control: bool) -> None:
    """Rule 8: the attribute bits of a batch about to be stored (records.proto, TRANSACTIONS)."""
    if header.attributes & ~ATTRIBUTES_KNOWN:
        raise KanalError(ErrorCode.INVALID_RECORD, f"unknown batch attribute bits {header.attributes:#x}")
    if header.attributes & ATTR_CONTROL:
        if not allow_control:
            raise KanalError(ErrorCode.INVALID_RECORD,
                             "control batches (transaction markers) are written by the broker only")
        if not header.attributes & ATTR_TRANSACTIONAL or header.record_count != 1:
            raise KanalError(
                ErrorCode.INVALID_RECORD, "a control batch is transactional and holds one record"
            )
    if header.attributes & ATTR_TRANSACTIONAL and header.producer_id <= 0:
        raise KanalError(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")


# ---- the reference walk ----

class _Invalid(Exception):
    """A walk failure before it is given its code and position (internal)."""

    def __init__(self, code: int, why: str, at: int) -> None:
        self.code, self.why, self.at = code, why, at


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = 0
    start = pos
    for i in range(10):
        if pos >= end:
            raise _Invalid(ErrorCode.INVALID_RECORD, "truncated varint", start)
        byte = buf[pos]
        pos += 1
        if i == 9 and byte > 1:  # a 10th byte adds bit 63 at most
            raise _Invalid(ErrorCode.INVALID_RECORD, "varint longer than 10 bytes or above 2^64 - 1", start)
        result |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return result, pos
    raise _Invalid(ErrorCode.INVALID_RECORD, "varint longer than 10 bytes or above 2^64 - 1", start)


def _varint32(buf, pos: int, end: int, what: str) -> tuple[int, int]:
    value, after = _varint(buf, pos, end)
    if after - pos > 5 or value > _UINT32_MAX:
        raise _Invalid(ErrorCode.INVALID_RECORD, f"{what} longer than 5 bytes or above 2^32 - 1", pos)
    return value, after


def _length(buf, pos: int, end: int) -> tuple[int, int]:
    n, after = _varint32(buf, pos, end, "length")
    if n > _INT32_MAX or n > end - after:
        raise _Invalid(ErrorCode.INVALID_RECORD, "length past the end of its message", pos)
    return n, after


def _unknown(tag: int, where: str, at: int) -> _Invalid:
    return _Invalid(
        ErrorCode.INVALID_RECORD, f"field {tag >> 3} with wire type {tag & 7} is not part of {where}", at
    )


def _walk_header(buf, pos: int, end: int) -> None:
    while pos < end:
        at = pos
        tag, pos = _varint32(buf, pos, end, "tag")
        if tag == 0x0A:
            n, pos = _length(buf, pos, end)
            try:
                bytes(buf[pos : pos + n]).decode("utf-8")
            except UnicodeDecodeError:
                raise _Invalid(ErrorCode.INVALID_RECORD, "header key is not valid UTF-8", at) from None
            pos += n
        elif tag == 0x12:
            n, pos = _length(buf, pos, end)
            pos += n
        else:
            raise _unknown(tag, "a RecordHeader", at)


def _walk_record(buf, pos: int, end: int, index: int, first_timestamp_ms: int) -> int:
    """Checks record `index` in buf[pos:end]; returns its timestamp."""
    start = pos
    offset_delta = 0
    zigzag = 0
    while pos < end:
        at = pos
        tag, pos = _varint32(buf, pos, end, "tag")
        if tag == 0x08:
            offset_delta, pos = _varint(buf, pos, end)
        elif tag == 0x10:
            zigzag, pos = _varint(buf, pos, end)
        elif tag in (0x1A, 0x22):
            n, pos = _length(buf, pos, end)
            pos += n
        elif tag == 0x2A:
            n, pos = _length(buf, pos, end)
            _walk_header(buf, pos, pos + n)
            pos += n
        else:
            raise _unknown(tag, "a Record", at)
    if offset_delta != index:
        raise _Invalid(
            ErrorCode.INVALID_RECORD,
            f"record {index} has offset_delta {offset_delta}: offsets must be 0, 1, 2, ... in order",
            start,
        )
    timestamp = first_timestamp_ms + ((zigzag >> 1) ^ -(zigzag & 1))
    if not 0 <= timestamp <= INT64_MAX:
        raise _Invalid(ErrorCode.INVALID_TIMESTAMP, f"record {index} has timestamp {timestamp}", start)
    return timestamp


def walk_record_list_python(record_list: bytes | memoryview | bytearray, record_count: int,
                            first_timestamp_ms: int) -> int:
    """The walk rules of the module docstring over a decompressed RecordList holding `record_count`
    records; returns the largest record timestamp. KanalError (INVALID_RECORD / INVALID_TIMESTAMP) with the
    rule broken and its byte position."""
    buf = memoryview(record_list).cast("B") if not isinstance(record_list, bytes) else record_list
    end = len(buf)
    pos = 0
    index = 0
    max_ts = -1
    try:
        while pos < end:
            at = pos
            tag, pos = _varint32(buf, pos, end, "tag")
            if tag != 0x0A:
                raise _unknown(tag, "a RecordList", at)
            if index >= record_count:
                raise _Invalid(ErrorCode.INVALID_RECORD, f"more records than record_count {record_count}", at)
            n, pos = _length(buf, pos, end)
            max_ts = max(max_ts, _walk_record(buf, pos, pos + n, index, first_timestamp_ms))
            pos += n
            index += 1
        if index != record_count:
            raise _Invalid(
                ErrorCode.INVALID_RECORD, f"{index} records where record_count says {record_count}", end
            )
    except _Invalid as exc:
        raise KanalError(exc.code, f"records: {exc.why} at byte {exc.at} of {end}") from None
    return max_ts


def _load_native() -> tuple[ModuleType | None, str | None]:
    """The C walk, or None and why not (not built: no compiler at install time; or turned off)."""
    if os.environ.get("KANAL_BATCH_WALK_PURE_PYTHON"):
        return None, "KANAL_BATCH_WALK_PURE_PYTHON is set"
    try:
        return importlib.import_module("kanal.broker._batch_walk"), None
    except ImportError as exc:
        return None, str(exc)


native, NATIVE_IMPORT_ERROR = _load_native()
NATIVE = native is not None
walk_record_list: RecordListWalk = native.walk if native is not None else walk_record_list_python
