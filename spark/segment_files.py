"""SegmentFiles: which segment files of a data directory the Spark readers read, and in which groups.

A data directory may be one node's (`<data_dir>/<topic>-<partition>/<base:020d>.log`), a whole local
cluster's (`<root>/broker-0/...`, `<root>/controller-1/__cluster_metadata-0/...`, as `kanal dev` and
LocalCluster lay it out), or a copy of either. Partition directories are found up to three levels down.

Copies. A cluster directory holds a partition once per replica (and the metadata log once per
controller); this module lists them all. Which copy is read, and how far, is copy_plan.py's and
replica_history.py's: the copy with the current history up to the committed end, never simply the
longest (a dead ex-leader's copy can be the longest and hold records that were never committed).

Groups. A Spark partition reads whole segment files (never part of one), so files are packed, in
(topic, partition, base offset) order, into groups of at most `group_bytes_max` bytes (a larger file is
a group of its own). Each group is one InputPartition: the work spreads over executors by file.

Remote segments (tiered storage, issue 44) are `RemoteSegmentFile`s: a `.log` object in the cluster's
remote storage (`RemoteStore`), named by its key; copy_plan.py puts them before a partition's local files
from the metadata image, never by listing the store.

Pure apart from listing directories and stat; nothing is opened for writing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

METADATA_TOPIC = "__cluster_metadata"
METADATA_DIR_NAME = "__cluster_metadata-0"
# Partition directory names: `<topic>-<partition>`; topic names are [A-Za-z0-9._-]{1,249}.
_PARTITION_DIR = re.compile(r"^(?P<topic>[A-Za-z0-9._-]{1,249})-(?P<partition>\d{1,9})$")
_SEGMENT_FILE = re.compile(r"^(?P<base>\d{20})\.log$")
# How deep below the given directory partition directories are looked for (root/node/partition).
_SEARCH_DEPTH_MAX = 3
T = TypeVar("T")
# Default bytes of segment files per Spark partition: small enough that a partition of a few tens of MiB
# is several tasks and `local[2]` keeps both cores busy (at 128 MiB one task read such a partition while
# the other core idled), large enough that the per-task cost (~tens of ms) stays small against the read.
GROUP_BYTES_MAX_DEFAULT = 16 * 1024 * 1024
# Smallest share a read is cut into to reach its minimum number of Spark partitions (log_source.plan_groups):
# below it a task's start-up would cost more than its read.
SPLIT_BYTES_MIN = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One `.log` file: its partition, first offset, path and size when listed."""

    topic: str
    partition: int
    base_offset: int
    path: str
    size_bytes: int

    def __repr__(self) -> str:
        return f"<SegmentFile {self.topic}-{self.partition} base={self.base_offset} bytes={self.size_bytes}>"


@dataclass(frozen=True, slots=True)
class RemoteStore:
    """The cluster's remote storage (tiered storage): its URL (`s3://bucket/prefix`, `file:///dir`) and,
    for an S3-compatible store, its endpoint ("" for AWS or the standard `AWS_*` variables)."""

    url: str
    endpoint: str = ""


@dataclass(frozen=True, slots=True)
class RemoteSegmentFile(SegmentFile):
    """A remote segment's `.log` object: `path` is its key in `store`, `size_bytes` the size its metadata
    record gives. Read with range reads (segment_reader.read_segment_file), never downloaded."""

    store: RemoteStore = RemoteStore("")

    @property
    def url(self) -> str:
        return f"{self.store.url.rstrip('/')}/{self.path}"

    def __repr__(self) -> str:
        return f"<RemoteSegmentFile {self.topic}-{self.partition} base={self.base_offset} {self.url}>"


@dataclass(frozen=True, slots=True)
class RemoteOnlyRange(SegmentFile):
    """Offsets from `base_offset` up to the next segment's base that only the cluster's remote storage holds,
    in a read given no store (no `remoteStorage` option): `path` names them for the damage report;
    `size_bytes` is 0 (nothing here is read: task sizing leaves it out), `remote_bytes` their remote
    segments' total. Read, it is damage at its first offset (segment_reader.read_segment_file), so the
    offsets are reported lost, never skipped unannounced."""

    remote_bytes: int = 0

    def __repr__(self) -> str:
        return (f"<RemoteOnlyRange {self.topic}-{self.partition} base={self.base_offset} "
                f"remote_bytes={self.remote_bytes}>")


@dataclass(frozen=True, slots=True)
class PartitionCopy:
    """One replica's directory of one partition and its segment files, oldest first."""

    topic: str
    partition: int
    directory: str
    segments: tuple[SegmentFile, ...]


def _segments_of(directory: Path, topic: str, partition: int) -> tuple[SegmentFile, ...]:
    found = []
    for entry in directory.iterdir():
        m = _SEGMENT_FILE.match(entry.name)
        if m and entry.is_file():
            found.append(SegmentFile(topic, partition, int(m["base"]), str(entry), entry.stat().st_size))
    return tuple(sorted(found, key=lambda s: s.base_offset))


def find_partition_copies(root: Path) -> list[PartitionCopy]:
    """Every partition directory (with at least one segment file) under `root`, `root` included."""
    if not root.is_dir():
        raise FileNotFoundError(f"no such data directory: {root}")
    copies: list[PartitionCopy] = []
    frontier = [(root, 0)]
    while frontier:
        directory, depth = frontier.pop()
        m = _PARTITION_DIR.match(directory.name)
        if m:
            segments = _segments_of(directory, m["topic"], int(m["partition"]))
            if segments:
                copies.append(PartitionCopy(m["topic"], int(m["partition"]), str(directory), segments))
                continue
        if depth < _SEARCH_DEPTH_MAX:
            frontier.extend((child, depth + 1) for child in directory.iterdir() if child.is_dir())
    return sorted(copies, key=lambda c: (c.topic, c.partition, c.directory))


def group_segments(segments: list[SegmentFile], group_bytes_max: int) -> list[tuple[SegmentFile, ...]]:
    """Pack segment files, in order, into groups of at most group_bytes_max bytes (whole files)."""
    return pack_by_size(segments, group_bytes_max, lambda s: s.size_bytes)


def pack_by_size(
    items: Sequence[T], group_bytes_max: int, size_of: Callable[[T], int]
) -> list[tuple[T, ...]]:
    """Items packed, in order, into groups of at most group_bytes_max bytes; an item larger than that is a
    group of its own (items are never split)."""
    if group_bytes_max < 1:
        raise ValueError(f"group_bytes_max must be >= 1, got {group_bytes_max}")
    groups: list[tuple[T, ...]] = []
    current: list[T] = []
    current_bytes = 0
    for item in items:
        size = size_of(item)
        if current and current_bytes + size > group_bytes_max:
            groups.append(tuple(current))
            current, current_bytes = [], 0
        current.append(item)
        current_bytes += size
    if current:
        groups.append(tuple(current))
    return groups
