"""OffsetIndex: a sparse map from offsets to byte positions in one segment's .log file.

File `<base_offset:020d>.index`, entries of 8 bytes, big-endian:

    0: u32  relative offset (batch base offset - segment base offset)
    4: u32  byte position of that batch's log entry in the .log file

One entry is added after at least index_interval_bytes of log since the previous one, so a lookup
finds a position at most that many bytes before the wanted batch. Both columns strictly increase.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from pathlib import Path

from kanal.broker.storage.ids import FilePosition, Offset
from kanal.broker.storage.index_file import IndexDamaged, IndexFile

_ENTRY = struct.Struct(">II")
ENTRY_BYTES = _ENTRY.size
RELATIVE_OFFSET_MAX = (1 << 32) - 1


class OffsetIndex:
    def __init__(self, path: Path, base_offset: Offset) -> None:
        self.base_offset = base_offset
        self._file = IndexFile(path, _ENTRY, "II")

    def __repr__(self) -> str:
        return f"<OffsetIndex {self._file.path.name} entries={len(self)}>"

    def __len__(self) -> int:
        return len(self._file)

    @property
    def path(self) -> Path:
        return self._file.path

    def load(self, log_size: int) -> None:
        """Load and sanity-check against the .log size; IndexDamaged when it cannot be trusted."""
        self._file.load()
        rel, pos = self._file.columns
        for i in range(1, len(rel)):
            if rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]:
                raise IndexDamaged(f"{self.path.name} entry {i} does not increase")
        if len(pos) and pos[-1] >= log_size:
            raise IndexDamaged(f"{self.path.name} points past the end of the log ({pos[-1]} >= {log_size})")

    def append(self, offset: Offset, position: FilePosition) -> None:
        rel, pos = self._file.columns
        relative = offset - self.base_offset
        if not 0 <= relative <= RELATIVE_OFFSET_MAX:
            raise ValueError(f"offset {offset} does not fit segment {self.base_offset}")
        if len(rel) and (relative <= rel[-1] or position <= pos[-1]):
            raise ValueError(f"index entry ({offset}, {position}) does not increase")
        self._file.append(relative, position)

    def lookup(self, offset: Offset) -> FilePosition:
        """Position of the last indexed batch starting at or before `offset` (0 when none)."""
        rel, pos = self._file.columns
        i = bisect_right(rel, offset - self.base_offset)
        return FilePosition(pos[i - 1] if i else 0)

    def truncate_to(self, offset: Offset) -> None:
        """Drop entries for batches at or after `offset`."""
        self._file.truncate_entries(bisect_left(self._file.columns[0], offset - self.base_offset))

    def rewrite(self, entries: list[tuple[Offset, FilePosition]]) -> None:
        self._file.rewrite([(offset - self.base_offset, position) for offset, position in entries])

    def drop_pending(self) -> None:
        self._file.drop_pending()

    def write_pending(self) -> None:
        self._file.write_pending()

    def flush(self) -> None:
        self._file.flush()

    def delete(self) -> None:
        self._file.delete()
