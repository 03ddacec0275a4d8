"""The `kanal-metadata` Spark data source: the metadata log (`__cluster_metadata-0`) as one row per record.

    spark.dataSource.register(KanalMetadataDataSource)
    df = spark.read.format("kanal-metadata").load("/path/to/data-dir")

`load` takes a controller's data dir, a whole cluster dir (every controller's copy: the one with the
latest epoch and longest log is read, the others stand in where it is damaged; copy_plan.metadata_plan)
or the `__cluster_metadata-0` directory itself, or a copy of any of them. Options: `mode`
(PERMISSIVE / FAILFAST, as kanal-log), `bytesPerPartition` and `minPartitions` (as kanal-log).
Columns: columns.METADATA_TABLE: offset,
batch_offset, controller_epoch, time, record_type, principal, request_id, typed fields (broker_id,
broker_epoch, fenced, topic, topic_id, partition, leader, isr, replicas, cause, reason, config_*),
record_json, record (the serialized MetadataRecord), _corrupt and _lost (as kanal-log). Also a stream
(`spark.readStream`, metadata_stream.py); never written to. The batch reader is metadata_reader.py.

In a session from `kanal_session`, `format("kanal-metadata")` is the kanal-spark jar's JVM table, which
plans and reads with KanalMetadataReader in worker processes and hands its stream to this class, then
also registered as `kanal-metadata-python` (log_source.py says how; jvm_jar.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from kanal.spark.batch_only import BatchOnly
from kanal.spark.columns import METADATA_TABLE, Table
from kanal.spark.metadata_reader import KanalMetadataReader
from kanal.spark.metadata_stream import KanalMetadataStreamReader, StreamOptions
from kanal.spark.pushdown import Pushed
from kanal.spark.source_options import SourceOptions


class KanalMetadataDataSource(BatchOnly, DataSource):
    KIND = "read-only"

    @classmethod
    def name(cls) -> str:
        return "kanal-metadata"

    def schema(self) -> str:
        return METADATA_TABLE.ddl()

    def reader(self, schema: StructType) -> DataSourceReader:
        return self.open_reader(self.options, METADATA_TABLE.select(schema.fieldNames()))

    @staticmethod
    def open_reader(options: Mapping[str, str], table: Table, pushed: Pushed | None = None
                    ) -> KanalMetadataReader:
        """The reader for these options and columns (as kanal-log's: the JVM worker's too)."""
        return KanalMetadataReader(SourceOptions.parse(options, files_only=True), table, pushed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The metadata log as a stream (metadata_stream.py); writes stay refused (BatchOnly)."""
        stream, rest = StreamOptions.split(dict(self.options))
        options = SourceOptions.parse(rest, files_only=True)
        return KanalMetadataStreamReader(options, stream, METADATA_TABLE.select(schema.fieldNames()))


class KanalMetadataPythonSource(KanalMetadataDataSource):
    """The same source under its own name, for sessions that also have the JVM `kanal-metadata`
    (jvm_jar.py): its stream is what the JVM table's readStream runs, and its rows are compared with the
    JVM table's in tests."""

    @classmethod
    def name(cls) -> str:
        return "kanal-metadata-python"
