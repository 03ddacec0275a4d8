"""The `kanal-log` Spark data source: partition logs as rows of records.

    spark.dataSource.register(KanalLogDataSource)
    df = spark.read.format("kanal-log").load("/path/to/data-dir")              # files
    df = spark.read.format("kanal-log").option("bootstrap", "host:9092").load()  # a live cluster

Options (all optional):

| option | default | what |
|---|---|---|
| `path` (the load argument) | | a data dir, a cluster dir or a copy (segment_files.py) |
| `bootstrap` | | read a live cluster with Fetch instead of files (`host:port,...`) |
| `topics` | all | comma-separated topic names |
| `includeInternal` | false | with no `topics`: also read `__consumer_offsets` and other `__` topics |
| `mode` | PERMISSIVE | PERMISSIVE: damage becomes a row with `_corrupt` set and the scan goes on; FAILFAST: the query fails at the first damage with its file and offset |
| `bytesPerPartition` | 134217728 | segment bytes per Spark partition (whole files) |

Columns: columns.LOG_TABLE (topic, partition, offset, timestamp, key, value, headers, producer_id,
producer_epoch, leader_epoch, batch_offset, value_bytes, _corrupt). A narrower user schema builds fewer
columns. There is no DROPMALFORMED mode: rows are never dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kanal.spark.columns import LOG_TABLE, Table
from kanal.spark.fetch_reader import FetchPartition, fetch_partition, list_partitions
from kanal.spark.log_rows import RowBuffer, entry_rows
from kanal.spark.segment_files import GROUP_BYTES_MAX_DEFAULT, SegmentFile, data_partitions, group_segments
from kanal.spark.segment_reader import read_segment
from kanal.spark.source_options import SourceOptions


class SegmentGroup(InputPartition):
    """Whole segment files read by one Spark task."""

    def __init__(self, segments: tuple[SegmentFile, ...]) -> None:
        super().__init__(len(segments))
        self.segments = segments


class FetchGroup(InputPartition):
    """One partition read from a live cluster by one Spark task."""

    def __init__(self, part: FetchPartition) -> None:
        super().__init__(f"{part.topic}-{part.partition}")
        self.part = part


class KanalLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kanal-log"

    def schema(self) -> str:
        return LOG_TABLE.ddl()

    def reader(self, schema: StructType) -> DataSourceReader:
        return KanalLogReader(SourceOptions.parse(self.options), LOG_TABLE.select(schema.fieldNames()))


class KanalLogReader(DataSourceReader):
    def __init__(self, options: SourceOptions, table: Table) -> None:
        self.options = options
        self.table = table

    def partitions(self) -> list[InputPartition]:
        o = self.options
        if o.bootstrap:
            parts: list[InputPartition] = [
                FetchGroup(p) for p in list_partitions(o.bootstrap, o.topics, o.include_internal)]
            return parts or [SegmentGroup(())]
        copies = data_partitions(Path(o.path), o.topics)
        if o.topics is None and not o.include_internal:
            copies = [c for c in copies if not c.topic.startswith("__")]
        segments = [seg for c in copies for seg in c.segments]
        groups = group_segments(segments, o.bytes_per_partition or GROUP_BYTES_MAX_DEFAULT)
        # Spark needs at least one partition; an empty group yields no rows.
        return [SegmentGroup(g) for g in groups] or [SegmentGroup(())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        buf = RowBuffer(self.table)
        fail_fast = self.options.fail_fast
        if isinstance(partition, FetchGroup):
            part = partition.part
            yield from entry_rows(buf, part.topic, part.partition, f"fetch://{part.topic}-{part.partition}",
                                  fetch_partition(self.options.bootstrap, part), fail_fast)
        else:
            for seg in partition.segments:  # type: ignore[attr-defined]
                yield from entry_rows(buf, seg.topic, seg.partition, seg.path,
                                      read_segment(seg.path, seg.base_offset), fail_fast)
        last = buf.flush()
        if last is not None:
            yield last
