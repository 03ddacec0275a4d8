"""The replay's two tables, as the audit writes them: `events` (replay.Event's fields) and the intervals
behind `partition_health` and `broker_fencing` (replay.Interval's fields, times as timestamps)."""

from __future__ import annotations

import pyarrow as pa

from kanal.spark.columns import TIMESTAMP, Column, Table

_INT_LIST = pa.list_(pa.field("element", pa.int32()))

EVENTS_TABLE = Table((
    Column("offset", "bigint", pa.int64(), ""), Column("batch_offset", "bigint", pa.int64(), ""),
    Column("controller_epoch", "bigint", pa.int64(), ""), Column("time", "timestamp", TIMESTAMP, ""),
    Column("principal", "string", pa.string(), ""), Column("request_id", "string", pa.string(), ""),
    Column("event", "string", pa.string(), ""), Column("topic", "string", pa.string(), ""),
    Column("topic_id", "string", pa.string(), ""), Column("partition", "int", pa.int32(), ""),
    Column("broker_id", "int", pa.int32(), ""), Column("broker_epoch", "bigint", pa.int64(), ""),
    Column("leader_before", "int", pa.int32(), ""), Column("leader_after", "int", pa.int32(), ""),
    Column("leader_epoch", "int", pa.int32(), ""), Column("isr_before", "array<int>", _INT_LIST, ""),
    Column("isr_after", "array<int>", _INT_LIST, ""), Column("replicas", "array<int>", _INT_LIST, ""),
    Column("isr_change", "string", pa.string(), ""), Column("cause", "string", pa.string(), ""),
    Column("reason", "string", pa.string(), ""), Column("resource_type", "string", pa.string(), ""),
    Column("resource", "string", pa.string(), ""), Column("key", "string", pa.string(), ""),
    Column("value_before", "string", pa.string(), ""), Column("value_after", "string", pa.string(), ""),
    Column("duration_ms", "bigint", pa.int64(), ""), Column("detail", "string", pa.string(), ""),
    Column("base_offset", "bigint", pa.int64(), ""), Column("end_offset", "bigint", pa.int64(), ""),
    Column("size_bytes", "bigint", pa.int64(), ""), Column("log_start_offset", "bigint", pa.int64(), ""),
    Column("subject", "string", pa.string(), ""), Column("version", "int", pa.int32(), ""),
    Column("schema_id", "int", pa.int32(), ""), Column("schema_type", "string", pa.string(), ""),
))

INTERVALS_TABLE = Table((
    Column("kind", "string", pa.string(), ""), Column("topic", "string", pa.string(), ""),
    Column("topic_id", "string", pa.string(), ""), Column("partition", "int", pa.int32(), ""),
    Column("broker_id", "int", pa.int32(), ""), Column("broker_epoch", "bigint", pa.int64(), ""),
    Column("start", "timestamp", TIMESTAMP, ""), Column("end", "timestamp", TIMESTAMP, ""),
    Column("duration_ms", "bigint", pa.int64(), ""), Column("start_offset", "bigint", pa.int64(), ""),
    Column("end_offset", "bigint", pa.int64(), ""), Column("start_reason", "string", pa.string(), ""),
    Column("end_reason", "string", pa.string(), ""), Column("open", "boolean", pa.bool_(), ""),
))
