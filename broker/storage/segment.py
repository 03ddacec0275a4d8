"""LogSegment: one `<base_offset:020d>.log` file of a partition log, with its two indexes.

The .log file is a plain concatenation of log entries (records.proto, kanal.v1.batch):

    <N u32 BE> <entry CRC u32 BE> <N bytes: producer batch bytes + 19-byte broker suffix> ...

No file header, no padding: byte 0 is the first entry, the file size is the end of the last one. Batch
offsets strictly increase within a segment and all lie in [base_offset, base_offset + 2^32). Navigation
reads only the 8-byte entry header and the 19-byte suffix of an entry; recovery and compaction are the
only readers that check CRCs and open batches.

Not thread-safe: the owning Log serialises access.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kanal.broker.storage.ids import FilePosition, Offset
from kanal.broker.storage.index_file import IndexDamaged
from kanal.broker.storage.offset_index import RELATIVE_OFFSET_MAX, OffsetIndex
from kanal.broker.storage.segment_walk import mapped_segment, walk_segment
from kanal.broker.storage.time_index import TimeIndex
from kanal.v1.batch import (
    BROKER_SUFFIX_BYTES,
    ENTRY_HEADER,
    ENTRY_HEADER_BYTES,
    BatchHeader,
    CorruptEntry,
    SuffixFields,
    parse_broker_suffix,
    scan_batch,
)
from kanal.v1.error import KanalError

_FILE_START = FilePosition(0)


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class EntryLocation:
    """Where one entry lies in the .log file and what its suffix says."""

    position: FilePosition
    size: int  # entry header + batch bytes
    suffix: SuffixFields


@dataclass(frozen=True, slots=True)
class RecoveredEntry:
    """An entry that recovery (or a verified scan) checked: location plus its scanned header."""

    location: EntryLocation
    header: BatchHeader


class LogSegment:
    def __init__(self, directory: Path, base_offset: Offset, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = directory / segment_file_name(base_offset, ".log")
        self.offset_index = OffsetIndex(directory / segment_file_name(base_offset, ".index"), base_offset)
        self.time_index = TimeIndex(directory / segment_file_name(base_offset, ".timeindex"), base_offset)
        self._index_interval_bytes = index_interval_bytes
        self._fd = -1
        self.size = 0
        self.next_offset = base_offset  # one past the last offset in the segment
        self.max_timestamp_ms = -1
        self.first_batch_timestamp_ms: int | None = None  # max timestamp of the first batch (age rolls)
        self._bytes_since_index_entry = 0
        # Filled by recover(): (leader epoch, base offset) where the epoch changes, for the epoch cache.
        self.epoch_starts: list[tuple[int, int]] = []
        # Bytes the last recover() cut from the tail (set by `recovered`).
        self.cut_bytes = 0

    def __repr__(self) -> str:
        return (
            f"<LogSegment {self.log_path.parent.name}/{self.log_path.name} "
            f"offsets=[{self.base_offset},{self.next_offset}) bytes={self.size}>"
        )

    # ---- opening ----

    @classmethod
    def create(cls, directory: Path, base_offset: Offset, index_interval_bytes: int) -> LogSegment:
        seg = cls(directory, base_offset, index_interval_bytes)
        for path in (seg.log_path, seg.offset_index.path, seg.time_index.path):
            path.unlink(missing_ok=True)
            path.touch()
        seg._open_fd()
        return seg

    @classmethod
    def open(cls, directory: Path, base_offset: Offset, index_interval_bytes: int) -> LogSegment:
        """Open a segment that was closed cleanly: trust the log, check the indexes, rebuild them if
        they are damaged, and read the last batches to learn the segment's end."""
        seg = cls(directory, base_offset, index_interval_bytes)
        seg._open_fd()
        seg.size = os.fstat(seg._fd).st_size
        try:
            seg.offset_index.load(seg.size)
            start = seg.offset_index.lookup(Offset(RELATIVE_OFFSET_MAX + base_offset))
            locations = list(seg.locations(start))
            seg.next_offset = Offset(locations[-1].suffix.last_offset + 1) if locations else base_offset
            seg.time_index.load(seg.next_offset - base_offset)
            tail_max_ts = max((seg._header_at(loc).max_timestamp_ms for loc in locations), default=-1)
            seg.max_timestamp_ms = max(seg.time_index.last_timestamp_ms, tail_max_ts)
            if seg.size:
                first = next(seg.locations(FilePosition(0)))
                seg.first_batch_timestamp_ms = seg._header_at(first).max_timestamp_ms
        except (IndexDamaged, KanalError):
            seg.recover()
        return seg

    @classmethod
    def recovered(cls, directory: Path, base_offset: Offset, index_interval_bytes: int) -> LogSegment:
        """Open a segment that may not have been closed cleanly: check every entry, cut a bad tail and
        rebuild both indexes (recover()); `cut_bytes` then says how much was cut."""
        seg = cls(directory, base_offset, index_interval_bytes)
        seg._open_fd()
        seg.cut_bytes = seg.recover()
        return seg

    def _open_fd(self) -> None:
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)

    @property
    def index_interval_bytes(self) -> int:
        return self._index_interval_bytes

    # ---- appending ----

    def fits(self, entry_size: int, last_offset: int, segment_bytes_max: int, index_entries_max: int) -> bool:
        """Whether an entry can be appended without rolling (size, relative-offset and index limits)."""
        if self.size == 0:
            return last_offset - self.base_offset <= RELATIVE_OFFSET_MAX
        return (
            self.size + entry_size <= segment_bytes_max
            and last_offset - self.base_offset <= RELATIVE_OFFSET_MAX
            and len(self.offset_index) < index_entries_max
        )

    def append(self, parts: Sequence[bytes | memoryview], size: int, base_offset: int, last_offset: int,
               max_timestamp_ms: int) -> None:
        """Write one entry given as consecutive parts of `size` bytes in total, at the end of the file."""
        if base_offset < self.next_offset:
            raise ValueError(f"{self!r}: batch at {base_offset} does not follow {self.next_offset}")
        written = os.pwritev(self._fd, parts, self.size)
        if written != size:
            # A short write leaves a torn entry; the file is cut back so the segment stays well formed.
            os.ftruncate(self._fd, self.size)
            raise OSError(f"short write to {self.log_path}: {written} of {size} bytes")
        self._index(FilePosition(self.size), size, Offset(base_offset), max_timestamp_ms)
        self.size += size
        self.next_offset = Offset(last_offset + 1)
        if self.first_batch_timestamp_ms is None:
            self.first_batch_timestamp_ms = max_timestamp_ms

    def _index(self, position: FilePosition, size: int, base_offset: Offset, max_timestamp_ms: int) -> None:
        """Index entries are added before the bytes they cover grow past the interval, and always for
        the first batch of a segment. The time entry is the largest timestamp so far, this batch's
        included (when it grew since the last entry), so the last entry and the batches after the last
        offset index entry give the segment's largest timestamp on open: with this batch's own maximum,
        a larger one in a batch between index entries was lost at a restart, and time retention and
        ListOffsets by timestamp then passed over a segment holding later records."""
        if position == 0 or self._bytes_since_index_entry >= self._index_interval_bytes:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(max(self.max_timestamp_ms, max_timestamp_ms), base_offset)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        self.max_timestamp_ms = max(self.max_timestamp_ms, max_timestamp_ms)

    # ---- reading ----

    def read_bytes(self, position: int, length: int) -> bytes:
        data = os.pread(self._fd, length, position)
        if len(data) != length:
            raise CorruptEntry(position, f"wanted {length} bytes, the file has {len(data)}")
        return data

    def location_at(self, position: FilePosition) -> EntryLocation:
        """The entry starting at `position`, from its header and suffix only."""
        head = os.pread(self._fd, ENTRY_HEADER_BYTES, position)
        if len(head) < ENTRY_HEADER_BYTES:
            raise CorruptEntry(position, "incomplete entry header")
        length, _crc = ENTRY_HEADER.unpack(head)
        if length < BROKER_SUFFIX_BYTES or position + ENTRY_HEADER_BYTES + length > self.size:
            raise CorruptEntry(position, f"entry length {length} does not fit the segment")
        suffix = self.read_bytes(
            position + ENTRY_HEADER_BYTES + length - BROKER_SUFFIX_BYTES, BROKER_SUFFIX_BYTES
        )
        try:
            fields = parse_broker_suffix(suffix)
        except KanalError as exc:
            raise CorruptEntry(position, exc.message) from None
        return EntryLocation(position, ENTRY_HEADER_BYTES + length, fields)

    def locations(self, start: FilePosition = _FILE_START) -> Iterator[EntryLocation]:
        """Entries from `start` to the end of the segment, by header and suffix only."""
        position = start
        while position < self.size:
            location = self.location_at(FilePosition(position))
            yield location
            position = FilePosition(position + location.size)

    def _header_at(self, location: EntryLocation) -> BatchHeader:
        body = self.read_bytes(location.position + ENTRY_HEADER_BYTES, location.size - ENTRY_HEADER_BYTES)
        return scan_batch(body)

    def find(self, offset: Offset) -> EntryLocation | None:
        """The first entry whose last offset is >= `offset` (the batch holding it, or the next one after a
        compaction gap); None when the segment ends before it."""
        for location in self.locations(self.offset_index.lookup(offset)):
            if location.suffix.last_offset >= offset:
                return location
        return None

    def read(self, offset: Offset, bytes_max: int, offset_limit: int | None) -> bytes:
        """Whole entries from the batch holding `offset` on, at most bytes_max bytes but at least one
        entry, and only batches that end below offset_limit (exclusive) when it is given."""
        first = self.find(offset)
        if first is None or (offset_limit is not None and first.suffix.last_offset >= offset_limit):
            return b""
        end = first.position + first.size
        while end < self.size:
            location = self.location_at(FilePosition(end))
            if end + location.size - first.position > bytes_max:
                break
            if offset_limit is not None and location.suffix.last_offset >= offset_limit:
                break
            end += location.size
        return self.read_bytes(first.position, end - first.position)

    def verified_entries(self) -> Iterator[RecoveredEntry]:
        """Every entry, fully checked by the one segment walk (segment_walk.py: both CRCs, header rules,
        offsets in order and inside the segment's range). Raises CorruptEntry at the first bad one."""
        with mapped_segment(self._fd, self.size) as view:
            for entry in walk_segment(view, self.base_offset):
                if entry.header is None:  # walk_segment checks every entry, so each carries its header
                    raise RuntimeError(f"{self!r}: entry at {entry.position} came back unchecked")
                location = EntryLocation(FilePosition(entry.position), entry.size, entry.suffix)
                yield RecoveredEntry(location, entry.header)

    # ---- recovery ----

    def recover(self) -> int:
        """Check every entry; cut the file at the first bad one (a torn or corrupt tail) and rebuild both
        indexes. Returns the number of bytes cut. `epoch_starts` then lists (leader epoch, base offset)
        for every batch whose epoch differs from the batch before it."""
        self.size = os.fstat(self._fd).st_size
        offset_entries: list[tuple[Offset, FilePosition]] = []
        time_entries: list[tuple[int, Offset]] = []
        self.next_offset = self.base_offset
        self.max_timestamp_ms = -1
        self.first_batch_timestamp_ms = None
        valid_end = 0
        since_index = 0
        self.epoch_starts = []
        try:
            for entry in self.verified_entries():
                loc, header = entry.location, entry.header
                if not self.epoch_starts or self.epoch_starts[-1][0] != loc.suffix.leader_epoch:
                    self.epoch_starts.append((loc.suffix.leader_epoch, loc.suffix.base_offset))
                if loc.position == 0 or since_index >= self._index_interval_bytes:
                    offset_entries.append((Offset(loc.suffix.base_offset), loc.position))
                    so_far = max(self.max_timestamp_ms, header.max_timestamp_ms)  # as _index
                    if not time_entries or so_far > time_entries[-1][0]:
                        time_entries.append((so_far, Offset(loc.suffix.base_offset)))
                    since_index = 0
                since_index += loc.size
                self.max_timestamp_ms = max(self.max_timestamp_ms, header.max_timestamp_ms)
                if self.first_batch_timestamp_ms is None:
                    self.first_batch_timestamp_ms = header.max_timestamp_ms
                self.next_offset = Offset(loc.suffix.last_offset + 1)
                valid_end = loc.position + loc.size
        except CorruptEntry:
            pass  # everything from the first bad entry on is the torn tail
        cut = self.size - valid_end
        if cut:
            os.ftruncate(self._fd, valid_end)
            self.size = valid_end
        self._bytes_since_index_entry = since_index
        self.offset_index.rewrite(offset_entries)
        self.time_index.rewrite(time_entries)
        return cut

    # ---- changing the end ----

    def truncate_to(self, offset: Offset) -> None:
        """Remove the batch holding `offset` (or the first one after it) and every later batch. Batches
        are atomic, so next_offset ends at or below `offset`."""
        location = self.find(offset)
        if location is None:
            return
        cut_at = location.position
        self.offset_index.truncate_to(Offset(location.suffix.base_offset))
        self.time_index.truncate_to(Offset(location.suffix.base_offset))
        os.ftruncate(self._fd, cut_at)
        self.size = cut_at
        # Re-derive the end state from what is left (the tail after the last index entry is short).
        remaining = list(
            self.locations(self.offset_index.lookup(Offset(self.base_offset + RELATIVE_OFFSET_MAX)))
        )
        self.next_offset = Offset(remaining[-1].suffix.last_offset + 1) if remaining else self.base_offset
        tail_ts = max((self._header_at(loc).max_timestamp_ms for loc in remaining), default=-1)
        self.max_timestamp_ms = max(self.time_index.last_timestamp_ms, tail_ts)
        if cut_at == 0:
            self.first_batch_timestamp_ms = None
        self._bytes_since_index_entry = sum(loc.size for loc in remaining)

    # ---- durability and lifetime ----

    def sync_data(self) -> None:
        """fdatasync the .log file only (see Log.sync_data)."""
        os.fdatasync(self._fd)

    def flush(self) -> None:
        """fsync the log and both indexes."""
        os.fdatasync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        if self._fd >= 0:
            self.offset_index.write_pending()
            self.time_index.write_pending()
            os.close(self._fd)
            self._fd = -1

    def close_unclean(self) -> None:
        """Release the file without writing pending index entries, as a crash would leave it: the next
        open recovers the indexes from the log."""
        if self._fd >= 0:
            self.offset_index.drop_pending()
            self.time_index.drop_pending()
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
