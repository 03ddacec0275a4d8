"""RangeReader's stand-ins (spark/range_reader.py), on real segment files written by the storage package: a
damaged range of the current copy is read from the other copies, and a copy whose log starts above the
offsets still wanted (a higher log start: retention, or a tiered replica's local start) is passed over, never
read from its start with the offsets below it skipped without a word."""

from __future__ import annotations

import shutil
from pathlib import Path

from kanal.spark.range_reader import Clipped, CopySegments, Notice, ReadItem, read_item
from kanal.spark.segment_files import SegmentFile
from kanal.spark.segment_reader import StoredEntry, read_segment
from kanal.v1.batch import NewRecord

from .log_files import segment_paths, write_log

BATCHES = 200  # about 40 a 6 KiB segment: five segments


def _segments(directory: Path) -> tuple[SegmentFile, ...]:
    return tuple(SegmentFile("t", 0, int(p.name[:-4]), str(p), p.stat().st_size)
                 for p in segment_paths(directory))


def _damage_first_entry(path: Path) -> StoredEntry:
    entry = next(e for e in read_segment(str(path), int(path.name[:-4])) if isinstance(e, StoredEntry))
    data = bytearray(path.read_bytes())
    data[entry.position + 40] ^= 0xFF  # inside the batch: its CRC no longer matches
    path.write_bytes(bytes(data))
    return entry


def _copies(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The current copy, a whole copy, and a copy whose first two segments are gone (a higher log start)."""
    current = tmp_path / "current"
    write_log(current, [[NewRecord(key=None, value=f"v{i}".encode() * 40, timestamp_ms=1000 + i)]
                        for i in range(BATCHES)])
    whole, high = tmp_path / "whole", tmp_path / "high"
    shutil.copytree(current, whole)
    shutil.copytree(current, high)
    for path in segment_paths(high)[:2]:
        path.unlink()
    return current, whole, high


def _read(item: ReadItem) -> tuple[list[int], list[Notice]]:
    offsets, notices = [], []
    for got in read_item(item):
        if isinstance(got, Clipped):
            offsets += range(max(got.entry.base_offset, got.lo), min(got.entry.last_offset + 1, got.hi))
        else:
            notices.append(got)
    return offsets, notices


def _item(current: Path, alternates: list[Path]) -> ReadItem:
    segments = _segments(current)
    bounds = (*(s.base_offset for s in segments[1:]), BATCHES)
    return ReadItem("t", 0, segments, bounds, 0, BATCHES,
                    alternates=tuple((CopySegments(str(a), _segments(a)), BATCHES) for a in alternates))


def test_a_copy_starting_above_the_damage_is_passed_over_for_one_that_holds_it(tmp_path):
    current, whole, high = _copies(tmp_path)
    assert len(segment_paths(current)) >= 4 and int(segment_paths(high)[0].name[:-4]) > 0
    _damage_first_entry(segment_paths(current)[0])
    # The high copy comes first among the stand-ins: read from its start, offset 0 up would be skipped.
    offsets, notices = _read(_item(current, [high, whole]))
    assert offsets == list(range(BATCHES))
    assert [n.lost for n in notices] == [False] and f"from {whole}" in notices[0].text
    assert str(high) not in notices[0].text


def test_with_only_a_copy_starting_above_the_damage_the_offsets_below_it_are_reported_lost(tmp_path):
    current, _, high = _copies(tmp_path)
    damaged = _damage_first_entry(segment_paths(current)[0])
    offsets, notices = _read(_item(current, [high]))
    lost = [n for n in notices if n.lost]
    assert len(lost) == 1 and lost[0].offset == damaged.base_offset
    first_segment_end = int(segment_paths(current)[1].name[:-4])
    # Nothing of the damaged segment's range was taken from the high copy: it does not hold it.
    assert all(o >= first_segment_end for o in offsets)
    assert offsets == list(range(first_segment_end, BATCHES))
