"""The wire framing registry-aware clients write in a record's key or value (Confluent's, which every
registry client library uses): a magic byte 0, the schema id as a 4-byte big-endian integer, then the
payload. A Protobuf payload is preceded by the message indexes that name which message of the `.proto`
file it is: a zigzag varint count, then each index as a zigzag varint (the single byte 0 stands for the
common case, [0]: the file's first message).
"""

from __future__ import annotations

import struct

from kanal.v1.error import ErrorCode, KanalError

MAGIC_BYTE = 0
HEADER_BYTES = 5  # the magic byte and the id
_HEADER = struct.Struct(">bI")
SCHEMA_ID_MAX = (1 << 31) - 1  # ids are positive int32s, as Confluent's


class FramingError(KanalError):
    """Bytes that are not a registry-framed record (no magic byte, too short, a bad index list)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_RECORD, message)


def frame(schema_id: int, payload: bytes) -> bytes:
    if not 0 < schema_id <= SCHEMA_ID_MAX:
        raise ValueError(f"schema id {schema_id} is not in 1..{SCHEMA_ID_MAX}")
    return _HEADER.pack(MAGIC_BYTE, schema_id) + payload


def unframe(data: bytes | memoryview) -> tuple[int, memoryview]:
    """(schema id, payload) of a framed record; FramingError for anything else."""
    view = memoryview(data)
    if len(view) < HEADER_BYTES:
        raise FramingError(f"{len(view)} bytes: a framed record has at least {HEADER_BYTES}")
    magic, schema_id = _HEADER.unpack_from(view)
    if magic != MAGIC_BYTE:
        raise FramingError(f"magic byte {magic}, not {MAGIC_BYTE}: not written with a schema registry")
    if schema_id == 0 or schema_id > SCHEMA_ID_MAX:
        raise FramingError(f"schema id {schema_id} is not a registry id")
    return schema_id, view[HEADER_BYTES:]


def _zigzag_varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_zigzag_varint(view: memoryview, at: int) -> tuple[int, int]:
    shift, n = 0, 0
    while True:
        if at >= len(view) or shift > 63:
            raise FramingError("a truncated or overlong varint in the message indexes")
        byte = view[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (n >> 1) ^ -(n & 1), at


MESSAGE_INDEXES_MAX = 64  # nesting deeper than any real .proto: a bound on what a record may claim


def frame_message_indexes(indexes: list[int]) -> bytes:
    """The Protobuf message-index prefix: [0] is the single byte 0."""
    if indexes == [0]:
        return b"\x00"
    return _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)


def unframe_message_indexes(payload: memoryview) -> tuple[list[int], memoryview]:
    """(message indexes, the Protobuf message's bytes) of a Protobuf payload."""
    count, at = _read_zigzag_varint(payload, 0)
    if count == 0:
        return [0], payload[at:]
    if not 0 < count <= MESSAGE_INDEXES_MAX:
        raise FramingError(f"{count} message indexes (at most {MESSAGE_INDEXES_MAX})")
    indexes = []
    for _ in range(count):
        index, at = _read_zigzag_varint(payload, at)
        if index < 0:
            raise FramingError(f"a negative message index {index}")
        indexes.append(index)
    return indexes, payload[at:]
