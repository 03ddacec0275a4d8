"""Kafka's RecordBatch (magic 2) <-> kanal's stored batch (records.proto): the transcode on the Kafka
listener's produce and fetch paths.

Kafka's batch, big-endian, 61 header bytes then `count` records (compressed as a whole by bits 0-2 of
`attributes`):

    base_offset i64 | batch_length i32 (bytes after this field) | partition_leader_epoch i32 | magic i8 (2)
    | crc u32 (CRC-32C of every byte after it) | attributes i16 | last_offset_delta i32
    | base_timestamp i64 | max_timestamp i64 | producer_id i64 | producer_epoch i16 | base_sequence i32
    | count i32 | records

    record: length zigzag-varint | attributes i8 | timestamp_delta zigzag-varlong | offset_delta
            zigzag-varint | key_length zigzag-varint (-1 null) | key | value_length | value
            | header_count zigzag-varint | per header: key_length, key (UTF-8), value_length (-1 null), value

The two formats carry the same fields, so a record crosses either way byte for byte (key, value, headers,
timestamp). What differs:

- the framing of each record (Kafka's varint layout above; kanal's protobuf RecordList);
- "no producer": Kafka writes -1 for producer id, epoch and sequence, kanal 0 (left out);
- the codec ids are the same numbers (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), and gzip, lz4 (the LZ4
  frame format; Kafka's readers need independent blocks) and zstd are the same streams; Kafka's snappy
  is xerial's framing (a magic header, then length-prefixed raw blocks), or one raw block from some
  clients, where kanal uses snappy's standard framing;
- transaction markers: Kafka's control record key is `version i16, type i16` (0 abort, 1 commit) and its
  value `version i16, coordinator_epoch i32`; kanal's are ControlRecordKey / ControlRecordValue.

So each batch is decompressed, re-framed and compressed again with the same codec. The record walk is C
(broker/_kafka_records.c) when it is built; this module holds the same walk in Python, which a test keeps
byte-for-byte equal to the C one."""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import cast

import cramjam
import crc32c
from google.protobuf.message import DecodeError

from kanal.v1 import batch as kbatch
from kanal.v1 import codecs, records_pb2
from kanal.v1.error import ErrorCode, KanalError

Buffer = bytes | memoryview
KAFKA_HEADER = struct.Struct(">qiibIhiqqqhii")
KAFKA_HEADER_BYTES = KAFKA_HEADER.size  # 61
# Bytes before the CRC-covered part: base_offset, batch_length, partition_leader_epoch, magic, crc.
_CRC_FROM = 21
_LENGTH_PREFIX_BYTES = 12  # base_offset and batch_length: batch_length counts the bytes after them
MAGIC = 2
ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
_CODECS = {0, 1, 2, 3, 4}  # Kafka's ids, which are kanal's CompressionCodec numbers

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES = 32 << 10  # the block size Kafka's Java client writes
_KAFKA_CONTROL_KEY = struct.Struct(">hh")
_KAFKA_CONTROL_VALUE = struct.Struct(">hi")

def _load_native() -> tuple[ModuleType | None, str | None]:
    """The C walks, or None and why not (built optionally by setup.py: without a compiler the Python
    walks below serve)."""
    try:
        return importlib.import_module("kanal.broker._kafka_records"), None
    except ImportError as exc:
        return None, str(exc)


_native, NATIVE_IMPORT_ERROR = _load_native()
NATIVE = _native is not None


# ---- compression: Kafka's streams ----


def kafka_decompress(codec: int, data: bytes | memoryview, bytes_max: int) -> bytes | memoryview:
    """A Kafka batch's records, decompressed; at most `bytes_max` bytes (MESSAGE_TOO_LARGE past that)."""
    if codec == records_pb2.COMPRESSION_SNAPPY:
        return _snappy_kafka_decompress(bytes(data), bytes_max)
    return codecs.decompress_bounded(codec, data, bytes_max)


def fast_compress(codec: int, data: bytes) -> bytes:
    """`data` compressed with `codec` in kanal's streams at the codec's fastest level: the broker
    recompresses every batch a Kafka client produces, on its own CPU, where kanal's own producers
    compress on theirs. Measured on 100 KiB of records: lz4 level 1 takes a tenth of cramjam's default
    level's time for 12 % more bytes; zstd 1 two thirds of zstd 3's; gzip 1 under half of gzip 6's."""
    if codec == records_pb2.COMPRESSION_LZ4:
        packer = cramjam.lz4.Compressor(level=1, content_checksum=False, block_linked=False)
        packer.compress(data)
        return bytes(packer.finish())
    if codec == records_pb2.COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=1))
    if codec == records_pb2.COMPRESSION_GZIP:
        gzip = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
        return gzip.compress(data) + gzip.flush()
    return codecs.compress(codec, data)


def kafka_compress(codec: int, data: bytes) -> bytes:
    """`data` compressed as Kafka's clients read it (at the codec's fastest level, as fast_compress)."""
    if codec == records_pb2.COMPRESSION_SNAPPY:
        out = [_XERIAL_HEADER]
        for start in range(0, len(data), _XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK_BYTES]))
            out += (len(block).to_bytes(4, "big"), block)
        return b"".join(out)
    return fast_compress(codec, data)


def _snappy_kafka_decompress(data: bytes, bytes_max: int) -> bytes:
    too_large = KanalError(ErrorCode.MESSAGE_TOO_LARGE, f"records decompress to more than {bytes_max} bytes")
    try:
        if not data.startswith(_XERIAL_MAGIC):
            if cramjam.snappy.decompress_raw_len(data) > bytes_max:
                raise too_large
            return bytes(cramjam.snappy.decompress_raw(data))
        out = []
        size = 0
        pos = len(_XERIAL_HEADER)
        while pos < len(data):
            if pos + 4 > len(data):
                raise KanalError(ErrorCode.CORRUPT_MESSAGE, "xerial snappy block length is truncated")
            length = int.from_bytes(data[pos : pos + 4], "big")
            block = data[pos + 4 : pos + 4 + length]
            if len(block) != length:
                raise KanalError(ErrorCode.CORRUPT_MESSAGE, "xerial snappy block is truncated")
            size += cramjam.snappy.decompress_raw_len(block)
            if size > bytes_max:
                raise too_large
            out.append(bytes(cramjam.snappy.decompress_raw(block)))
            pos += 4 + length
        return b"".join(out)
    except (cramjam.DecompressionError, zlib.error) as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress snappy: {exc}") from exc


# ---- the record walks ----


def _zigzag_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, "record has a truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> 64:
                raise KanalError(ErrorCode.CORRUPT_MESSAGE, "record has a varint above 2^64 - 1")
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _zigzag_bytes(n: int) -> bytes:
    return bytes(kbatch.varint((n << 1) ^ (n >> 63)))


def _sized(buf: Buffer, pos: int, end: int, nullable: bool = True) -> tuple[bytes | None, int]:
    length, pos = _zigzag_varint(buf, pos, end)
    if length < 0:
        if length != -1 or not nullable:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"record has a field of length {length}")
        return None, pos
    if pos + length > end:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "record field runs past the record")
    return bytes(buf[pos : pos + length]), pos + length


def _py_kafka_to_record_list(plain: Buffer, count: int) -> bytes:
    """Kafka records -> kanal's serialized RecordList (the canonical encoding of batch.encode_record_list).
    Offsets and timestamps stay deltas: both formats count them from the batch's base."""
    view = memoryview(plain)
    end = len(view)
    pos = 0
    parts: list[bytes] = []
    for _ in range(count):
        length, pos = _zigzag_varint(view, pos, end)
        if length < 0 or pos + length > end:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, "record length runs past the batch")
        stop = pos + length
        pos += 1  # record attributes: unused in magic 2
        ts_delta, pos = _zigzag_varint(view, pos, stop)
        offset_delta, pos = _zigzag_varint(view, pos, stop)
        key, pos = _sized(view, pos, stop)
        value, pos = _sized(view, pos, stop)
        header_count, pos = _zigzag_varint(view, pos, stop)
        if header_count < 0:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"record has {header_count} headers")
        body: list[bytes] = []
        if offset_delta < 0:
            raise KanalError(ErrorCode.INVALID_RECORD, f"record has offset delta {offset_delta}")
        if offset_delta:
            body += (b"\x08", kbatch.varint(offset_delta))
        if ts_delta:
            body += (b"\x10", _zigzag_bytes(ts_delta))
        if key is not None:
            body += (b"\x1a", kbatch.varint(len(key)), key)
        if value is not None:
            body += (b"\x22", kbatch.varint(len(value)), value)
        for _ in range(header_count):
            hkey, pos = _sized(view, pos, stop, nullable=False)
            hvalue, pos = _sized(view, pos, stop)
            header = b""
            if hkey:
                header = b"\x0a" + kbatch.varint(len(hkey)) + hkey
            if hvalue is not None:
                header += b"\x12" + kbatch.varint(len(hvalue)) + hvalue
            body += (b"\x2a", kbatch.varint(len(header)), header)
        if pos != stop:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, "record length does not match its fields")
        record = b"".join(body)
        parts += (b"\x0a", kbatch.varint(len(record)), record)
    if pos != end:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"batch holds more bytes than its {count} records")
    return b"".join(parts)


def _py_record_list_to_kafka(plain: Buffer) -> tuple[bytes, int]:
    """kanal's RecordList -> Kafka records and their number."""
    try:
        parsed = records_pb2.RecordList.FromString(bytes(plain))
    except DecodeError as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"record list does not parse: {exc}") from exc
    parts: list[bytes] = []
    for record in parsed.records:
        if record.offset_delta > 0x7FFFFFFF:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, "record offset delta is above 2^31 - 1")
        body = [b"\x00", _zigzag_bytes(record.timestamp_delta_ms), _zigzag_bytes(record.offset_delta)]
        for present, field in (
            (record.HasField("key"), record.key),
            (record.HasField("value"), record.value),
        ):
            body += (_zigzag_bytes(len(field)), field) if present else (_zigzag_bytes(-1),)
        body.append(_zigzag_bytes(len(record.headers)))
        for header in record.headers:
            name = header.key.encode()
            body += (_zigzag_bytes(len(name)), name)
            body += (
                (_zigzag_bytes(len(header.value)), header.value)
                if header.HasField("value")
                else (_zigzag_bytes(-1),)
            )
        encoded = b"".join(body)
        parts += (_zigzag_bytes(len(encoded)), encoded)
    return b"".join(parts), len(parsed.records)


def kafka_to_record_list(plain: Buffer, count: int) -> bytes:
    if _native is not None:
        return cast(bytes, _native.kafka_to_record_list(plain, count))
    return _py_kafka_to_record_list(plain, count)


def record_list_to_kafka(plain: Buffer) -> tuple[bytes, int]:
    if _native is not None:
        return cast(tuple[bytes, int], _native.record_list_to_kafka(plain))
    return _py_record_list_to_kafka(plain)


# ---- batches ----


def split_kafka_batches(records: bytes | memoryview) -> list[memoryview]:
    """The batches of a Produce request's `records`: each whole, or CORRUPT_MESSAGE."""
    view = memoryview(records)
    out = []
    pos = 0
    while pos < len(view):
        if pos + KAFKA_HEADER_BYTES > len(view):
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, "record batch header is truncated")
        length = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        end = pos + _LENGTH_PREFIX_BYTES + length
        if length < KAFKA_HEADER_BYTES - _LENGTH_PREFIX_BYTES or end > len(view):
            raise KanalError(
                ErrorCode.CORRUPT_MESSAGE, f"record batch length {length} does not fit the request"
            )
        out.append(view[pos:end])
        pos = end
    if not out:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "no record batch in the request")
    return out


def kafka_to_kanal(batch: memoryview, *, records_bytes_max: int) -> bytes:
    """A producer's Kafka batch as kanal producer bytes (no broker suffix), with kanal's CRC. Checks what
    only the Kafka form can show (magic, Kafka's CRC, the codec, a client's control or log-append-time
    batch); the leader then validates the result as it does every batch (kanal.broker.batch_validation)."""
    if len(batch) < KAFKA_HEADER_BYTES:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "record batch header is truncated")
    (
        base_offset,
        _length,
        _epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = KAFKA_HEADER.unpack_from(batch)
    if base_offset != 0:  # the leader gives offsets; a producer's batch starts at 0, as Kafka requires
        raise KanalError(ErrorCode.INVALID_RECORD,
                         f"a produced batch's base offset must be 0, not {base_offset}")
    if magic != MAGIC:
        raise KanalError(
            ErrorCode.INVALID_RECORD, f"record batch has magic {magic}: kanal takes magic 2 only"
        )
    if crc32c.crc32c(batch[_CRC_FROM:]) != crc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "record batch CRC does not match its contents")
    codec = attributes & ATTR_CODEC_MASK
    if codec not in _CODECS:
        raise KanalError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
    if attributes & (ATTR_CONTROL | ATTR_LOG_APPEND_TIME):
        raise KanalError(
            ErrorCode.INVALID_RECORD, "clients may not produce control or log-append-time batches"
        )
    if attributes & ~(ATTR_CODEC_MASK | ATTR_TRANSACTIONAL):
        raise KanalError(ErrorCode.INVALID_RECORD, f"record batch has unknown attributes {attributes:#x}")
    if not 0 < count <= kbatch.RECORDS_PER_BATCH_MAX:
        raise KanalError(ErrorCode.INVALID_RECORD, f"record batch claims {count} records")
    if last_offset_delta != count - 1:  # a producer's batch is dense from 0, as the leader requires
        raise KanalError(ErrorCode.INVALID_RECORD,
                         f"record batch of {count} records has last offset delta {last_offset_delta}")
    plain = kafka_decompress(codec, batch[KAFKA_HEADER_BYTES:], records_bytes_max)
    idempotent = producer_id >= 0
    return b"".join(
        kbatch.frame_batch_parts(
            fast_compress(codec, kafka_to_record_list(plain, count)),
            record_count=count,
            last_offset_delta=last_offset_delta,
            first_timestamp_ms=base_ts,
            max_timestamp_ms=max_ts,
            codec=codec,
            producer_id=producer_id if idempotent else 0,
            producer_epoch=producer_epoch if idempotent else 0,
            base_sequence=base_sequence if idempotent else 0,
            attributes=attributes & ATTR_TRANSACTIONAL,
        )
    )


def kanal_to_kafka(stored: bytes | memoryview) -> bytes:
    """A stored kanal batch (broker suffix included) as Kafka's batch, at the same offsets and epoch."""
    header = kbatch.scan_batch(stored)
    codec = header.codec
    plain = codecs.decompress(codec, bytes(memoryview(stored)[header.records_start : header.records_end]))
    attributes = codec
    if header.attributes & kbatch.ATTR_TRANSACTIONAL:
        attributes |= ATTR_TRANSACTIONAL
    if header.attributes & kbatch.ATTR_CONTROL:
        attributes |= ATTR_CONTROL
        records, count = _kafka_control_record(plain), 1
    else:
        records, count = record_list_to_kafka(plain)
    records = kafka_compress(codec, records)
    has_producer = header.producer_id > 0
    body = (
        _KAFKA_BODY.pack(
            attributes,
            header.last_offset_delta,
            header.first_timestamp_ms,
            header.max_timestamp_ms,
            header.producer_id if has_producer else -1,
            header.producer_epoch if has_producer else -1,
            header.base_sequence if has_producer and not attributes & ATTR_CONTROL else -1,
            count,
        )
        + records
    )
    return (
        _KAFKA_PREFIX.pack(
            header.base_offset, len(body) + 9, header.partition_leader_epoch, MAGIC, crc32c.crc32c(body)
        )
        + body
    )


_KAFKA_PREFIX = struct.Struct(">qiibI")  # base_offset, batch_length, partition_leader_epoch, magic, crc
_KAFKA_BODY = struct.Struct(">hiqqqhii")  # what the CRC covers, before the records


def _kafka_control_record(record_list: bytes) -> bytes:
    """The one record of a kanal marker as Kafka's control record (key: version 0 and type, 0 abort or 1
    commit; value: version 0 and the coordinator epoch)."""
    try:
        records = records_pb2.RecordList.FromString(record_list).records
    except DecodeError as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"control record list does not parse: {exc}") from exc
    if len(records) != 1:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"a control batch holds {len(records)} records, not 1")
    record = records[0]
    kind = kbatch.control_type_of(record)
    try:
        epoch = records_pb2.ControlRecordValue.FromString(record.value).coordinator_epoch
    except DecodeError as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"control record value does not parse: {exc}") from exc
    key = _KAFKA_CONTROL_KEY.pack(0, 1 if kind == kbatch.CONTROL_COMMIT else 0)
    value = _KAFKA_CONTROL_VALUE.pack(0, epoch)
    body = b"".join(
        [
            b"\x00",
            _zigzag_bytes(record.timestamp_delta_ms),
            _zigzag_bytes(record.offset_delta),
            _zigzag_bytes(len(key)),
            key,
            _zigzag_bytes(len(value)),
            value,
            _zigzag_bytes(0),
        ]
    )
    return _zigzag_bytes(len(body)) + body


def entries_to_kafka(
    entries: bytes | memoryview, transcode: Callable[[Buffer], bytes] = kanal_to_kafka
) -> bytes:
    """A Fetch answer's log entries (records.proto framing) as concatenated Kafka batches, each made by
    `transcode` (batch_cache.py passes its own). The entries were checked when they were stored; they are
    not checked again here, as Kafka serves its log."""
    view = memoryview(entries)
    out = []
    pos = 0
    while pos + kbatch.ENTRY_HEADER_BYTES <= len(view):
        length, _crc = kbatch.ENTRY_HEADER.unpack_from(view, pos)
        start = pos + kbatch.ENTRY_HEADER_BYTES
        out.append(transcode(view[start : start + length]))
        pos = start + length
    return b"".join(out)
