"""The C column walk (spark/_record_columns.c) against the protobuf decoding it replaces: the same rows,
whatever the records, codecs, clipping and columns (no Spark session needed); and `kanal-log` with
filters and options against a plain Python reading of the same files."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kanal.spark.columns import LOG_TABLE
from kanal.spark.copy_plan import data_copies
from kanal.spark.log_columns import NATIVE, NATIVE_IMPORT_ERROR, ColumnBuffer, add_entry_columns, new_buffer
from kanal.spark.log_rows import RowBuffer, add_entry
from kanal.spark.segment_reader import StoredEntry, read_segment
from kanal.v1 import records_pb2
from kanal.v1.batch import (
    BROKER_SUFFIX_BYTES,
    NewRecord,
    build_batch,
    decode_records,
    parse_batch,
    scan_batch,
    with_broker_suffix,
)
from kanal.v1.error import ErrorCode, KanalError

from .log_files import write_log


@pytest.fixture(autouse=True)
def c_walk_built():
    # The suite's set-up builds the C walk (deploy/bootstrap.sh installs a compiler); a missing one is a
    # failure here, not a skip, so a broken build cannot pass for a tested fast path.
    if not NATIVE:
        pytest.fail(f"the C column walk is not built: {NATIVE_IMPORT_ERROR}")


T0 = 1_700_000_050_000

header_st = st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4)))
record_st = st.builds(
    lambda key, value, delta, headers: (key, value, delta, tuple(headers)),
    st.one_of(st.none(), st.binary(max_size=12)), st.one_of(st.none(), st.binary(max_size=40)),
    st.integers(0, 10_000), st.lists(header_st, max_size=3))
CODECS = (records_pb2.COMPRESSION_NONE, records_pb2.COMPRESSION_GZIP, records_pb2.COMPRESSION_ZSTD)


def _entry(records, base_offset: int, codec: int, leader_epoch: int = 4) -> StoredEntry:
    produced = build_batch(
        [NewRecord(value=v, key=k, timestamp_ms=T0 + d, headers=h) for k, v, d, h in records],
        codec=codec,
        producer_id=9,
        producer_epoch=2,
    )
    stored = memoryview(with_broker_suffix(produced, base_offset, leader_epoch))
    return StoredEntry(
        0, base_offset, base_offset + len(records) - 1, leader_epoch, stored, scan_batch(stored)
    )


def _both(entries, names, lo, hi):
    table = LOG_TABLE.select(names)
    fast, slow = ColumnBuffer(table), RowBuffer(table)
    for e in entries:
        add_entry_columns(fast, "tópic", 3, e, lo, hi)
        add_entry(slow, "tópic", 3, e, lo, hi)
    return fast.flush(), slow.flush()


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(record_st, min_size=1, max_size=8), min_size=1, max_size=4),
       codec=st.sampled_from(CODECS), lo=st.integers(0, 30), span=st.integers(0, 40),
       names=st.lists(st.sampled_from(LOG_TABLE.names()), min_size=1, unique=True))
def test_c_columns_equal_protobuf_decoding(batches, codec, lo, span, names):
    entries, base = [], 0
    for records in batches:
        entries.append(_entry(records, base, codec))
        base += len(records)
    for columns in (list(LOG_TABLE.names()), names):
        fast, slow = _both(entries, columns, lo, lo + span)
        if slow is None:
            assert fast is None
        else:
            assert fast.schema == slow.schema and fast.to_pylist() == slow.to_pylist()


def test_a_batch_that_does_not_walk_is_refused_and_leaves_the_columns_whole():
    good = _entry([(b"k", b"v", 0, (("h", None),))] * 3, 0, records_pb2.COMPRESSION_NONE)
    buf = ColumnBuffer(LOG_TABLE)
    add_entry_columns(buf, "t", 0, good)
    header = good.header
    payload = bytes(good.batch[header.records_start:header.records_end])
    for bad, count, why in (
        (payload[:-1], 3, "overruns"),
        (payload + b"\x0a\x02\x60\x00", 4, "unknown field"),
    ):
        with pytest.raises(KanalError) as err:
            buf.columns.add(bad, count, 3, T0, 0, 1 << 62, b"t", 0, 0, 0, 0)
        assert err.value.code == ErrorCode.CORRUPT_MESSAGE and why in err.value.message
    with pytest.raises(KanalError, match="says 4 records but holds 3"):
        buf.columns.add(payload, 4, 3, T0, 0, 1 << 62, b"t", 0, 0, 0, 0)
    bad_key = payload.replace(b"\x0a\x01h", b"\x0a\x01\xff")  # a header key that is not UTF-8
    with pytest.raises(KanalError, match="UTF-8"):
        buf.columns.add(bad_key, 3, 3, T0, 0, 1 << 62, b"t", 0, 0, 0, 0)
    assert buf.columns.rows == 3
    add_entry_columns(buf, "t", 0, _entry([(None, b"w", 1, ())], 3, records_pb2.COMPRESSION_NONE))
    rows = buf.flush().to_pylist()
    assert [r["offset"] for r in rows] == [0, 1, 2, 3] and rows[3]["value"] == b"w" and rows[3]["key"] is None
    assert BROKER_SUFFIX_BYTES == 19  # the stored batches above carry the suffix the walk reads offsets from


def test_notice_rows_keep_their_place_between_records():
    buf, add = new_buffer(LOG_TABLE)
    add(buf, "t", 0, _entry([(b"a", b"1", 0, ())] * 2, 0, records_pb2.COMPRESSION_NONE))
    buf.add_nulls_except(1, {"topic": ["t"], "partition": [0], "offset": [2], "_corrupt": ["damage"],
                             "_lost": [True]})
    add(buf, "t", 0, _entry([(b"b", b"2", 0, ())], 3, records_pb2.COMPRESSION_NONE))
    rows = buf.flush().to_pylist()
    assert [(r["offset"], r["_corrupt"]) for r in rows] == [(0, None), (1, None), (2, "damage"), (3, None)]


# ---- the source against a plain reading ----

@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("plain-rows")
    for topic in ("a", "b"):
        for p in range(2):
            write_log(
                root / "broker-0" / f"{topic}-{p}",
                [
                    [
                        NewRecord(
                            value=f"{topic}{p}-{b}-{i}".encode(),
                            key=str(i).encode(),
                            timestamp_ms=T0 + b * 3_600_000 * 12 + i,
                            headers=[("n", b"1")] if i == 1 else (),
                        )
                        for i in range(10)
                    ]
                    for b in range(12)
                ],
                leader_epoch=1,
            )
    return root


def plain_rows(root):
    """Every record under `root` with the columns compared, by a plain loop over the current copies."""
    out = []
    for copy in data_copies(root):
        for seg in copy.segments:
            for e in read_segment(seg.path, seg.base_offset):
                batch = parse_batch(e.batch, verify_crc=False)
                for r in decode_records(batch):
                    out.append((copy.topic, copy.partition, e.base_offset + r.offset_delta,
                                batch.first_timestamp_ms + r.timestamp_delta_ms, r.key, r.value))
    return sorted(out)


@pytest.mark.spark
def test_filters_and_options_return_exactly_the_plain_rows(spark, log_dir):
    plain = plain_rows(log_dir)
    cols = "topic, partition, offset, timestamp, key, value"
    ms = lambda ts: int(ts.timestamp() * 1000)
    cases = {
        "true": lambda r: True,
        "topic = 'b' and partition = 1": lambda r: r[0] == "b" and r[1] == 1,
        "partition in (0) and offset >= 35 and offset < 70": lambda r: r[1] == 0 and 35 <= r[2] < 70,
        f"timestamp >= timestamp_millis({T0 + 3_600_000 * 12 * 9})": lambda r: (
            r[3] >= T0 + 3_600_000 * 12 * 9
        ),
        "offset = 5": lambda r: r[2] == 5,
    }
    for n, (where, keep) in enumerate(cases.items()):
        options = {"bytesPerPartition": "600"} if n % 2 else {}  # whole files per task, or parts of files
        df = spark.read.format("kanal-log").options(**options).load(str(log_dir)).where(where)
        got = sorted(
            (r[0], r[1], r[2], ms(r[3]), r[4], r[5]) for r in df.selectExpr(*cols.split(", ")).collect()
        )
        assert got == [r for r in plain if keep(r)], (where, options)
    narrow = spark.read.format("kanal-log").schema("offset bigint, partition int, topic string") \
        .option("topics", "a").load(str(log_dir)).where("offset < 3")
    assert sorted(tuple(r) for r in narrow.collect()) == sorted((r[2], r[1], r[0]) for r in plain
                                                                  if r[0] == "a" and r[2] < 3)
    # Querying one DataFrame with a filter and then without it reads everything the second time (a source
    # that pushed the filter into its read plan would have Spark reuse that plan: log_source.py).
    df = spark.read.format("kanal-log").load(str(log_dir))
    assert df.where("partition = 1 and offset = 20").count() == 2 and df.count() == len(plain)
