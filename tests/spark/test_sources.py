"""kanal-log and kanal-metadata on files written by the storage package: every record comes back with its
fields, a narrower schema builds fewer columns, and damage is reported with its file and offset while
the rest is read (or the scan stops, in FAILFAST mode)."""

from __future__ import annotations

import itertools

import pytest

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.metadata.log_codec import encode_metadata_batch
from kanal.spark.segment_reader import SegmentDamage, read_segment
from kanal.v1 import metadata_pb2
from kanal.v1.batch import NewRecord

from .log_files import segment_paths, write_log

pytestmark = pytest.mark.spark

T0 = 1_700_000_040_000
RECORDS_PER_BATCH = 20
BATCHES = 30


def _batches(partition: int) -> list[list[NewRecord]]:
    return [
        [
            NewRecord(
                value=f"v{partition}-{b}-{i}".encode() * 5,
                key=f"k{i}".encode(),
                timestamp_ms=T0 + b * 10 + i,
                headers=[("source", b"test")] if i == 0 else (),
            )
            for i in range(RECORDS_PER_BATCH)
        ]
        for b in range(BATCHES)
    ]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    for p in range(2):
        write_log(root / "broker-0" / f"events-{p}", _batches(p), producer_id=11 + p, leader_epoch=3)
    # A second replica of partition 0 that lags: the reader must take the longer copy, once.
    write_log(root / "broker-1" / "events-0", _batches(0)[:5], producer_id=11, leader_epoch=3)
    return root


def test_reads_every_record_once_with_its_fields(spark, data_dir):
    df = spark.read.format("kanal-log").load(str(data_dir))
    assert df.count() == 2 * BATCHES * RECORDS_PER_BATCH
    assert df.select("partition", "offset").distinct().count() == df.count()
    row = df.where("partition = 1 and offset = 20").collect()[0]
    assert row["topic"] == "events" and row["key"] == b"k0" and row["value"] == b"v1-1-0" * 5
    assert row["headers"][0]["key"] == "source" and bytes(row["headers"][0]["value"]) == b"test"
    assert row["producer_id"] == 12 and row["leader_epoch"] == 3 and row["batch_offset"] == 20
    assert row["timestamp"].timestamp() * 1000 == T0 + 10
    assert row["_corrupt"] is None
    # Several segment files per partition (small segments), spread over several Spark partitions.
    assert len(segment_paths(data_dir / "broker-0" / "events-0")) > 2
    small = spark.read.format("kanal-log").option("bytesPerPartition", "20000").load(str(data_dir))
    assert small.rdd.getNumPartitions() > 2 and small.count() == df.count()


def test_narrow_schema_and_topic_filter(spark, data_dir):
    df = (
        spark.read.format("kanal-log")
        .schema("offset bigint, topic string")
        .option("topics", "events")
        .load(str(data_dir))
    )
    assert df.columns == ["offset", "topic"]
    assert df.count() == 2 * BATCHES * RECORDS_PER_BATCH
    assert spark.read.format("kanal-log").option("topics", "other").load(str(data_dir)).count() == 0


def test_unknown_option_or_mode_is_refused(spark, data_dir):
    with pytest.raises(Exception, match="unknown options"):
        spark.read.format("kanal-log").option("mdoe", "FAILFAST").load(str(data_dir)).count()
    with pytest.raises(Exception, match="never dropped silently"):
        spark.read.format("kanal-log").option("mode", "DROPMALFORMED").load(str(data_dir)).count()


def test_options_are_checked_before_anything_is_read():
    """Pure: SourceOptions refuses what does not apply (the metadata source reads files only and has no
    transactions), before Spark plans a read."""
    from kanal.spark.source_options import SourceOptions

    with pytest.raises(ValueError, match="no transactions"):
        SourceOptions.parse({"path": "/x", "isolationLevel": "read_committed"}, files_only=True)
    with pytest.raises(ValueError, match="files only"):
        SourceOptions.parse({"bootstrap": "127.0.0.1:1"}, files_only=True)
    assert SourceOptions.parse({"path": "/x", "isolationLevel": "READ_COMMITTED"}).read_committed
    assert SourceOptions.parse({"path": "/x", "minPartitions": "3"}).partitions_min == 3
    assert SourceOptions.parse({"path": "/x", "bytesPerPartition": "9000"}).partitions_min == 1
    with pytest.raises(ValueError, match="minPartitions"):
        SourceOptions.parse({"path": "/x", "minPartitions": "two"})


def test_a_log_under_the_task_size_is_cut_into_even_shares_for_every_core(tmp_path):
    """Pure: one 3 MiB segment (under the 16 MiB task size) becomes minPartitions even parts, cut at its
    offset index, covering every offset once; with bytesPerPartition given it stays whole."""
    from kanal.broker.storage.log_config import LogConfig
    from kanal.spark.log_source import file_plan, plan_groups

    one_segment = LogConfig(segment_bytes_max=1 << 24, batch_bytes_max=1 << 16)
    batches = [[NewRecord(value=b"x" * 1000, timestamp_ms=T0 + b) for _ in range(30)] for b in range(100)]
    write_log(tmp_path / "mid-0", batches, config=one_segment)
    plan = file_plan(tmp_path)
    groups = plan_groups(plan, 0, partitions_min=2)
    sizes = [sum(i.size_bytes for i in g.items) for g in groups]  # type: ignore[attr-defined]
    assert len(groups) == 2 and max(sizes) - min(sizes) < max(sizes) // 10
    ranges = sorted((i.lo, min(i.hi, i.bounds[-1])) for g in groups for i in g.items)  # type: ignore[attr-defined]
    assert ranges[0][0] == 0 and ranges[-1][1] == 3000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert len(plan_groups(plan, 1 << 30, partitions_min=1)) == 1


@pytest.fixture()
def damaged(tmp_path):
    """Partition 0 with a torn tail on its first segment and a flipped byte inside its last segment."""
    directory = tmp_path / "events-0"
    write_log(directory, _batches(0), producer_id=11)
    segments = segment_paths(directory)
    first, last = segments[0], segments[-1]
    first_entries = [e for e in read_segment(str(first), 0)]
    torn_at = first_entries[-1].position + 10  # cut inside the last entry of the first segment
    first.write_bytes(first.read_bytes()[:torn_at])
    last_base = int(last.name[:-4])
    last_entries = [e for e in read_segment(str(last), last_base)]
    flipped = last_entries[1].position + 40
    data = bytearray(last.read_bytes())
    data[flipped] ^= 0xFF
    last.write_bytes(bytes(data))
    lost = RECORDS_PER_BATCH * (1 + len(last_entries) - 1)
    return tmp_path, first, first_entries[-1], last, last_entries[1], lost


def test_damage_is_reported_with_file_and_offset_and_the_rest_is_read(spark, damaged):
    root, first, torn_entry, last, flipped_entry, lost = damaged
    df = spark.read.format("kanal-log").load(str(root))
    corrupt = sorted((r["offset"], r["_corrupt"]) for r in df.where("_corrupt is not null").collect())
    assert [o for o, _ in corrupt] == [torn_entry.base_offset, flipped_entry.base_offset]
    assert str(first) in corrupt[0][1] and f"byte {torn_entry.position}" in corrupt[0][1]
    assert str(last) in corrupt[1][1] and f"byte {flipped_entry.position}" in corrupt[1][1]
    good = df.where("_corrupt is null")
    assert good.count() == BATCHES * RECORDS_PER_BATCH - lost
    # Nothing after a damaged entry of a file is returned; the segments between are read whole.
    assert (
        good.where(f"offset >= {torn_entry.base_offset} and offset < {torn_entry.last_offset + 1}").count()
        == 0
    )


def test_failfast_stops_with_file_and_offset(spark, damaged):
    root, _first, torn_entry, *_ = damaged
    with pytest.raises(Exception, match=f"offset {torn_entry.base_offset}"):
        spark.read.format("kanal-log").option("mode", "FAILFAST").load(str(root)).collect()


def test_segment_reader_reports_out_of_order_batch(tmp_path):
    write_log(tmp_path / "t-0", _batches(0)[:3])
    path = segment_paths(tmp_path / "t-0")[0]
    items = list(read_segment(str(path), 1000))  # a segment claiming a base past its batches
    assert isinstance(items[0], SegmentDamage) and "out of order" in items[0].reason


def _metadata_log(directory):
    log = Log.open(directory, LogConfig(segment_bytes_max=4096, batch_bytes_max=2048, retention_ms=None))
    stamp = {"time_ms": T0, "principal": "alice", "request_id": "r1"}
    batches = [
        (
            1,
            [
                metadata_pb2.MetadataRecord(
                    register_broker=metadata_pb2.RegisterBrokerRecord(
                        broker_id=0, incarnation_id="i0", broker_epoch=0, endpoint="127.0.0.1:1", fenced=True
                    ),
                    **stamp,
                )
            ],
        ),
        (
            1,
            [
                metadata_pb2.MetadataRecord(
                    topic=metadata_pb2.TopicRecord(name="t", topic_id="tid"), **stamp
                ),
                metadata_pb2.MetadataRecord(
                    partition=metadata_pb2.PartitionRecord(
                        topic_id="tid", partition_id=0, replicas=[0], isr=[0], leader=-1
                    ),
                    **stamp,
                ),
            ],
        ),
    ]
    for i in range(40):
        batches.append((1, [metadata_pb2.MetadataRecord(config=metadata_pb2.ConfigRecord(
            resource_type=metadata_pb2.CONFIG_RESOURCE_TOPIC, resource_name="t", key="retention.ms",
            value=str(1000 + i)), **stamp)]))
    for epoch, records in batches:
        log.append(encode_metadata_batch(metadata_pb2.MetadataBatch(controller_epoch=epoch, records=records)),
                   leader_epoch=epoch, now_ms=T0)
    log.close()
    return 2 + 1 + 40


def test_metadata_source_rows(spark, tmp_path):
    count = _metadata_log(tmp_path / "controller-0" / "__cluster_metadata-0")
    df = spark.read.format("kanal-metadata").load(str(tmp_path))
    rows = df.orderBy("offset").collect()
    assert len(rows) == count and [r["offset"] for r in rows] == list(range(count))
    assert rows[0]["record_type"] == "register_broker" and rows[0]["fenced"] is True
    assert rows[2]["record_type"] == "partition" and rows[2]["batch_offset"] == 1 and rows[2]["isr"] == [0]
    assert rows[3]["config_key"] == "retention.ms" and rows[3]["config_value"] == "1000"
    assert (
        rows[3]["topic"] == "t"
        and rows[3]["principal"] == "alice"
        and '"retention.ms"' in rows[3]["record_json"]
    )
    assert metadata_pb2.MetadataRecord.FromString(rows[1]["record"]).topic.name == "t"


def test_an_unreachable_bootstrap_is_one_clear_line_per_endpoint():
    """`kanal analytics --bootstrap` with no broker answering: a one-line error naming each endpoint and
    why, not gRPC's multi-line exception repr."""
    from kanal.deploy.local_cluster import free_ports
    from kanal.spark.fetch_reader import cluster_metadata
    from kanal.v1.error import ErrorCode, KanalError

    endpoint = f"127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    with pytest.raises(KanalError) as err:
        cluster_metadata(f"{endpoint}, ")
    message = str(err.value)
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE
    assert f"{endpoint} (UNAVAILABLE: " in message and "\n" not in message


def test_a_large_partition_is_split_over_tasks_with_the_same_rows(spark, data_dir):
    from kanal.spark.copy_plan import pack_items, read_items
    from kanal.spark.log_source import file_plan
    from kanal.spark.segment_files import GROUP_BYTES_MAX_DEFAULT

    assert GROUP_BYTES_MAX_DEFAULT <= 16 * 1024 * 1024
    items = [i for i in read_items(file_plan(data_dir), 8000) if (i.topic, i.partition) == ("events", 0)]
    assert len(pack_items(items, 8000)) > 2  # one partition, several Spark partitions (whole segment files)
    cols = ["topic", "partition", "offset", "key", "value", "timestamp", "batch_offset"]
    whole = spark.read.format("kanal-log").option("bytesPerPartition", str(1 << 30)).load(str(data_dir))
    split = spark.read.format("kanal-log").option("bytesPerPartition", "8000").load(str(data_dir))
    assert whole.rdd.getNumPartitions() == 1 and split.rdd.getNumPartitions() > 4
    assert sorted(split.select(*cols).collect()) == sorted(whole.select(*cols).collect())


def test_one_large_segment_is_split_at_its_index_with_the_same_rows(spark, tmp_path):
    from kanal.broker.storage.log_config import LogConfig

    one_segment = LogConfig(segment_bytes_max=1 << 24, batch_bytes_max=1 << 16)
    batches = [[NewRecord(value=b"x" * 200, key=f"k{i}".encode(), timestamp_ms=T0 + b) for i in range(20)]
               for b in range(400)]
    write_log(tmp_path / "big-0", batches, config=one_segment)
    assert len(segment_paths(tmp_path / "big-0")) == 1
    cols = ["offset", "key", "value", "timestamp", "batch_offset"]
    whole = spark.read.format("kanal-log").option("bytesPerPartition", str(1 << 30)).load(str(tmp_path))
    split = spark.read.format("kanal-log").option("bytesPerPartition", "100000").load(str(tmp_path))
    assert whole.rdd.getNumPartitions() == 1 and split.rdd.getNumPartitions() > 10
    rows = sorted(split.select(*cols).collect())
    assert [r["offset"] for r in rows] == list(range(400 * 20))
    assert rows == sorted(whole.select(*cols).collect())
