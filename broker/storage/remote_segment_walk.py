"""A remote segment's `.log` object walked with range reads (tiered storage, issue 44), for readers
outside the broker: the Spark `kanal-log` source and `kanal dump-log`.

The object is a run of stored log entries from a batch boundary on (remote_segment_index.py), in
segment.py's format, so it is walked as a local file is (segment_walk.walk_segment: both CRCs, header
rules, offsets in order), only over bytes fetched in chunks: `chunk_bytes` at a time (`get_range`), the
entries wholly inside a chunk walked, the next chunk read from the first entry that did not fit. An entry
larger than a chunk is read alone, in one range read of its own length. Nothing is written to disk and the
object is never read whole into memory at once (unless it is smaller than one chunk).

Positions are the object's byte positions. A damaged entry, or an object that ends before `size_bytes`
(the size the metadata record gives), raises CorruptEntry at that position, as walk_segment does;
storage failures (ObjectMissing, RemoteStorageError) pass through for the caller to report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from kanal.broker.storage.remote_storage import RemoteStorage
from kanal.broker.storage.segment_walk import walk_segment
from kanal.v1.batch import BROKER_SUFFIX_BYTES, ENTRY_HEADER_BYTES, CorruptEntry, Entry

# Bytes per range read: large enough that a read's round trip (~1 ms to a local S3 server) is small against
# its transfer, small enough that a Spark task holds little beside its output.
CHUNK_BYTES_DEFAULT = 8 * 1024 * 1024


def walk_remote_segment(storage: RemoteStorage, key: str, size_bytes: int, base_offset: int, *,
                        start: int = 0, start_offset: int | None = None,
                        chunk_bytes: int = CHUNK_BYTES_DEFAULT) -> Iterator[Entry]:
    """Every entry of the object `key` from byte `start` (an entry boundary; `start_offset` its base
    offset) to `size_bytes`, checked, with its position in the object (module docstring)."""
    if chunk_bytes < ENTRY_HEADER_BYTES + BROKER_SUFFIX_BYTES:
        raise ValueError(f"chunk_bytes must be >= {ENTRY_HEADER_BYTES + BROKER_SUFFIX_BYTES}, "
                         f"got {chunk_bytes}")
    position = start
    expected = base_offset if start_offset is None else start_offset
    while position < size_bytes:
        chunk = storage.get_range(key, position, min(size_bytes, position + chunk_bytes))
        whole = _whole_entries_bytes(chunk)
        if whole == 0:
            length = int.from_bytes(chunk[:4], "big") if len(chunk) >= 4 else 0
            if len(chunk) >= ENTRY_HEADER_BYTES and length >= BROKER_SUFFIX_BYTES and \
                    position + ENTRY_HEADER_BYTES + length <= size_bytes:
                chunk = storage.get_range(key, position, position + ENTRY_HEADER_BYTES + length)
            whole = len(chunk)  # the walk below reports what is wrong with it, if anything
            if whole == 0:
                raise CorruptEntry(position, f"the object ends at {position}, before its recorded "
                                             f"size {size_bytes}")
        entries = walk_segment(memoryview(chunk)[:whole], base_offset)
        while True:
            try:
                entry = next(entries)
            except StopIteration:
                break
            except CorruptEntry as exc:  # at a position within the chunk
                raise CorruptEntry(position + exc.position, _reason(exc)) from None
            at = position + entry.position
            if entry.suffix.base_offset < expected:
                raise CorruptEntry(at, f"batch offset {entry.suffix.base_offset} is out of order")
            expected = entry.suffix.last_offset + 1
            yield dataclasses.replace(entry, position=at)
        position += whole


def _whole_entries_bytes(chunk: bytes) -> int:
    """How many leading bytes of `chunk` are whole entries by their length fields (0: not even one)."""
    at = 0
    while at + ENTRY_HEADER_BYTES <= len(chunk):
        length = int.from_bytes(chunk[at:at + 4], "big")
        if length < BROKER_SUFFIX_BYTES or at + ENTRY_HEADER_BYTES + length > len(chunk):
            break
        at += ENTRY_HEADER_BYTES + length
    return at


def _reason(exc: CorruptEntry) -> str:
    head, sep, rest = exc.message.partition(": ")
    return rest if sep and head.startswith("log entry at byte") else exc.message
