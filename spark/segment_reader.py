"""SegmentReader: the stored batches of one segment file, read-only, with damage reported, not hidden.

The file format and the checks are the storage package's: the walk is
kanal.broker.storage.segment_walk (the one broker recovery and compaction use: both CRCs, header rules,
offsets in order and inside the segment's range) over a read-only mmap of the file, so nothing is copied
until a batch is parsed and nothing is ever written (Log.open would recover, i.e. rewrite, a log that was
not closed cleanly; a reader of a live or copied data dir must not).

Damage. A torn tail (a crash, or a live segment caught mid-write), a flipped bit or an out-of-order batch
ends the walk of that file at the first bad entry: entry lengths are only trustworthy up to there, so no
later entry in the file can be located safely. The reader then yields one `SegmentDamage` saying which
file, at which byte, the first offset it could not read, and how many bytes it left unread; the caller
reports it (a row, or an error in fail-fast mode) and goes on with the next file. A batch whose entry is
intact but whose records do not decode (an unknown codec) is reported the same way and skipped alone,
because its neighbours are still located by sound entry headers.

A remote segment (tiered storage: segment_files.RemoteSegmentFile) is walked the same way over range reads
of its object (kanal.broker.storage.remote_segment_walk); an object that is gone (remote retention
deleted it after the read was planned) is damage at its first offset, like a file that is gone; so are the
offsets only remote storage holds in a read not given the store (segment_files.RemoteOnlyRange).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

from kanal.broker.storage.remote_segment_walk import walk_remote_segment
from kanal.broker.storage.remote_storage import ObjectMissing, RemoteStorage, open_remote_storage
from kanal.broker.storage.segment_walk import mapped_segment_file, walk_segment
from kanal.spark.segment_files import RemoteOnlyRange, RemoteSegmentFile, RemoteStore, SegmentFile
from kanal.v1.batch import BatchHeader, CorruptEntry, Entry
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
    header: BatchHeader | None = None  # the walk's scan of the batch (its records payload located), if any


def read_segment(path: str, base_offset: int, start: int = 0, start_offset: int | None = None
                 ) -> Iterator[StoredEntry | SegmentDamage]:
    """Every intact entry of the segment file at `path`, in order, then a SegmentDamage if the file does
    not end on an intact entry. With `start`: from that byte position on, which must be where an entry
    begins (an offset index entry's position; `start_offset` is that entry's base offset)."""
    with mapped_segment_file(path) as view:
        expected = base_offset if start_offset is None else start_offset
        try:
            for entry in walk_segment(view[start:], base_offset):
                stored = _located(entry, start)
                expected = stored.last_offset + 1
                yield stored
        except CorruptEntry as exc:
            position = start + exc.position
            yield SegmentDamage(path, position, expected, len(view) - position, _reason(exc))


def read_segment_file(segment: SegmentFile, start: int = 0, start_offset: int | None = None
                      ) -> Iterator[StoredEntry | SegmentDamage]:
    """read_segment of a local file, or of a remote segment's object through range reads; a RemoteOnlyRange
    (offsets only the remote storage this read was not given holds) is damage at its first offset."""
    if isinstance(segment, RemoteOnlyRange):
        first = segment.base_offset if start_offset is None else start_offset
        yield SegmentDamage(segment.path, start, first, segment.remote_bytes, "held only by the cluster's "
                            "remote storage, which this read was not given (the remoteStorage option)")
        return
    if not isinstance(segment, RemoteSegmentFile):
        yield from read_segment(segment.path, segment.base_offset, start, start_offset)
        return
    expected = segment.base_offset if start_offset is None else start_offset
    position = start
    try:
        for entry in walk_remote_segment(remote_storage(segment.store), segment.path, segment.size_bytes,
                                         segment.base_offset, start=start, start_offset=start_offset):
            stored = _located(entry)
            expected, position = stored.last_offset + 1, entry.position + entry.size
            yield stored
    except CorruptEntry as exc:
        yield SegmentDamage(segment.url, exc.position, expected, segment.size_bytes - exc.position,
                            _reason(exc))
    except ObjectMissing as exc:
        yield SegmentDamage(segment.url, position, expected, segment.size_bytes - position,
                            f"the object is gone ({exc})")


@functools.lru_cache(maxsize=16)
def remote_storage(store: RemoteStore) -> RemoteStorage:
    """The remote storage of `store`, opened once per process (a Spark worker reads many segments)."""
    return open_remote_storage(store.url, endpoint=store.endpoint)


def _located(entry: Entry, start: int = 0) -> StoredEntry:
    suffix = entry.suffix
    return StoredEntry(start + entry.position, suffix.base_offset, suffix.last_offset, suffix.leader_epoch,
                       entry.batch, entry.header)


def _reason(exc: KanalError) -> str:
    # CorruptEntry's message starts with "log entry at byte N: "; the position is reported separately.
    message = exc.message
    head, sep, rest = message.partition(": ")
    return rest if sep and head.startswith("log entry at byte") else message
