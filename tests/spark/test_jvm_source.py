"""`kanal-log` and `kanal-metadata` as the kanal-spark jar's JVM tables (spark/jvm/, jvm_jar.py) against the
Python data sources they front (`kanal-log-python`, `kanal-metadata-python`): the same rows, whatever the
columns a query prunes to, the user schema, the damage and the mode; errors from the Python reader reach
the query with their message, and the worker that raised one serves the next read. (kanal-metadata's
stream, which the JVM table hands to the Python source, is tests/spark/test_metadata_stream.py's.)"""

from __future__ import annotations

import pytest

from kanal.v1.batch import NewRecord

from .cluster_files import failover_cluster, metadata_batches, write_metadata_log
from .log_files import segment_paths, write_log

T0 = 1_700_000_070_000


@pytest.fixture(autouse=True)
def jvm_table(spark):
    # The suite's set-up builds the jar (deploy/bootstrap.sh, or kanal_session on first use with javac);
    # a session without it is a failure here, not a skip, so a broken build cannot pass for a tested path.
    from kanal.spark.session import jvm_log_source

    if not jvm_log_source(spark):
        pytest.fail("the session has no JVM kanal-log: the kanal-spark jar was not built")


def _batches(partition: int, count: int) -> list[list[NewRecord]]:
    return [[NewRecord(value=None if i == 3 else f"v{partition}-{b}-{i}".encode() * (1 + i % 4),
                       key=None if i % 5 == 0 else f"k{i}".encode(), timestamp_ms=T0 + b * 10 + i,
                       headers=[("h", b"x"), ("n", None)] if i == 1 else ())
             for i in range(12)] for b in range(count)]


@pytest.fixture()
def files(tmp_path):
    """Two topics over three partitions, and one flipped byte in `events-1` (a notice row, a record gap)."""
    write_log(tmp_path / "events-0", _batches(0, 25), producer_id=7)
    write_log(tmp_path / "events-1", _batches(1, 25), leader_epoch=3)
    write_log(tmp_path / "audit-0", _batches(2, 9))
    damaged = segment_paths(tmp_path / "events-1")[1]
    data = bytearray(damaged.read_bytes())
    data[200] ^= 0xFF
    damaged.write_bytes(bytes(data))
    return tmp_path


def _key(row) -> tuple:
    return tuple("" if v is None else str(v) for v in row)


def _rows(df) -> list:
    return sorted(df.collect(), key=_key)


def _both(spark, root, schema: str | None = None, source: str = "kanal-log", **options):
    out = []
    for fmt in (source, f"{source}-python"):
        reader = spark.read.format(fmt).options(**options)
        out.append((reader.schema(schema) if schema else reader).load(str(root)))
    return out


def test_every_column_is_the_python_sources(spark, files):
    jvm, python = _both(spark, files)
    rows = _rows(jvm)
    assert rows == _rows(python)
    assert len([r for r in rows if r["_corrupt"] is not None]) == 1
    records = [r for r in rows if r["_corrupt"] is None]
    assert {r["topic"] for r in records} == {"events", "audit"}
    assert any(r["value"] is None for r in records) and any(r["key"] is None for r in records)
    assert any(r["headers"] == [("h", b"x"), ("n", None)] for r in records)


@pytest.mark.parametrize("columns", [
    ("offset",), ("headers", "partition"), ("value", "key", "_corrupt"), ("timestamp", "_lost", "topic"),
    ("producer_id", "producer_epoch", "leader_epoch", "batch_offset", "value_bytes"),
])
def test_a_pruned_scan_gives_the_same_rows(spark, files, columns):
    jvm, python = _both(spark, files)
    assert _rows(jvm.select(*columns)) == _rows(python.select(*columns))


def test_counts_filters_and_aggregates_match(spark, files):
    jvm, python = _both(spark, files)
    assert jvm.count() == python.count()
    assert jvm.where("partition = 0").count() == (25 + 9) * 12  # events-0 and audit-0: no damage
    where = "topic = 'events' and partition = 1 and offset >= 100 and value is not null"
    assert _rows(jvm.where(where)) == _rows(python.where(where))
    by = ("topic", "partition")
    assert _rows(jvm.groupBy(*by).count()) == _rows(python.groupBy(*by).count())
    sums = ("count(*)", "sum(value_bytes)", "max(timestamp)", "sum(size(headers))", "count(_corrupt)")
    assert jvm.selectExpr(*sums).collect() == python.selectExpr(*sums).collect()


def test_a_user_schema_reads_those_columns(spark, files):
    schema = "topic string, partition int, offset bigint, timestamp timestamp"
    jvm, python = _both(spark, files, schema)
    assert jvm.columns == ["topic", "partition", "offset", "timestamp"]
    assert _rows(jvm) == _rows(python)


@pytest.mark.parametrize("schema,message", [
    ("offset int", "offset is bigint, not int"),
    ("nope string", "unknown columns"),
])
def test_a_user_schema_that_does_not_fit_is_refused(spark, files, schema, message):
    with pytest.raises(Exception, match=message):
        spark.read.format("kanal-log").schema(schema).load(str(files)).collect()


def test_reader_errors_keep_their_message_and_the_worker_serves_the_next_read(spark, files):
    with pytest.raises(Exception, match="unknown options"):
        spark.read.format("kanal-log").option("colour", "blue").load(str(files)).count()
    with pytest.raises(Exception, match=r"events-1/\d+\.log: byte \d+, offset \d+"):
        spark.read.format("kanal-log").option("mode", "FAILFAST").load(str(files)).collect()
    # The workers that answered with an error are in step: the same session reads on.
    jvm, python = _both(spark, files)
    assert _rows(jvm) == _rows(python)


def test_the_metadata_log_is_the_python_sources_whole_and_pruned(spark, tmp_path):
    write_metadata_log(tmp_path / "controller-0" / "__cluster_metadata-0", metadata_batches())
    log = tmp_path / "controller-0" / "__cluster_metadata-0"
    damaged = segment_paths(log)[-1]
    data = bytearray(damaged.read_bytes())
    data[-20] ^= 0xFF  # inside the last batch: the ones before it are read
    damaged.write_bytes(bytes(data))
    jvm, python = _both(spark, tmp_path, source="kanal-metadata")
    rows = _rows(jvm)
    assert rows == _rows(python) and len(rows) > 10
    assert len([r for r in rows if r["_corrupt"] is not None]) == 1
    for columns in (("offset",), ("isr", "replicas", "record_type"), ("record_json", "record", "time")):
        assert _rows(jvm.select(*columns)) == _rows(python.select(*columns))
    assert jvm.count() == python.count() == len(rows)


@pytest.mark.parametrize("where", [
    "topic = 'audit'", "partition in (0, 5)", "topic = 'events' and partition = 1",
    "offset >= 150 and offset < 170", "offset = 7 or offset = 250", "partition = 0 and offset > 290",
    f"timestamp >= timestamp_millis({T0 + 20 * 10 + 6})", f"timestamp > timestamp_millis({T0 + 240})",
    "offset in (3, 4, 200)",
])
def test_pushed_filters_return_the_rows_of_the_unpushed_read(spark, files, where):
    jvm, python = _both(spark, files)
    assert _rows(jvm.where(where)) == _rows(python.where(where))
    assert jvm.count() == python.count()  # the same DataFrame without the filter: every row again


def test_filters_are_pushed_and_narrow_what_is_read(spark, files):
    """FAILFAST stops at offsets no copy holds among those read: with the damaged partition, or its
    damaged segment, filtered out before the read, the query succeeds."""
    df = spark.read.format("kanal-log").option("mode", "FAILFAST").load(str(files))
    plan = df.where("partition = 0 and offset >= 10")._jdf.queryExecution().executedPlan().toString()
    assert "PushedFilters: [" in plan and "EqualTo(partition,0)" in plan, plan
    assert df.where("partition = 0").count() == (25 + 9) * 12
    assert df.where("topic = 'events' and partition = 1 and offset < 12").count() == 12
    with pytest.raises(Exception, match=r"events-1/\d+\.log: byte \d+"):
        df.where("topic = 'events' and partition = 1").count()


@pytest.mark.parametrize("where", [
    None, "topic = 'orders'", "topic = 'orders' and offset >= 40", "offset < 10 and partition = 0",
    f"timestamp >= timestamp_millis({T0})",
])
def test_a_failed_over_clusters_files_read_the_committed_records_pushed_or_not(spark, tmp_path, where):
    """Three brokers' copies after a leader died holding unreplicated records and a topic was re-created:
    the JVM table, with or without pushed filters, reads what the Python source reads, and orders-0 is
    exactly its committed records once each."""
    cluster = failover_cluster(tmp_path)
    jvm, python = _both(spark, cluster.root)
    if where is not None:
        jvm, python = jvm.where(where), python.where(where)
    rows = _rows(jvm)
    assert rows == _rows(python)
    orders = {r["offset"]: r["value"] for r in rows if r["topic"] == "orders" and r["_corrupt"] is None}
    expected = {o: v for o, v in cluster.committed.items()
                if where is None or "offset >= 40" not in where or o >= 40}
    if where is None or "orders" in where:
        assert orders == expected
        assert len([r for r in rows if r["topic"] == "orders" and r["_corrupt"] is None]) == len(expected)
