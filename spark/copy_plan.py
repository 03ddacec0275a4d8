"""CopyPlan: the files of a data directory turned into what the Spark readers read — per partition, the
current copy up to its committed end, the copies that may stand in for it, and notes — and that work cut
into tasks. The I/O shell around replica_history.py (the rules are there).

What is read of each copy (never written; a live or copied data dir is never recovered):

- `leader-epoch-checkpoint` (kanal.broker.storage.leader_epoch_cache's format); missing or damaged, it
  is rebuilt from the batches' leader epochs, as a broker rebuilds it;
- `log-start-offset` (kanal.broker.storage.log) against the first segment's base;
- the log end: the last segment walked from its offset index's last entry (from byte 0 when the index is
  missing or points at no intact entry); past damage the walk looks for the next intact entry byte by
  byte (`RESYNC_BYTES_MAX`), so one damaged batch does not hide the end of an otherwise intact copy;
- `partition.metadata` (kanal.broker.storage.partition_metadata): the topic id of the directory;
- the node's `meta.properties` (kanal.broker.storage.meta_properties), in the directory above: which
  broker (or controller) the copy belongs to, matched against the ISR.

The high-water mark is not on disk (brokers keep it in memory), so the committed end comes from the ISR
in the metadata image (metadata_files.py reads it from the controllers' directories under the same root;
replica_history.py has the rule).

Tiered storage (issue 44). With the cluster's remote storage given (`RemoteStore`), a partition whose
topic the image knows and whose remote log the image holds (metadata/image.py RemoteLog) is read from the
remote log's start: the remote segments holding offsets in [remote log start, the current copy's log
start) come first in the current copy's segment list (`RemoteSegmentFile`, keys from
kanal.broker.storage.remote_keys), each up to the next segment's base as local files are, and the current
copy, chosen and bounded by the same rules, after them. A remote segment is committed by construction
(uploaded only below the high-water mark and the last stable offset). The store is never listed: the image
says which objects hold the partition. Read without the store, the offsets only its segments hold (from
the remote log's start up to the current copy's) are one `RemoteOnlyRange` before the copy's files: the read
reports them lost, as it does offsets no copy holds.

Tasks. Each partition's current copy is cut into `ReadItem`s of whole segment files of at most
`group_bytes_max` bytes; a single segment file larger than that is cut into parts at its offset index
entries (each part starts at an entry boundary, so it is walked like a file), and items are packed, in (topic,
partition, offset) order, into groups of at most
that many bytes: one group is one Spark InputPartition.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from kanal.broker.storage.index_file import IndexDamaged
from kanal.broker.storage.leader_epoch_cache import LeaderEpochCache
from kanal.broker.storage.meta_properties import FILE_NAME as META_PROPERTIES_FILE
from kanal.broker.storage.offset_index import OffsetIndex
from kanal.broker.storage.partition_metadata import PARTITION_METADATA_FILE, read_topic_id
from kanal.broker.storage.remote_keys import segment_keys
from kanal.broker.storage.segment_walk import mapped_segment_file, walk_segment
from kanal.metadata import MetadataImage
from kanal.spark.range_reader import CopySegments, ReadItem
from kanal.spark.replica_history import CopyState, PartitionFacts, PartitionPlan, plan_partition
from kanal.spark.segment_files import (
    METADATA_DIR_NAME,
    METADATA_TOPIC,
    PartitionCopy,
    RemoteOnlyRange,
    RemoteSegmentFile,
    RemoteStore,
    SegmentFile,
    find_partition_copies,
    group_segments,
    pack_by_size,
)
from kanal.spark.segment_reader import SegmentDamage, read_segment
from kanal.v1.batch import BROKER_SUFFIX_BYTES, ENTRY_HEADER_BYTES, CorruptEntry
from kanal.v1.error import KanalError

LOG_START_FILE = "log-start-offset"  # kanal.broker.storage.log's file of the same name
# How far past damage in a copy's last segment its log end is looked for (a byte-by-byte search).
RESYNC_BYTES_MAX = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """Every partition's plan and the copies they name, by directory."""

    plans: tuple[PartitionPlan, ...]
    copies: dict[str, PartitionCopy]
    notes: tuple[str, ...] = ()  # about the whole directory (no metadata log found, ...)

    def copy(self, directory: str | None) -> PartitionCopy | None:
        return self.copies.get(directory) if directory is not None else None


def log_start_of(copy: PartitionCopy) -> int:
    """The log start: the `log-start-offset` file or the first segment's base, whichever is larger."""
    first = copy.segments[0].base_offset if copy.segments else 0
    try:
        recorded = int((Path(copy.directory) / LOG_START_FILE).read_text().strip())
    except (OSError, ValueError):
        recorded = 0
    return max(first, recorded)


def _node_id(partition_dir: Path) -> int | None:
    """node.id from the meta.properties of the node directory holding this partition directory."""
    try:
        text = (partition_dir.parent / META_PROPERTIES_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "node.id":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def _log_end(copy: PartitionCopy) -> tuple[int, bool]:
    """One past the last offset of the copy, and whether that is known (module docstring)."""
    last = copy.segments[-1]
    start = 0
    try:
        index = OffsetIndex(Path(last.path).with_suffix(".index"), last.base_offset)  # type: ignore[arg-type]
        index.load(last.size_bytes)
        if len(index):
            start = index._file.columns[1][-1]  # the last indexed entry's byte position
    except (IndexDamaged, OSError):
        pass
    with mapped_segment_file(last.path) as view:
        if start and _entry_at(view, start, last.base_offset) is None:
            start = 0  # the index points at no intact entry: walk from the start
        return _walk_to_end(view, start, last.base_offset)


def _entry_at(view: memoryview, position: int, base_offset: int) -> int | None:
    """The end offset of an intact entry starting at `position`, else None."""
    if len(view) - position < ENTRY_HEADER_BYTES:
        return None
    length = int.from_bytes(view[position:position + 4], "big")
    if length < BROKER_SUFFIX_BYTES or position + ENTRY_HEADER_BYTES + length > len(view):
        return None  # the cheap test first: most byte positions fail here
    try:
        for entry in walk_segment(view[position:], base_offset):
            return entry.suffix.last_offset + 1
    except CorruptEntry:
        return None
    return None


def _walk_to_end(view: memoryview, position: int, base_offset: int) -> tuple[int, bool]:
    """The end offset of the last intact entry from `position` on. Past damage, the next intact entry
    is looked for byte by byte (both CRCs must match, so a false find is as unlikely as a CRC collision),
    for at most RESYNC_BYTES_MAX bytes; beyond that the end is only a lower bound (False)."""
    end = base_offset
    while True:
        try:
            for entry in walk_segment(view[position:], end):
                end = entry.suffix.last_offset + 1
            return end, True
        except CorruptEntry as exc:
            damaged = position + exc.position
        limit = min(len(view), damaged + 1 + RESYNC_BYTES_MAX)
        found = next((q for q in range(damaged + 1, limit) if _entry_at(view, q, end) is not None), None)
        if found is None:
            # A torn tail (nothing intact after the damage): the end a broker's recovery would keep.
            return end, limit == len(view)
        position = found


def _rebuilt_epochs(copy: PartitionCopy) -> list[tuple[int, int]]:
    """(epoch, start) from the batches themselves, as a broker rebuilds a lost checkpoint."""
    epochs: list[tuple[int, int]] = []
    for seg in copy.segments:
        for stored in read_segment(seg.path, seg.base_offset):
            if isinstance(stored, SegmentDamage):
                break
            if not epochs or stored.leader_epoch > epochs[-1][0]:
                epochs.append((stored.leader_epoch, stored.base_offset))
    return epochs


def copy_state(copy: PartitionCopy) -> CopyState:
    directory = Path(copy.directory)
    start = log_start_of(copy)
    end, exact = _log_end(copy)
    cache = LeaderEpochCache(directory)
    entries = [(int(e), int(o)) for e, o in cache.entries()] if cache.load() else _rebuilt_epochs(copy)
    # Clip to [start, end): epochs starting at or past the end were truncated away; the one covering the
    # start moves up to it (LeaderEpochCache.truncate_from_start's rule).
    entries = [(e, o) for e, o in entries if o < end]
    while len(entries) > 1 and entries[1][1] <= start:
        entries.pop(0)
    if entries and entries[0][1] < start:
        entries[0] = (entries[0][0], start)
    try:
        topic_id = read_topic_id(directory)
    except KanalError:
        topic_id = None  # damaged: its owner cannot be proven, so it is treated as not recorded
    written = 0
    if topic_id is not None:
        try:
            written = (directory / PARTITION_METADATA_FILE).stat().st_mtime_ns
        except OSError:
            written = 0
    return CopyState(
        copy.directory, tuple(entries), start, max(end, start), exact, _node_id(directory), topic_id, written
    )


def _facts(image: MetadataImage | None, topic: str, partition: int) -> PartitionFacts | None:
    if image is None:
        return None
    held = image.topics.get(topic)
    if held is None or partition >= len(held.partitions):
        return PartitionFacts(None)
    p = held.partitions[partition]
    return PartitionFacts(held.topic_id, tuple(p.isr), p.leader, p.leader_epoch)


def data_plan(root: Path, image: MetadataImage | None, topics: frozenset[str] | None = None,
              include_internal: bool = False, image_note: str = "", remote: RemoteStore | None = None
              ) -> ReadPlan:
    """Plans for the partition logs under `root` (the metadata log left out); `image`: the cluster as
    the metadata log there describes it (None when there is none); `remote`: the cluster's remote storage,
    whose segments come before the local copies (module docstring)."""
    by_partition: dict[tuple[str, int], list[PartitionCopy]] = defaultdict(list)
    for c in find_partition_copies(root):
        if c.topic == METADATA_TOPIC or (topics is not None and c.topic not in topics):
            continue
        if topics is None and not include_internal and c.topic.startswith("__"):
            continue
        by_partition[(c.topic, c.partition)].append(c)
    plans = []
    copies: dict[str, PartitionCopy] = {}
    for (topic, partition), found in sorted(by_partition.items()):
        copies.update((c.directory, c) for c in found)
        states = [copy_state(c) for c in found]
        plan = plan_partition(topic, partition, states, _facts(image, topic, partition))
        if image is not None and plan.primary is not None:
            plan = (_with_remote(plan, copies, image, remote) if remote is not None
                    else _without_remote(plan, copies, image))
        plans.append(plan)
    return ReadPlan(tuple(plans), copies, (image_note,) if image_note else ())


def _with_remote(plan: PartitionPlan, copies: dict[str, PartitionCopy], image: MetadataImage,
                 remote: RemoteStore) -> PartitionPlan:
    """`plan` read from the remote log's start, the remote segments below its current copy's start put
    before that copy's files (module docstring)."""
    held = image.topics.get(plan.topic)
    remote_log = image.remote_log(held.topic_id, plan.partition) if held is not None else None
    copy = copies.get(plan.primary or "")
    if held is None or remote_log is None or copy is None or remote_log.log_start_offset >= plan.read_from:
        return plan
    wanted = [s for s in remote_log.segments
              if s.end_offset > remote_log.log_start_offset and s.base_offset < plan.read_from]
    if not wanted or wanted[-1].end_offset < plan.read_from:
        # A gap between the remote log and the local copy (never, by the upload rules): read the copy only.
        return dataclasses.replace(plan, notes=(*plan.notes, (remote_log.end_offset, (
            f"{plan.topic}-{plan.partition}: the remote log ends at {remote_log.end_offset}, below the "
            f"current copy's start {plan.read_from}: the remote segments are not read"))))
    files = tuple(
        RemoteSegmentFile(plan.topic, plan.partition, s.base_offset,
                          segment_keys(image.cluster_id, held.topic_id, plan.partition, s.base_offset,
                                       s.end_offset, s.leader_epoch)[0], s.size_bytes, remote)
        for s in wanted)
    copies[copy.directory] = dataclasses.replace(copy, segments=files + copy.segments)
    return dataclasses.replace(plan, read_from=max(remote_log.log_start_offset, wanted[0].base_offset))


def _without_remote(plan: PartitionPlan, copies: dict[str, PartitionCopy], image: MetadataImage
                    ) -> PartitionPlan:
    """`plan` of a tiered partition read without its remote storage: the offsets from the remote log's start
    up to the current copy's start, which only remote segments hold, go before the copy's files as one
    RemoteOnlyRange, so the read reports them lost (a `_lost` row, FAILFAST's error) instead of starting
    above them unannounced (module docstring)."""
    held = image.topics.get(plan.topic)
    remote_log = image.remote_log(held.topic_id, plan.partition) if held is not None else None
    copy = copies.get(plan.primary or "")
    if held is None or remote_log is None or copy is None:
        return plan
    below = [s for s in remote_log.segments
             if s.end_offset > remote_log.log_start_offset and s.base_offset < plan.read_from]
    if not below:
        return plan
    start = max(remote_log.log_start_offset, below[0].base_offset)
    where = f"remote storage ({plan.topic}-{plan.partition} offsets {start}..{plan.read_from - 1})"
    gap = RemoteOnlyRange(plan.topic, plan.partition, start, where, 0, sum(s.size_bytes for s in below))
    copies[copy.directory] = dataclasses.replace(copy, segments=(gap, *copy.segments))
    return dataclasses.replace(plan, read_from=start)


def plan_notices(plan: ReadPlan) -> list[tuple[str | None, int | None, int, str]]:
    """What planning noticed that costs no committed record, as (topic, partition, offset, text): the
    directory's notes (topic None) and each partition's (divergent copies, copies of another topic id,
    offsets not yet on every in-sync replica). Known on the driver before any task runs, so the readers
    log them there and put them in the `notices` table, never in the data (spark/README.md)."""
    found: list[tuple[str | None, int | None, int, str]] = [(None, None, 0, n) for n in plan.notes]
    found += [(p.topic, p.partition, offset, text) for p in plan.plans for offset, text in p.notes]
    return found


def no_image_warning(root: Path) -> str | None:
    """The warning for reading partition logs where no metadata log is (None when there is one)."""
    if any(c.topic == METADATA_TOPIC for c in find_partition_copies(root)):
        return None
    return (f"no metadata log ({METADATA_DIR_NAME} of a controller) under {root}: the in-sync replicas "
            "are unknown, so each partition is read to the end of its copy with the latest leader epoch, "
            "which may hold records not yet committed; give the cluster directory (brokers' and "
            "controllers' data) to read only committed records")


def metadata_plan(root: Path) -> ReadPlan:
    """The plan for the metadata log: every controller's copy under `root`. Controllers write a batch to
    their log only once Raft committed and applied it, so each copy is committed to its end; the
    longest (latest epoch first) is read and the others stand in for damage."""
    found = [c for c in find_partition_copies(root) if c.topic == METADATA_TOPIC]
    if not found:
        raise FileNotFoundError(f"no {METADATA_DIR_NAME} directory with segments under {root}")
    plan = plan_partition(METADATA_TOPIC, 0, [copy_state(c) for c in found], None)
    return ReadPlan((plan,), {c.directory: c for c in found})


def metadata_copy(root: Path) -> PartitionCopy:
    """The controller copy of the metadata log that is read (metadata_plan's current copy)."""
    plan = metadata_plan(root)
    copy = plan.copy(plan.plans[0].primary)
    if copy is None:
        raise FileNotFoundError(f"no {METADATA_DIR_NAME} directory with segments under {root}")
    return copy


def data_copies(root: Path) -> list[PartitionCopy]:
    """The current copy of each partition under `root` (no metadata image: for a plain loop over files;
    the Spark readers also bound each by its committed end)."""
    plan = data_plan(root, None, include_internal=True)
    return [c for c in (plan.copy(p.primary) for p in plan.plans) if c is not None]


def read_items(plan: ReadPlan, group_bytes_max: int) -> list[ReadItem]:
    """Each partition's current copy cut into items of whole segment files (module docstring)."""
    items: list[ReadItem] = []
    global_notes = tuple((0, n) for n in plan.notes)
    for p in plan.plans:
        notes = global_notes + p.notes
        global_notes = ()
        primary = plan.copy(p.primary)
        segments = [s for s in primary.segments] if primary is not None else []
        bounds = {s.base_offset: (segments[i + 1].base_offset if i + 1 < len(segments) else p.committed_end)
                  for i, s in enumerate(segments)}
        wanted = [
            s for s in segments if bounds[s.base_offset] > p.read_from and s.base_offset < p.committed_end
        ]
        alternates = tuple((CopySegments(a.directory, plan.copies[a.directory].segments), a.agree_end)
                           for a in p.alternates)
        groups = group_segments(wanted, group_bytes_max) or [()]
        for group in groups:
            cuts = _cuts(group[0], group_bytes_max) if len(group) == 1 else []
            if len(cuts) > 1:
                # One segment larger than a task's share: parts from offset index entries.
                seg = group[0]
                ends = [*cuts[1:], (seg.size_bytes, bounds[seg.base_offset])]
                for (position, offset), (end_position, end_offset) in zip(cuts, ends):
                    items.append(
                        ReadItem(
                            p.topic,
                            p.partition,
                            group,
                            (end_offset,),
                            max(p.read_from, offset),
                            p.committed_end,
                            alternates,
                            notes,
                            position,
                            end_position - position,
                        )
                    )
                    notes = ()
                continue
            items.append(ReadItem(p.topic, p.partition, group, tuple(bounds[s.base_offset] for s in group),
                                  p.read_from, p.committed_end, alternates, notes))
            notes = ()
    if global_notes:
        items.append(ReadItem("", 0, (), (), 0, 0, (), global_notes))
    return items


def _cuts(segment: SegmentFile, part_bytes: int) -> list[tuple[int, int]]:
    """(byte position, offset) where parts of a segment larger than part_bytes begin: the first offset
    index entry at or past each multiple of part_bytes (the index maps a batch's base offset to where its
    entry begins). [] when the segment is small or its index is missing or damaged (read whole)."""
    if segment.size_bytes <= part_bytes or isinstance(segment, (RemoteSegmentFile, RemoteOnlyRange)):
        return []  # a remote segment is read whole (its offset index is in its .meta object)
    try:
        index = OffsetIndex(Path(segment.path).with_suffix(".index"), segment.base_offset)  # type: ignore[arg-type]
        index.load(segment.size_bytes)
    except (IndexDamaged, OSError):
        return []
    relative, positions = index._file.columns  # the on-disk entries: base offsets (relative) and positions
    cuts = [(0, segment.base_offset)]
    for rel, position in zip(relative, positions):
        if position >= cuts[-1][0] + part_bytes:
            cuts.append((position, segment.base_offset + rel))
    return cuts


def pack_items(items: list[ReadItem], group_bytes_max: int) -> list[tuple[ReadItem, ...]]:
    """Items packed in order into groups of at most group_bytes_max bytes (an item is never split)."""
    return pack_by_size(items, group_bytes_max, lambda i: i.size_bytes)


def deal_items(items: list[ReadItem], count: int) -> list[tuple[ReadItem, ...]]:
    """Items dealt in order into `count` groups of about equal bytes: each goes to the share its middle
    byte falls in, so a group is within half an item of total / count (pack_items' hard bound can leave
    a remainder group instead: 90 + 90 MB did not fit a 179.6 MB share, and a third task ran alone)."""
    total = sum(i.size_bytes for i in items)
    groups: list[list[ReadItem]] = [[] for _ in range(count)]
    at = 0
    for item in items:
        share = min((2 * at + item.size_bytes) * count // (2 * total), count - 1) if total else 0
        groups[share].append(item)
        at += item.size_bytes
    return [tuple(g) for g in groups if g]
