"""OffsetsTopic: committed offsets decoded from `__consumer_offsets` rows, as a Spark column function.

The record format is groups.proto's: key = a serialized GroupRecordKey, value = an OffsetCommitValue for an
`offset` key (a GroupMetadataValue for a `group` key, which lag does not need), a null value = a
tombstone (the offset was deleted). Rows that are not offset commits are dropped here on purpose (they are
group metadata, not data); a key or value that does not parse becomes a row with `error` set, so a damaged
commit is reported, never skipped silently.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kanal.v1 import groups_pb2

OFFSETS_TOPIC = "__consumer_offsets"
COMMITS_DDL = ("`group` string, topic string, partition int, committed_offset bigint, commit_time timestamp, "
               "log_offset bigint, tombstone boolean, error string")


def decode_commit(key: bytes | None, value: bytes | None) -> tuple | None:
    """(group, topic, partition, committed offset, commit ms, tombstone, error) for an offset commit
    record, None for any other record of the topic."""
    try:
        parsed = groups_pb2.GroupRecordKey.FromString(key or b"")
    except DecodeError as exc:
        return (None, None, None, None, None, False, f"key does not parse: {exc}")
    if parsed.WhichOneof("key") != "offset":
        return None
    k = parsed.offset
    if value is None:
        return (k.group_id, k.topic, k.partition, None, None, True, None)
    try:
        v = groups_pb2.OffsetCommitValue.FromString(value)
    except DecodeError as exc:
        return (k.group_id, k.topic, k.partition, None, None, False, f"value does not parse: {exc}")
    return (k.group_id, k.topic, k.partition, v.offset, v.commit_timestamp_ms, False, None)


def commits_frame_from_rows(rows: DataFrame) -> DataFrame:
    """Rows (offset, key, value) of __consumer_offsets -> commit rows (COMMITS_DDL). A plain Python UDF,
    not mapInArrow, which would need pandas on every executor."""
    decode = F.udf(lambda key, value: decode_commit(key, value), _DECODED, useArrow=False)
    decoded = rows.select(F.col("offset").alias("log_offset"),
                          decode(F.col("key"), F.col("value")).alias("c")).where(F.col("c").isNotNull())
    return decoded.select(
        F.col("c.group").alias("group"),
        F.col("c.topic").alias("topic"),
        F.col("c.partition").alias("partition"),
        F.col("c.committed_offset").alias("committed_offset"),
        F.timestamp_millis(F.col("c.commit_ms")).alias("commit_time"),
        "log_offset",
        F.col("c.tombstone").alias("tombstone"),
        F.col("c.error").alias("error"),
    )


_DECODED = T.StructType(
    [
        T.StructField("group", T.StringType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("committed_offset", T.LongType()),
        T.StructField("commit_ms", T.LongType()),
        T.StructField("tombstone", T.BooleanType()),
        T.StructField("error", T.StringType()),
    ]
)
