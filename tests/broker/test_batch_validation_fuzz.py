"""The leader's batch validation (kanal.broker.batch_validation) under Hypothesis: random and mutated batches.

Properties held for every generated batch:
- the C walk and the Python reference walk give the same answer (accept, or refuse with the same code);
- a batch it accepts is decoded by the consumer's decoders (Python and C) to exactly record_count records,
  offsets base .. base + last_offset_delta with none missing, timestamps in [0, 2^63 - 1] whose largest
  is max_timestamp_ms, and header keys that are text;
- a batch it refuses gets one of the documented codes, and a real Partition (over a Log in a temp dir)
  stores nothing of it: the log end and the segment bytes stay as they were.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kanal.broker import batch_validation
from kanal.broker.batch_validation import (
    NATIVE,
    RECORDS_EXPANSION_MAX,
    validate_produced_batch,
    walk_record_list_python,
)
from kanal.broker.partition import Assignment, Partition
from kanal.broker.storage.log_config import LogConfig
from kanal.clients import consumer as consumer_module
from kanal.clients.consumer import decode_fetched, decode_record_list_python
from kanal.v1 import broker_pb2, codecs, records_pb2
from kanal.v1.batch import (
    NewRecord,
    build_batch,
    check_scanned,
    encode_record_list,
    frame_batch_parts,
    frame_entry,
    scan_batch,
    varint,
    with_broker_suffix,
)
from kanal.v1.error import ErrorCode, KanalError

from .test_partition_waiters import FakeManager

# The codes batch_validation's docstring (and records.proto / errors.proto) document for a refused batch.
DOCUMENTED = {ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP,
              ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, ErrorCode.MESSAGE_TOO_LARGE}
BATCH_BYTES_MAX = LogConfig().batch_bytes_max
WALKS = [walk_record_list_python] + ([batch_validation.native.walk] if NATIVE else [])
DECODERS = [decode_record_list_python] + (
    [consumer_module.native.decode_into] if consumer_module.NATIVE else []
)
BASE_OFFSET, LEADER_EPOCH = 1000, 3


def test_the_c_walk_is_built_here():
    """This machine has a compiler: the fuzz tests below compare both walks, not one with itself."""
    assert NATIVE, batch_validation.NATIVE_IMPORT_ERROR


# ---- generating batches ----

header_keys = st.one_of(st.text(max_size=6), st.binary(max_size=6).map(lambda b: b.decode("latin-1")))
new_records = st.lists(st.builds(
    NewRecord,
    value=st.one_of(st.none(), st.binary(max_size=40)),
    key=st.one_of(st.none(), st.binary(max_size=12)),
    timestamp_ms=st.integers(0, 5_000) | st.sampled_from([0, (1 << 63) - 1, 1_700_000_000_000]),
    headers=st.lists(st.tuples(header_keys, st.one_of(st.none(), st.binary(max_size=6))), max_size=2),
), min_size=1, max_size=6)
codec_ids = st.sampled_from(sorted(records_pb2.CompressionCodec.values()))

MUTATIONS = [
    "none",
    "record_count",
    "last_offset_delta",
    "first_timestamp",
    "max_timestamp",
    "flip_list_byte",
    "cut_list",
    "append_to_list",
    "flip_payload_byte",
    "codec_label",
    "unknown_codec",
    "bad_crc",
    "offset_delta",
    "raw_header_key",
]


@st.composite
def batches(draw) -> bytes:
    """Producer bytes: a valid batch, then at most one mutation; the CRC is recomputed unless the
    mutation is bad_crc, so the walk itself is what must catch the rest."""
    records = draw(new_records)
    first_ts = records[0].timestamp_ms
    fields = {
        "record_count": len(records),
        "last_offset_delta": len(records) - 1,
        "first_timestamp_ms": first_ts,
        "max_timestamp_ms": max(r.timestamp_ms for r in records),
        "codec": draw(codec_ids),
    }
    record_list = bytearray(encode_record_list(records, first_ts))
    mutation = draw(st.sampled_from(MUTATIONS))
    small = st.integers(-3, 3)
    if mutation == "record_count":
        fields["record_count"] += draw(small)
    elif mutation == "last_offset_delta":
        fields["last_offset_delta"] = max(
            0, fields["last_offset_delta"] + draw(small | st.just((1 << 24) - 1))
        )
    elif mutation == "first_timestamp":
        fields["first_timestamp_ms"] += draw(small | st.just(-(1 << 40)))
    elif mutation == "max_timestamp":
        fields["max_timestamp_ms"] += draw(small | st.just(-(1 << 40)))
    elif mutation == "flip_list_byte":
        at = draw(st.integers(0, len(record_list) - 1))
        record_list[at] ^= draw(st.integers(1, 255))
    elif mutation == "cut_list":
        del record_list[draw(st.integers(0, len(record_list) - 1)):]
    elif mutation == "append_to_list":
        record_list += draw(
            st.binary(min_size=1, max_size=12)
            | st.sampled_from(
                [
                    b"\x0a\x00",
                    b"\x0a\x02\x08\x07",
                    b"\x12\x00",
                    b"\x0b\x0c",
                    b"\x0a\x02\x08" + varint(len(records)),
                ]
            )
        )
    elif mutation == "offset_delta":
        index = draw(st.integers(0, len(records) - 1))
        rebuilt = records_pb2.RecordList.FromString(bytes(record_list))
        rebuilt.records[index].offset_delta = draw(st.integers(0, (1 << 32) - 1))
        record_list = bytearray(rebuilt.SerializeToString())
    elif mutation == "raw_header_key":
        key = draw(st.binary(min_size=1, max_size=4))
        header = b"\x0a" + varint(len(key)) + key
        body = b"\x08" + varint(len(records)) + b"\x22\x00" + b"\x2a" + varint(len(header)) + header
        record_list += b"\x0a" + varint(len(body)) + body
        fields["record_count"] += 1
        fields["last_offset_delta"] += 1
    payload = bytearray(codecs.compress(fields["codec"], bytes(record_list)))
    if mutation == "flip_payload_byte" and payload:
        payload[draw(st.integers(0, len(payload) - 1))] ^= draw(st.integers(1, 255))
    elif mutation == "codec_label":
        fields["codec"] = draw(codec_ids)
    elif mutation == "unknown_codec":
        fields["codec"] = draw(st.integers(5, 100))
    for name in ("first_timestamp_ms", "max_timestamp_ms"):  # int64 fields: keep them encodable
        fields[name] = max(-(1 << 63), min(fields[name], (1 << 63) - 1))
    head, body, tail = frame_batch_parts(
        bytes(payload), producer_id=0, producer_epoch=0, base_sequence=0, **fields
    )
    raw = head + body + tail
    if mutation == "bad_crc":
        crc_at = len(head) + len(body) + 1
        raw = raw[:crc_at] + bytes([raw[crc_at] ^ 0x40]) + raw[crc_at + 1:]
    return raw


def outcome(raw: bytes, walk) -> int:
    """ErrorCode.NONE when the batch is accepted, else the code it is refused with."""
    header = scan_batch(raw)
    try:
        validate_produced_batch(raw, header, BATCH_BYTES_MAX, walk=walk)
        check_scanned(header, raw)  # rule 1 on success: Log.append's first step, as the partition runs them
    except KanalError as exc:
        return exc.code
    return ErrorCode.NONE


def check_consumers_read_it_whole(raw: bytes) -> None:
    header = scan_batch(raw)
    entry = frame_entry(with_broker_suffix(raw, BASE_OFFSET, LEADER_EPOCH))
    for decoder in DECODERS:
        records, next_offset, _ = decode_fetched(("t", 0), entry, BASE_OFFSET, decoder)
        assert len(records) == header.record_count
        assert [r.offset for r in records] == list(
            range(BASE_OFFSET, BASE_OFFSET + header.last_offset_delta + 1)
        )
        assert next_offset == BASE_OFFSET + header.record_count
        assert all(0 <= r.timestamp_ms <= (1 << 63) - 1 for r in records)
        assert max(r.timestamp_ms for r in records) == header.max_timestamp_ms
        assert all(isinstance(k, str) for r in records for k, _ in r.headers)


# ---- the properties ----

@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_both_walks_agree_and_what_they_accept_consumers_read_whole(raw):
    results = {walk.__name__: outcome(raw, walk) for walk in WALKS}
    assert len(set(results.values())) == 1, results
    (code,) = set(results.values())
    if code == ErrorCode.NONE:
        check_consumers_read_it_whole(raw)
    else:
        assert code in DOCUMENTED, ErrorCode.Name(code)


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=80) | st.builds(lambda rs: encode_record_list(rs, 0), new_records),
       st.integers(1, 8), st.integers(-(1 << 63), (1 << 63) - 1) | st.integers(0, 10))
def test_both_walks_agree_on_any_bytes(data, record_count, first_timestamp_ms):
    """The walk alone, on arbitrary bytes and on valid RecordLists with arbitrary counts and times."""
    answers = []
    for walk in WALKS:
        try:
            answers.append(("accepted", walk(data, record_count, first_timestamp_ms)))
        except KanalError as exc:
            answers.append(("refused", exc.code))
    assert len(set(answers)) == 1, answers
    if answers[0][0] == "refused":
        assert answers[0][1] in (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP)


@pytest.fixture(scope="module")
def partition():
    """One leader partition over a real Log for every example (a Hypothesis example must not depend on a
    function-scoped fixture); each example checks what it changed."""
    with tempfile.TemporaryDirectory() as tmp:
        part = Partition("t", 0, Path(tmp) / "t-0", LogConfig(), 0, 1, FakeManager())
        part.become_leader(Assignment("id", (0,), (0,), 0, 1, 1), set(), 10_000)
        yield part
        part.close()


def stored_bytes(part: Partition) -> int:
    return sum(f.stat().st_size for f in part.directory.glob("*.log"))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches())
def test_a_partition_stores_what_is_accepted_and_nothing_of_what_is_refused(partition, raw):
    good = build_batch([NewRecord(b"good", timestamp_ms=1)])
    end, size = partition.log.log_end_offset, stored_bytes(partition)
    expected = outcome(raw, None)
    out = broker_pb2.ProduceResponse.PartitionResult()
    refused, _ = partition.append_as_leader([good, raw], 1, 0, out)
    assert out.batch_base_offsets[0] == end
    if expected == ErrorCode.NONE:
        assert refused is None
        assert partition.log.log_end_offset == end + 1 + scan_batch(raw).record_count
    else:
        assert refused is not None and refused.code == expected
        assert list(out.batch_base_offsets) == [end]
        assert partition.log.log_end_offset == end + 1
        assert stored_bytes(partition) == size + len(frame_entry(with_broker_suffix(good, end, 1)))
    # Alone, a refused batch fails the call and changes nothing at all.
    if expected != ErrorCode.NONE:
        end, size = partition.log.log_end_offset, stored_bytes(partition)
        with pytest.raises(KanalError) as refused_alone:
            partition.append_as_leader([raw], 1, 0, broker_pb2.ProduceResponse.PartitionResult())
        assert refused_alone.value.code == expected
        assert (partition.log.log_end_offset, stored_bytes(partition)) == (end, size)


# ---- the bound on decompression ----

# Snappy is left out: it expands at most ~20x, so no snappy batch under the limit can reach 64x.
@pytest.mark.parametrize("codec", [records_pb2.COMPRESSION_GZIP, records_pb2.COMPRESSION_LZ4,
                                   records_pb2.COMPRESSION_ZSTD])
def test_records_that_decompress_past_the_limit_are_refused(codec):
    """A small batch whose records expand past RECORDS_EXPANSION_MAX x the batch limit (a decompression
    bomb) is refused with MESSAGE_TOO_LARGE; one just under the limit's batch size is accepted."""
    batch_bytes_max = 4096
    raw = build_batch(
        [NewRecord(bytes(RECORDS_EXPANSION_MAX * batch_bytes_max), timestamp_ms=1)], codec=codec
    )
    assert len(raw) <= batch_bytes_max
    with pytest.raises(KanalError) as refused:
        validate_produced_batch(raw, scan_batch(raw), batch_bytes_max)
    assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE
    smaller = build_batch([NewRecord(bytes(batch_bytes_max), timestamp_ms=1)], codec=codec)
    validate_produced_batch(smaller, scan_batch(smaller), batch_bytes_max)
