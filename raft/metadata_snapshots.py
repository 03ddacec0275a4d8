"""Metadata snapshots on disk and the rules that make the metadata log's start move past 0.

Files. Each controller writes snapshot files of its committed image into the metadata log's directory,
`__cluster_metadata-0/<next_offset:020d>-<controller_epoch:010d>.checkpoint`, in the format of
kanal.metadata.snapshot_file (magic, offset, epoch, write time, a MetadataSnapshot, CRC-32). A file is
written atomically: `<name>.tmp`, fsync, rename to `<name>`, fsync the directory; a crash leaves either no
file or a whole one (a stray `.tmp` is removed when the log is opened). A file that does not decode is
skipped (logged), never half-loaded: `newest_valid` and the readers fall back to the next older file.

When (SnapshotSettings, KRaft's rules with kanal's names):
- a snapshot is due once the log has grown `interval_bytes` since the last one
  (metadata.log.max.record.bytes.between.snapshots, 20 MiB) or `interval_ms` has passed since the last
  one and at least one record came in since (metadata.log.max.snapshot.interval.ms, 1 h);
- a segment of the metadata log is deleted only when it lies wholly below the newest published snapshot
  (its last offset is below the snapshot's offset) and is not the active segment, and then only while it
  is older than `retention_ms` (its newest record time; metadata.max.retention.ms, 7 days) or the log is
  larger than `retention_bytes` (metadata.max.retention.bytes, 100 MiB). Oldest first; the first segment
  that may not go stops the deletion. The log start becomes the first kept segment's base offset;
- snapshot files: the `retained` newest are kept, and the oldest one at or past the log start (a full
  replay of what the log still holds starts there: `kanal audit`); the others are deleted.

So the log start is never past the newest snapshot, and the log holds every offset from its start to its
end: a reader below the start loads a snapshot at or past the start and continues from its offset.

`snapshot_due` and `retained_log_start` are pure (time is an argument); `MetadataSnapshots` does the file
I/O. The caller (MetadataStore) serialises calls.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kanal.broker.storage.durable_files import fsync_directory, write_file_atomically
from kanal.metadata.snapshot_file import (
    SnapshotFile,
    SnapshotFileError,
    decode_snapshot_file,
    encode_snapshot_file,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from kanal.v1.metadata_pb2 import MetadataSnapshot

_log = logging.getLogger("kanal.raft.snapshots")

SNAPSHOT_INTERVAL_BYTES_DEFAULT = 20 * 1024 * 1024
SNAPSHOT_INTERVAL_MS_DEFAULT = 3_600_000
SNAPSHOTS_RETAINED_DEFAULT = 3
METADATA_RETENTION_MS_DEFAULT = 7 * 24 * 3_600_000
METADATA_RETENTION_BYTES_DEFAULT = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SnapshotSettings:
    """When snapshots are taken and what the metadata log keeps (bounds checked by ControllerConfig)."""

    interval_bytes: int = SNAPSHOT_INTERVAL_BYTES_DEFAULT
    interval_ms: int = SNAPSHOT_INTERVAL_MS_DEFAULT
    retained: int = SNAPSHOTS_RETAINED_DEFAULT
    retention_ms: int = METADATA_RETENTION_MS_DEFAULT
    # None: no size limit (time alone decides).
    retention_bytes: int | None = METADATA_RETENTION_BYTES_DEFAULT

    def __post_init__(self) -> None:
        if self.interval_bytes < 1 or self.interval_ms < 1 or self.retained < 1 or self.retention_ms < 0:
            raise ValueError(f"bad snapshot settings: {self!r}")
        if self.retention_bytes is not None and self.retention_bytes < 0:
            raise ValueError(f"bad snapshot settings: {self!r}")


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """What retention needs to know of one segment."""

    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp_ms: int


def snapshot_due(settings: SnapshotSettings, *, bytes_since: int, records_since: int, ms_since: int) -> bool:
    """Whether a snapshot should be taken now, given what came in since the last one."""
    if records_since <= 0:
        return False
    return bytes_since >= settings.interval_bytes or ms_since >= settings.interval_ms


def retained_log_start(
    segments: Sequence[SegmentSpan], snapshot_offset: int, now_ms: int, settings: SnapshotSettings
) -> int | None:
    """The new log start after retention (the base of the first segment kept), or None when no segment
    may be deleted. `segments` oldest first, the last one being the active segment."""
    total = sum(s.size_bytes for s in segments)
    deleted = 0
    for seg in segments[:-1]:  # never the active segment
        if seg.next_offset > snapshot_offset:
            break  # not wholly below the newest snapshot: this segment and all later ones stay
        too_old = seg.max_timestamp_ms < now_ms - settings.retention_ms
        too_big = settings.retention_bytes is not None and total > settings.retention_bytes
        if not (too_old or too_big):
            break
        total -= seg.size_bytes
        deleted += 1
    return segments[deleted].base_offset if deleted else None


class MetadataSnapshots:
    """The snapshot files of one metadata log directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __repr__(self) -> str:
        return f"<MetadataSnapshots {self.directory} offsets={[o for o, _, _ in self.list()]}>"

    def list(self) -> list[tuple[int, int, Path]]:
        """(next_offset, controller_epoch, path) of every snapshot file, oldest first."""
        found = []
        for entry in self.directory.iterdir():
            parsed = parse_snapshot_file_name(entry.name)
            if parsed is not None:
                found.append((parsed[0], parsed[1], entry))
        return sorted(found)

    def write(self, snapshot: MetadataSnapshot, written_ms: int) -> Path:
        """Write `snapshot` atomically (temp file, fsync, rename, fsync the directory); its path."""
        path = self.directory / snapshot_file_name(snapshot.next_offset, snapshot.controller_epoch)
        write_file_atomically(path, encode_snapshot_file(snapshot, written_ms))
        return path

    def has_valid(self, offset: int) -> bool:
        """Whether a snapshot file at `offset` is there and decodes."""
        return any(o == offset and read_snapshot(path) is not None for o, _, path in self.list())

    def newest_valid(self) -> SnapshotFile | None:
        """The newest snapshot file that decodes; damaged ones are logged and skipped."""
        for _offset, _epoch, path in reversed(self.list()):
            loaded = read_snapshot(path)
            if loaded is not None:
                return loaded
        return None

    def prune(self, retained: int, log_start: int) -> builtins.list[int]:  # `list` is a method here
        """Keep the `retained` newest snapshot files and the oldest one at or past `log_start` (where a
        full replay of what the log still holds starts); delete the others. The offsets deleted."""
        files = self.list()
        oldest_usable = next((offset for offset, _, _ in files if offset >= log_start), None)
        deleted = []
        for offset, _epoch, path in files[: max(0, len(files) - retained)]:
            if offset != oldest_usable:
                path.unlink(missing_ok=True)
                deleted.append(offset)
        if deleted:
            fsync_directory(self.directory)
        return deleted


def read_snapshot(path: Path) -> SnapshotFile | None:
    """The snapshot in `path`, or None (logged) when it is damaged or unreadable."""
    try:
        return decode_snapshot_file(path.read_bytes(), path.name)
    except (OSError, SnapshotFileError) as exc:
        _log.warning("skipping the damaged metadata snapshot %s: %s", path, exc)
        return None
