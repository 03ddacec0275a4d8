"""MetadataStore: this controller's committed metadata — the image, the last applied proposal, the log.

State:
- `image`: kanal.metadata's MetadataImage of every applied batch (next_offset = metadata log end).
- `last_proposal`: the proposal id of the last applied batch: the head of the chain that conditional
  commands name as their parent (command.py).
- the metadata log (metadata_log.py) and its durable end: the offset below which every batch is fsynced
  AND confirmed by Raft in this run (applied from a committed entry, or part of an installed snapshot).
  Readers (FetchMetadata, heartbeat replies, write acknowledgements) only ever see durable offsets.

Never serve an unconfirmed tail. After a restart the log may hold batches past what Raft has replayed
so far (normal: the replay catches up and the writer checks them one by one), or past anything Raft will
ever commit (a Raft history lost in a power cut before the journal was durable). So the durable end
starts at 0 at start-up and follows the committed image (`image.next_offset`), never the log's end. A
stored batch that Raft replaces is cut off with everything after it by the writer (metadata_log.py,
"Repair"). No tail outlives the next leader: every new active controller commits a NoOp batch of its
own term, which no earlier history holds, so when it applies, whatever the log still held from that
offset on is cut.

Writes come from one thread at a time, in Raft order: `apply_entry` for each committed entry (each of its
commands in order), `flush` after a group of entries (one fsync for the group), `install` when
pysyncobj loads a snapshot. Readers use
`read`, `copy_image` and `fetch`, which take the lock. A broken invariant on the write side
(MetadataInvariantError, MetadataLogGapError, CommandFormatError, a storage error) is not caught here:
the caller stops the process, because the image and the log could no longer be trusted to match the
other controllers'.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from kanal.broker.storage.log import Log
from kanal.metadata import (
    MetadataImage,
    MetadataInvariantError,
    apply_batch,
    image_from_snapshot,
    image_to_snapshot,
)
from kanal.metadata.log_codec import LogBatch
from kanal.raft.command import MetadataCommand, ProposalId, Verdict, decode_command, decode_entry, judge
from kanal.raft.metadata_log import (
    BelowLogStartError,
    MetadataLogGapError,
    MetadataLogWriter,
    WriteResult,
    record_values,
)
from kanal.raft.metadata_snapshots import (
    MetadataSnapshots,
    SegmentSpan,
    SnapshotSettings,
    retained_log_start,
    snapshot_due,
)
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.metadata_pb2 import MetadataSnapshot

T = TypeVar("T")

_log = logging.getLogger("kanal.raft.store")


@dataclass(frozen=True, slots=True)
class AppliedEntry:
    """How one committed command was judged, and the metadata log end after it."""

    proposal: ProposalId
    verdict: Verdict
    end_offset: int

    def __repr__(self) -> str:
        return f"<Applied {self.proposal!r} {self.verdict.value} end={self.end_offset}>"


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Whole log entries from the requested offset, and the log's durable bounds."""

    entries: bytes
    start_offset: int
    end_offset: int
    controller_epoch: int


class MetadataStore:
    def __init__(self, log: Log, settings: SnapshotSettings | None = None) -> None:
        self._log = log
        self._writer = MetadataLogWriter(log)
        self._settings = settings or SnapshotSettings()
        self.snapshots = MetadataSnapshots(log.directory)
        # The newest snapshot that is written both as a snapshot file and as pysyncobj's dump (published):
        # retention deletes only below it. None until one is (no retention before the first).
        self._snapshot_offset: int | None = None
        # What came in since the last snapshot: bytes appended in this run, and when it was taken.
        self._appended_bytes = 0
        self._snapshot_bytes_mark = 0
        self._snapshot_image_offset = 0
        self._snapshot_ms: int | None = None
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # taken before self._lock, by flush only
        self._durable = threading.Condition(self._lock)
        self._image = MetadataImage()
        self._last_proposal = ProposalId.NONE
        self._dirty = False
        # Nothing is confirmed by Raft yet: the replay (and snapshot load) moves this up.
        self._durable_end = 0
        self.replaced_batches = 0  # repairs made: stored batches the writer replaced

    def __repr__(self) -> str:
        return (
            f"<MetadataStore image_end={self._image.next_offset} durable_end={self._durable_end} "
            f"log_end={self._log.log_end_offset} last={self._last_proposal!r}>"
        )

    # -- the write side (one thread at a time) -----------------------------------------------------

    def apply_entry(self, data: bytes) -> list[AppliedEntry]:
        """Judge and apply the commands of one committed Raft entry (one, or a group: command.py) in
        order, each exactly as if it were an entry of its own."""
        return [self._apply_command(command) for command in decode_entry(data)]

    def apply(self, data: bytes) -> AppliedEntry:
        """Judge and apply one committed command (an entry of one command); append it to the log exactly
        once."""
        return self._apply_command(decode_command(data))

    def _apply_command(self, command: MetadataCommand) -> AppliedEntry:
        batch = command.parse_batch()
        with self._lock:
            image = self._image
            verdict = judge(
                command,
                batch.controller_epoch,
                highest_epoch=image.controller_epoch,
                last_proposal=self._last_proposal,
            )
            if verdict is not Verdict.APPLY:
                return AppliedEntry(command.proposal, verdict, image.next_offset)
            base = image.next_offset
            if not command.unconditional and command.expected_base_offset != base:
                # The parent matched, so the image is the one the batch was decided on; its offset
                # must match too. If not, the chain of ids and the offsets disagree: a bug.
                raise MetadataInvariantError(
                    f"{command!r} follows its parent but expects offset {command.expected_base_offset}, "
                    f"the image ends at {base}"
                )
            values = record_values(command.batch_bytes)
            if not apply_batch(image, batch, base):
                raise MetadataInvariantError(f"{command!r} was fenced by apply_batch after judge accepted it")
            self._last_proposal = command.proposal
            result = self._writer.write(
                LogBatch(base, batch.controller_epoch, tuple(values), tuple(r.time_ms for r in batch.records))
            )
            self._appended_bytes += len(command.batch_bytes)
            if result is WriteResult.REPLACED:
                self.replaced_batches += 1
            self._dirty = True
            return AppliedEntry(command.proposal, Verdict.APPLY, image.next_offset)

    def flush(self) -> int:
        """fsync what was appended since the last flush and publish it to readers; the durable end (the
        committed image's end).

        The log may run ahead of the image (after a restart, until pysyncobj's replay reaches the log
        end), never behind it; what it holds past the image is not published."""
        with self._flush_lock:  # one flush at a time: none may publish what another has not synced yet
            with self._lock:
                dirty, self._dirty = self._dirty, False
                end = self._log.log_end_offset
                confirmed = self._image.next_offset
                if end < confirmed:
                    raise MetadataLogGapError(
                        f"the metadata log ends at {end}, before the image at {confirmed}"
                    )
            if dirty:
                # Outside the lock: readers (FetchMetadata, the durable end a reply carries, Describe*) are
                # not held up by the disk. Safe because every change to the log (apply, retention, install)
                # comes from the thread calling flush, so nothing moves under the fsync; only `confirmed`,
                # read before it, is published after it. A failed fsync stops the process (the caller).
                self._sync_data()
            with self._lock:
                if self._durable_end != confirmed:
                    self._durable_end = confirmed
                    self._durable.notify_all()
                return confirmed

    def _sync_data(self) -> None:
        """fdatasync the active segment's .log file only (Log.sync_data): one sync per group instead of
        Log.flush's three; the indexes are derived data that recovery rebuilds."""
        self._log.sync_data()

    def snapshot(self) -> tuple[MetadataSnapshot, ProposalId]:
        """The image as a snapshot, and the last proposal, after fsyncing the log: a snapshot must never
        get ahead of the durable log, or a restart would find the log behind the image."""
        self.flush()
        with self._lock:
            self._snapshot_bytes_mark = self._appended_bytes
            self._snapshot_image_offset = self._image.next_offset
            return image_to_snapshot(self._image), self._last_proposal

    # -- snapshot files and retention (metadata_snapshots.py) -------------------------------------

    def write_snapshot_file(self, snapshot: MetadataSnapshot, now_ms: int) -> int:
        """Write `snapshot` (taken by `snapshot()`) as a snapshot file; its offset. Not yet a base for
        retention: `publish_snapshot` makes it one once pysyncobj's dump of the same image is durable."""
        path = self.snapshots.write(snapshot, now_ms)
        with self._lock:
            self._snapshot_ms = now_ms
        _log.info("wrote the metadata snapshot %s (%d records)", path.name, len(snapshot.records))
        return snapshot.next_offset

    def publish_snapshot(self, offset: int) -> None:
        """Let retention delete segments below `offset` (a snapshot file and pysyncobj's dump hold it)."""
        with self._lock:
            if offset > self._log.log_end_offset:
                raise MetadataLogGapError(
                    f"a snapshot at {offset} is past the metadata log end {self._log.log_end_offset}"
                )
            self._snapshot_offset = max(offset, self._snapshot_offset or 0)

    def maintain(self, now_ms: int) -> bool:
        """Retention (segments wholly below the published snapshot, past retention) and pruning of old
        snapshot files; whether a new snapshot is due. Called on the applier thread."""
        with self._lock:
            if self._snapshot_ms is None:
                self._snapshot_ms = now_ms  # the interval counts from this run's start
            due = snapshot_due(
                self._settings,
                bytes_since=self._appended_bytes - self._snapshot_bytes_mark,
                records_since=self._image.next_offset - self._snapshot_image_offset,
                ms_since=now_ms - self._snapshot_ms,
            )
            if self._snapshot_offset is None:
                return due
            spans = [SegmentSpan(seg.base_offset, seg.next_offset, seg.size, seg.max_timestamp_ms)
                     for seg in self._log.segments]
            start = retained_log_start(spans, self._snapshot_offset, now_ms, self._settings)
            if start is not None and start > self._log.log_start_offset:
                before = self._log.log_start_offset
                self._log.advance_log_start(start)
                _log.info("metadata log retention: log start %d -> %d (snapshot at %d)",
                          before, start, self._snapshot_offset)
            log_start = self._log.log_start_offset
        deleted = self.snapshots.prune(self._settings.retained, log_start)
        if deleted:
            _log.info("deleted metadata snapshots at offsets %s", deleted)
        return due

    @property
    def log_start_offset(self) -> int:
        with self._lock:
            return self._log.log_start_offset

    def install(
        self,
        snapshot: MetadataSnapshot,
        last_proposal: ProposalId,
        fetch_missing: Callable[[int, int], Iterable[LogBatch]],
        now_ms: int = 0,
    ) -> None:
        """Replace the image with a snapshot's (a restart, or a snapshot sent by the leader).

        When the log ends before the snapshot, the missing batches are fetched (`fetch_missing(from,
        to)`, from another controller's metadata log) and appended first, so the log never has a gap."""
        image = image_from_snapshot(snapshot)
        self.flush()
        with self._lock:
            end = self._log.log_end_offset
        if end < image.next_offset:
            try:
                for batch in fetch_missing(end, image.next_offset):
                    with self._lock:
                        if batch.base_offset < image.next_offset:
                            self._writer.write(batch)
            except BelowLogStartError as exc:
                # The other controllers deleted those batches (retention, below their snapshots): this
                # log restarts at the snapshot's offset, as a Kafka follower does after FetchSnapshot.
                with self._lock:
                    _log.warning(
                        "%s; restarting the metadata log at the snapshot's offset %d (it ended at %d)",
                        exc,
                        image.next_offset,
                        self._log.log_end_offset,
                    )
                    self._log.truncate_fully_and_start_at(image.next_offset)
            with self._lock:
                if self._log.log_end_offset != image.next_offset:
                    raise MetadataLogGapError(
                        f"after fetching missing batches the log ends at {self._log.log_end_offset}, "
                        f"the snapshot at {image.next_offset}"
                    )
                self._log.flush()
        with self._lock:
            # A log past the snapshot is fine: pysyncobj replays the entries after the snapshot and the
            # writer skips them once it has checked they are the batches it holds.
            self._image = image
            self._last_proposal = last_proposal
            self._durable_end = image.next_offset
            self._snapshot_image_offset = image.next_offset
            self._snapshot_bytes_mark = self._appended_bytes
            self._durable.notify_all()
        # The installed snapshot is pysyncobj's dump, durable: it is a snapshot file too (written unless
        # the one written with the dump is there) and a base for retention.
        if image.next_offset > 0:
            if not self.snapshots.has_valid(image.next_offset):
                self.snapshots.write(snapshot, now_ms)
            self.publish_snapshot(image.next_offset)

    # -- the read side (any thread) ----------------------------------------------------------------

    def read(self, reader: Callable[[MetadataImage], T]) -> T:
        """Run `reader` on the committed image under the lock (it must not keep references to it)."""
        with self._lock:
            return reader(self._image)

    def copy_image(self) -> tuple[MetadataImage, ProposalId]:
        """An independent copy of the committed image and the id of its last batch."""
        with self._lock:
            return self._image.copy(), self._last_proposal

    @property
    def last_proposal(self) -> ProposalId:
        with self._lock:
            return self._last_proposal

    @property
    def durable_end_offset(self) -> int:
        with self._lock:
            return self._durable_end

    @property
    def controller_epoch(self) -> int:
        with self._lock:
            return self._image.controller_epoch

    def wait_durable(self, offset: int, timeout_s: float) -> bool:
        """Wait until the durable end reaches `offset`; False when the time ran out first."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._durable_end < offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._durable.wait(left)
            return True

    def fetch(self, offset: int, bytes_max: int, wait_s: float) -> FetchResult:
        """Whole entries from `offset` below the durable end; waits up to `wait_s` when there are none.

        OFFSET_OUT_OF_RANGE below the log start. An offset past the durable end is not an error: the
        caller followed a controller that is further along; it gets no entries and this log's end."""
        if bytes_max < 1:
            raise KanalError(ErrorCode.INVALID_REQUEST, f"max_bytes must be >= 1, got {bytes_max}")
        deadline = time.monotonic() + max(0.0, wait_s)
        with self._lock:
            while True:
                start = self._log.log_start_offset
                if offset < start:
                    raise KanalError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"offset {offset} is below the metadata log start {start}; load a snapshot",
                    )
                if offset < self._durable_end:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return FetchResult(b"", start, self._durable_end, self._image.controller_epoch)
                self._durable.wait(left)
            data = self._log.read(offset, bytes_max, offset_limit=self._durable_end).data
            return FetchResult(data, start, self._durable_end, self._image.controller_epoch)

    def close(self) -> None:
        with self._lock:
            self._log.close()
