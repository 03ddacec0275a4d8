"""SegmentFiles: which segment files of a data directory the Spark readers read, and in which groups.

A data directory may be one node's (`<data_dir>/<topic>-<partition>/<base:020d>.log`), a whole local
cluster's (`<root>/broker-0/...`, `<root>/controller-1/__cluster_metadata-0/...`, as `kanal dev` and
LocalCluster lay it out), or a copy of either. Partition directories are found up to three levels down.

One copy per partition. A cluster directory holds a partition once per replica; reading every copy
would count each record replication-factor times. For each (topic, partition) the reader takes the
replica whose log reaches furthest (highest last segment base offset, then the largest last segment),
which is the leader's copy or a caught-up follower's. `__cluster_metadata-0` likewise: the controller with
the longest metadata log.

Groups. A Spark partition reads whole segment files (never part of one), so files are packed, in
(topic, partition, base offset) order, into groups of at most `group_bytes_max` bytes (a larger file is
a group of its own). Each group is one InputPartition: the work spreads over executors by file.

Pure apart from listing directories and stat; nothing is opened for writing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

METADATA_TOPIC = "__cluster_metadata"
METADATA_DIR_NAME = "__cluster_metadata-0"
# Partition directory names: `<topic>-<partition>`; topic names are [A-Za-z0-9._-]{1,249}.
_PARTITION_DIR = re.compile(r"^(?P<topic>[A-Za-z0-9._-]{1,249})-(?P<partition>\d{1,9})$")
_SEGMENT_FILE = re.compile(r"^(?P<base>\d{20})\.log$")
# How deep below the given directory partition directories are looked for (root/node/partition).
_SEARCH_DEPTH_MAX = 3
# Default bytes of segment files per Spark partition.
GROUP_BYTES_MAX_DEFAULT = 128 * 1024 * 1024


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
class PartitionCopy:
    """One replica's directory of one partition and its segment files, oldest first."""

    topic: str
    partition: int
    directory: str
    segments: tuple[SegmentFile, ...]

    @property
    def reach(self) -> tuple[int, int]:
        """How far this copy's log goes: (last segment base offset, last segment bytes)."""
        if not self.segments:
            return (-1, -1)
        last = self.segments[-1]
        return (last.base_offset, last.size_bytes)


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


def choose_copies(copies: list[PartitionCopy]) -> list[PartitionCopy]:
    """One copy per (topic, partition): the one whose log reaches furthest (ties: directory name)."""
    best: dict[tuple[str, int], PartitionCopy] = {}
    for copy in copies:
        key = (copy.topic, copy.partition)
        held = best.get(key)
        if held is None or copy.reach > held.reach:
            best[key] = copy
    return [best[k] for k in sorted(best)]


def data_partitions(root: Path, topics: frozenset[str] | None = None) -> list[PartitionCopy]:
    """The partition logs to read for data: one copy each, the metadata log left out."""
    chosen = choose_copies(find_partition_copies(root))
    return [c for c in chosen if c.topic != METADATA_TOPIC and (topics is None or c.topic in topics)]


def metadata_copy(root: Path) -> PartitionCopy:
    """The metadata log to replay: the longest `__cluster_metadata-0` under `root`."""
    copies = [c for c in choose_copies(find_partition_copies(root)) if c.topic == METADATA_TOPIC]
    if not copies:
        raise FileNotFoundError(f"no {METADATA_DIR_NAME} directory with segments under {root}")
    return copies[0]


def group_segments(segments: list[SegmentFile], group_bytes_max: int) -> list[tuple[SegmentFile, ...]]:
    """Pack segment files, in order, into groups of at most group_bytes_max bytes (whole files)."""
    if group_bytes_max < 1:
        raise ValueError(f"group_bytes_max must be >= 1, got {group_bytes_max}")
    groups: list[tuple[SegmentFile, ...]] = []
    current: list[SegmentFile] = []
    current_bytes = 0
    for seg in segments:
        if current and current_bytes + seg.size_bytes > group_bytes_max:
            groups.append(tuple(current))
            current, current_bytes = [], 0
        current.append(seg)
        current_bytes += seg.size_bytes
    if current:
        groups.append(tuple(current))
    return groups
