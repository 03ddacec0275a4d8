"""The one full check of a segment file's stored entries, over its bytes, read-only.

Recovery and compaction (segment.py, cleaner.py) and readers outside the broker (the Spark sources) walk
segments with it, so they agree on what an intact entry is. The format is segment.py's: concatenated log
entries `<N u32 BE> <entry CRC u32 BE> <N bytes: stored batch>`. Per entry, in order:

- framing, the entry CRC, the producer CRC and the batch header rules (kanal.v1.batch.iter_entries);
- offsets move forward and stay within [base_offset, base_offset + 2^32) — the segment's relative-offset
  range. A batch that breaks this was not written by this log, or its suffix was damaged in a way the
  CRC happens not to see.

The first entry that fails raises CorruptEntry with its byte position in the file: entry lengths are
trustworthy only up to there, so nothing after it can be located. The caller decides whether that is a
torn tail to cut (recovery) or damage to report (readers).

`mapped_segment` maps a file read-only, so walking never copies the file and never changes it: opening a
Log recovers it (and may cut its tail), which a reader of a live or copied data dir must not do.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator

from kanal.broker.storage.offset_index import RELATIVE_OFFSET_MAX
from kanal.v1.batch import CorruptEntry, Entry, iter_entries


def walk_segment(view: bytes | memoryview, base_offset: int) -> Iterator[Entry]:
    """Every entry of a segment's bytes, fully checked (each with its scanned header); raises
    CorruptEntry at the first one that is not intact or out of order."""
    expected_min = base_offset
    for entry in iter_entries(view, verify_crc=True):
        suffix = entry.suffix
        if suffix.base_offset < expected_min or suffix.last_offset - base_offset > RELATIVE_OFFSET_MAX:
            raise CorruptEntry(entry.position, f"batch offset {suffix.base_offset} is out of order")
        expected_min = suffix.last_offset + 1
        yield entry


@contextlib.contextmanager
def mapped_segment(fd: int, size: int) -> Iterator[memoryview]:
    """The first `size` bytes of an open file, mapped read-only (an empty view for an empty file)."""
    if size == 0:
        yield memoryview(b"")
        return
    mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    view = memoryview(mapped)
    try:
        yield view
    finally:
        try:
            view.release()
            mapped.close()
        except BufferError:
            pass  # a caller still holds a batch view into the map; it is unmapped with the last one


@contextlib.contextmanager
def mapped_segment_file(path: str) -> Iterator[memoryview]:
    """A segment file by path, mapped read-only (see mapped_segment)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with mapped_segment(fd, os.fstat(fd).st_size) as view:
            yield view
    finally:
        os.close(fd)
