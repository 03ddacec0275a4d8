"""Record batches and log entries as bytes (records.proto): CRC, broker suffix, framing, the wire walker."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kanal.v1 import records_pb2
from kanal.v1.batch import (
    BROKER_SUFFIX_BYTES,
    NewRecord,
    build_batch,
    decode_records,
    frame_entry,
    iter_entries,
    parse_batch,
    producer_crc,
    read_broker_suffix,
    scan_batch,
    with_broker_suffix,
)
from kanal.v1.codecs import compress, decompress
from kanal.v1.error import ErrorCode, KanalError

# A test vector for implementers in other languages: this producer batch, its CRC and its stored entry.
VECTOR_RECORDS = [
    NewRecord(key=b"k1", value=b"v1", timestamp_ms=1_700_000_000_000),
    NewRecord(key=None, value=b"v2", timestamp_ms=1_700_000_000_005, headers=[("h", b"x")]),
]
VECTOR_CRC = 0x302DE62B  # RecordBatch.crc of vector_batch()
VECTOR_RECORDS_CRC = 0x5C172603  # CRC-32C of its serialized RecordList


def protobuf_record_list(records: list[NewRecord], first_timestamp_ms: int) -> records_pb2.RecordList:
    """The RecordList of `records` built with protobuf's own messages: the reference the hand encoder and
    the vectors (test_crc_vectors.py) are held to."""
    expected = records_pb2.RecordList()
    for delta, rec in enumerate(records):
        out = expected.records.add(
            offset_delta=delta, timestamp_delta_ms=rec.timestamp_ms - first_timestamp_ms
        )
        if rec.key is not None:
            out.key = rec.key
        if rec.value is not None:
            out.value = rec.value
        for hkey, hvalue in rec.headers:
            header = out.headers.add(key=hkey)
            if hvalue is not None:
                header.value = hvalue
    return expected


def vector_batch() -> bytes:
    return build_batch(VECTOR_RECORDS, producer_id=7, producer_epoch=1, base_sequence=3)


def test_crc32c_check_value():
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_producer_crc_covers_the_documented_44_byte_header_and_the_records():
    batch = parse_batch(vector_batch())
    header = struct.pack(">qiiqqiii", 7, 1, 3, 1_700_000_000_000, 1_700_000_000_005, 2, 1, 0)
    assert len(header) == 44
    assert batch.crc == crc32c.crc32c(header + batch.records)


def test_crc_vector_is_stable():
    # Changing these values means changing the wire format: every client must agree on them.
    batch = parse_batch(vector_batch())
    assert batch.crc == VECTOR_CRC
    assert crc32c.crc32c(decompress(batch.codec, batch.records)) == VECTOR_RECORDS_CRC


def test_broker_suffix_sets_offsets_without_reencoding():
    raw = vector_batch()
    stored = with_broker_suffix(raw, base_offset=1234, leader_epoch=5)
    assert stored[: len(raw)] == raw and len(stored) == len(raw) + BROKER_SUFFIX_BYTES
    parsed = parse_batch(stored)  # an ordinary protobuf parser reads the broker fields
    assert (parsed.base_offset, parsed.partition_leader_epoch, parsed.last_offset_delta) == (1234, 5, 1)
    suffix = read_broker_suffix(stored)
    assert (suffix.base_offset, suffix.leader_epoch, suffix.last_offset) == (1234, 5, 1235)


def test_records_round_trip_with_keys_values_headers_and_nulls():
    batch = parse_batch(with_broker_suffix(vector_batch(), 10, 0))
    records = decode_records(batch)
    assert [(r.offset_delta, r.key if r.HasField("key") else None, r.value) for r in records] == [
        (0, b"k1", b"v1"),
        (1, None, b"v2"),
    ]
    assert records[1].headers[0].key == "h" and records[1].headers[0].value == b"x"
    assert batch.first_timestamp_ms + records[1].timestamp_delta_ms == 1_700_000_000_005


def test_tombstone_value_is_distinguished_from_empty():
    batch = parse_batch(build_batch([NewRecord(key=b"k", value=None), NewRecord(key=b"k", value=b"")]))
    a, b = decode_records(batch)
    assert not a.HasField("value") and b.HasField("value") and b.value == b""


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_every_codec_round_trips(codec):
    records = [NewRecord(key=b"k%d" % i, value=b"value-%d" % i * 20, timestamp_ms=i) for i in range(50)]
    batch = parse_batch(build_batch(records, codec=codec))
    assert batch.codec == codec
    assert [r.value for r in decode_records(batch)] == [r.value for r in records]


def test_corrupt_compressed_payload_is_a_corrupt_message():
    with pytest.raises(KanalError) as err:
        decompress(records_pb2.COMPRESSION_ZSTD, b"not zstd at all")
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    assert decompress(records_pb2.COMPRESSION_GZIP, compress(records_pb2.COMPRESSION_GZIP, b"abc")) == b"abc"


def test_any_flipped_byte_in_a_stored_entry_is_detected():
    entry = frame_entry(with_broker_suffix(vector_batch(), 99, 2))
    for i in range(len(entry)):
        damaged = bytearray(entry)
        damaged[i] ^= 0x5A
        with pytest.raises(KanalError) as err:
            list(iter_entries(bytes(damaged)))
        assert err.value.code == ErrorCode.CORRUPT_MESSAGE, i


def test_crc_mismatch_is_rejected():
    batch = parse_batch(vector_batch())
    batch.crc ^= 1
    with pytest.raises(KanalError) as err:
        parse_batch(batch.SerializeToString())
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=200, deadline=None)
@given(
    producer_id=st.integers(-(1 << 63), (1 << 63) - 1),
    producer_epoch=st.integers(-(1 << 31), (1 << 31) - 1),
    base_sequence=st.integers(-(1 << 31), (1 << 31) - 1),
    count=st.integers(1, 5),
    ts=st.integers(-(1 << 40), 1 << 40),
    codec=st.sampled_from([0, 1, 2, 3, 4]),
)
def test_wire_walker_agrees_with_the_protobuf_parser(
    producer_id, producer_epoch, base_sequence, count, ts, codec
):
    raw = build_batch(
        [NewRecord(value=b"v", timestamp_ms=ts + i) for i in range(count)],
        codec=codec, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
    )
    stored = with_broker_suffix(raw, 2**40 + 3, 17)
    walked, parsed = scan_batch(stored), parse_batch(stored)
    for name in (
        "base_offset",
        "partition_leader_epoch",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "first_timestamp_ms",
        "max_timestamp_ms",
        "record_count",
        "codec",
        "crc",
        "last_offset_delta",
    ):
        assert getattr(walked, name) == getattr(parsed, name), name
    assert stored[walked.records_start : walked.records_end] == parsed.records
    assert producer_crc(parsed) == parsed.crc


def test_truncated_bytes_do_not_parse():
    raw = vector_batch()
    for cut in (1, 5, len(raw) // 2, len(raw) - 1):
        with pytest.raises(KanalError) as err:
            scan_batch(raw[:cut])
        assert err.value.code == ErrorCode.CORRUPT_MESSAGE


HEADERS = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)


@settings(max_examples=120, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=300)),
            st.one_of(st.none(), st.binary(max_size=20000)),
            st.integers(-(1 << 45), 1 << 45),
            HEADERS,
        ),
        min_size=1,
        max_size=20,
    ),
    many=st.booleans(),
)
def test_hand_encoder_writes_exactly_what_protobuf_writes(records, many):
    from kanal.v1.batch import encode_record_list

    news = [NewRecord(key=k, value=v, timestamp_ms=ts, headers=h) for k, v, ts, h in records]
    if many:  # offset deltas beyond the small-varint table
        news = news * (20000 // len(news) + 1)
    first = news[0].timestamp_ms
    assert encode_record_list(news, first) == protobuf_record_list(news, first).SerializeToString()


@settings(max_examples=300, deadline=None)
@given(
    producer_id=st.one_of(st.just(0), st.integers(-(1 << 63), (1 << 63) - 1)),
    producer_epoch=st.one_of(st.just(0), st.integers(-(1 << 31), (1 << 31) - 1)),
    base_sequence=st.one_of(st.just(0), st.integers(-(1 << 31), (1 << 31) - 1)),
    first_ts=st.one_of(st.just(0), st.integers(-(1 << 63), (1 << 63) - 1)),
    max_ts=st.one_of(st.just(0), st.integers(-(1 << 63), (1 << 63) - 1)),
    count=st.integers(0, (1 << 31) - 1),
    last_offset_delta=st.one_of(st.just(0), st.integers(0, (1 << 31) - 1)),
    codec=st.sampled_from([0, 1, 2, 3, 4]),
    records=st.binary(max_size=3000),
)
def test_batch_pieces_join_to_what_protobuf_writes(
    producer_id, producer_epoch, base_sequence, first_ts, max_ts, count, last_offset_delta, codec, records
):
    """encode_batch_parts writes the RecordBatch by hand (so a Produce request copies the records once):
    its pieces must join to protobuf's own serialization of the same fields, CRC included."""
    from kanal.v1.batch import encode_batch, encode_batch_parts

    fields = {"record_count": count, "last_offset_delta": last_offset_delta, "first_timestamp_ms": first_ts,
              "max_timestamp_ms": max_ts, "codec": codec, "producer_id": producer_id,
              "producer_epoch": producer_epoch, "base_sequence": base_sequence}
    head, payload, tail = encode_batch_parts(records, **fields)
    expected = records_pb2.RecordBatch(records=compress(codec, records), **fields)
    expected.crc = producer_crc(expected)
    assert decompress(codec, payload) == records
    assert head + payload + tail == expected.SerializeToString() == encode_batch(records, **fields)


def test_reframed_batch_equals_one_encoded_with_its_new_header():
    """A producer moving a batch to a new epoch re-frames the records it already compressed
    (frame_batch_parts): the result is the batch encode_batch_parts makes with the new fields, CRC
    included, and the records are the same object, not compressed again."""
    from kanal.v1.batch import encode_batch_parts, encode_record_list, frame_batch_parts

    records = encode_record_list([NewRecord(b"v%d" % i, key=b"k") for i in range(50)], 1_700_000_000_000)
    fields = {"record_count": 50, "last_offset_delta": 49, "first_timestamp_ms": 1_700_000_000_000,
              "max_timestamp_ms": 1_700_000_000_000, "codec": 1, "producer_id": 7}
    first = encode_batch_parts(records, producer_epoch=0, base_sequence=120, **fields)
    again = frame_batch_parts(first[1], producer_epoch=1, base_sequence=0, **fields)
    assert again == encode_batch_parts(records, producer_epoch=1, base_sequence=0, **fields)
    assert again[1] is first[1]
    batch = parse_batch(b"".join(again))  # checks the CRC
    assert (batch.producer_epoch, batch.base_sequence) == (1, 0)
