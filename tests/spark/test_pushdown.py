"""Pushed filters (spark/pushdown.py), pure: bounds from the JVM's predicates, and reads narrowed by them that
keep every row the predicates pass and read each segment as a read without them does."""

from __future__ import annotations

import pytest

from kanal.spark.log_source import file_plan, plan_groups
from kanal.spark.pushdown import Pushed
from kanal.spark.range_reader import Clipped, Notice, read_item
from kanal.v1.batch import NewRecord

from .log_files import segment_paths, write_log

T0 = 1_700_000_080_000
BATCHES, PER_BATCH = 40, 10


def _batches(partition: int) -> list[list[NewRecord]]:
    return [[NewRecord(value=f"p{partition}-{b}-{i}".encode() * 8, timestamp_ms=T0 + b * 100 + i)
             for i in range(PER_BATCH)] for b in range(BATCHES)]


@pytest.fixture()
def logs(tmp_path):
    for partition in range(3):
        write_log(tmp_path / f"events-{partition}", _batches(partition))
    write_log(tmp_path / "audit-0", _batches(9))
    return tmp_path


NOTHING_PUSHED = Pushed()


def _read(plan, pushed: Pushed = NOTHING_PUSHED) -> tuple[set[tuple[str, int, int]], list[str]]:
    """(topic, partition, offset) of every record read, and the notices' texts."""
    records: set[tuple[str, int, int]] = set()
    notices: list[str] = []
    for group in plan_groups(plan, 0, partitions_min=2):
        for item in group.items:  # type: ignore[attr-defined]
            for got in pushed.batches(read_item(item)):
                if isinstance(got, Notice):
                    notices.append(got.text)
                    continue
                assert isinstance(got, Clipped)
                first, end = max(got.lo, got.entry.base_offset), min(got.hi, got.entry.last_offset + 1)
                records.update((item.topic, item.partition, offset) for offset in range(first, end))
    return records, notices


def test_bounds_intersect_every_predicate():
    p = Pushed.parse([
        {"column": "topic", "op": "in", "values": ["a", "b"]}, {"column": "topic", "op": "=", "value": "b"},
        {"column": "partition", "op": ">=", "value": 1}, {"column": "partition", "op": "<", "value": 3},
        {"column": "offset", "op": ">", "value": 9}, {"column": "offset", "op": "<=", "value": 20},
        {"column": "timestamp", "op": ">=", "value": 5_000},
        {"column": "timestamp", "op": ">", "value": 7_000},
        {"column": "timestamp", "op": "<", "value": 1},  # an upper bound narrows nothing
    ])
    assert p.topics == {"b"} and (p.partition_lo, p.partition_hi) == (1, 3)
    assert (p.offset_lo, p.offset_hi) == (10, 21) and p.timestamp_lo_us == 7_001
    assert p.wants("b", 2) and not p.wants("a", 2) and not p.wants("b", 3)
    with pytest.raises(ValueError, match="unknown op"):
        Pushed.parse([{"column": "offset", "op": "!=", "value": 1}])
    with pytest.raises(ValueError, match="does not narrow"):
        Pushed.parse([{"column": "value", "op": "=", "value": "x"}])


def test_topic_and_partition_predicates_plan_only_the_partitions_they_pass(logs):
    plan = file_plan(logs)
    pushed = Pushed.parse([{"column": "topic", "op": "=", "value": "events"},
                           {"column": "partition", "op": "in", "values": [0, 2, 7]}])
    assert sorted((p.topic, p.partition) for p in pushed.prune(plan).plans) == [("events", 0), ("events", 2)]
    everything, _ = _read(plan)
    narrowed, _ = _read(pushed.prune(plan))
    assert narrowed == {r for r in everything if r[0] == "events" and r[1] in (0, 2)}


@pytest.mark.parametrize("lo,hi", [(0, 1), (95, 260), (123, 124), (390, 10_000), (500, 600)])
def test_offset_bounds_read_whole_segments_holding_the_offsets(logs, lo, hi):
    plan = file_plan(logs)
    assert len(segment_paths(logs / "events-1")) > 3
    pushed = Pushed(offset_lo=lo, offset_hi=hi)
    everything, _ = _read(plan)
    narrowed, _ = _read(pushed.prune(plan))
    assert {r for r in everything if lo <= r[2] < hi} <= narrowed <= everything
    if lo > 0:
        assert len(narrowed) < len(everything)  # segments below the bound were not read


def test_offset_bounds_keep_the_notices_of_the_segments_read(logs):
    """Damage inside a segment read is reported at the same offset and in the same words as without the
    bound, however far into the segment the bound begins."""
    segment = segment_paths(logs / "events-1")[2]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    base = int(segment.name[:-4])
    plan = file_plan(logs)
    _, all_notices = _read(plan)
    _, notices = _read(Pushed(offset_lo=base + 1, offset_hi=base + 2).prune(plan))
    assert len(all_notices) == 1 and notices == all_notices


def test_a_timestamp_bound_passes_over_older_batches_only(logs):
    plan = file_plan(logs)
    bound_ms = T0 + 20 * 100 + 5  # inside batch 20: its records 5..9 pass, the batch is kept
    everything, _ = _read(plan)
    narrowed, _ = _read(plan, Pushed(timestamp_lo_us=bound_ms * 1000))
    assert len(narrowed) == (BATCHES - 20) * PER_BATCH * 4
    # Every record at or after the bound is read (timestamps rise with offsets in these logs).
    assert {r for r in everything if r[2] >= 20 * PER_BATCH} == narrowed
