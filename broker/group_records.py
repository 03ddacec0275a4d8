"""The records of __consumer_offsets (format: proto/kanal/v1/groups.proto) and their replay, pure.

Writing: `offset_record` / `group_record` build the (key, value) of one record; `batch_of` frames them as
one producer batch (no producer id: the coordinator is the only writer of its partitions, and a retried
write that lands twice replays to the same state). A value of None is a tombstone.

Reading: `apply_record` is the one function that turns a record into state, used when a coordinator
loads a partition and after each commit it wrote (decide → records → apply). The last record of a key
wins; a tombstone removes the key, so replaying a compacted partition gives the same state as the full
one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kanal.broker.group import Group
from kanal.v1 import groups_pb2, records_pb2
from kanal.v1.batch import NewRecord, build_batch, iter_entries, parse_batch
from kanal.v1.codecs import decompress

Record = tuple[bytes, bytes | None]  # key, value (None: tombstone)


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return groups_pb2.GroupRecordKey(offset=groups_pb2.OffsetCommitKey(
        group_id=group_id, topic=topic, partition=partition)).SerializeToString()


def group_key(group_id: str) -> bytes:
    return groups_pb2.GroupRecordKey(group=groups_pb2.GroupMetadataKey(group_id=group_id)).SerializeToString()


def offset_record(group_id: str, topic: str, partition: int,
                  value: groups_pb2.OffsetCommitValue | None) -> Record:
    return offset_key(group_id, topic, partition), None if value is None else value.SerializeToString()


def group_record(group_id: str, value: groups_pb2.GroupMetadataValue | None) -> Record:
    return group_key(group_id), None if value is None else value.SerializeToString()


def batch_of(records: list[Record], now_ms: int) -> bytes:
    return build_batch([NewRecord(value, key, now_ms) for key, value in records])


def iter_records(entries: bytes) -> Iterator[Record]:
    """(key, value) of every record in log-entry framed bytes, CRCs checked."""
    for entry in iter_entries(entries, verify_crc=True):
        batch = parse_batch(entry.batch, verify_crc=False)
        for r in records_pb2.RecordList.FromString(decompress(batch.codec, batch.records)).records:
            yield r.key, (r.value if r.HasField("value") else None)


def apply_record(groups: dict[str, Group], record: Record, new_group: Callable[[str], Group], now_ms: int) -> None:
    """Apply one __consumer_offsets record to `groups` (group id -> Group)."""
    key_bytes, value_bytes = record
    key = groups_pb2.GroupRecordKey.FromString(key_bytes)
    which = key.WhichOneof("key")
    if which == "offset":
        k = key.offset
        group = groups.get(k.group_id)
        if value_bytes is None:
            if group is not None:
                group.offsets.pop((k.topic, k.partition), None)
                _drop_if_gone(groups, group)
            return
        if group is None:
            group = groups[k.group_id] = new_group(k.group_id)
        group.offsets[(k.topic, k.partition)] = groups_pb2.OffsetCommitValue.FromString(value_bytes)
    elif which == "group":
        group_id = key.group.group_id
        group = groups.get(group_id)
        if value_bytes is None:
            if group is not None:
                group.restore(groups_pb2.GroupMetadataValue(), now_ms)
                group.generation = 0
                _drop_if_gone(groups, group)
            return
        if group is None:
            group = groups[group_id] = new_group(group_id)
        group.restore(groups_pb2.GroupMetadataValue.FromString(value_bytes), now_ms)
    # A key of a kind this version does not know is skipped: a newer coordinator may write more kinds.


def _drop_if_gone(groups: dict[str, Group], group: Group) -> None:
    """A group with no members, no generation and no offsets does not exist any more."""
    if not group.members and not group.offsets and group.generation == 0:
        groups.pop(group.group_id, None)
