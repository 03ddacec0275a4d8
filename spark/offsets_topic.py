"""OffsetsTopic: committed offsets decoded from `__consumer_offsets` rows, as a Spark mapInArrow function.

The record format is groups.proto's: key = a serialized GroupRecordKey, value = an OffsetCommitValue for an
`offset` key (a GroupMetadataValue for a `group` key, which lag does not need), a null value = a
tombstone (the offset was deleted). Rows that are not offset commits are dropped here on purpose (they are
group metadata, not data); a key or value that does not parse becomes a row with `error` set, so a damaged
commit is reported, never skipped silently.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from google.protobuf.message import DecodeError

from kanal.v1 import groups_pb2

OFFSETS_TOPIC = "__consumer_offsets"
COMMITS_DDL = ("`group` string, topic string, partition int, committed_offset bigint, commit_time timestamp, "
               "log_offset bigint, tombstone boolean, error string")
_SCHEMA = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                     ("committed_offset", pa.int64()), ("commit_time", pa.timestamp("us", tz="UTC")),
                     ("log_offset", pa.int64()), ("tombstone", pa.bool_()), ("error", pa.string())])


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


def commits_from_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: rows (key, value, offset) of __consumer_offsets -> commit rows (COMMITS_DDL)."""
    for batch in batches:
        keys, values, offsets = (batch.column(n).to_pylist() for n in ("key", "value", "offset"))
        out: list[list] = [[] for _ in range(8)]
        for key, value, log_offset in zip(keys, values, offsets):
            decoded = decode_commit(key, value)
            if decoded is None:
                continue
            group, topic, partition, committed, commit_ms, tombstone, error = decoded
            for col, item in zip(out, (group, topic, partition, committed,
                                       commit_ms * 1000 if commit_ms is not None else None,
                                       log_offset, tombstone, error)):
                col.append(item)
        yield pa.RecordBatch.from_arrays([pa.array(col, f.type) for col, f in zip(out, _SCHEMA)], schema=_SCHEMA)
