"""The registry wire framing (kanal/schemas/framing.py): what confluent-kafka's serializers write."""

from __future__ import annotations

import pytest

from kanal.schemas.framing import (
    FramingError,
    frame,
    frame_message_indexes,
    unframe,
    unframe_message_indexes,
)


def test_a_framed_payload_is_magic_byte_big_endian_id_then_the_payload():
    assert frame(258, b"abc") == b"\x00\x00\x00\x01\x02abc"
    schema_id, payload = unframe(b"\x00\x00\x00\x01\x02abc")
    assert (schema_id, bytes(payload)) == (258, b"abc")


@pytest.mark.parametrize("data", [b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01x",
                                  b"\x00\x00\x00\x00\x00x", b"\x00\xff\xff\xff\xffx", b"plain json"])
def test_anything_else_is_refused(data):
    with pytest.raises(FramingError):
        unframe(data)


@pytest.mark.parametrize("schema_id", [0, -1, 1 << 31])
def test_ids_outside_the_positive_int32_range_are_not_framed(schema_id):
    with pytest.raises(ValueError):
        frame(schema_id, b"")


@pytest.mark.parametrize(("indexes", "encoded"), [([0], b"\x00"), ([1], b"\x02\x02"),
                                                  ([0, 2], b"\x04\x00\x04"), ([70], b"\x02\x8c\x01")])
def test_protobuf_message_indexes_are_zigzag_varints_with_the_first_message_one_zero_byte(indexes, encoded):
    assert frame_message_indexes(indexes) == encoded
    got, rest = unframe_message_indexes(memoryview(encoded + b"msg"))
    assert (got, bytes(rest)) == (indexes, b"msg")


@pytest.mark.parametrize("data", [b"", b"\x02", b"\x02\x80", b"\x03\x02", b"\xfe\x01" + b"\x00" * 200])
def test_truncated_negative_or_overlong_index_lists_are_refused(data):
    with pytest.raises(FramingError):
        unframe_message_indexes(memoryview(data))
