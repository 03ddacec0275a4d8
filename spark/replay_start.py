"""ReplayStart: where a replay of the metadata log begins when the log no longer starts at offset 0.

The controllers delete metadata log segments wholly below their newest snapshot once they are past
retention (raft/metadata_snapshots.py), so a log may start past 0. Applying its first batch to an empty
image would be wrong; the replay instead starts from a snapshot file of the same directory
(`<offset:020d>-<epoch:010d>.checkpoint`, kanal.metadata.snapshot_file's format): the **oldest** one at
or past the log start that decodes (damaged ones are skipped and reported), whose image is the initial
state, and applies the log from that snapshot's offset on. What happened before that offset is not in the
files any more: the history begins with a `snapshot_loaded` event.

A log that starts at 0 is replayed from 0 with an empty image, snapshots or not (the whole history). Read
only: files are listed and read, never written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kanal.metadata.snapshot_file import (
    SnapshotFile,
    SnapshotFileError,
    decode_snapshot_file,
    parse_snapshot_file_name,
)
from kanal.spark.copy_plan import log_start_of
from kanal.spark.segment_files import PartitionCopy


@dataclass(frozen=True, slots=True)
class ReplayStart:
    """The log's start, and the snapshot a replay starts from (None when the log starts at 0, or when no
    usable snapshot is there: then nothing can be replayed)."""

    log_start_offset: int
    snapshot: SnapshotFile | None = None
    snapshot_path: str | None = None
    damaged: tuple[str, ...] = field(default=())

    @property
    def offset(self) -> int:
        """The first offset the replay applies."""
        return self.snapshot.next_offset if self.snapshot is not None else self.log_start_offset

    @property
    def replayable(self) -> bool:
        return self.log_start_offset == 0 or self.snapshot is not None


def replay_start(copy: PartitionCopy) -> ReplayStart:
    """Where to start replaying `copy` (a `__cluster_metadata-0` directory)."""
    start = log_start_of(copy)
    if start == 0:
        return ReplayStart(0)
    candidates = []
    for entry in Path(copy.directory).iterdir():
        parsed = parse_snapshot_file_name(entry.name)
        if parsed is not None and parsed[0] >= start:
            candidates.append((parsed[0], entry))
    damaged = []
    for _offset, path in sorted(candidates):
        try:
            loaded = decode_snapshot_file(path.read_bytes(), path.name)
        except (OSError, SnapshotFileError) as exc:
            damaged.append(f"{path}: {exc}")
            continue
        return ReplayStart(start, loaded, str(path), tuple(damaged))
    return ReplayStart(start, None, None, tuple(damaged))
