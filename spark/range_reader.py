"""RangeReader: a partition's committed offsets read from its current copy, with other copies standing in
where the current one is damaged.

A `ReadItem` (made by copy_plan.py, read by one Spark task) is a run of the current copy's segment
files, or a part of one large file (from an entry boundary the offset index gives), and the offset range
[lo, hi) to read from them; each segment covers offsets up to the next
segment's base (`bounds`). Per segment the reader walks the file (segment_reader.py). When the walk
hits damage at offset d, the rest of that segment's range [d, bound) is read from the stand-ins
(`alternates`: copies that agree with the current history up to their `agree_end`, best first), each
giving what it can from where the previous one stopped: a stand-in is damaged too, or agrees only up to
a lower offset, and the next one goes on from there. Replicas hold the same batches at the same offsets
(followers copy batch bytes), so a range read from a stand-in is the same records.

A tiered partition's current copy begins with its remote segments (segment_files.RemoteSegmentFile, put
there by copy_plan.py), read through range reads of their objects; the local copies stand in only from
their own starts on.

What comes out, in offset order:

- `Clipped`: an intact stored entry and the offsets of it to read ([lo, hi): a batch that crosses the
  committed end or a range edge keeps only the records inside);
- `Notice(lost=False)`: damage another copy made good (what, where, which copy gave the range), and the
  item's planning notes (divergent copies, copies left out) on the partition's first item;
- `Notice(lost=True)`: offsets no copy could give: the damage found in each copy tried. That is data
  really missing.

Read-only, like segment_reader.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kanal.spark.segment_files import SegmentFile
from kanal.spark.segment_reader import SegmentDamage, StoredEntry, read_segment_file
from kanal.v1.error import ErrorCode, KanalError


@dataclass(frozen=True, slots=True)
class CopySegments:
    """One copy's directory and segment files, oldest first."""

    directory: str
    segments: tuple[SegmentFile, ...]


@dataclass(frozen=True, slots=True)
class ReadItem:
    """Part of one partition, read by one task (module docstring)."""

    topic: str
    partition: int
    segments: tuple[SegmentFile, ...]
    bounds: tuple[int, ...]  # per segment: the offset its range ends at (exclusive)
    lo: int
    hi: int
    alternates: tuple[
        tuple[CopySegments, int], ...
    ] = ()  # (copy, offset it agrees with the current one up to)
    notes: tuple[tuple[int, str], ...] = ()
    # Part of one large segment (copy_plan cuts it at offset index entries): the byte position the walk
    # starts at (an entry boundary) and the bytes this part spans; -1: whole files.
    start_position: int = 0
    part_bytes: int = -1

    @property
    def size_bytes(self) -> int:
        return self.part_bytes if self.part_bytes >= 0 else sum(s.size_bytes for s in self.segments)


@dataclass(frozen=True, slots=True)
class Clipped:
    """An intact entry; only its offsets in [lo, hi) are to be read."""

    entry: StoredEntry
    lo: int
    hi: int

    @property
    def whole(self) -> bool:
        return self.entry.base_offset >= self.lo and self.entry.last_offset < self.hi


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the reader found that is not a record: damage made good (lost=False), offsets no copy
    could give (lost=True), or a note from planning (lost=False)."""

    offset: int
    text: str
    lost: bool

    def error(self) -> KanalError:
        return KanalError(ErrorCode.CORRUPT_MESSAGE, self.text)


def read_item(item: ReadItem) -> Iterator[Clipped | Notice]:
    """Every committed entry of the item, in offset order, with notices (module docstring)."""
    for offset, text in item.notes:
        yield Notice(offset, text, False)
    for segment, bound in zip(item.segments, item.bounds):
        lo, hi = max(item.lo, segment.base_offset), min(item.hi, bound)
        if lo < hi:
            yield from _range_with_stand_ins(item, segment, lo, hi)


def read_copy_range(segments: tuple[SegmentFile, ...], lo: int, hi: int, start_position: int = 0
                    ) -> Iterator[Clipped | SegmentDamage]:
    """The entries of one copy that hold offsets in [lo, hi); stops after the first damage. The walk of
    the first segment begins at `start_position` (an entry boundary at or below lo)."""
    first = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= lo:
            first = i
    for n, seg in enumerate(segments[first:]):
        if seg.base_offset >= hi:
            return
        start = start_position if n == 0 else 0
        for stored in read_segment_file(seg, start, lo if start else None):
            if isinstance(stored, SegmentDamage):
                yield stored
                return
            if stored.last_offset < lo:
                continue
            if stored.base_offset >= hi:
                return
            yield Clipped(stored, lo, hi)


def _range_with_stand_ins(
    item: ReadItem, segment: SegmentFile, lo: int, hi: int
) -> Iterator[Clipped | Notice]:
    sources: list[tuple[str, tuple[SegmentFile, ...], int, int]] = [
        (segment.path, (segment,), hi, item.start_position)
    ]
    sources += [(copy.directory, copy.segments, min(hi, end), 0) for copy, end in item.alternates]
    damages: list[SegmentDamage] = []
    gave: list[str] = []
    at = lo
    for name, segments, limit, start_position in sources:
        if at >= hi:
            break
        if limit <= at:
            continue  # this copy parts from the current history (or ends) before the offsets still wanted
        if name != segment.path and segments and segments[0].base_offset > at:
            # This copy starts above the offsets still wanted (a higher log start: retention, or a tiered
            # copy's local start): read from it, [at, its start) would be skipped without a word.
            continue
        before = at
        damaged = False
        for got in read_copy_range(segments, at, limit, start_position if at == lo else 0):
            if isinstance(got, SegmentDamage):
                damages.append(got)
                damaged = True
                break
            yield Clipped(got.entry, at, limit)
            at = max(at, got.entry.last_offset + 1)
        if not damaged:
            at = max(at, limit)  # read to its limit: offsets with no record (compaction) included
        if at > before and name != segment.path:
            gave.append(f"[{before}, {at}) from {name}")
    if at < hi:
        if len(damages) == 1 and not item.alternates:
            yield Notice(damages[0].offset, damages[0].describe(), True)
        else:
            what = "; ".join(d.describe() for d in damages) or "no copy holds them"
            yield Notice(
                at,
                f"{item.topic}-{item.partition}: offsets {at}..{hi - 1} are in no readable copy: {what}",
                True,
            )
    elif damages:
        what = "; ".join(d.describe() for d in damages)
        yield Notice(
            damages[0].offset,
            f"{item.topic}-{item.partition}: damage made good from another copy: {what}; "
            f"read {', '.join(gave)}",
            False,
        )
