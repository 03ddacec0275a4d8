"""IndexFile: an append-only file of fixed-size big-endian entries, mirrored in memory as columns.

Both segment indexes are built on it (offset_index.py, time_index.py). The file holds nothing but
entries: no header, so its size is always a multiple of the entry size, and a torn last entry (a crash
mid-write) shows as a size that is not. Indexes are derived data: a damaged one is rebuilt from the log,
never trusted.
"""

from __future__ import annotations

import os
import struct
from array import array
from pathlib import Path


class IndexDamaged(Exception):
    """The index file does not hold a sane index; the caller rebuilds it from the log."""


class IndexFile:
    """Fixed-size entries of `entry` (a struct.Struct); column i of every entry is columns[i], an array of
    `typecodes[i]`, an integer typecode ("II": two unsigned 32-bit columns)."""

    def __init__(self, path: Path, entry: struct.Struct, typecodes: str) -> None:
        self.path = path
        self._entry = entry
        self._typecodes = typecodes
        self.columns: tuple[array[int], ...] = tuple(array(code) for code in typecodes)
        self._pending = bytearray()  # entries appended since the last write to the file

    def __len__(self) -> int:
        return len(self.columns[0])

    def load(self) -> None:
        """Read the file into memory; IndexDamaged when it is missing or torn."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise IndexDamaged(f"{self.path.name} is missing") from None
        if len(data) % self._entry.size:
            raise IndexDamaged(
                f"{self.path.name} has {len(data)} bytes, not a multiple of {self._entry.size}"
            )
        self.columns = tuple(array(code) for code in self._typecodes)
        for fields in self._entry.iter_unpack(data):
            for column, value in zip(self.columns, fields):
                column.append(value)
        self._pending.clear()

    def append(self, first: int, second: int) -> None:
        """Add one two-column entry (both indexes have two columns; this is on the append path)."""
        self.columns[0].append(first)
        self.columns[1].append(second)
        self._pending += self._entry.pack(first, second)

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries, in memory and on disk."""
        self.write_pending()
        for column in self.columns:
            del column[count:]
        with open(self.path, "r+b") as f:
            f.truncate(count * self._entry.size)

    def drop_pending(self) -> None:
        """Forget entries not yet written, as a crash would (they are rebuilt by recovery)."""
        self._pending.clear()

    def write_pending(self) -> None:
        """Push appended entries to the file (page cache)."""
        if self._pending:
            with open(self.path, "ab") as f:
                f.write(self._pending)
            self._pending.clear()

    def flush(self) -> None:
        """Write pending entries and fsync the file."""
        self.write_pending()
        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rewrite(self, rows: list[tuple[int, ...]]) -> None:
        """Replace every entry (after a rebuild) atomically: write a temporary file, then rename it."""
        self.columns = tuple(array(code) for code in self._typecodes)
        out = bytearray()
        for fields in rows:
            for column, value in zip(self.columns, fields):
                column.append(value)
            out += self._entry.pack(*fields)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_bytes(out)
        os.replace(tmp, self.path)
        self._pending.clear()

    def delete(self) -> None:
        self._pending.clear()
        self.path.unlink(missing_ok=True)
