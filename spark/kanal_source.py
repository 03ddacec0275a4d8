"""The `kanal` data source: Structured Streaming in and out, and the same over fixed offsets in batch.

    spark.readStream.format("kanal")   # KanalStreamReader (stream_source.py)
    spark.read.format("kanal")         # KanalBatchReader: startingOffsets..endingOffsets
    df.writeStream.format("kanal")     # KanalStreamWriter (sink.py): exactly-once per micro-batch
    df.write.format("kanal")           # KanalBatchWriter: idempotent producer, at-least-once on task retries

It reads and writes through brokers (kanal's clients), unlike `kanal-log` / `kanal-metadata`, which read
files (or Fetch) in batch only. Options: stream_options.py.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from kanal.spark.sink import KanalBatchWriter, KanalStreamWriter, check_sink_schema
from kanal.spark.stream_options import ReadOptions, WriteOptions
from kanal.spark.stream_source import STREAM_SCHEMA, KanalBatchReader, KanalStreamReader


class KanalDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kanal"

    def schema(self) -> str:
        return STREAM_SCHEMA

    def reader(self, schema: StructType) -> KanalBatchReader:
        return KanalBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> KanalStreamReader:
        return KanalStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> KanalBatchWriter:
        options = WriteOptions.parse(self.options)
        check_sink_schema(schema, options)
        return KanalBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KanalStreamWriter:
        options = WriteOptions.parse(self.options)
        check_sink_schema(schema, options)
        return KanalStreamWriter(options)
