"""Spark readers' throughput: rows/s of `kanal-log` over 10 million 100-byte records and of `kanal-metadata`
over 1 million metadata records on local[2], beside a plain single-process Python loop over the same files
doing the same decoding. Prints one JSON object.

    python benchmarks/spark_bench.py [--records 10000000] [--metadata-records 1000000] [--master local[2]]
                                     [--rounds 5]

The files are written directly with the storage package (batches of 1,000 records, 4 partitions, 256 MiB
segments), not through a cluster. Both timings include Spark's planning and task start-up; the Spark
session itself is started before the clock runs.

`kanal-log` with every column is the full schema written to Spark's `noop` sink, its benchmarking sink: every
column of every row is built and handed over as a Spark row, and nothing else is done with it. Since the
JVM table prunes columns (spark/jvm_jar.py), a `count()` builds no column and times only the walk
(`spark_log_count`). Timed beside them: one aggregate that reads each of the 14 columns on every row
(`spark_log_all_columns_aggregate`, ALL_COLUMNS: the sink's rows plus the query's own work), the full schema
of `kanal-log-python` (PySpark's Python data source API, which builds every column whatever the query) to
the same sink, and the narrow schema (topic, partition, offset, timestamp: the columns a count per partition
and minute needs). `kanal-metadata` likewise: its full schema to the noop sink, from the JVM table and from
`kanal-metadata-python`. Rounds alternate the order of the runs; the goals (PERFORMANCE.md) are the medians of
the per-round ratios: `kanal-log` with every column >= 2x the plain loop, `kanal-metadata` >= 1x its loop.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.metadata.log_codec import encode_metadata_batch
from kanal.spark.copy_plan import data_copies, metadata_copy
from kanal.spark.segment_reader import StoredEntry, read_segment
from kanal.v1 import metadata_pb2
from kanal.v1.batch import NewRecord, build_batch, decode_records, parse_batch

BATCH_RECORDS = 1000
PARTITIONS = 4
RECORD_VALUE_BYTES = 100
T0 = 1_700_000_000_000
# The columns a count per partition and minute needs.
NARROW = "topic string, partition int, offset bigint, timestamp timestamp"
# One pass that reads every column of every row (a `count()` reads none where columns are pruned); the
# first value is the row count the run is checked against.
ALL_COLUMNS = ("count(*)", "sum(length(key))", "sum(length(value))", "sum(size(headers))", "max(topic)",
               "max(partition)", "max(offset)", "max(timestamp)", "max(producer_id)",
               "max(producer_epoch)", "max(leader_epoch)", "max(batch_offset)", "sum(value_bytes)",
               "count(_corrupt)", "count(_lost)")
CONFIG = LogConfig(segment_bytes_max=256 * 1024 * 1024, batch_bytes_max=4 * 1024 * 1024, retention_ms=None,
                   timestamp_difference_ms_max=None)


def write_data(root: Path, records: int) -> None:
    batches = records // BATCH_RECORDS
    # A handful of distinct batches, appended round-robin: building 10,000 batches would time the encoder.
    templates = [build_batch([NewRecord(value=bytes([65 + (b + i) % 26]) * RECORD_VALUE_BYTES,
                                        key=f"key-{(b * BATCH_RECORDS + i) % 10_000}".encode(),
                                        timestamp_ms=T0 + b * 1000 + i) for i in range(BATCH_RECORDS)],
                             producer_id=1 + b)
                 for b in range(8)]
    logs = [Log.open(root / "broker-0" / f"bench-{p}", CONFIG) for p in range(PARTITIONS)]
    for b in range(batches):
        logs[b % PARTITIONS].append(templates[b % len(templates)], leader_epoch=0, now_ms=T0)
    for log in logs:
        log.close()


def write_metadata(root: Path, records: int) -> None:
    log = Log.open(root / "controller-0" / "__cluster_metadata-0", CONFIG)
    batch = metadata_pb2.MetadataBatch(controller_epoch=1, records=[
        metadata_pb2.MetadataRecord(time_ms=T0 + i, principal="bench", request_id=f"r{i // 10}",
                                    config=metadata_pb2.ConfigRecord(
                                        resource_type=metadata_pb2.CONFIG_RESOURCE_BROKER, resource_name="",
                                        key="retention.ms", value=str(i)))
        for i in range(BATCH_RECORDS)])
    producer_bytes = encode_metadata_batch(batch)
    for _ in range(records // BATCH_RECORDS):
        log.append(producer_bytes, leader_epoch=1, now_ms=T0)
    log.close()


def plain_log_loop(root: Path) -> int:
    """What one Python process does over the same files: walk, check, decode, touch each record's fields."""
    count = 0
    for copy in data_copies(root):
        for seg in copy.segments:
            for item in read_segment(seg.path, seg.base_offset):
                if isinstance(item, StoredEntry):
                    batch = parse_batch(item.batch, verify_crc=False)
                    for r in decode_records(batch):
                        _ = (
                            item.base_offset + r.offset_delta,
                            r.key,
                            r.value,
                            batch.first_timestamp_ms + r.timestamp_delta_ms,
                        )
                        count += 1
    return count


def plain_metadata_loop(root: Path) -> int:
    count = 0
    for seg in metadata_copy(root).segments:
        for item in read_segment(seg.path, seg.base_offset):
            if isinstance(item, StoredEntry):
                batch = parse_batch(item.batch, verify_crc=False)
                for r in decode_records(batch):
                    record = metadata_pb2.MetadataRecord.FromString(r.value)
                    _ = (record.time_ms, record.principal, record.WhichOneof("record"))
                    count += 1
    return count


def timed(fn) -> tuple[int, float]:
    start = time.perf_counter()
    n = fn()
    return n, time.perf_counter() - start


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--metadata-records", type=int, default=1_000_000)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kanal-spark-bench-"))
    # Apart: a data dir with a metadata log beside it is planned against that log's topics (copy_plan),
    # and the bench's metadata log holds config records only.
    data_root, metadata_root = root / "data", root / "metadata"
    try:
        t = time.perf_counter()
        write_data(data_root, args.records)
        write_metadata(metadata_root, args.metadata_records)
        write_s = time.perf_counter() - t
        data_bytes = sum(s.size_bytes for c in data_copies(data_root) for s in c.segments)

        from kanal.spark.log_columns import NATIVE
        from kanal.spark.session import jvm_log_source, kanal_session

        spark = kanal_session(args.master, "kanal-bench")
        jvm = jvm_log_source(spark)

        def load(fmt: str, where: Path, schema: str | None = None):
            reader = spark.read.format(fmt)
            return (reader.schema(schema) if schema else reader).load(str(where))

        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        def all_columns(fmt: str, where: Path = data_root) -> int:
            """Every row with every column into the noop sink; the rows it got, counted on the way in."""
            seen = Observation()
            load(fmt, where).observe(seen, F.count(F.lit(1)).alias("rows")).write.format("noop").mode(
                "overwrite").save()
            return seen.get["rows"]

        runs = {
            "spark_log_all_columns": lambda: all_columns("kanal-log"),
            "spark_log_all_columns_aggregate": lambda: load("kanal-log", data_root).selectExpr(
                *ALL_COLUMNS).collect()[0][0],
            "spark_log_count": lambda: load("kanal-log", data_root).count(),
            "spark_log_python_all_columns": lambda: all_columns("kanal-log-python"),
            "spark_log_narrow_schema": lambda: load("kanal-log", data_root, NARROW).count(),
            "spark_metadata": lambda: all_columns("kanal-metadata", metadata_root),
            "spark_metadata_python": lambda: all_columns("kanal-metadata-python", metadata_root),
            "plain_log_loop": lambda: plain_log_loop(data_root),
            "plain_metadata_loop": lambda: plain_metadata_loop(metadata_root),
        }
        expected = {"spark_metadata": args.metadata_records, "spark_metadata_python": args.metadata_records,
                    "plain_metadata_loop": args.metadata_records}
        rounds = []
        for r in range(args.rounds):
            # Alternate which side goes first, so neither always meets the machine's load of the moment.
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            result = {}
            for name in order:
                n, seconds = timed(runs[name])
                if n != expected.get(name, args.records):
                    raise SystemExit(f"{name} counted {n} rows, expected {expected.get(name, args.records)}")
                result[name] = round(n / seconds)
            result["log_ratio"] = round(result["spark_log_all_columns"] / result["plain_log_loop"], 2)
            result["log_python_ratio"] = round(
                result["spark_log_python_all_columns"] / result["plain_log_loop"], 2)
            result["metadata_ratio"] = round(result["spark_metadata"] / result["plain_metadata_loop"], 2)
            result["metadata_python_ratio"] = round(
                result["spark_metadata_python"] / result["plain_metadata_loop"], 2)
            rounds.append(result)
            print(json.dumps({"round": r, "rows_per_s": result}), file=sys.stderr)
        spark.stop()
        medians = {k: median([r[k] for r in rounds]) for k in rounds[0]}
        print(json.dumps({
            "master": args.master, "native_columns": NATIVE, "jvm_log_source": jvm, "rounds": rounds,
            "files_written_s": round(write_s, 1),
            "records": args.records, "metadata_records": args.metadata_records,
            "record_value_bytes": RECORD_VALUE_BYTES, "data_bytes": data_bytes,
            "median_rows_per_s": medians,
            "goals": {"log_all_columns_vs_loop": {"median_ratio": medians["log_ratio"], "goal": 2.0,
                                                  "met": medians["log_ratio"] >= 2.0},
                      "metadata_vs_loop": {"median_ratio": medians["metadata_ratio"], "goal": 1.0,
                                           "met": medians["metadata_ratio"] >= 1.0}},
        }, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
