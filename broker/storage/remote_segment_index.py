"""What an uploaded remote segment holds, found by walking its bytes once (tiered storage, issue 44).

A remote segment's `.log` object is a run of stored log entries, starting at a batch boundary: a whole
local segment, or the part of one from the remote log's end on (a new leader's segments need not start
where the previous leader's uploads ended: replicas roll segments on their own). The walk checks every
entry as recovery does (segment_walk.py: both CRCs, offsets in order), so a damaged segment is never
uploaded, and gives what the `.meta` object and the metadata record carry:

- the offset index and the time index of the object, in the local files' formats (offset_index.py,
  time_index.py: relative to the object's first offset, positions within the object), one entry per
  `index_interval_bytes` of entries and always one for the first batch, as a local segment indexes;
- the leader epochs with batches in it, each with its first offset there (the stored batches' own
  epochs: the truth the epoch cache is built from);
- the end offset (one past the last batch's last offset) and the largest batch timestamp.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kanal.broker.storage.segment_walk import walk_segment
from kanal.v1.error import ErrorCode, KanalError

_OFFSET_ENTRY = struct.Struct(">II")  # offset_index.py's entry
_TIME_ENTRY = struct.Struct(">qI")  # time_index.py's entry


@dataclass(frozen=True, slots=True)
class SegmentContents:
    base_offset: int
    end_offset: int  # exclusive
    size_bytes: int
    max_timestamp_ms: int
    epochs: tuple[tuple[int, int], ...]  # (leader epoch, first offset with it)
    offset_index: bytes
    time_index: bytes


def describe_segment_bytes(view: bytes | memoryview, base_offset: int,
                           index_interval_bytes: int) -> SegmentContents:
    """Walk `view` (entries whose first batch starts at `base_offset`). CORRUPT_MESSAGE (CorruptEntry)
    when an entry is damaged or out of order, or when the bytes hold no batch or do not start at
    `base_offset`."""
    offset_entries: list[bytes] = []
    time_entries: list[bytes] = []
    epochs: list[tuple[int, int]] = []
    max_ts = -1
    last_indexed_ts = -1
    since_index = 0
    end = None
    for entry in walk_segment(view, base_offset):
        suffix = entry.suffix
        header = entry.header
        if header is None:  # walk_segment scans every header: never None here
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"entry at byte {entry.position} was not scanned")
        if end is None and suffix.base_offset != base_offset:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE,
                             f"the segment bytes start at offset {suffix.base_offset}, not {base_offset}")
        if not epochs or suffix.leader_epoch > epochs[-1][0]:
            epochs.append((suffix.leader_epoch, suffix.base_offset))
        elif suffix.leader_epoch < epochs[-1][0]:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE,
                             f"batch at {suffix.base_offset} has leader epoch {suffix.leader_epoch}, after "
                             f"epoch {epochs[-1][0]}")
        relative = suffix.base_offset - base_offset
        if entry.position == 0 or since_index >= index_interval_bytes:
            offset_entries.append(_OFFSET_ENTRY.pack(relative, entry.position))
            ts = max(max_ts, header.max_timestamp_ms)
            if ts > last_indexed_ts:
                time_entries.append(_TIME_ENTRY.pack(ts, relative))
                last_indexed_ts = ts
            since_index = 0
        since_index += entry.size
        max_ts = max(max_ts, header.max_timestamp_ms)
        end = suffix.last_offset + 1
    if end is None:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"no batch in the segment bytes from {base_offset}")
    return SegmentContents(base_offset, end, len(view), max_ts, tuple(epochs), b"".join(offset_entries),
                           b"".join(time_entries))
