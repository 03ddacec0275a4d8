"""__consumer_offsets records that the loader cannot use (broker/group_records.py), pure: no log, no
threads. A bad record is refused whole with a reason and changes nothing; replaying a chunk of the log
skips it (or its whole batch when the batch does not decode) and applies everything around it."""

from __future__ import annotations

import pytest

from kanal.broker.group import Group, GroupLimits
from kanal.broker.group_records import (
    BadGroupRecord,
    GroupEntry,
    OffsetEntry,
    SkippedRecords,
    apply_record,
    batch_of,
    decode_record,
    group_key,
    group_record,
    offset_key,
    offset_record,
    replay_entries,
)
from kanal.v1 import groups_pb2
from kanal.v1.batch import CorruptEntry, NewRecord, build_batch, encode_batch, frame_entry, with_broker_suffix

LIMITS = GroupLimits(session_timeout_ms_min=100, session_timeout_ms_max=60_000, initial_rebalance_delay_ms=0)


def new_group(group_id: str) -> Group:
    return Group(group_id, LIMITS)


def commit(group_id: str, offset: int, topic: str = "t", partition: int = 0):
    return offset_record(group_id, topic, partition, groups_pb2.OffsetCommitValue(offset=offset))


def committed(groups: dict[str, Group]) -> dict[tuple[str, str, int], int]:
    return {(g.group_id, *tp): v.offset for g in groups.values() for tp, v in g.offsets.items()}


def stored(batch: bytes, base_offset: int) -> bytes:
    """A producer batch as one log entry at base_offset, the bytes Log.read returns."""
    return frame_entry(with_broker_suffix(batch, base_offset, 0))


def test_good_records_decode_to_their_entries():
    value = groups_pb2.OffsetCommitValue(offset=42, leader_epoch=3)
    assert decode_record(offset_record("g", "t", 7, value)) == OffsetEntry("g", "t", 7, value)
    assert decode_record(offset_record("g", "t", 7, None)) == OffsetEntry("g", "t", 7, None)
    meta = groups_pb2.GroupMetadataValue(protocol_type="consumer", generation_id=2)
    meta.members.add(member_id="m1")
    assert decode_record(group_record("g", meta)) == GroupEntry("g", meta)
    assert decode_record(group_record("g", None)) == GroupEntry("g", None)


OFFSET_VALUE = groups_pb2.OffsetCommitValue(offset=1).SerializeToString()
NON_CANONICAL = offset_key("g", "t", 0) + b"\x20\x01"  # the same key with an unknown field 4 after it
TWO_MEMBERS_ONE_ID = groups_pb2.GroupMetadataValue(
    generation_id=1, members=[groups_pb2.GroupMemberMetadata(member_id="m")] * 2).SerializeToString()

BAD_RECORDS = {
    "key ff ff, garbage value": ((b"\xff\xff", b"garbage"), "does not parse as GroupRecordKey"),
    "key ff ff, tombstone": ((b"\xff\xff", None), "does not parse as GroupRecordKey"),
    "no key": ((b"", OFFSET_VALUE), "has no key"),
    "key of an unknown kind": ((b"\x1a\x00", OFFSET_VALUE), "of no kind this version knows"),
    "tombstone of an unknown kind": ((b"\x1a\x00", None), "tombstone with key"),
    "non-canonical key": ((NON_CANONICAL, OFFSET_VALUE), "not canonical"),
    "empty group id": ((offset_key("", "t", 0), OFFSET_VALUE), "group id of 0 characters"),
    "group id too long": ((group_key("g" * 256), None), "group id of 256 characters"),
    "empty topic": ((offset_key("g", "", 0), OFFSET_VALUE), "topic ''"),
    "negative partition": ((offset_key("g", "t", -1), OFFSET_VALUE), "partition -1"),
    "garbage offset value": ((offset_key("g", "t", 0), b"garbage"), "does not parse as OffsetCommitValue"),
    "truncated offset value": ((offset_key("g", "t", 0), OFFSET_VALUE[:-1]), "does not parse"),
    "negative offset": (commit("g", -5), "committed offset -5 is negative"),
    "garbage group value": ((group_key("g"), b"\xff\xff"), "does not parse as GroupMetadataValue"),
    "negative generation": (group_record("g", groups_pb2.GroupMetadataValue(generation_id=-1)),
                            "generation -1"),
    "two members, one id": ((group_key("g"), TWO_MEMBERS_ONE_ID), "two members share one"),
}


@pytest.mark.parametrize("record, reason", BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
def test_a_bad_record_is_refused_with_its_reason_and_changes_nothing(record, reason):
    groups: dict[str, Group] = {}
    apply_record(groups, commit("g", 42), new_group, 0)
    with pytest.raises(BadGroupRecord, match=reason):
        apply_record(groups, record, new_group, 0)
    assert committed(groups) == {("g", "t", 0): 42}
    assert groups["g"].generation == 0 and not groups["g"].members


def test_replay_skips_bad_records_and_undecodable_batches_and_applies_the_rest():
    garbage_records = encode_batch(b"\xff\xffnot a record list", record_count=1, last_offset_delta=0,
                                   first_timestamp_ms=1, max_timestamp_ms=1)
    chunk = b"".join([
        stored(batch_of([commit("a", 42), commit("b", 1)], 1), 0),  # offsets 0, 1
        stored(build_batch([NewRecord(*reversed(commit("a", 43)), 1), NewRecord(b"garbage", b"\xff\xff", 1),
                            NewRecord(*reversed(commit("b", 2)), 1)]), 2),  # 2, 3 (bad), 4
        stored(garbage_records, 5),  # 5: the whole batch is skipped
        stored(batch_of([commit("a", 44, partition=1), offset_record("b", "t", 0, None)], 1), 6),  # 6, 7
    ])
    groups: dict[str, Group] = {}
    replayed = replay_entries(groups, chunk, new_group, 0)
    assert committed(groups) == {("a", "t", 0): 43, ("a", "t", 1): 44}
    assert replayed.applied == 6 and replayed.next_offset == 8
    assert [(s.first_offset, s.last_offset) for s in replayed.skipped] == [(3, 3), (5, 5)]
    assert "does not parse as GroupRecordKey" in replayed.skipped[0].reason
    assert "batch does not decode" in replayed.skipped[1].reason
    assert str(replayed.skipped[0]).startswith("offset 3: ")
    assert str(SkippedRecords(5, 9, "why")) == "offsets 5..9: why"


def test_replay_raises_on_damaged_log_framing():
    entry = bytearray(stored(batch_of([commit("a", 1)], 1), 0))
    entry[5] ^= 0xFF  # the entry CRC: where the next entries start can no longer be trusted
    with pytest.raises(CorruptEntry):
        replay_entries({}, bytes(entry), new_group, 0)
