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
| `mode` | PERMISSIVE | PERMISSIVE: offsets no copy holds become a row with `_corrupt` and `_lost` set and the scan goes on; FAILFAST: the query fails at the first offsets no copy holds, with file and offset |
| `bytesPerPartition` | 268435456 | segment bytes per Spark partition (whole files; a partition's files are split over several) |
| `minPartitions` | CPU count | the least number of Spark partitions, of even size (not under 1 MiB each); without it, 1 when `bytesPerPartition` is given |
| `remoteStorage` | | tiered storage: the cluster's remote storage URL (`s3://bucket/prefix`, `file:///dir`); each partition is read from its remote log's start, the remote segments below the committed copy's start through range reads (copy_plan.py), S3 credentials from the `AWS_*` variables; without it those offsets are lost rows (FAILFAST: an error) |
| `remoteStorageEndpoint` | | with `remoteStorage`: an S3-compatible store's endpoint (`http://host:port`) |
| `isolationLevel` | read_uncommitted | as Kafka's `isolation.level`: read_committed stops at the last stable offset and drops aborted transactions' records (transactions.py) |
| `valueFormat`, `keyFormat` | binary | `avro`: decoded through the schema registry into typed columns (below); with `valueSubject`, `valueSchemaId`, `schemaRegistry`, ... (decoding_options.py) |

Columns: columns.LOG_TABLE (topic, partition, offset, timestamp, key, value, headers, producer_id,
producer_epoch, leader_epoch, batch_offset, value_bytes, _corrupt, _lost). A narrower user schema builds
fewer columns. With `valueFormat=avro` (`keyFormat=avro`), `value` (`key`) is the record decoded with its
writer's schema (the id it carries) into the reader schema (the latest version of `<topic>-value`, or the
options'), typed as Spark's `from_avro` types it, with `value_schema_id` and `value_error` beside it
(decoded_columns.py, value_decoding.py; a value that does not decode is null with the reason in PERMISSIVE,
an error in FAILFAST); the schemas come from the metadata log under the path, or from `schemaRegistry`
(schema_lookup.py). Transaction markers (control records) are never rows. Records are the rows with `_corrupt` null; the others
(PERMISSIVE) are offsets no copy could give (`_lost` true). There is no DROPMALFORMED mode: rows are never dropped silently.

Notices are not rows (`count()` counts records and losses only). What costs no committed record is a
WARNING in the log of the process that found it: the planning notes (a divergent copy, copies of another
topic id, offsets not yet on every in-sync replica; copy_plan.plan_notices) on the driver when the read is
planned, and damage another copy made good in the task that read around it (the executor's log). `kanal
analytics` puts both in its `notices` table (analytics.py).

Records are decoded in C into Arrow buffers when the extension is built (log_columns.py). Spark's Python
API pushes no filter here (Spark 4.3 keeps a Python source's read plan made with pushed filters on the
relation and reuses it for later queries of the same DataFrame without them, spark/README.md); the JVM
table pushes them (`pushed`, pushdown.py).

In a session from `kanal_session`, `format("kanal-log")` is the kanal-spark jar's JVM table (jvm_jar.py,
spark/jvm/): it prunes columns and hands Spark this reader's Arrow batches without turning them into rows,
and plans and reads with this very class in worker processes (jvm_worker.py), so the rows are the same. This
class is then also `kanal-log-python`; without the jar (no javac) it is `kanal-log` itself.

From files, each partition is read from its current copy up to the committed end, with the other copies
standing in for damage (copy_plan.py, replica_history.py, range_reader.py). Batch-only: readStream and
writes are refused (batch_only.py).
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kanal.spark.batch_only import BatchOnly
from kanal.spark.columns import LOG_TABLE, Table
from kanal.spark.copy_plan import ReadPlan, data_plan, deal_items, pack_items, plan_notices, read_items
from kanal.spark.decoded_columns import BatchDecoder, check_types, decoded_schema, read_table, wanted_sides
from kanal.spark.fetch_reader import FetchPartition, fetch_partition, list_partitions
from kanal.spark.log_columns import new_buffer
from kanal.spark.log_rows import entry_rows
from kanal.spark.metadata_files import image_from_files
from kanal.spark.pushdown import Pushed
from kanal.spark.range_reader import Clipped, Notice, ReadItem, read_item
from kanal.spark.schema_lookup import plan_decodings
from kanal.spark.segment_files import GROUP_BYTES_MAX_DEFAULT, SPLIT_BYTES_MIN, RemoteStore
from kanal.spark.source_options import SourceOptions
from kanal.spark.transactions import AbortedFilter, TxnView, partition_index, visible_items
from kanal.spark.value_decoding import AvroDecoding

# Default segment bytes per Spark task of a kanal-log read from files (`bytesPerPartition`). Each task costs
# Spark ~0.1 s of JVM CPU and ~0.05 s in the Python worker whatever its size (docs/benchmarks.md, Spark):
# 16 MiB tasks (~140 K rows of 100 B) spent about as much on that as on their rows, and 3 M rows read at
# half the speed of 2 tasks. Cores stay busy through minPartitions (CPU count, even sizes), not small tasks.
LOG_TASK_BYTES_DEFAULT = 256 * 1024 * 1024
# Pieces per share when a read is cut into minPartitions even shares: a share is then within half a
# piece (1/16) of its size; more pieces would cost an offset-index lookup and a reopened file each.
SHARE_PIECES = 8
PIECE_BYTES_MIN = 64 * 1024

log = logging.getLogger(__name__)


class ItemGroup(InputPartition):
    """Parts of partitions (whole segment files, copy_plan.ReadItem) read by one Spark task; under
    read_committed, what each item needs to know of its partition's transactions; the schemas its decoded
    sides are read with (value_decoding.py), pinned when the read was planned."""

    def __init__(self, items: tuple[ReadItem, ...], views: tuple[TxnView, ...] | None = None) -> None:
        super().__init__(len(items))
        self.items = items
        self.views = views
        self.decodings: dict[str, AvroDecoding] = {}


class FetchGroup(InputPartition):
    """One partition read from a live cluster by one Spark task (and its decodings, as ItemGroup's)."""

    def __init__(self, part: FetchPartition) -> None:
        super().__init__(f"{part.topic}-{part.partition}")
        self.part = part
        self.decodings: dict[str, AvroDecoding] = {}


class KanalLogDataSource(BatchOnly, DataSource):
    @classmethod
    def name(cls) -> str:
        return "kanal-log"

    def schema(self) -> str | StructType:
        decoded = self.decoded_schema(self.options)
        return LOG_TABLE.ddl() if decoded is None else decoded

    def reader(self, schema: StructType) -> DataSourceReader:
        return self.open_reader(self.options, self.read_table(self.options, schema))

    @staticmethod
    def decoded_schema(options: Mapping[str, str]) -> StructType | None:
        """The table's schema when keys or values are decoded (decoded_columns.py), None for LOG_TABLE's:
        it depends on the reader schemas the registry holds now."""
        o = SourceOptions.parse(options)
        if o.decoding is None:
            return None
        return decoded_schema(plan_decodings(o.decoding, o.topics, o.path, writers=False))

    @staticmethod
    def read_table(options: Mapping[str, str], schema: StructType) -> Table:
        """The Table of the columns Spark asks for (the DataFrame's schema, or the JVM table's pruned one)."""
        return read_table(schema, SourceOptions.parse(options).decoding)

    @staticmethod
    def open_reader(options: Mapping[str, str], table: Table, pushed: Pushed | None = None) -> KanalLogReader:
        """The reader for these options and columns: Spark's Python API's, and the JVM worker's
        (jvm_worker.py), which also passes the pushed filters."""
        return KanalLogReader(SourceOptions.parse(options), table, pushed)


class KanalLogPythonSource(KanalLogDataSource):
    """The same source under its own name, for sessions that also have the JVM `kanal-log`
    (jvm_jar.py): what it reads is compared with the JVM table's in tests, and timed beside it."""

    @classmethod
    def name(cls) -> str:
        return "kanal-log-python"


def file_plan(root: Path, topics: frozenset[str] | None = None, include_internal: bool = False,
              remote: RemoteStore | None = None) -> ReadPlan:
    """The plan for reading the partition logs under `root`: the metadata image from the controllers'
    copies there (when any), then each partition's committed copy (copy_plan.py), after its remote
    segments when `remote` names the cluster's remote storage."""
    image, note = image_from_files(root)
    return data_plan(root, image, topics, include_internal, note, remote)


def plan_groups(
    plan: ReadPlan, bytes_per_partition: int, read_committed: bool = False, partitions_min: int = 1
) -> list[InputPartition]:
    """The plan cut into Spark partitions of at most bytes_per_partition bytes, and into a multiple of
    `partitions_min` of them of even size (not under SPLIT_BYTES_MIN each): 16 MiB of metadata log was one
    task, and 40 MiB three (16, 16 and 8), while local[2] had two cores."""
    size = bytes_per_partition or GROUP_BYTES_MAX_DEFAULT
    items = read_items(plan, size)
    groups = None
    if partitions_min > 1:
        total = sum(i.size_bytes for i in items)
        count = -(-total // size)
        count = -(-count // partitions_min) * partitions_min
        even = max(-(-total // count), SPLIT_BYTES_MIN) if count else size
        if even < size:
            # Pieces of a fraction of a share, dealt out evenly: a share's worth of whole files would
            # leave a remainder task (copy_plan.deal_items).
            items = read_items(plan, max(even // SHARE_PIECES, PIECE_BYTES_MIN))
            groups = deal_items(items, count)
    if groups is None:
        groups = pack_items(items, size)
    views = transaction_views(items) if read_committed else None
    # Spark needs at least one partition; an empty group yields no rows.
    return [ItemGroup(g, tuple(views[id(i)] for i in g) if views is not None else None)
            for g in groups] or [ItemGroup(())]


def transaction_views(items: list[ReadItem]) -> dict[int, TxnView]:
    """read_committed from files: each partition's transaction index from all its items (in offset
    order, on the driver), and what each item needs of it (transactions.py)."""
    by_partition: dict[tuple[str, int], list[ReadItem]] = {}
    for item in items:
        by_partition.setdefault((item.topic, item.partition), []).append(item)
    views: dict[int, TxnView] = {}  # by id(): the groups hold these very items
    for parts in by_partition.values():
        parts.sort(key=lambda i: (i.lo, i.start_position))
        index = partition_index(entry for item in parts for entry in read_item(item))
        for item in parts:
            views[id(item)] = TxnView.of(index, item.lo, item.hi)
    return views


class KanalLogReader(DataSourceReader):
    def __init__(self, options: SourceOptions, table: Table, pushed: Pushed | None = None) -> None:
        self.options = options
        self.table = table
        self.pushed = pushed or Pushed()  # from the JVM table (pushdown.py); none from Spark's Python API

    def partitions(self) -> list[InputPartition]:
        o = self.options
        image = None
        if o.bootstrap:
            parts: list[InputPartition] = [
                FetchGroup(p) for p in list_partitions(o.bootstrap, o.topics, o.include_internal, o.security)
                if self.pushed.wants(p.topic, p.partition)] or [ItemGroup(())]
        else:
            size = o.bytes_per_partition or LOG_TASK_BYTES_DEFAULT
            root = Path(o.path)
            image, note = image_from_files(root)
            plan = data_plan(root, image, o.topics, o.include_internal, note, o.remote_store)
            plan = self.pushed.prune(plan, offsets=not o.read_committed)
            for topic, partition, offset, text in plan_notices(plan):
                log.warning("kanal-log notice (%s): %s", _where(topic, partition, offset), text)
            parts = plan_groups(plan, size, o.read_committed, o.partitions_min)
        sides = wanted_sides(self.table, o.decoding)
        if o.decoding is not None and sides:
            decodings = plan_decodings(o.decoding, o.topics, o.path, image, sides=sides)
            check_types(self.table, decodings)
            for part in parts:
                part.decodings = decodings  # type: ignore[attr-defined]
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        decodings = getattr(partition, "decodings", None)
        if not decodings:
            if wanted_sides(self.table, self.options.decoding):
                # The C walk would build bytes where the table says a struct: never read on.
                raise ValueError("kanal-log: decoded columns asked of a partition planned without schemas")
            yield from self._read(partition, self.table)
            return
        decoder = BatchDecoder(self.table, decodings, self.options.fail_fast)
        for batch in self._read(partition, decoder.raw_table):
            yield decoder.batch(batch)

    def _read(self, partition: InputPartition, table: Table) -> Iterator[pa.RecordBatch]:
        buf, add = new_buffer(table)
        fail_fast = self.options.fail_fast
        if isinstance(partition, FetchGroup):
            part = partition.part
            aborted = AbortedFilter() if self.options.read_committed else None
            entries = visible_items(
                fetch_partition(self.options.bootstrap, part, self.options.security, aborted), aborted
            )
            yield from entry_rows(buf, part.topic, part.partition, f"fetch://{part.topic}-{part.partition}",
                                  entries, fail_fast, add)
        else:
            views = partition.views  # type: ignore[attr-defined]
            for i, item in enumerate(partition.items):  # type: ignore[attr-defined]
                view = views[i] if views is not None else None
                filt = AbortedFilter(view.aborted) if view is not None else None
                items = self.pushed.batches(visible_items(
                    records_and_losses(item, read_item(item)), filt, view.lso if view is not None else None))
                yield from entry_rows(buf, item.topic, item.partition, item.topic, items, fail_fast, add)
        last = buf.flush()
        if last is not None:
            yield last


def _where(topic: str | None, partition: int | None, offset: int) -> str:
    return "the data directory" if topic is None else f"{topic}-{partition} at offset {offset}"


def records_and_losses(item: ReadItem, got: Iterable[Clipped | Notice]) -> Iterator[Clipped | Notice]:
    """A read of `item` without its notices (lost=False): the item's planning notes were logged by the
    driver when it planned the read; damage another copy made good is logged here, in the task that found
    it. Rows are records and losses only (module docstring)."""
    for g in got:
        if isinstance(g, Notice) and not g.lost:
            if (g.offset, g.text) not in item.notes:
                log.warning("kanal-log notice (%s): %s", _where(item.topic, item.partition, g.offset), g.text)
            continue
        yield g
