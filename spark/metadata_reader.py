"""KanalMetadataReader: the batch read of `kanal-metadata` (metadata_source.py), and the read of one task's
group of segment files that the stream (metadata_stream.py) shares.

Planning is the committed-copy plan of the metadata log (copy_plan.metadata_plan: the longest current copy,
the others standing in where it is damaged), cut into groups of whole segment files (log_source.plan_groups);
a task reads its group into columns.METADATA_TABLE's rows (metadata_columns.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from kanal.spark.columns import Table
from kanal.spark.copy_plan import metadata_plan
from kanal.spark.log_rows import entry_rows
from kanal.spark.log_source import plan_groups
from kanal.spark.metadata_columns import new_metadata_buffer
from kanal.spark.pushdown import Pushed
from kanal.spark.range_reader import read_item
from kanal.spark.segment_files import METADATA_TOPIC
from kanal.spark.source_options import SourceOptions


class KanalMetadataReader(DataSourceReader):
    def __init__(self, options: SourceOptions, table: Table, pushed: Pushed | None = None) -> None:
        self.options = options
        self.table = table
        self.pushed = pushed or Pushed()  # offsets, from the JVM table (pushdown.py)

    def partitions(self) -> list[InputPartition]:
        o = self.options
        plan = self.pushed.prune(metadata_plan(Path(o.path)))
        return plan_groups(plan, o.bytes_per_partition, partitions_min=o.partitions_min)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_metadata_group(partition, self.table, self.options.fail_fast)


def read_metadata_group(partition: InputPartition, table: Table, fail_fast: bool) -> Iterator[pa.RecordBatch]:
    """One task's rows: its items (whole segment files, each clipped to its [lo, hi)) as Arrow batches."""
    buf, add = new_metadata_buffer(table)
    for item in partition.items:  # type: ignore[attr-defined]
        yield from entry_rows(buf, None, None, METADATA_TOPIC, read_item(item), fail_fast, add)
    last = buf.flush()
    if last is not None:
        yield last
