"""The records of __consumer_offsets (format: proto/kanal/v1/groups.proto) and their replay, pure.

Writing: `offset_record` / `group_record` build the (key, value) of one record; `batch_of` frames them as
one producer batch (no producer id: the coordinator is the only writer of its partitions, and a retried
write that lands twice replays to the same state). A value of None is a tombstone.

Reading: `decode_record` turns a record into an `OffsetEntry` or a `GroupEntry`, or raises `BadGroupRecord`
saying why it cannot; `apply_entry` turns an entry into state. `apply_record` is the two together, the one
replay used after each commit the coordinator wrote (decide → records → apply), and `replay_entries` is
the loader's: it applies every record of a chunk of the log and returns the ones it skipped. The last
record of a key wins; a tombstone removes the key, so replaying a compacted partition gives the same state
as the full one.

Bad records. A partition may hold records this version cannot use: written by a client before Produce to
internal topics was refused, by a newer version with more kinds of key, or damaged. Such a record is
skipped whole (the key keeps the value it had before it), and the load goes on, so one bad record never
keeps a partition's groups unavailable. A record is bad when:
  - its key is absent, does not parse as a GroupRecordKey, or is of no kind this version knows;
  - its key names an invalid group id (empty or longer than GROUP_ID_LENGTH_MAX), or an offset key an
    empty topic or a negative partition;
  - its key is not canonical (not the bytes `offset_key` / `group_key` write for the same fields):
    compaction compares keys as bytes, so a second spelling of one key would outlive the first;
  - its value (when not a tombstone) does not parse as the key kind's value message, or says something a
    coordinator never writes: a negative committed offset, a negative generation, a member without an id
    or two members with one id.
A batch whose records do not decode (bad compression, a RecordList that does not parse, a record count
that does not match its header) is skipped whole the same way. Damage to the log's own framing (an entry
whose CRC fails) is not a bad record: the entries after it cannot be trusted to be where they seem, so
`replay_entries` raises and the coordinator treats it as a failed load.

Transactions (issue 22). TxnOffsetCommit writes its offset records in a TRANSACTIONAL batch of the
producer; they take effect only when that producer's COMMIT marker follows, and never after an ABORT
marker. `replay_entries` keeps them in `pending` (producer id -> records, carried across chunks) until
the marker; what is still pending at the end of the log belongs to a transaction still open.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from google.protobuf.message import DecodeError, Message

from kanal.broker.group import GROUP_ID_LENGTH_MAX, Group
from kanal.v1 import groups_pb2
from kanal.v1.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CONTROL_COMMIT,
    NewRecord,
    build_batch,
    control_type_in,
    decode_records,
    iter_entries,
    parse_batch,
)
from kanal.v1.error import KanalError

Record = tuple[bytes, bytes | None]  # key, value (None: tombstone)
M = TypeVar("M", bound=Message)


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


def txn_batch_of(records: list[Record], now_ms: int, producer_id: int, producer_epoch: int) -> bytes:
    """TxnOffsetCommit's records as a TRANSACTIONAL batch of the producer (effective at its COMMIT)."""
    return build_batch([NewRecord(value, key, now_ms) for key, value in records], producer_id=producer_id,
                       producer_epoch=producer_epoch, attributes=ATTR_TRANSACTIONAL)


# ---- decoding ----


class BadGroupRecord(ValueError):
    """A __consumer_offsets record this version cannot use; the message says why."""


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    """A decoded offset record: the committed offset of (group, topic, partition), None when deleted."""

    group_id: str
    topic: str
    partition: int
    value: groups_pb2.OffsetCommitValue | None


@dataclass(frozen=True, slots=True)
class GroupEntry:
    """A decoded group-metadata record: the group as of its last rebalance, None when deleted."""

    group_id: str
    value: groups_pb2.GroupMetadataValue | None


def decode_record(record: Record) -> OffsetEntry | GroupEntry:
    """The entry a record holds; BadGroupRecord (the rules in the module docstring) when it holds none."""
    key_bytes, value_bytes = record
    if not key_bytes:
        raise BadGroupRecord("the record has no key")
    key = _parse(groups_pb2.GroupRecordKey, key_bytes, "key")
    which = key.WhichOneof("key")
    if which == "offset":
        k = key.offset
        _check_group_id(k.group_id)
        if not k.topic or k.partition < 0:
            raise BadGroupRecord(f"offset key names topic {k.topic!r} partition {k.partition}")
        if key_bytes != offset_key(k.group_id, k.topic, k.partition):
            raise BadGroupRecord(f"offset key {_preview(key_bytes)} is not canonical")
        return OffsetEntry(k.group_id, k.topic, k.partition,
                           None if value_bytes is None else _offset_value(value_bytes))
    if which == "group":
        _check_group_id(key.group.group_id)
        if key_bytes != group_key(key.group.group_id):
            raise BadGroupRecord(f"group key {_preview(key_bytes)} is not canonical")
        return GroupEntry(key.group.group_id, None if value_bytes is None else _group_value(value_bytes))
    # A newer version may write more kinds of key; this one can only skip them (and says so).
    kind = "tombstone" if value_bytes is None else "record"
    raise BadGroupRecord(f"{kind} with key {_preview(key_bytes)} of no kind this version knows")


def _check_group_id(group_id: str) -> None:
    if not 1 <= len(group_id) <= GROUP_ID_LENGTH_MAX:
        raise BadGroupRecord(f"key names a group id of {len(group_id)} characters (1..{GROUP_ID_LENGTH_MAX})")


def _parse(kind: type[M], data: bytes, what: str) -> M:
    try:
        return kind.FromString(data)
    except DecodeError as exc:
        raise BadGroupRecord(
            f"{what} {_preview(data)} does not parse as {kind.DESCRIPTOR.name}: {exc}"
        ) from None


def _offset_value(data: bytes) -> groups_pb2.OffsetCommitValue:
    value = _parse(groups_pb2.OffsetCommitValue, data, "value")
    if value.offset < 0:
        raise BadGroupRecord(f"committed offset {value.offset} is negative")  # commits of those are refused
    return value


def _group_value(data: bytes) -> groups_pb2.GroupMetadataValue:
    value = _parse(groups_pb2.GroupMetadataValue, data, "value")
    if value.generation_id < 0:
        raise BadGroupRecord(f"generation {value.generation_id} is negative")
    member_ids = [m.member_id for m in value.members]
    if not all(member_ids) or len(set(member_ids)) != len(member_ids):
        raise BadGroupRecord("a member has no id, or two members share one")
    return value


def _preview(data: bytes, bytes_max: int = 16) -> str:
    """A record's bytes for a log line: hex, cut short."""
    more = "…" if len(data) > bytes_max else ""
    return f"{data[:bytes_max].hex(' ')}{more} ({len(data)} bytes)"


# ---- applying ----


def apply_entry(groups: dict[str, Group], entry: OffsetEntry | GroupEntry, new_group: Callable[[str], Group],
                now_ms: int) -> None:
    """Apply one decoded record to `groups` (group id -> Group)."""
    group = groups.get(entry.group_id)
    if isinstance(entry, OffsetEntry):
        if entry.value is None:
            if group is not None:
                group.offsets.pop((entry.topic, entry.partition), None)
                _drop_if_gone(groups, group)
            return
        if group is None:
            group = groups[entry.group_id] = new_group(entry.group_id)
        group.offsets[(entry.topic, entry.partition)] = entry.value
        return
    if entry.value is None:
        if group is not None:
            group.restore(groups_pb2.GroupMetadataValue(), now_ms)
            group.generation = 0
            _drop_if_gone(groups, group)
        return
    if group is None:
        group = groups[entry.group_id] = new_group(entry.group_id)
    group.restore(entry.value, now_ms)


def apply_record(
    groups: dict[str, Group], record: Record, new_group: Callable[[str], Group], now_ms: int
) -> None:
    """Apply one __consumer_offsets record to `groups`; BadGroupRecord (nothing changed) when it is bad."""
    apply_entry(groups, decode_record(record), new_group, now_ms)


def _drop_if_gone(groups: dict[str, Group], group: Group) -> None:
    """A group with no members, no generation and no offsets does not exist any more."""
    if not group.members and not group.offsets and group.generation == 0:
        groups.pop(group.group_id, None)


# ---- loading ----


@dataclass(frozen=True, slots=True)
class SkippedRecords:
    """Records the loader skipped: offsets first..last (one record, or a whole batch) and why."""

    first_offset: int
    last_offset: int
    reason: str

    def __str__(self) -> str:
        where = (f"offset {self.first_offset}" if self.first_offset == self.last_offset
                 else f"offsets {self.first_offset}..{self.last_offset}")
        return f"{where}: {self.reason}"


class Replayed(NamedTuple):
    """What `replay_entries` did with a chunk of the log."""

    applied: int  # records applied
    skipped: list[SkippedRecords]  # records (or batches) skipped as bad, in offset order
    next_offset: int  # the offset after the chunk's last batch (-1 + 1 = 0 for an empty chunk)


def replay_entries(groups: dict[str, Group], entries: bytes | memoryview, new_group: Callable[[str], Group],
                   now_ms: int, pending: dict[int, list[Record]] | None = None) -> Replayed:
    """Apply every record of log-entry framed bytes (as `Log.read` returns them) to `groups`, skipping bad
    records and undecodable batches. Framing damage (CorruptEntry) raises: see the module docstring."""
    applied = 0
    skipped: list[SkippedRecords] = []
    last_offset = -1
    for entry in iter_entries(entries, verify_crc=True):
        suffix = entry.suffix
        last_offset = suffix.last_offset
        try:
            batch = parse_batch(entry.batch, verify_crc=False)
            if batch.attributes & ATTR_CONTROL:
                held = (pending if pending is not None else {}).pop(batch.producer_id, [])
                if control_type_in(entry.batch) == CONTROL_COMMIT:
                    for record in held:
                        apply_record(groups, record, new_group, now_ms)
                        applied += 1
                continue
            records = decode_records(batch)
        except (KanalError, BadGroupRecord) as exc:
            skipped.append(SkippedRecords(suffix.base_offset, suffix.last_offset, f"batch does not decode: "
                                                                                  f"{exc}"))
            continue
        if batch.attributes & ATTR_TRANSACTIONAL and pending is not None:
            pending.setdefault(batch.producer_id, []).extend(
                (r.key, r.value if r.HasField("value") else None) for r in records)
            continue
        for r in records:
            offset = suffix.base_offset + r.offset_delta
            record = (r.key, r.value if r.HasField("value") else None)
            try:
                apply_record(groups, record, new_group, now_ms)
            except BadGroupRecord as exc:
                skipped.append(SkippedRecords(offset, offset, str(exc)))
                continue
            applied += 1
    return Replayed(applied, skipped, last_offset + 1)
