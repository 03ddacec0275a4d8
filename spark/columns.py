"""Columns: each Spark table kanal's sources produce, declared once as (name, Spark type, Arrow type).

A Python data source that yields Arrow record batches must match the Spark schema exactly (Spark's Arrow
form: timestamps in microseconds, UTC; list items named "element"), so both schemas come from this one
list instead of being written twice.

A user may pass a narrower schema (`spark.read.format("kanal-log").schema("topic string, offset
long")`): the Python data source API hands the reader that schema and has no column pruning of its own, so
`select` keeps the named columns (in the user's order) and the reader builds only those. That is the way to
make a scan cheaper: `value` and `headers` cost the most to build.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")


def _list(item: pa.DataType) -> pa.DataType:
    return pa.list_(pa.field("element", item))


HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    spark_type: str
    arrow_type: pa.DataType
    doc: str


@dataclass(frozen=True, slots=True)
class Table:
    """An ordered set of columns."""

    columns: tuple[Column, ...]

    def ddl(self) -> str:
        return ", ".join(f"`{c.name}` {c.spark_type}" for c in self.columns)

    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def select(self, names: Sequence[str]) -> Table:
        """The columns named, in that order; unknown names are refused (a typo must not read as nulls)."""
        by_name = {c.name: c for c in self.columns}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValueError(f"unknown columns {unknown}; this source has {list(by_name)}")
        return Table(tuple(by_name[n] for n in names))

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow_type) for c in self.columns])

    def batch(self, values: dict[str, list]) -> pa.RecordBatch:
        """An Arrow batch from one Python list per column (timestamps given in ms)."""
        arrays = []
        for c in self.columns:
            data = values[c.name]
            if hasattr(data, "to_arrow"):  # a column that builds its own array (log_rows.HeaderColumn)
                arrays.append(data.to_arrow(c.arrow_type))
            elif c.arrow_type == TIMESTAMP:
                arrays.append(pa.array(data, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(TIMESTAMP))
            else:
                arrays.append(pa.array(data, c.arrow_type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema())


CORRUPT_DOC = (
    "null for a record; otherwise the row is not a record but what the reader found: damage (the file, byte "
    "position, first offset not read, bytes not read and why), a divergent copy, a copy left out, offsets "
    "not committed yet (the other columns are null except topic, partition, offset and _lost)"
)
LOST_DOC = (
    "null for a record; true when the offsets the row names could be read from no copy (data missing), false "
    "for a notice that cost no committed record (damage another copy made good, a divergent copy)"
)

# kanal-log's rows are records: what costs no committed record goes to the driver's log and `kanal
# analytics`' notices table, never into the data (issue 42 item 7), so its only non-record row is a loss.
LOG_CORRUPT_DOC = (
    "null for a record; otherwise the row is not a record but offsets no copy could give: the damage (the "
    "file, byte position, first offset not read, bytes not read and why) in each copy tried (the other "
    "columns are null except topic, partition, offset and _lost)"
)
LOG_LOST_DOC = "null for a record; true for a row of offsets no copy could give (data missing)"

LOG_TABLE = Table((
    Column("topic", "string", pa.string(), "topic name (from the partition directory or the Fetch request)"),
    Column("partition", "int", pa.int32(), "partition index"),
    Column("offset", "bigint", pa.int64(), "the record's offset"),
    Column("timestamp", "timestamp", TIMESTAMP, "the record's timestamp (producer time)"),
    Column("key", "binary", pa.binary(), "key bytes, null when absent"),
    Column("value", "binary", pa.binary(), "value bytes, null when absent (a tombstone)"),
    Column("headers", "array<struct<key: string, value: binary>>", _list(HEADER), "record headers"),
    Column("producer_id", "bigint", pa.int64(), "producer id of the batch, 0 when not idempotent"),
    Column("producer_epoch", "int", pa.int32(), "producer epoch of the batch"),
    Column("leader_epoch", "int", pa.int32(), "leader epoch the batch was appended in"),
    Column("batch_offset", "bigint", pa.int64(), "base offset of the record's batch"),
    Column("value_bytes", "int", pa.int32(), "length of the value, 0 when null (cheaper than length(value))"),
    Column("_corrupt", "string", pa.string(), LOG_CORRUPT_DOC),
    Column("_lost", "boolean", pa.bool_(), LOG_LOST_DOC),
))

METADATA_TABLE = Table(
    (
        Column("offset", "bigint", pa.int64(), "metadata offset of the record"),
        Column(
            "batch_offset", "bigint", pa.int64(), "offset of the first record of its batch (one decision)"
        ),
        Column("controller_epoch", "bigint", pa.int64(), "epoch of the controller that wrote the batch"),
        Column("time", "timestamp", TIMESTAMP, "controller clock when the decision was taken"),
        Column("record_type", "string", pa.string(), "register_broker, partition_change, config, ..."),
        Column("principal", "string", pa.string(), "who asked: a principal, 'controller' or 'broker-<id>'"),
        Column("request_id", "string", pa.string(), "the request that caused it"),
        Column("broker_id", "int", pa.int32(), "broker records and producer-id blocks"),
        Column("broker_epoch", "bigint", pa.int64(), "broker records"),
        Column("fenced", "boolean", pa.bool_(), "register_broker and broker_registration_change"),
        Column("topic", "string", pa.string(), "topic name (topic records; config records on topics)"),
        Column(
            "topic_id",
            "string",
            pa.string(),
            "topic, partition, partition_change, partition_reassignment, remove_topic",
        ),
        Column("partition", "int", pa.int32(), "partition, partition_change and partition_reassignment"),
        Column(
            "leader",
            "int",
            pa.int32(),
            "partition; partition_change, partition_reassignment when the leader changes",
        ),
        Column(
            "isr",
            "array<int>",
            _list(pa.int32()),
            "partition; partition_change, partition_reassignment when the ISR changes",
        ),
        Column("replicas", "array<int>", _list(pa.int32()), "partition and partition_reassignment records"),
        Column("cause", "string", pa.string(), "partition_change cause (CAUSE_...)"),
        Column("reason", "string", pa.string(), "partition_change and broker_registration_change detail"),
        Column("config_resource_type", "string", pa.string(), "config: topic or broker"),
        Column(
            "config_resource", "string", pa.string(), "config: topic name or broker id ('' = cluster default)"
        ),
        Column("config_key", "string", pa.string(), "config and client_quota key"),
        Column(
            "config_value", "string", pa.string(), "config value (null: removed); client_quota value as text"
        ),
        Column("record_json", "string", pa.string(), "the whole record as JSON (protobuf JSON mapping)"),
        Column("record", "binary", pa.binary(), "the serialized MetadataRecord (what the replay applies)"),
        Column("_corrupt", "string", pa.string(), CORRUPT_DOC),
        Column("_lost", "boolean", pa.bool_(), LOST_DOC),
    )
)
