"""The analytics job on partition logs written with the storage package, including a `__consumer_offsets`
partition in groups.proto's format: counts, bytes, records per minute, key skew, producer ids, and lag over
time (committed offsets against the log end offsets) come out exactly."""

from __future__ import annotations

import pytest

from kanal.spark.analytics import run_analytics
from kanal.v1 import groups_pb2
from kanal.v1.batch import NewRecord

from .log_files import LARGE_BATCHES, write_log

pytestmark = pytest.mark.spark

T0 = 1_700_000_040_000  # a minute boundary
MINUTE_MS = 60_000


def _key(i: int) -> bytes:
    return b"hot" if i % 5 < 2 else f"k{i}".encode()


def _commit(group: str, topic: str, partition: int, offset: int, at_ms: int) -> NewRecord:
    key = groups_pb2.GroupRecordKey(offset=groups_pb2.OffsetCommitKey(group_id=group, topic=topic,
                                                                        partition=partition))
    value = groups_pb2.OffsetCommitValue(offset=offset, leader_epoch=-1, commit_timestamp_ms=at_ms,
                                         generation_id=1, member_id="m1")
    return NewRecord(value=value.SerializeToString(), key=key.SerializeToString(), timestamp_ms=at_ms)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("analytics")
    # clicks-0: minute 0 gets offsets 0..99 from producer 7, minute 1 gets 100..149 from producer 8.
    minute0 = [NewRecord(value=b"x" * 100, key=_key(i), timestamp_ms=T0 + i * 100) for i in range(100)]
    minute1 = [
        NewRecord(value=b"y" * 100, key=_key(i), timestamp_ms=T0 + MINUTE_MS + i) for i in range(100, 150)
    ]
    write_log(root / "broker-0" / "clicks-0", [minute0[:50], minute0[50:], minute1], producer_ids=[7, 7, 8],
              config=LARGE_BATCHES)
    # clicks-1: 30 records without keys in minute 2.
    write_log(
        root / "broker-1" / "clicks-1",
        [[NewRecord(value=b"z" * 10, timestamp_ms=T0 + 2 * MINUTE_MS + i) for i in range(30)]],
        producer_id=7,
    )
    # __consumer_offsets-7: group g1 commits 40 in minute 0 and 120 in minute 1; group metadata and a
    # tombstone for another group's offset, which lag must not count.
    meta_key = groups_pb2.GroupRecordKey(group=groups_pb2.GroupMetadataKey(group_id="g1")).SerializeToString()
    gone = groups_pb2.GroupRecordKey(
        offset=groups_pb2.OffsetCommitKey(group_id="g2", topic="clicks", partition=1)
    )
    write_log(
        root / "broker-0" / "__consumer_offsets-7",
        [
            [
                NewRecord(
                    value=groups_pb2.GroupMetadataValue(protocol_type="consumer").SerializeToString(),
                    key=meta_key,
                    timestamp_ms=T0 + 1000,
                )
            ],
            [_commit("g1", "clicks", 0, 40, T0 + 30_000)],
            [_commit("g1", "clicks", 0, 120, T0 + MINUTE_MS + 30_000)],
            [NewRecord(value=None, key=gone.SerializeToString(), timestamp_ms=T0 + MINUTE_MS + 40_000)],
        ],
    )
    return root


@pytest.fixture(scope="module")
def result(spark, data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("analytics-out")
    return run_analytics(spark, data_dir=data_root, out_dir=out, hot_keys_max=3)


def rows(df, *cols):
    return [tuple(r[c] for c in cols) for r in df.collect()]


def test_partition_stats(result):
    stats = rows(result.tables["partition_stats"], "topic", "partition", "records", "bytes", "first_offset",
                 "last_offset", "producer_ids")
    key_bytes = sum(len(_key(i)) for i in range(150))
    assert stats == [("clicks", 0, 150, 150 * 100 + key_bytes, 0, 149, 2), ("clicks", 1, 30, 300, 0, 29, 1)]


def test_records_per_minute(result):
    per_minute = [(t, p, int(m.timestamp() * 1000) - T0, n) for t, p, m, n in
                  rows(result.tables["throughput"], "topic", "partition", "minute", "records")]
    assert per_minute == [
        ("clicks", 0, 0, 100),
        ("clicks", 0, MINUTE_MS, 50),
        ("clicks", 1, 2 * MINUTE_MS, 30),
    ]


def test_key_skew_and_hot_keys(result):
    [(records, distinct, null_keys, hottest)] = rows(result.tables["topic_keys"], "records", "distinct_keys",
                                                     "null_keys", "hottest_key_count")
    assert (records, distinct, null_keys, hottest) == (180, 91, 30, 60)
    hot = rows(result.tables["hot_keys"], "key", "count", "rank")
    assert hot[0] == (b"hot", 60, 1) and len(hot) == 3


def test_producers(result):
    assert rows(
        result.tables["producers"], "partition", "producer_id", "records", "first_offset", "last_offset"
    ) == [(0, 7, 100, 0, 99), (0, 8, 50, 100, 149), (1, 7, 30, 0, 29)]


def test_lag_over_time_and_now(result):
    lag = [
        (g, p, int(m.timestamp() * 1000) - T0, end, committed, lag)
        for g, p, m, end, committed, lag in rows(
            result.tables["lag"], "group", "partition", "minute", "log_end_offset", "committed_offset", "lag"
        )
    ]
    assert lag == [("g1", 0, 0, 100, 40, 60), ("g1", 0, MINUTE_MS, 150, 120, 30)]
    assert rows(
        result.tables["group_lag"], "group", "topic", "partition", "committed_offset", "log_end_offset", "lag"
    ) == [("g1", "clicks", 0, 120, 150, 30)]
    assert result.damage == []
    assert (result.out_dir / "lag").is_dir() and list((result.out_dir / "lag").glob("*.parquet"))


def test_analytics_command(spark, data_root, tmp_path, capsys):
    from kanal.spark import analytics_cli

    code = analytics_cli.main(["--data-dir", str(data_root), "--out", str(tmp_path), "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 topics, 2 partitions, 180 records" in out and "group g1 on clicks-0: lag 30" in out
    report = (tmp_path / "report.html").read_text()
    assert report.count("<svg") >= 3 and "g1 clicks-0" in report and "<script" not in report
    assert list((tmp_path / "throughput").glob("*.parquet"))
