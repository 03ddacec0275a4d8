"""The `.meta` object uploaded beside each remote segment (tiered storage, issue 44).

A segment's `.log` object is the segment file, byte for byte. What a reader or a new follower needs
besides, without reading the log before it, travels in one small object next to it: the segment's two
indexes (to find an offset or a timestamp with range reads), the idempotence state and the transaction
state as of the segment's end (a follower that starts at a later local log start takes them instead of
replaying the remote history), and the leader epochs with records in the segment. The producer and
transaction sections are opaque here: they are the bytes of `broker/producer_snapshot.py` and
`transaction_checkpoint.py`, at the segment's end offset, which the layer above encodes and decodes.

Layout (big-endian):

    offset 0   4 bytes  magic b"KRSM"
           4   u16      version (1)
           6   u16      reserved, 0
           8   i64      base offset: the segment's first offset
          16   i64      end offset: the offset after its last record (> base offset)
          24   u16      T, length of the topic name
          26   T bytes  topic name, UTF-8 (for a human reading a bucket; the key names the topic id)
               u32      E, leader epochs with records in the segment
               E x 12   epoch i32, start offset i64: strictly increasing epochs, start offsets increasing,
                        the first one at the base offset (an epoch that began before the segment starts
                        at the base offset here), every one below the end offset
               4 sections, each u32 length L then L bytes, in this order: offset index, time index,
                        producer-state snapshot, transaction checkpoint
               u32      CRC-32C of every byte before it

A reader refuses (CORRUPT_MESSAGE) anything that is not exactly that: wrong magic or version, a CRC
mismatch, lengths that overrun or leave bytes over, offsets or epochs out of order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NoReturn

import crc32c

from kanal.v1.error import ErrorCode, KanalError

_MAGIC = b"KRSM"
_VERSION = 1
_HEADER = struct.Struct(">4sHHqqH")
_COUNT = struct.Struct(">I")
_EPOCH = struct.Struct(">iq")
_CRC = struct.Struct(">I")
TOPIC_NAME_BYTES_MAX = 0xFFFF


@dataclass(frozen=True, slots=True)
class RemoteSegmentMeta:
    topic: str
    base_offset: int
    end_offset: int  # exclusive
    epochs: tuple[tuple[int, int], ...]  # (leader epoch, first offset in the segment)
    offset_index: bytes
    time_index: bytes
    producer_snapshot: bytes  # producer_snapshot.py's format, at end_offset
    transactions: bytes  # transaction_checkpoint.py's format, at end_offset


def encode_meta(meta: RemoteSegmentMeta) -> bytes:
    """The object's bytes; KanalError(INVALID_REQUEST) when the fields break the rules above (a bug in the
    caller: nothing that fails here is ever uploaded)."""
    _check_fields(meta, ErrorCode.INVALID_REQUEST)
    topic = meta.topic.encode()
    parts = [_HEADER.pack(_MAGIC, _VERSION, 0, meta.base_offset, meta.end_offset, len(topic)), topic,
             _COUNT.pack(len(meta.epochs))]
    parts += [_EPOCH.pack(epoch, start) for epoch, start in meta.epochs]
    for section in (meta.offset_index, meta.time_index, meta.producer_snapshot, meta.transactions):
        parts += [_COUNT.pack(len(section)), section]
    body = b"".join(parts)
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_meta(data: bytes | memoryview) -> RemoteSegmentMeta:
    """The fields of a `.meta` object; CORRUPT_MESSAGE when the bytes are not a whole, undamaged one."""
    data = bytes(data)
    if len(data) < _HEADER.size + _COUNT.size + _CRC.size:
        _damaged(f"{len(data)} bytes is too short")
    body = data[:-_CRC.size]
    (crc,) = _CRC.unpack_from(data, len(body))
    if crc32c.crc32c(body) != crc:
        _damaged("CRC mismatch")
    magic, version, _, base, end, topic_len = _HEADER.unpack_from(body, 0)
    if magic != _MAGIC or version != _VERSION:
        _damaged(f"magic {magic!r} version {version}, expected {_MAGIC!r} version {_VERSION}")
    reader = _Reader(body, _HEADER.size)
    try:
        topic = reader.take(topic_len).decode()
    except UnicodeDecodeError:
        _damaged("the topic name is not UTF-8")
    count = reader.count()
    epochs = tuple(_EPOCH.unpack(reader.take(_EPOCH.size)) for _ in range(count))
    sections = [reader.take(reader.count()) for _ in range(4)]
    if reader.position != len(body):
        _damaged(f"{len(body) - reader.position} bytes after the last section")
    meta = RemoteSegmentMeta(topic, base, end, epochs, *sections)
    _check_fields(meta, ErrorCode.CORRUPT_MESSAGE)
    return meta


class _Reader:
    def __init__(self, body: bytes, position: int) -> None:
        self.body, self.position = body, position

    def take(self, length: int) -> bytes:
        if self.position + length > len(self.body):
            _damaged(f"a field of {length} bytes at {self.position} overruns the object")
        out = self.body[self.position:self.position + length]
        self.position += length
        return out

    def count(self) -> int:
        (value,) = _COUNT.unpack(self.take(_COUNT.size))
        return int(value)


def _check_fields(meta: RemoteSegmentMeta, code: ErrorCode) -> None:
    problem = None
    if not 0 <= meta.base_offset < meta.end_offset:
        problem = f"offsets [{meta.base_offset}, {meta.end_offset}) are not a segment's"
    elif len(meta.topic.encode()) > TOPIC_NAME_BYTES_MAX:
        problem = "the topic name is too long"
    elif not meta.epochs or meta.epochs[0][1] != meta.base_offset:
        problem = f"the first leader epoch does not start at the base offset: {meta.epochs[:1]}"
    else:
        for (epoch, start), (next_epoch, next_start) in zip(meta.epochs, meta.epochs[1:]):
            if next_epoch <= epoch or next_start <= start:
                problem = f"leader epochs out of order: ({epoch}, {start}) then ({next_epoch}, {next_start})"
                break
        if problem is None and not meta.epochs[-1][1] < meta.end_offset:
            problem = f"leader epoch {meta.epochs[-1][0]} starts at or past the end offset"
        if problem is None and meta.epochs[0][0] < 0:
            problem = "a negative leader epoch"
    if problem is not None:
        raise KanalError(code, f"remote segment meta: {problem}")


def _damaged(detail: str) -> NoReturn:
    raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"remote segment meta: {detail}")
