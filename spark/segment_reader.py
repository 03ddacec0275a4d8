"""SegmentReader: the stored batches of one segment file, read-only, with damage reported, not hidden.

The file format is the storage package's (broker/storage/segment.py): concatenated log entries
`<N u32 BE> <entry CRC u32 BE> <N bytes: stored batch>`. The walk is kanal.v1.batch.iter_entries with
both CRCs and the header rules checked (the same walker the broker uses for replicated entries), over an
mmap of the file: nothing is copied until a batch is parsed, and nothing is written (Log.open would
recover, i.e. rewrite, a log that was not closed cleanly; a reader of a live or copied data dir must not).

Damage. A torn tail (a crash, or a live segment caught mid-write), a flipped bit or an out-of-order batch
ends the walk of that file at the first bad entry: entry lengths are only trustworthy up to there, so no
later entry in the file can be located safely. The reader then yields one `SegmentDamage` saying which
file, at which byte, the first offset it could not read, and how many bytes it left unread; the caller
reports it (a row, or an error in fail-fast mode) and goes on with the next file. A batch whose entry is
intact but whose records do not decode (an unknown codec) is reported the same way and skipped alone,
because its neighbours are still located by sound entry headers.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

from kanal.v1.batch import CorruptEntry, Entry, iter_entries
from kanal.v1.error import ErrorCode, KanalError


@dataclass(frozen=True, slots=True)
class SegmentDamage:
    """What could not be read from a segment file, and where."""

    path: str
    position: int  # byte position in the file of the first entry not read
    offset: int  # first offset not read (the offset expected at that position)
    bytes_unread: int
    reason: str

    def describe(self) -> str:
        return (
            f"{self.path}: byte {self.position}, offset {self.offset}: {self.reason} "
            f"({self.bytes_unread} bytes not read)"
        )

    def error(self) -> KanalError:
        return KanalError(ErrorCode.CORRUPT_MESSAGE, self.describe())


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """One intact entry of a segment file: its byte position, base and last offsets, leader epoch and
    stored batch bytes (a view into the mapped file)."""

    position: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    batch: memoryview


def read_segment(path: str, base_offset: int) -> Iterator[StoredEntry | SegmentDamage]:
    """Every intact entry of the segment file at `path`, in order, then a SegmentDamage if the file does
    not end on an intact entry. Offsets must increase and start at or after `base_offset`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return
        mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    view = memoryview(mapped)
    try:
        yield from _walk(path, view, base_offset)
    finally:
        try:
            view.release()
            mapped.close()
        except BufferError:
            pass  # a consumer still holds a batch view; the map is freed with the last one


def _walk(path: str, view: memoryview, base_offset: int) -> Iterator[StoredEntry | SegmentDamage]:
    size = len(view)
    expected = base_offset
    position = 0
    try:
        for entry in iter_entries(view, verify_crc=True):
            position = entry.position
            stored = _located(entry)
            if stored.base_offset < expected:
                yield SegmentDamage(path, position, expected, size - position,
                                    f"batch at offset {stored.base_offset} is out of order")
                return
            expected = stored.last_offset + 1
            position = entry.position + entry.size
            yield stored
    except CorruptEntry as exc:
        yield SegmentDamage(path, exc.position, expected, size - exc.position, _reason(exc))


def _located(entry: Entry) -> StoredEntry:
    suffix = entry.suffix
    return StoredEntry(entry.position, suffix.base_offset, suffix.last_offset, suffix.leader_epoch, entry.batch)


def _reason(exc: KanalError) -> str:
    # CorruptEntry's message starts with "log entry at byte N: "; the position is reported separately.
    message = exc.message
    head, sep, rest = message.partition(": ")
    return rest if sep and head.startswith("log entry at byte") else message
