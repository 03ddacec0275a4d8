"""TimeIndex: a sparse map from timestamps to offsets in one segment, for lookups by time.

File `<base_offset:020d>.timeindex`, entries of 12 bytes, big-endian:

    0: i64  the largest record timestamp (ms) in the segment up to and including the batch below
    8: u32  relative offset of that batch (batch base offset - segment base offset)

Entries are added alongside offset-index entries, only when the largest timestamp grew since the last entry
(through this batch or one between index entries), so both columns strictly increase, and the last entry
with the batches after the last offset-index entry gives the segment's largest timestamp on open. Every
batch before an entry has timestamps <= the entry's, which is what makes a lookup safe: scanning from the
last entry below a target time cannot miss a batch at or after it.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from pathlib import Path

from kanal.broker.storage.ids import Offset
from kanal.broker.storage.index_file import IndexDamaged, IndexFile

_ENTRY = struct.Struct(">qI")
ENTRY_BYTES = _ENTRY.size


class TimeIndex:
    def __init__(self, path: Path, base_offset: Offset) -> None:
        self.base_offset = base_offset
        self._file = IndexFile(path, _ENTRY, "qI")

    def __repr__(self) -> str:
        return f"<TimeIndex {self._file.path.name} entries={len(self)}>"

    def __len__(self) -> int:
        return len(self._file)

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def last_timestamp_ms(self) -> int:
        ts = self._file.columns[0]
        return ts[-1] if len(ts) else -1

    def load(self, next_relative_offset: int) -> None:
        """Load and sanity-check; IndexDamaged when it cannot be trusted."""
        self._file.load()
        ts, rel = self._file.columns
        for i in range(1, len(ts)):
            if ts[i] <= ts[i - 1] or rel[i] <= rel[i - 1]:
                raise IndexDamaged(f"{self.path.name} entry {i} does not increase")
        if len(rel) and rel[-1] >= next_relative_offset:
            raise IndexDamaged(f"{self.path.name} points past the end of the segment")

    def maybe_append(self, timestamp_ms: int, offset: Offset) -> None:
        """Add an entry when `timestamp_ms` is a new maximum (the index stays monotonic)."""
        ts, rel = self._file.columns
        relative = offset - self.base_offset
        if len(ts) and (timestamp_ms <= ts[-1] or relative <= rel[-1]):
            return
        self._file.append(timestamp_ms, relative)

    def lookup(self, timestamp_ms: int) -> Offset:
        """Offset to scan from for the first batch with max timestamp >= timestamp_ms."""
        ts, rel = self._file.columns
        i = bisect_left(ts, timestamp_ms)
        return Offset(self.base_offset + rel[i - 1] if i else self.base_offset)

    def truncate_to(self, offset: Offset) -> None:
        """Drop entries for batches at or after `offset`."""
        rel = self._file.columns[1]
        keep = 0
        while keep < len(rel) and self.base_offset + rel[keep] < offset:
            keep += 1
        self._file.truncate_entries(keep)

    def rewrite(self, entries: list[tuple[int, Offset]]) -> None:
        self._file.rewrite([(ts, offset - self.base_offset) for ts, offset in entries])

    def drop_pending(self) -> None:
        self._file.drop_pending()

    def write_pending(self) -> None:
        self._file.write_pending()

    def flush(self) -> None:
        self._file.flush()

    def delete(self) -> None:
        self._file.delete()
