"""Kafka's RecordBatch v2 <-> kanal's stored batch (kanal.broker.kafka.record_batch), checked against a
real Kafka client's codec: kafka-python 3 builds the batches a Kafka producer sends and reads the batches
a Kafka consumer fetches.

- A Kafka producer's batch, any codec, idempotent, transactional or neither, becomes a kanal batch with
  kanal's CRC and the same records; served back it is a Kafka batch with a valid CRC, the same records at
  the stored offsets, the same producer fields and codec.
- A batch a kanal client wrote, and a transaction marker, are served as Kafka batches a Kafka client reads.
- The C record walks and their Python references give the same bytes and the same refusals.
- What a Kafka client may not send is refused with the kanal code the leader would use, nothing half done.
"""

from __future__ import annotations

import random
import struct
import zlib

import cramjam
import crc32c
import lz4.frame
import pytest
from kafka.codec import gzip_decode, lz4_decode, snappy_decode, snappy_encode
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kanal.broker.kafka import record_batch
from kanal.broker.kafka.record_batch import (
    NATIVE,
    NATIVE_IMPORT_ERROR,
    _py_kafka_to_record_list,
    _py_record_list_to_kafka,
    entries_to_kafka,
    kafka_compress,
    kafka_decompress,
    kafka_to_kanal,
    kanal_to_kafka,
    split_kafka_batches,
)
from kanal.v1 import records_pb2
from kanal.v1.batch import (
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    RECORDS_PER_BATCH_MAX,
    NewRecord,
    build_batch,
    build_control_batch,
    decode_records,
    encode_record_list,
    frame_entry,
    parse_batch,
    read_broker_suffix,
    with_broker_suffix,
)
from kanal.v1.error import ErrorCode, KanalError

CODECS = {
    "none": records_pb2.COMPRESSION_NONE,
    "gzip": records_pb2.COMPRESSION_GZIP,
    "snappy": records_pb2.COMPRESSION_SNAPPY,
    "lz4": records_pb2.COMPRESSION_LZ4,
    "zstd": records_pb2.COMPRESSION_ZSTD,
}
COMPRESSED = {name: codec for name, codec in CODECS.items() if codec != records_pb2.COMPRESSION_NONE}
BASE_OFFSET, LEADER_EPOCH = 1000, 7
BYTES_MAX = 1 << 20
T0 = 1_700_000_000_000

# (producer id, epoch, base sequence, transactional) as a Kafka producer sends them; -1: no producer.
PRODUCERS = {
    "plain": (-1, -1, -1, False),
    "idempotent": (4242, 3, 17, False),
    "transactional": (4242, 3, 17, True),
}

# Kafka's batch header, by byte offset (record_batch.py's module docstring).
AT_MAGIC, AT_CRC, AT_ATTRIBUTES, AT_LAST_OFFSET_DELTA, AT_COUNT = 16, 17, 21, 23, 57
CRC_FROM = 21

# Records as a Kafka producer hands them over: (timestamp, key, value, headers). Null and empty keys and
# values, header values null and empty, header names empty and non-ASCII, timestamps going back and forth;
# values repeat enough for every codec to pay off (kafka-python sends uncompressed when it does not).
RECORDS = [
    (T0, b"order-1", b"created " * 40, [("traceparent", b"00-4bf92f3577b34da6-01")]),
    (T0 - 5_000, None, b"updated " * 40, []),
    (T0 + 123_456_789, b"", b"", [("", b""), ("ключ", None)]),
    (T0, b"order-2", None, [("名前", b"\x00\xff"), ("x", b"")]),
    (T0 + 1, b"\x00\x01\x02", b"shipped " * 40, [("dup", b"1"), ("dup", b"2")]),
    (T0 - 1, None, None, []),
]


def kafka_batch(codec: int, producer: tuple[int, int, int, bool] = PRODUCERS["plain"],
                records=RECORDS) -> bytes:
    """A batch as kafka-python's producer builds it, asserting it really used `codec`."""
    producer_id, epoch, sequence, transactional = producer
    builder = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, epoch, sequence, 1 << 20)
    for offset, (timestamp, key, value, headers) in enumerate(records):
        assert builder.append(offset, timestamp, key, value, headers) is not None
    raw = bytes(builder.build())
    assert DefaultRecordBatch(raw).compression_type == codec
    return raw


def with_crc(raw: bytes | bytearray) -> bytes:
    """`raw` with its Kafka CRC recomputed: CRC-32C of the bytes after the CRC, big-endian at offset 17."""
    out = bytearray(raw)
    struct.pack_into(">I", out, AT_CRC, crc32c.crc32c(bytes(out[CRC_FROM:])))
    return bytes(out)


def edited(raw: bytes, fmt: str, offset: int, value: int) -> bytes:
    """A header field of a Kafka batch set to `value`, CRC recomputed so the edit is what is tested."""
    out = bytearray(raw)
    struct.pack_into(fmt, out, offset, value)
    return with_crc(out)


def stored_from_kafka(raw: bytes) -> bytes:
    """What the leader stores for a Kafka producer's batch: kanal producer bytes plus the broker suffix."""
    return with_broker_suffix(kafka_to_kanal(memoryview(raw), records_bytes_max=BYTES_MAX), BASE_OFFSET,
                              LEADER_EPOCH)


def kanal_view(record: records_pb2.Record, first_ts: int) -> tuple:
    return (
        first_ts + record.timestamp_delta_ms,
        record.key if record.HasField("key") else None,
        record.value if record.HasField("value") else None,
        [(h.key, h.value if h.HasField("value") else None) for h in record.headers],
    )


def kafka_records(raw: bytes) -> list[tuple]:
    """(offset, timestamp, key, value, headers) of each record of a Kafka batch, as kafka-python reads it."""
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in DefaultRecordBatch(raw)]


@pytest.fixture(params=["c", "python"])
def walk(request, monkeypatch):
    """Each transcode runs once on the C record walks and once on the Python ones (the fallback when the
    extension is not built), which must give the same batches."""
    if request.param == "c":
        assert NATIVE, NATIVE_IMPORT_ERROR
    else:
        monkeypatch.setattr(record_batch, "_native", None)
    return request.param


# ---- a Kafka producer's batch, stored and served back ----

@pytest.mark.parametrize("producer", PRODUCERS.values(), ids=PRODUCERS.keys())
@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_a_kafka_batch_is_stored_with_its_records_and_served_back_as_kafka_reads_it(walk, codec, producer):
    raw = kafka_batch(codec, producer)
    producer_id, epoch, sequence, transactional = producer

    stored = stored_from_kafka(raw)
    batch = parse_batch(stored)  # kanal's CRC and header rules
    assert batch.codec == codec
    assert (batch.record_count, batch.last_offset_delta) == (len(RECORDS), len(RECORDS) - 1)
    assert batch.first_timestamp_ms == RECORDS[0][0]
    assert batch.max_timestamp_ms == max(r[0] for r in RECORDS)
    if producer_id < 0:  # kanal's "no producer" is 0
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (0, 0, 0)
    else:
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
            producer_id, epoch, sequence)
    assert batch.attributes == (ATTR_TRANSACTIONAL if transactional else 0)
    records = decode_records(batch)
    assert [r.offset_delta for r in records] == list(range(len(RECORDS)))
    assert [kanal_view(r, batch.first_timestamp_ms) for r in records] == RECORDS
    suffix = read_broker_suffix(stored)
    assert (suffix.base_offset, suffix.leader_epoch) == (BASE_OFFSET, LEADER_EPOCH)

    served = kanal_to_kafka(stored)
    back = DefaultRecordBatch(served)
    assert back.validate_crc()
    assert back.magic == 2 and back.size_in_bytes == len(served)
    assert (back.base_offset, back.leader_epoch) == (BASE_OFFSET, LEADER_EPOCH)
    assert back.compression_type == codec
    assert (back.producer_id, back.producer_epoch, back.base_sequence) == (producer_id, epoch, sequence)
    assert back.is_transactional == transactional and not back.is_control_batch
    assert (back.records_count, back.last_offset_delta) == (len(RECORDS), len(RECORDS) - 1)
    assert (back.first_timestamp, back.max_timestamp) == (batch.first_timestamp_ms, batch.max_timestamp_ms)
    assert kafka_records(served) == [(BASE_OFFSET + i, ts, key, value, headers)
                                     for i, (ts, key, value, headers) in enumerate(RECORDS)]


def test_an_uncompressed_kafka_batch_comes_back_byte_for_byte_at_its_stored_offset(walk):
    """Records cross both ways byte for byte: only base offset and leader epoch (outside the CRC) differ."""
    raw = kafka_batch(CODECS["none"], PRODUCERS["idempotent"])
    served = kanal_to_kafka(stored_from_kafka(raw))
    assert served[8:12] == raw[8:12] and served[16:] == raw[16:]
    assert struct.unpack_from(">qii", served) == (BASE_OFFSET, len(raw) - 12, LEADER_EPOCH)


def test_a_produce_requests_several_batches_are_split_and_each_transcoded(walk):
    batches = [kafka_batch(codec, PRODUCERS["idempotent"]) for codec in CODECS.values()]
    split = split_kafka_batches(b"".join(batches))
    assert [bytes(b) for b in split] == batches
    for part, raw in zip(split, batches):
        assert kafka_to_kanal(part, records_bytes_max=BYTES_MAX) == kafka_to_kanal(
            memoryview(raw), records_bytes_max=BYTES_MAX)


@pytest.mark.parametrize("timestamps", [[0, 0], [T0, T0 - (1 << 40)], [(1 << 62), (1 << 62) + 1, 5]],
                         ids=["zero", "far-back", "far-future"])
def test_timestamps_far_from_the_first_keep_their_value(walk, timestamps):
    records = [(ts, b"k", b"v", []) for ts in timestamps]
    raw = kafka_batch(CODECS["none"], records=records)
    served = kanal_to_kafka(stored_from_kafka(raw))
    assert [r[1] for r in kafka_records(served)] == timestamps


# ---- batches kanal clients wrote, and transaction markers, served to Kafka clients ----

KANAL_RECORDS = [
    NewRecord(b"first " * 30, b"k1", T0, [("h", b"v"), ("naïve", None)]),
    NewRecord(None, None, T0 + 10),
    NewRecord(b"", b"", T0 - 10, [("", b"")]),
    NewRecord(b"last " * 30, b"k4", T0 + 7),
]


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
@pytest.mark.parametrize("producer", [(0, 0, 0), (9, 2, 5)], ids=["plain", "idempotent"])
def test_a_batch_a_kanal_client_wrote_is_served_as_a_kafka_batch(walk, codec, producer):
    producer_id, epoch, sequence = producer
    produced = build_batch(KANAL_RECORDS, codec=codec, producer_id=producer_id, producer_epoch=epoch,
                           base_sequence=sequence)
    served = kanal_to_kafka(with_broker_suffix(produced, BASE_OFFSET, LEADER_EPOCH))
    back = DefaultRecordBatch(served)
    assert back.validate_crc()
    assert back.compression_type == codec
    expected_producer = producer if producer_id else (-1, -1, -1)
    assert (back.producer_id, back.producer_epoch, back.base_sequence) == expected_producer
    assert not back.is_transactional and not back.is_control_batch
    assert kafka_records(served) == [(BASE_OFFSET + i, r.timestamp_ms, r.key, r.value, list(r.headers))
                                     for i, r in enumerate(KANAL_RECORDS)]
    # and a Kafka client producing those bytes gives back what the kanal client produced: the same batch
    # fields and records (the broker compresses at the codec's fastest level, so for gzip and lz4 the
    # compressed bytes may differ from the client's)
    as_produced = bytearray(served)
    struct.pack_into(">q", as_produced, 0, 0)  # a producer's batch starts at offset 0 (not CRC-covered)
    again = parse_batch(kafka_to_kanal(memoryview(bytes(as_produced)), records_bytes_max=BYTES_MAX))
    original = parse_batch(produced)
    assert decode_records(again) == decode_records(original)
    again.ClearField("records")
    again.ClearField("crc")
    original.ClearField("records")
    original.ClearField("crc")
    assert again == original


@pytest.mark.parametrize(("control_type", "kafka_type"), [(CONTROL_COMMIT, 1), (CONTROL_ABORT, 0)],
                         ids=["commit", "abort"])
@pytest.mark.parametrize("coordinator_epoch", [0, 12, (1 << 31) - 1])
def test_a_transaction_marker_is_served_as_kafkas_control_batch(walk, control_type, kafka_type,
                                                                 coordinator_epoch):
    marker = build_control_batch(control_type, producer_id=77, producer_epoch=4,
                                 coordinator_epoch=coordinator_epoch, timestamp_ms=T0)
    served = kanal_to_kafka(with_broker_suffix(marker, BASE_OFFSET, LEADER_EPOCH))
    back = DefaultRecordBatch(served)
    assert back.validate_crc()
    assert back.is_control_batch and back.is_transactional
    assert (back.producer_id, back.producer_epoch, back.base_sequence) == (77, 4, -1)
    assert (back.base_offset, back.records_count, back.last_offset_delta) == (BASE_OFFSET, 1, 0)
    [record] = list(back)
    assert (record.offset, record.timestamp) == (BASE_OFFSET, T0)
    assert record.key == struct.pack(">hh", 0, kafka_type)  # version 0, type (0 abort, 1 commit)
    assert record.value == struct.pack(">hi", 0, coordinator_epoch)  # version 0, coordinator epoch
    assert (record.version, record.type) == (0, kafka_type)
    assert record.headers == []


def test_a_fetchs_log_entries_are_served_as_concatenated_kafka_batches(walk):
    stored = []
    offset = BASE_OFFSET
    for produced in (
        kafka_to_kanal(memoryview(kafka_batch(CODECS["lz4"], PRODUCERS["transactional"])),
                       records_bytes_max=BYTES_MAX),
        build_batch(KANAL_RECORDS, codec=CODECS["zstd"]),
        build_control_batch(CONTROL_COMMIT, producer_id=4242, producer_epoch=3, coordinator_epoch=1,
                            timestamp_ms=T0),
        kafka_to_kanal(memoryview(kafka_batch(CODECS["snappy"])), records_bytes_max=BYTES_MAX),
    ):
        batch = with_broker_suffix(produced, offset, LEADER_EPOCH)
        stored.append(batch)
        offset = read_broker_suffix(batch).last_offset + 1
    served = entries_to_kafka(b"".join(frame_entry(s) for s in stored))
    assert served == b"".join(kanal_to_kafka(s) for s in stored)

    offsets = []
    pos = 0
    for _ in stored:  # a Kafka consumer reads them one after another
        size = DefaultRecordBatch(served[pos:]).size_in_bytes
        batch = DefaultRecordBatch(served[pos:pos + size])
        assert batch.validate_crc()
        offsets += [r.offset for r in batch]
        pos += size
    assert pos == len(served)
    assert offsets == list(range(BASE_OFFSET, offset))
    assert entries_to_kafka(b"") == b""


# ---- the C walks against the Python references ----

def native_walks():
    assert NATIVE, NATIVE_IMPORT_ERROR  # setup.py builds it: a missing build is a failure, not a skip
    from kanal.broker import _kafka_records

    return _kafka_records


def test_the_c_walks_are_built_here():
    native_walks()


def zigzag(n: int) -> bytes:
    n = ((n << 1) ^ (n >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_kafka_record(ts_delta: int, offset_delta: int, key: bytes | None, value: bytes | None,
                        headers: list[tuple[bytes, bytes | None]]) -> bytes:
    """One Kafka record (record_batch.py's layout), written here field by field."""
    body = b"\x00" + zigzag(ts_delta) + zigzag(offset_delta)
    for field in (key, value):
        body += zigzag(-1) if field is None else zigzag(len(field)) + field
    body += zigzag(len(headers))
    for name, header_value in headers:
        body += zigzag(len(name)) + name
        body += zigzag(-1) if header_value is None else zigzag(len(header_value)) + header_value
    return zigzag(len(body)) + body


def random_kafka_records(rng: random.Random) -> tuple[bytes, int]:
    def blob(most: int) -> bytes | None:
        return rng.choice([None, b"", rng.randbytes(rng.randint(1, most))])

    big = [0, 1, -1, (1 << 31) - 1, (1 << 63) - 1, -(1 << 63), 1 << 40]
    count = rng.randint(1, 4)
    records = b"".join(
        encode_kafka_record(
            rng.choice([rng.randint(-5000, 5000), rng.choice(big)]),
            rng.choice([i, rng.randint(0, 1 << 20), rng.choice([(1 << 31) - 1, (1 << 62)])]),
            blob(8),
            blob(300),
            [(rng.choice([b"", b"a", "ключ".encode()]), blob(4)) for _ in range(rng.randint(0, 3))],
        )
        for i in range(count)
    )
    return records, count


def damaged(rng: random.Random, data: bytes, count: int) -> tuple[bytes, int]:
    out = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0:
        for _ in range(rng.randint(1, 3)):
            out[rng.randrange(len(out))] = rng.randrange(256)
    elif kind == 1:
        del out[rng.randrange(len(out)):]
    elif kind == 2:
        out += rng.choice([b"\x00", b"\x01", b"\xff" * 11, rng.randbytes(rng.randint(1, 6))])
    elif kind == 3:
        count += rng.choice([-1, 1, 2, RECORDS_PER_BATCH_MAX])
    elif kind == 4:
        out[rng.randrange(len(out))] = rng.choice([0x80, 0xFF, 0x7F, 0x01])
    else:
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out), count


def outcome(walk, *args) -> tuple[str, object]:
    """("ok", output) or ("refused", kanal ErrorCode); anything else than a KanalError fails the test."""
    try:
        return "ok", walk(*args)
    except KanalError as exc:
        return "refused", exc.code


def test_the_walks_agree_on_kafka_records_valid_and_damaged():
    native = native_walks()
    rng = random.Random(20240611)
    refused = set()
    for _ in range(4000):
        data, count = random_kafka_records(rng)
        valid = outcome(native.kafka_to_record_list, data, count)
        assert valid == outcome(_py_kafka_to_record_list, data, count)
        assert valid[0] == "ok"
        assert len(records_pb2.RecordList.FromString(valid[1]).records) == count
        data, count = damaged(rng, data, count)
        result = outcome(native.kafka_to_record_list, data, count)
        assert result == outcome(_py_kafka_to_record_list, data, count), (data.hex(), count)
        if result[0] == "refused":
            refused.add(result[1])
    assert refused == {ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD}  # the damage reached both codes


@pytest.mark.parametrize(("data", "count"), [
    (b"", 0),
    (b"", 1),
    (zigzag(0), 1),  # a record of no bytes: not even its attributes
    (zigzag(-1), 1),  # negative record length
    (b"\x80" * 10 + b"\x00", 1),  # an 11-byte varint
    (zigzag(12) + b"\x00" + b"\xff" * 9 + b"\x02", 1),  # a 10-byte varint above 2^64 - 1
    (encode_kafka_record(0, -1, None, None, []), 1),  # negative offset delta: INVALID_RECORD
    (encode_kafka_record(0, 0, None, None, []), 2),
    (encode_kafka_record(0, 0, None, None, []), RECORDS_PER_BATCH_MAX),
    (encode_kafka_record(0, 0, None, None, []) * 2, 1),
    (encode_kafka_record((1 << 63) - 1, (1 << 63) - 1, b"", b"", [(b"", b"")]), 1),
    (encode_kafka_record(-(1 << 63), 0, None, b"v", [(b"k", None)]), 1),
])
def test_the_walks_agree_on_edge_cases(data, count):
    native = native_walks()
    assert outcome(native.kafka_to_record_list, data, count) == outcome(_py_kafka_to_record_list, data, count)


def test_the_walks_agree_on_kanal_record_lists():
    """Stored record lists (checked by the leader when they were appended) become the same Kafka records."""
    native = native_walks()
    rng = random.Random(99)
    for _ in range(3000):
        records = [
            NewRecord(rng.choice([None, b"", rng.randbytes(rng.randint(1, 200))]),
                      rng.choice([None, b"", rng.randbytes(rng.randint(1, 8))]),
                      rng.choice([rng.randint(0, 10_000), rng.randint(0, (1 << 63) - 1)]),
                      [(rng.choice(["", "h", "ключ"]), rng.choice([None, b"", b"v"]))
                       for _ in range(rng.randint(0, 3))])
            for _ in range(rng.randint(1, 5))
        ]
        plain = encode_record_list(records, records[0].timestamp_ms)
        result = outcome(native.record_list_to_kafka, plain)
        assert result == outcome(_py_record_list_to_kafka, plain)
        assert result[0] == "ok" and result[1][1] == len(records)
        # offset deltas with gaps (a compacted or a transactional batch), up to Kafka's int32
        listed = records_pb2.RecordList.FromString(plain)
        for record in listed.records:
            record.offset_delta = rng.choice([rng.randint(0, 1000), (1 << 31) - 1])
        plain = listed.SerializeToString()
        assert outcome(native.record_list_to_kafka, plain) == outcome(_py_record_list_to_kafka, plain)
    too_far = records_pb2.RecordList(records=[records_pb2.Record(offset_delta=1 << 31)]).SerializeToString()
    assert outcome(native.record_list_to_kafka, too_far) == ("refused", ErrorCode.CORRUPT_MESSAGE)
    assert outcome(_py_record_list_to_kafka, too_far) == ("refused", ErrorCode.CORRUPT_MESSAGE)


def test_the_c_walk_refuses_a_damaged_record_list_cleanly():
    """A stored record list was checked when it was appended, so damage is not expected here; if some
    gets through, the C walk refuses it with CORRUPT_MESSAGE (never reads past it or crashes), and where it
    does accept the bytes, protobuf's reading gives the same Kafka records."""
    native = native_walks()
    rng = random.Random(5)
    for _ in range(3000):
        records = [NewRecord(rng.randbytes(rng.randint(0, 40)), rng.choice([None, b"kk"]),
                             rng.randint(0, 1 << 41), [("h", rng.choice([None, b"zz"]))] * rng.randint(0, 2))
                   for _ in range(rng.randint(1, 3))]
        plain = bytearray(encode_record_list(records, records[0].timestamp_ms))
        if rng.random() < 0.5:
            del plain[rng.randrange(len(plain)):]
        else:
            plain[rng.randrange(len(plain))] = rng.randrange(256)
        result = outcome(native.record_list_to_kafka, bytes(plain))
        if result[0] == "refused":
            assert result[1] == ErrorCode.CORRUPT_MESSAGE
            continue
        try:
            reference = _py_record_list_to_kafka(bytes(plain))
        except KanalError:  # protobuf refuses what C took: a header name that is not UTF-8
            continue
        assert result[1] == reference


# ---- what a Kafka client may not send ----

def refused_with(raw: bytes | memoryview, *, records_bytes_max: int = BYTES_MAX) -> int:
    with pytest.raises(KanalError) as caught:
        kafka_to_kanal(memoryview(raw), records_bytes_max=records_bytes_max)
    return caught.value.code


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_a_batch_whose_kafka_crc_does_not_match_is_corrupt(walk, codec):
    raw = kafka_batch(codec)
    flipped_record = bytearray(raw)
    flipped_record[len(raw) - 3] ^= 0x04
    assert refused_with(bytes(flipped_record)) == ErrorCode.CORRUPT_MESSAGE
    flipped_crc = bytearray(raw)
    flipped_crc[AT_CRC] ^= 0x80
    assert refused_with(bytes(flipped_crc)) == ErrorCode.CORRUPT_MESSAGE
    flipped_header = bytearray(raw)
    flipped_header[AT_COUNT - 3] ^= 0x01  # base_sequence: covered by the CRC too
    assert refused_with(bytes(flipped_header)) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_a_batch_of_another_magic_is_an_invalid_record(walk, magic):
    raw = bytearray(kafka_batch(CODECS["none"]))
    raw[AT_MAGIC] = magic  # not covered by the CRC
    assert refused_with(bytes(raw)) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("bit", [0x20, 0x08, 0x40, 0x4000],
                         ids=["control", "log-append-time", "bit-6", "bit-14"])
def test_attributes_a_client_may_not_set_make_an_invalid_record(walk, bit):
    raw = kafka_batch(CODECS["gzip"], PRODUCERS["transactional"])
    attributes = struct.unpack_from(">h", raw, AT_ATTRIBUTES)[0]
    assert refused_with(edited(raw, ">h", AT_ATTRIBUTES, attributes | bit)) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_an_unknown_codec_is_an_unsupported_compression_type(walk, codec):
    raw = kafka_batch(CODECS["none"])
    attributes = struct.unpack_from(">h", raw, AT_ATTRIBUTES)[0]
    assert refused_with(edited(raw, ">h", AT_ATTRIBUTES, (attributes & ~0x07) | codec)) == \
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
@pytest.mark.parametrize("change", [-1, 1, 1000])
def test_a_record_count_other_than_the_records_present_is_corrupt(walk, codec, change):
    """The header agrees with itself (last offset delta = count - 1) but not with the records it carries."""
    claimed = len(RECORDS) + change
    raw = edited(kafka_batch(codec), ">i", AT_LAST_OFFSET_DELTA, claimed - 1)
    assert refused_with(edited(raw, ">i", AT_COUNT, claimed)) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("delta", [-1, 0, len(RECORDS), 1 << 30])
def test_a_last_offset_delta_other_than_count_minus_one_is_an_invalid_record(walk, delta):
    """A producer's batch is dense from offset delta 0 (the leader's rule, and Kafka's)."""
    assert refused_with(edited(kafka_batch(CODECS["none"]), ">i", AT_LAST_OFFSET_DELTA, delta)) == \
        ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("count", [0, -1, RECORDS_PER_BATCH_MAX + 1])
def test_a_record_count_out_of_range_is_an_invalid_record(walk, count):
    raw = edited(kafka_batch(CODECS["none"]), ">i", AT_COUNT, count)
    assert refused_with(raw) == ErrorCode.INVALID_RECORD


def test_a_damaged_compressed_stream_is_corrupt(walk):
    for codec in COMPRESSED.values():
        raw = bytearray(kafka_batch(codec))
        del raw[len(raw) - 8:]  # the stream loses its end
        struct.pack_into(">i", raw, 8, len(raw) - 12)
        assert refused_with(with_crc(raw)) == ErrorCode.CORRUPT_MESSAGE, codec


@pytest.mark.parametrize("codec", COMPRESSED.values(), ids=COMPRESSED.keys())
def test_records_that_decompress_beyond_the_bound_are_too_large(walk, codec):
    raw = kafka_batch(codec)
    plain_bytes = len(kafka_batch(CODECS["none"])) - 61
    assert refused_with(raw, records_bytes_max=plain_bytes - 1) == ErrorCode.MESSAGE_TOO_LARGE
    kafka_to_kanal(memoryview(raw), records_bytes_max=plain_bytes)  # exactly the bound: taken


def test_split_refuses_a_truncated_or_overlong_batch():
    raw = kafka_batch(CODECS["none"])
    whole = raw + raw
    for records in (b"", raw[:60], raw[:-1], whole[:len(raw) + 30], whole[:-1]):
        with pytest.raises(KanalError) as caught:
            split_kafka_batches(records)
        assert caught.value.code == ErrorCode.CORRUPT_MESSAGE
    for length in (len(raw) - 11, 1 << 30, 48, 0, -1):  # past the buffer; shorter than a header
        bad = bytearray(raw)
        struct.pack_into(">i", bad, 8, length)
        with pytest.raises(KanalError) as caught:
            split_kafka_batches(bytes(bad))
        assert caught.value.code == ErrorCode.CORRUPT_MESSAGE, length
    assert [bytes(b) for b in split_kafka_batches(whole)] == [raw, raw]


# ---- Kafka's compression streams ----

DATA = b"".join(b"record %06d " % i + bytes(range(i % 50)) for i in range(6000))  # > 32 KiB: several blocks


def test_snappy_reads_xerial_framing_and_a_raw_block():
    assert len(DATA) > 3 * (32 << 10)
    written = kafka_compress(CODECS["snappy"], DATA)
    assert written.startswith(b"\x82SNAPPY\x00")
    assert snappy_decode(written) == DATA  # what a Kafka client reads
    for stream in (written, snappy_encode(DATA), snappy_encode(DATA, xerial_compatible=False),
                   bytes(cramjam.snappy.compress_raw(DATA))):
        assert bytes(kafka_decompress(CODECS["snappy"], stream, len(DATA))) == DATA
        with pytest.raises(KanalError) as caught:
            kafka_decompress(CODECS["snappy"], stream, len(DATA) - 1)
        assert caught.value.code == ErrorCode.MESSAGE_TOO_LARGE
    for broken in (written[:-5], written[:len(written) // 2], written[:18], b"\x00\xff\xff"):
        with pytest.raises(KanalError) as caught:
            kafka_decompress(CODECS["snappy"], broken, len(DATA))
        assert caught.value.code == ErrorCode.CORRUPT_MESSAGE


def test_lz4_is_a_frame_with_independent_blocks():
    written = kafka_compress(CODECS["lz4"], DATA)
    assert written[:4] == b"\x04\x22\x4d\x18"  # the LZ4 frame magic
    flags = written[4]
    assert flags >> 6 == 0b01  # frame format version 1
    assert flags & 0x20, "Kafka's Java reader takes independent blocks only"
    assert lz4.frame.decompress(written) == DATA
    assert lz4_decode(written) == DATA
    assert bytes(kafka_decompress(CODECS["lz4"], written, len(DATA))) == DATA


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_what_kafka_compress_writes_kafka_decompress_reads(codec):
    written = kafka_compress(codec, DATA)
    assert bytes(kafka_decompress(codec, written, len(DATA))) == DATA
    if codec == CODECS["gzip"]:
        assert gzip_decode(written) == DATA
        assert zlib.decompress(written, 31) == DATA
