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
| `mode` | PERMISSIVE | PERMISSIVE: damage and notices become rows with `_corrupt` set and the scan goes on; FAILFAST: the query fails at the first offsets no copy holds, with file and offset |
| `bytesPerPartition` | 16777216 | segment bytes per Spark partition (whole files; a partition's files are split over several) |

Columns: columns.LOG_TABLE (topic, partition, offset, timestamp, key, value, headers, producer_id,
producer_epoch, leader_epoch, batch_offset, value_bytes, _corrupt, _lost). A narrower user schema builds
fewer columns. Records are the rows with `_corrupt` null; the others say what the reader found (`_lost`:
whether offsets are missing). There is no DROPMALFORMED mode: rows are never dropped silently.

Filters on topic, partition, offset and timestamp are pushed down to skip reading (log_pushdown.py; Spark
still evaluates each). Records are decoded in C into Arrow buffers when the extension is built
(log_columns.py).

From files, each partition is read from its current copy up to the committed end, with the other copies
standing in for damage (copy_plan.py, replica_history.py, range_reader.py). Batch-only: readStream and
writes are refused (batch_only.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from kanal.spark.batch_only import BatchOnly
from kanal.spark.columns import LOG_TABLE, Table
from kanal.spark.copy_plan import ReadPlan, data_plan, pack_items, read_items
from kanal.spark.fetch_reader import FetchPartition, fetch_partition, list_partitions
from kanal.spark.log_columns import new_buffer
from kanal.spark.log_pushdown import ScanBounds, scan_bounds, skip_older
from kanal.spark.log_rows import entry_rows
from kanal.spark.metadata_files import image_from_files
from kanal.spark.range_reader import ReadItem, read_item
from kanal.spark.segment_files import GROUP_BYTES_MAX_DEFAULT
from kanal.spark.source_options import SourceOptions


class ItemGroup(InputPartition):
    """Parts of partitions (whole segment files, copy_plan.ReadItem) read by one Spark task."""

    def __init__(self, items: tuple[ReadItem, ...]) -> None:
        super().__init__(len(items))
        self.items = items


class FetchGroup(InputPartition):
    """One partition read from a live cluster by one Spark task."""

    def __init__(self, part: FetchPartition) -> None:
        super().__init__(f"{part.topic}-{part.partition}")
        self.part = part


class KanalLogDataSource(BatchOnly, DataSource):
    @classmethod
    def name(cls) -> str:
        return "kanal-log"

    def schema(self) -> str:
        return LOG_TABLE.ddl()

    def reader(self, schema: StructType) -> DataSourceReader:
        return KanalLogReader(SourceOptions.parse(self.options), LOG_TABLE.select(schema.fieldNames()))


def file_plan(root: Path, topics: frozenset[str] | None = None, include_internal: bool = False) -> ReadPlan:
    """The plan for reading the partition logs under `root`: the metadata image from the controllers'
    copies there (when any), then each partition's committed copy (copy_plan.py)."""
    image, note = image_from_files(root)
    return data_plan(root, image, topics, include_internal, note)


def plan_groups(plan: ReadPlan, bytes_per_partition: int, bounds: ScanBounds = ScanBounds()) -> list[InputPartition]:
    size = bytes_per_partition or GROUP_BYTES_MAX_DEFAULT
    items = [n for n in (bounds.narrow(i) for i in read_items(plan, size)) if n is not None]
    groups = pack_items(items, size)
    # Spark needs at least one partition; an empty group yields no rows.
    return [ItemGroup(g) for g in groups] or [ItemGroup(())]


class _PushFilters:
    """`reader.pushFilters` as Spark calls it. Spark refuses a reader that overrides pushFilters when
    `spark.sql.python.filterPushdown.enabled` is false (so that a source relying on it is not silently
    left unfiltered); this reader hands every filter back to Spark and uses them only to skip reading
    (log_pushdown.py), so without pushdown it is merely slower. Showing Spark the base method keeps such
    sessions working; with pushdown on, Spark calls this object."""

    def __init__(self, reader: KanalLogReader) -> None:
        self.reader = reader
        self.__func__ = DataSourceReader.pushFilters  # what Spark's check compares with

    def __call__(self, filters: list[Filter]) -> list[Filter]:
        self.reader.bounds = scan_bounds(filters)
        return filters  # all of them: Spark evaluates each on the rows read


class KanalLogReader(DataSourceReader):
    def __init__(self, options: SourceOptions, table: Table) -> None:
        self.options = options
        self.table = table
        self.bounds = ScanBounds()

    @property  # type: ignore[override]
    def pushFilters(self) -> _PushFilters:
        return _PushFilters(self)

    def partitions(self) -> list[InputPartition]:
        o = self.options
        if o.bootstrap:
            parts: list[InputPartition] = [
                FetchGroup(p) for p in list_partitions(o.bootstrap, o.topics, o.include_internal, o.security)
                if self.bounds.keeps(p.topic, p.partition)]
            return parts or [ItemGroup(())]
        return plan_groups(file_plan(Path(o.path), o.topics, o.include_internal), o.bytes_per_partition,
                           self.bounds)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        buf, add = new_buffer(self.table)
        fail_fast = self.options.fail_fast
        newer = self.bounds.timestamp_min_ms
        if isinstance(partition, FetchGroup):
            part = partition.part
            entries = fetch_partition(self.options.bootstrap, part, self.options.security)
            yield from entry_rows(buf, part.topic, part.partition, f"fetch://{part.topic}-{part.partition}",
                                  skip_older(entries, newer), fail_fast, add)
        else:
            for item in partition.items:  # type: ignore[attr-defined]
                yield from entry_rows(buf, item.topic, item.partition, item.topic,
                                      skip_older(read_item(item), newer), fail_fast, add)
        last = buf.flush()
        if last is not None:
            yield last
