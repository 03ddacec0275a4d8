"""The `kanal-metadata` Spark data source: the metadata log (`__cluster_metadata-0`) as one row per record.

    spark.dataSource.register(KanalMetadataDataSource)
    df = spark.read.format("kanal-metadata").load("/path/to/data-dir")

`load` takes a controller's data dir, a whole cluster dir (the controller with the longest metadata log
is read) or the `__cluster_metadata-0` directory itself, or a copy of any of them. Options: `mode`
(PERMISSIVE / FAILFAST, as kanal-log) and `bytesPerPartition`. Columns: columns.METADATA_TABLE: offset,
batch_offset, controller_epoch, time, record_type, principal, request_id, typed fields (broker_id,
broker_epoch, fenced, topic, topic_id, partition, leader, isr, replicas, cause, reason, config_*),
record_json, record (the serialized MetadataRecord) and _corrupt.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kanal.spark.columns import METADATA_TABLE, Table
from kanal.spark.log_rows import RowBuffer
from kanal.spark.log_source import SegmentGroup
from kanal.spark.metadata_rows import add_metadata_damage, add_metadata_entry
from kanal.spark.segment_files import GROUP_BYTES_MAX_DEFAULT, group_segments, metadata_copy
from kanal.spark.segment_reader import SegmentDamage, StoredEntry, read_segment
from kanal.spark.source_options import SourceOptions
from kanal.v1.error import KanalError


class KanalMetadataDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kanal-metadata"

    def schema(self) -> str:
        return METADATA_TABLE.ddl()

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options, files_only=True)
        return KanalMetadataReader(options, METADATA_TABLE.select(schema.fieldNames()))


class KanalMetadataReader(DataSourceReader):
    def __init__(self, options: SourceOptions, table: Table) -> None:
        self.options = options
        self.table = table

    def partitions(self) -> list[InputPartition]:
        copy = metadata_copy(Path(self.options.path))
        groups = group_segments(list(copy.segments), self.options.bytes_per_partition or GROUP_BYTES_MAX_DEFAULT)
        return [SegmentGroup(g) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        buf = RowBuffer(self.table)
        for seg in partition.segments:  # type: ignore[attr-defined]
            for item in read_segment(seg.path, seg.base_offset):
                if isinstance(item, StoredEntry):
                    try:
                        add_metadata_entry(buf, item)
                    except KanalError as exc:
                        item = SegmentDamage(seg.path, item.position, item.base_offset, len(item.batch) + 8,
                                             f"batch at offset {item.base_offset} does not decode: {exc.message}")
                if isinstance(item, SegmentDamage):
                    if self.options.fail_fast:
                        raise item.error()
                    add_metadata_damage(buf, item)
                if buf.full():
                    out = buf.flush()
                    if out is not None:
                        yield out
        last = buf.flush()
        if last is not None:
            yield last
