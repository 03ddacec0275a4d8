"""Log: one partition's segmented, append-only log on disk.

Directory `<data_dir>/<topic>-<partition>/` (the metadata log: `__cluster_metadata-0/`):

    <base_offset:020d>.log        log entries (segment.py has the byte layout)
    <base_offset:020d>.index      sparse offset -> position index (offset_index.py)
    <base_offset:020d>.timeindex  sparse timestamp -> offset index (time_index.py)
    leader-epoch-checkpoint       leader epoch -> start offset (leader_epoch_cache.py)
    recovery-point                text: every offset below it was fsynced (written when a segment rolls)
    log-start-offset              text: offsets below it are deleted (written when it moves)
    clean-shutdown                present only while the log is closed after a clean close()
    partition.metadata            broker replicas: the topic id the directory belongs to
                                  (partition_metadata.py; written by the replica manager, not by Log)

Rules it keeps:
- Offsets are assigned densely by the leader and never reused; batches are atomic (stored, read,
  truncated and deleted whole).
- Only the last segment (the active one) is written; the others are immutable until compaction rewrites
  them or retention deletes them. Retention never deletes the active segment.
- After an unclean shutdown, every segment at or past the recovery point is checked entry by entry and
  the log is cut at the first damaged entry (a torn tail); nothing after it is kept, so a recovered log
  never returns a damaged batch and never loses a batch that was fully written before the damage.
- Bad input raises KanalError and changes nothing.

Time is an argument (`now_ms`), never read from a clock here. Not thread-safe: one owner (the partition's
replica in the broker, the controller's state machine) serialises calls.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from kanal.broker.storage.cleaner import CompactionStats, compact_log
from kanal.broker.storage.ids import LeaderEpoch, Offset
from kanal.broker.storage.leader_epoch_cache import LeaderEpochCache
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.segment import LogSegment
from kanal.broker.storage.transaction_index import TransactionIndex
from kanal.v1 import records_pb2
from kanal.v1.batch import (
    ENTRY_HEADER,
    BatchHeader,
    CorruptEntry,
    broker_suffix,
    check_scanned,
    decode_records,
    entry_crc,
    iter_entries,
    parse_batch,
    scan_batch,
)
from kanal.v1.error import ErrorCode, KanalError

_log = logging.getLogger("kanal.broker.storage")

RECOVERY_POINT_FILE = "recovery-point"
LOG_START_FILE = "log-start-offset"
CLEAN_SHUTDOWN_FILE = "clean-shutdown"


def closed_uncleanly(data_dir: Path) -> list[str]:
    """The partition logs under `data_dir` (directories holding segments) whose last run did not close
    them cleanly: no clean-shutdown marker. Only meaningful before the broker opens them (open removes
    the marker)."""
    if not data_dir.is_dir():
        return []
    return sorted(d.name for d in data_dir.iterdir()
                  if d.is_dir() and not (d / CLEAN_SHUTDOWN_FILE).exists() and any(d.glob("*.log")))
_KNOWN_CODECS = frozenset(records_pb2.CompressionCodec.values())


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Where an appended batch landed."""

    base_offset: Offset
    last_offset: Offset
    max_timestamp_ms: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole log entries (records.proto framing) and the log's bounds at the time of the read."""

    data: bytes
    log_start_offset: Offset
    log_end_offset: Offset


class Log:
    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.directory = directory
        self.config = config
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = Offset(0)
        self.epoch_cache = LeaderEpochCache(directory)
        self._recovery_point = Offset(0)
        self._unflushed_batches = 0
        self._oldest_unflushed_ms: int | None = None
        self.recovered_bytes_cut = 0  # what the last open() cut off a torn tail, for logs and tests

    def __repr__(self) -> str:
        return (
            f"<Log {self.directory.name} offsets=[{self.log_start_offset},{self.log_end_offset}) "
            f"segments={len(self._segments)} bytes={self.size_bytes}>"
        )

    # ---- opening and closing ----

    @classmethod
    def open(cls, directory: Path, config: LogConfig) -> Log:
        """Open (or create) the log in `directory`, recovering it if it was not closed cleanly."""
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config)
        for stray in directory.glob("*.tmp"):
            stray.unlink()
        for stray in directory.glob("*.cleaned"):
            stray.unlink()  # a compaction that did not finish; the original segment is intact
        clean_marker = directory / CLEAN_SHUTDOWN_FILE
        clean = clean_marker.exists()
        clean_marker.unlink(missing_ok=True)  # from now on, a crash leaves the log marked unclean
        log._recovery_point = Offset(_read_offset_file(directory / RECOVERY_POINT_FILE, 0))
        bases = sorted(int(p.name[:-4]) for p in directory.glob("*.log") if p.name[:-4].isdigit())
        # A missing or damaged leader-epoch checkpoint is rebuilt from the batches' epochs: every segment
        # is walked as a recovery would (Kafka rebuilds it the same way).
        rebuild_epochs = not log.epoch_cache.load() and bool(bases)
        for i, base in enumerate(bases):
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            needs_recovery = rebuild_epochs or (
                not clean and (next_base is None or next_base > log._recovery_point)
            )
            if needs_recovery:
                seg = LogSegment.recovered(directory, Offset(base), config.index_interval_bytes)
                cut = seg.cut_bytes
                log.recovered_bytes_cut += cut
                for epoch, start in seg.epoch_starts:
                    log.epoch_cache.assign(epoch, start)
            else:
                seg = LogSegment.open(directory, Offset(base), config.index_interval_bytes)
                cut = 0
            if log._segments and seg.base_offset < log._segments[-1].next_offset:
                # Two segments overlap: the older one's tail was not cut where it should have been.
                raise KanalError(ErrorCode.STORAGE_ERROR, f"{seg!r} overlaps {log._segments[-1]!r}")
            log._append_segment(seg)
            if cut and next_base is not None:
                # A damaged entry inside a segment that is not the last: everything after it is a tail
                # that cannot be trusted to follow on, so the later segments go too.
                for later in bases[i + 1 :]:
                    LogSegment(directory, Offset(later), config.index_interval_bytes).delete()
                break
        if not log._segments:
            start = _read_offset_file(directory / LOG_START_FILE, 0)
            log._append_segment(LogSegment.create(directory, Offset(start), config.index_interval_bytes))
        log._log_start_offset = Offset(
            max(log._segments[0].base_offset, _read_offset_file(directory / LOG_START_FILE, 0))
        )
        if log.log_end_offset < log._log_start_offset:
            # Recovery cut below a log start that was already persisted: nothing readable is left, and
            # offsets below the log start must never be handed out again.
            log.truncate_fully_and_start_at(log._log_start_offset)
        log.epoch_cache.truncate_from_end(log.log_end_offset)
        log.epoch_cache.save()
        return log

    def close(self) -> None:
        """Flush everything and mark the log clean, so the next open skips recovery."""
        self.flush()
        self._write_recovery_point(self.log_end_offset)
        for seg in self._segments:
            seg.close()
        (self.directory / CLEAN_SHUTDOWN_FILE).touch()

    def close_unclean(self) -> None:
        """Release file handles without the clean-shutdown marker: the next open recovers, as after a
        crash. Pending index entries are dropped, as a crash would drop them."""
        for seg in self._segments:
            seg.close_unclean()

    # ---- bounds ----

    @property
    def log_start_offset(self) -> Offset:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> Offset:
        """One past the last offset in the log: the offset the next batch gets."""
        return self._segments[-1].next_offset

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(seg.size for seg in self._segments)

    @property
    def recovery_point(self) -> Offset:
        return self._recovery_point

    # ---- appending ----

    def append(self, batch: bytes, *, leader_epoch: int, now_ms: int) -> AppendInfo:
        """Leader append of one producer batch (no broker suffix): validate, assign offsets, store.
        MESSAGE_TOO_LARGE, CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TIMESTAMP,
        UNSUPPORTED_COMPRESSION_TYPE or FENCED_LEADER_EPOCH leave the log unchanged."""
        if len(batch) > self.config.batch_bytes_max:
            raise KanalError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"batch of {len(batch)} bytes is over the limit of {self.config.batch_bytes_max}",
            )
        header = scan_batch(batch)
        check_scanned(header, batch)
        if header.codec not in _KNOWN_CODECS:  # a codec added later in the proto, unknown to this broker
            raise KanalError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {header.codec}"
            )
        limit = self.config.timestamp_difference_ms_max
        if limit is not None and (
            abs(header.max_timestamp_ms - now_ms) > limit or abs(header.first_timestamp_ms - now_ms) > limit
        ):
            raise KanalError(
                ErrorCode.INVALID_TIMESTAMP, f"batch timestamps are more than {limit} ms from now"
            )
        self._check_epoch(leader_epoch)
        base = self.log_end_offset
        last = base + header.last_offset_delta
        suffix = broker_suffix(base, leader_epoch, header.last_offset_delta)
        stored_size = len(batch) + len(suffix)
        head = ENTRY_HEADER.pack(stored_size, entry_crc(header, [batch, suffix]))
        entry_size = len(head) + stored_size
        try:
            self._maybe_roll(entry_size, last, header.max_timestamp_ms)
            self.active_segment.append([head, batch, suffix], entry_size, base, last, header.max_timestamp_ms)
        except OSError as exc:
            raise self._storage_error(exc) from exc
        self._after_append(leader_epoch, base, now_ms)
        return AppendInfo(Offset(base), Offset(last), header.max_timestamp_ms, entry_size)

    def append_replicated(self, entries: bytes, *, now_ms: int) -> list[tuple[AppendInfo, BatchHeader]]:
        """Follower append of stored entries fetched from the leader, offsets kept. Every entry is
        checked first; a damaged one, or one that does not follow the log end, rejects the whole call
        (CORRUPT_MESSAGE) with nothing written. Returns each batch's place and scanned header, so the
        caller can record producer state without walking the fetched bytes a second time."""
        checked = []
        expected_min = self.log_end_offset
        try:
            for entry in iter_entries(entries, verify_crc=True):
                suffix = entry.suffix
                if suffix.base_offset < expected_min:
                    raise KanalError(
                        ErrorCode.CORRUPT_MESSAGE,
                        f"replicated batch at {suffix.base_offset} does not follow the log end "
                        f"{expected_min}",
                    )
                self._check_epoch(suffix.leader_epoch)
                expected_min = Offset(suffix.last_offset + 1)
                checked.append(entry)
        except CorruptEntry as exc:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, exc.message) from None
        infos: list[tuple[AppendInfo, BatchHeader]] = []
        view = memoryview(entries)
        for entry in checked:
            suffix = entry.suffix
            header = scan_batch(entry.batch)
            try:
                self._maybe_roll(entry.size, suffix.last_offset, header.max_timestamp_ms)
                part = view[entry.position : entry.position + entry.size]
                self.active_segment.append([part], entry.size, suffix.base_offset, suffix.last_offset,
                                           header.max_timestamp_ms)
            except OSError as exc:
                if not infos:
                    raise self._storage_error(exc) from exc
                # What is stored stays (the log end says how far); the next fetch retries from there.
                _log.warning("%s", self._storage_error(exc).message)
                break
            self._after_append(suffix.leader_epoch, suffix.base_offset, now_ms)
            infos.append((AppendInfo(Offset(suffix.base_offset), Offset(suffix.last_offset),
                                     header.max_timestamp_ms, entry.size), header))
        return infos

    def _storage_error(self, exc: OSError) -> KanalError:
        """A write the disk refused (full, read-only, failing): STORAGE_ERROR, with nothing of the entry
        left behind (a short write is cut back by the segment; a roll that failed added no segment)."""
        return KanalError(ErrorCode.STORAGE_ERROR,
                          f"{self.directory.name}: the disk refused a write: {exc.strerror or exc}")

    def _check_epoch(self, leader_epoch: int) -> None:
        latest = self.epoch_cache.latest_epoch
        if latest is not None and leader_epoch < latest:
            raise KanalError(
                ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} is older than the log's {latest}"
            )

    def _after_append(self, leader_epoch: int, base_offset: int, now_ms: int) -> None:
        latest = self.epoch_cache.latest_epoch
        if (latest is None or leader_epoch > latest) and self.epoch_cache.assign(leader_epoch, base_offset):
            self.epoch_cache.save()
        self._unflushed_batches += 1
        if self._oldest_unflushed_ms is None:
            self._oldest_unflushed_ms = now_ms
        if self.config.flush_batches_max is not None or self.config.flush_interval_ms is not None:
            self.maybe_flush(now_ms)

    def _maybe_roll(self, entry_size: int, last_offset: int, batch_timestamp_ms: int) -> None:
        """Roll before an entry that would not fit, or whose timestamp is segment_age_ms_max past the
        segment's first batch (Kafka's rule: time is read from the records, not the clock, so a batch
        stamped long ago does not roll a segment per append, and replicas roll at the same places)."""
        active = self.active_segment
        if not active.fits(entry_size, last_offset, self.config.segment_bytes_max,
                           self.config.segment_index_entries_max) or (
            active.first_batch_timestamp_ms is not None
            and batch_timestamp_ms - active.first_batch_timestamp_ms >= self.config.segment_age_ms_max
        ):
            self.roll()

    def roll(self) -> LogSegment:
        """Close the active segment (flushed, so it is durable before the recovery point passes it) and
        start a new one at the log end. An empty active segment is kept as it is."""
        active = self.active_segment
        if active.size == 0:
            return active
        active.flush()
        self._write_recovery_point(active.next_offset)
        new = LogSegment.create(self.directory, active.next_offset, self.config.index_interval_bytes)
        self._append_segment(new)
        return new

    # ---- durability ----

    def maybe_flush(self, now_ms: int) -> bool:
        """fsync when the policy asks for it (batch count or age of the oldest unflushed append)."""
        if not self._unflushed_batches:
            return False
        by_count = (
            self.config.flush_batches_max is not None
            and self._unflushed_batches >= self.config.flush_batches_max
        )
        by_age = (
            self.config.flush_interval_ms is not None
            and self._oldest_unflushed_ms is not None
            and now_ms - self._oldest_unflushed_ms >= self.config.flush_interval_ms
        )
        if by_count or by_age:
            self.flush()
            return True
        return False

    def sync_data(self) -> None:
        """fdatasync only the active segment's .log file: what a crash must not lose. The indexes are
        derived data that recovery rebuilds past the recovery point, so group commits (the metadata log)
        skip their two extra syncs. Segments that rolled were flushed whole by roll()."""
        self.active_segment.sync_data()
        self._unflushed_batches = 0
        self._oldest_unflushed_ms = None

    def flush(self) -> None:
        """fsync the active segment and its indexes (closed segments were flushed when they rolled)."""
        self.active_segment.flush()
        self._unflushed_batches = 0
        self._oldest_unflushed_ms = None

    # ---- reading ----

    def read(self, offset: int, bytes_max: int, offset_limit: int | None = None) -> ReadResult:
        """Whole entries from the batch holding `offset`, up to bytes_max bytes (at least one entry), and
        only batches ending below offset_limit when given (the high-water mark, for consumers). Reading at
        the log end, or at/after offset_limit, returns no data. OFFSET_OUT_OF_RANGE below the log start
        or past the log end."""
        self._check_readable(offset)
        if bytes_max < 1:
            raise KanalError(ErrorCode.INVALID_REQUEST, f"bytes_max must be >= 1, got {bytes_max}")
        data = b""
        if offset < self.log_end_offset and (offset_limit is None or offset < offset_limit):
            i = max(0, bisect_right(self._bases, offset) - 1)
            for seg in self._segments[i:]:
                data = seg.read(Offset(offset), bytes_max, offset_limit)
                if data:
                    break
        return ReadResult(data, self.log_start_offset, self.log_end_offset)

    def _check_readable(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise KanalError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]",
            )

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[Offset, int] | None:
        """The first offset (at or after the log start) whose record timestamp is >= timestamp_ms, with
        that timestamp; None when no record is that late."""
        for seg in self._segments:
            if seg.max_timestamp_ms < timestamp_ms:
                continue
            start = seg.offset_index.lookup(seg.time_index.lookup(timestamp_ms))
            for location in seg.locations(start):
                if location.suffix.last_offset < self.log_start_offset:
                    continue
                body = seg.read_bytes(location.position + 8, location.size - 8)
                header = scan_batch(body)
                if header.max_timestamp_ms < timestamp_ms:
                    continue
                batch = parse_batch(body)
                for record in decode_records(batch):
                    offset = batch.base_offset + record.offset_delta
                    ts = batch.first_timestamp_ms + record.timestamp_delta_ms
                    if ts >= timestamp_ms and offset >= self.log_start_offset:
                        return Offset(offset), ts
        return None

    def max_timestamp_offset(self) -> tuple[Offset, int] | None:
        """The first offset (at or after the log start) holding the largest record timestamp of the log, with
        that timestamp (ListOffsets' MAX_TIMESTAMP); None for a log without records."""
        max_timestamp_ms = max((seg.max_timestamp_ms for seg in self._segments), default=-1)
        if max_timestamp_ms < 0:
            return None
        return self.offset_for_timestamp(max_timestamp_ms)

    def end_offset_for_epoch(self, epoch: int) -> tuple[LeaderEpoch, Offset] | None:
        """The largest epoch <= `epoch` this log knows and where it ends (OffsetsForLeaderEpoch)."""
        return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # ---- retention and the log start ----

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention (cleanup.policy delete, or compact,delete): drop closed segments whose newest record is
        older than retention_ms, then the oldest closed segments while the log is larger than
        retention_bytes. The active segment is never deleted. Returns how many segments were deleted.

        With compaction too, both rules measure the segments as compaction left them: their size after
        rewriting, and the newest timestamp of the batches they still hold (a rewritten batch keeps its
        max timestamp). A segment compaction emptied has neither; it goes together with the first
        non-empty segment after it, never on its own: alone it would move the log start past offsets
        whose later records are within retention, and a consumer positioned there would get
        OFFSET_OUT_OF_RANGE (and maybe reset to the latest offset) instead of reading on to them."""
        if not self.config.cleanup_policy.deletes:
            return 0
        deleted = 0  # segments [0, deleted) go
        retention_ms = self.config.retention_ms
        while retention_ms is not None:
            end = self._retention_unit_end(deleted)
            if end is None or self._segments[end - 1].max_timestamp_ms >= now_ms - retention_ms:
                break
            deleted = end
        retention_bytes = self.config.retention_bytes
        size = sum(seg.size for seg in self._segments[deleted:])
        while retention_bytes is not None:
            end = self._retention_unit_end(deleted)
            unit_bytes = 0 if end is None else sum(seg.size for seg in self._segments[deleted:end])
            if end is None or size - unit_bytes < retention_bytes:
                break
            size -= unit_bytes
            deleted = end
        for _ in range(deleted):
            self._delete_first_segment()
        if deleted:
            self._log_start_offset = Offset(max(self._log_start_offset, self._segments[0].base_offset))
            self._after_start_moved()
        return deleted

    def _retention_unit_end(self, first: int) -> int | None:
        """One past the first non-empty closed segment at or after `first`: what retention deletes as one
        unit (with the empty segments before it); None when only empty segments and the active one are
        left."""
        for index in range(first, len(self._segments) - 1):
            if self._segments[index].size:
                return index + 1
        return None

    def delete_uploaded_segments(self, now_ms: int, upload_end: int, *, local_retention_ms: int | None,
                                 local_retention_bytes: int | None) -> int:
        """Local retention of a tiered log (remote.storage.enable, issue 44): drop the oldest closed
        segments that lie wholly below `upload_end` (the end of what remote storage holds, as the applied
        metadata records it) while they are older than `local_retention_ms` or the local log without
        them still holds `local_retention_bytes` (None: no limit; the topic's local.retention.*). A
        segment not yet uploaded and recorded is never dropped, whatever its age or the local size: with
        remote storage down the disk fills rather than lose data.
        The local log start moves; the leader-epoch cache keeps its entries below it, which describe the
        remote part of the log (divergence checks and a new follower's state need them). Returns how
        many segments were dropped."""
        retention_ms, retention_bytes = local_retention_ms, local_retention_bytes
        size = sum(seg.size for seg in self._segments)
        deleted = 0
        closed = len(self._segments) - 1
        while deleted < closed and self._segments[deleted + 1].base_offset <= upload_end:
            seg = self._segments[deleted]
            expired = retention_ms is not None and seg.max_timestamp_ms < now_ms - retention_ms
            # As retention.bytes: a segment goes while the log without it still holds the bound.
            too_large = retention_bytes is not None and size - seg.size >= retention_bytes
            if not (expired or too_large):
                break
            size -= seg.size
            deleted += 1
        for _ in range(deleted):
            self._delete_first_segment()
        if deleted:
            self._log_start_offset = Offset(max(self._log_start_offset, self._segments[0].base_offset))
            self._after_start_moved(truncate_epochs=False)
        return deleted

    def advance_log_start(self, offset: int) -> None:
        """Make offsets below `offset` unreadable (Kafka's DeleteRecords) and drop the segments wholly
        below it. OFFSET_OUT_OF_RANGE past the log end."""
        if offset > self.log_end_offset:
            raise KanalError(ErrorCode.OFFSET_OUT_OF_RANGE, f"log start {offset} is past the log end")
        if offset <= self._log_start_offset:
            return
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            self._delete_first_segment()
        self._log_start_offset = Offset(offset)
        self._after_start_moved()

    def _after_start_moved(self, *, truncate_epochs: bool = True) -> None:
        _write_offset_file(self.directory / LOG_START_FILE, self._log_start_offset)
        if truncate_epochs:
            self.epoch_cache.truncate_from_start(self._log_start_offset)
            self.epoch_cache.save()

    def _delete_first_segment(self) -> None:
        seg = self._segments.pop(0)
        self._bases.pop(0)
        seg.delete()

    # ---- truncation ----

    def truncate_to(self, offset: int, *, high_watermark: int) -> None:
        """Remove every batch at or after `offset` (the batch holding it too: batches are atomic), so the
        log ends at or below `offset`. INVALID_TRUNCATION when `offset` is below the committed
        `high_watermark` the caller passes (that would lose acknowledged records);
        OFFSET_OUT_OF_RANGE below the log start. Nothing changes on error."""
        if offset < high_watermark:
            raise KanalError(
                ErrorCode.INVALID_TRUNCATION,
                f"truncation to {offset} is below the high-water mark {high_watermark}",
            )
        if offset < self.log_start_offset:
            raise KanalError(ErrorCode.OFFSET_OUT_OF_RANGE, f"truncation to {offset} is below the log start")
        if offset >= self.log_end_offset:
            return
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            seg = self._segments.pop()
            self._bases.pop()
            seg.delete()
        self.active_segment.truncate_to(Offset(offset))
        self.active_segment.flush()
        if self.log_end_offset < self._log_start_offset:
            # The batch holding the target started below the log start (which may sit mid-batch): the
            # log is now empty, and must restart at its start so no offset below it is handed out again.
            self.truncate_fully_and_start_at(self._log_start_offset)
            return
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self.epoch_cache.save()
        if self._recovery_point > self.log_end_offset:
            self._write_recovery_point(self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart the log empty at `offset` (a follower far behind the leader's
        log start)."""
        for seg in self._segments:
            seg.delete()
        self._segments, self._bases = [], []
        self._append_segment(
            LogSegment.create(self.directory, Offset(offset), self.config.index_interval_bytes)
        )
        self._log_start_offset = Offset(offset)
        _write_offset_file(self.directory / LOG_START_FILE, offset)
        self.epoch_cache.clear()
        self.epoch_cache.save()
        self._write_recovery_point(offset)

    # ---- compaction ----

    def compact(self, now_ms: int, transactions: TransactionIndex | None = None) -> CompactionStats:
        """cleanup.policy compact (or compact,delete): keep the latest record per key in the closed segments
        (cleaner.py);
        `transactions` (the partition's TransactionIndex) tells it which transactional records aborted."""
        return compact_log(self, now_ms, transactions)

    def replace_segment(self, index: int, segment: LogSegment) -> None:
        """Put `segment` (a rewritten copy of the closed segment at `index`, same base offset) in its place:
        the cleaner's one change to the log (cleaner.CompactedLog)."""
        # The active segment is never rewritten, and a rewrite keeps offsets: anything else is a cleaner bug
        # that would lose or reorder records.
        if index >= len(self._segments) - 1 or segment.base_offset != self._bases[index]:
            raise RuntimeError(
                f"{self!r}: segment {segment.base_offset} cannot replace closed segment {index}"
            )
        self._segments[index] = segment

    # ---- helpers ----

    def _append_segment(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    def _write_recovery_point(self, offset: int) -> None:
        self._recovery_point = Offset(offset)
        _write_offset_file(self.directory / RECOVERY_POINT_FILE, offset)


def _read_offset_file(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return default


def _write_offset_file(path: Path, offset: int) -> None:
    """Atomically replace a one-number text file (write, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{offset}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
