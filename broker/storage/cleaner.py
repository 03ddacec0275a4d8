"""Compaction (cleanup.policy compact, or compact,delete): keep the latest record per key in the closed
segments. With compact,delete, retention (log.delete_old_segments) runs too and removes whole segments
from the front; compaction then sees only what retention left, so a key whose records were all in deleted
segments is simply gone (Kafka's combined policy).

Rules:
- The key map covers the whole log, the active segment included, so a record is superseded as soon as
  a later record with the same key exists anywhere. Only closed segments are rewritten.
- Records without a key cannot be superseded and are kept.
- A tombstone (null value) that is the latest for its key is kept until its batch's max timestamp is
  older than delete.retention.ms, so consumers that are behind still see the delete.
- Batches younger than min.compaction.lag.ms (when it is above 0) are kept whole.
- Offsets are preserved: a rewritten batch keeps its base offset, leader epoch, producer fields,
  timestamps and last_offset_delta; it holds fewer records (record_count) and a new producer CRC. A batch
  with nothing left is dropped; a segment may become empty but keeps its file and base offset.

Transactions (issue 22), with the partition's TransactionIndex:
- control batches (COMMIT / ABORT markers) are kept whole and their keys never enter the key map while
  any data batch of their transaction remains: the transaction index is rebuilt from them after a crash,
  and a marker removed while data of its transaction remains would make aborted records visible (ABORT)
  or leave the rebuilt LSO stuck at the transaction's first batch (COMMIT). Once every data batch of the
  transaction is gone (aborted data removed, committed data superseded), the marker is removed by a
  later pass when its timestamp is older than delete.retention.ms and it is not its producer's last batch
  in the log (Kafka's rules; the decision is `transaction_index.removable_markers`, taken over the log as
  it stood before the pass). The index then forgets the aborted transactions those markers closed, so it
  stays what a rebuild from the log gives; the LSO is unchanged (a removed marker closed a transaction
  that stays closed);
- records of aborted transactions are removed, and never supersede anything;
- records of transactions still open are kept and supersede nothing: the transaction may yet abort, and
  a committed value it would have superseded must then still be there (Kafka bounds cleaning by the
  first unstable offset for the same reason);
- records of committed transactions are ordinary records.
A rewritten batch keeps its attributes.

A segment is rewritten into `<base>.log.cleaned`, fsynced, its index files deleted, then renamed over the
original (atomic), and its indexes are rebuilt. A crash before the rename leaves the original intact (the
.cleaned file is removed on open); after it, the missing indexes are rebuilt on open.

The cleaner sits below log.py: `Log.compact` calls `compact_log(self, ...)`, and what the cleaner needs of
the log is the `CompactedLog` protocol, so this module never imports log.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kanal.broker.storage.durable_files import fsync_directory
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.segment import EntryLocation, LogSegment
from kanal.broker.storage.transaction_index import (
    ABORTED,
    COMMITTED,
    OPEN,
    TransactionIndex,
    TxnBatch,
    removable_markers,
)
from kanal.v1 import records_pb2
from kanal.v1.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    ENTRY_HEADER_BYTES,
    broker_suffix,
    decode_records,
    encode_batch,
    frame_entry,
    parse_batch,
)

# OPEN, ABORTED or COMMITTED: what compaction may do with a batch (transaction_index.batch_state's answer
# for transactional data batches; OPEN for markers, which are kept whole; COMMITTED for the rest).
Fate = Callable[[records_pb2.RecordBatch], str]


class CompactedLog(Protocol):
    """What compaction needs of a log (log.Log): its topic config, its segments (the last one is the active
    segment, never rewritten) and a way to put a rewritten segment in place of the one at `index`."""

    @property
    def config(self) -> LogConfig: ...

    @property
    def segments(self) -> tuple[LogSegment, ...]: ...

    def replace_segment(self, index: int, segment: LogSegment) -> None: ...


@dataclass(frozen=True, slots=True)
class CompactionStats:
    segments_rewritten: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    markers_removed: int = 0


def compact_log(
    log: CompactedLog, now_ms: int, transactions: TransactionIndex | None = None
) -> CompactionStats:
    if not log.config.cleanup_policy.compacts or len(log.segments) < 2:
        return CompactionStats()

    def fate(batch: records_pb2.RecordBatch) -> str:
        if batch.attributes & ATTR_CONTROL:
            return OPEN  # kept whole, keys not mapped: see the module docstring
        if not batch.attributes & ATTR_TRANSACTIONAL or transactions is None:
            return COMMITTED
        return transactions.batch_state(batch.producer_id, batch.base_offset)

    latest, txn_batches = _scan_log(log.segments, fate)
    tombstone_horizon_ms = now_ms - log.config.delete_retention_ms
    removable = removable_markers(txn_batches, tombstone_horizon_ms)
    # 0 means no lag at all (not "protect batches stamped in the future").
    lag_ms = log.config.compaction_lag_ms_min
    lag_horizon_ms = now_ms - lag_ms if lag_ms else None
    rewritten = removed = tombstones = before = after = 0
    markers_removed: list[int] = []
    for index, seg in enumerate(log.segments[:-1]):
        entries, seg_removed, seg_tombstones, seg_markers = _clean_segment(
            seg, latest, tombstone_horizon_ms, lag_horizon_ms, fate, removable)
        if not seg_removed and not seg_markers:
            continue
        before += seg.size
        new_seg = _swap(seg, entries)
        after += new_seg.size
        log.replace_segment(index, new_seg)
        rewritten += 1
        removed += seg_removed
        tombstones += seg_tombstones
        markers_removed += seg_markers
    if transactions is not None and markers_removed:
        transactions.forget_markers(markers_removed)
    return CompactionStats(rewritten, removed, tombstones, before, after, len(markers_removed))


def _scan_log(segments: tuple[LogSegment, ...], fate: Fate) -> tuple[dict[bytes, int], list[TxnBatch]]:
    """The offset of the latest committed record per key, and the batches with a producer id (for the
    marker rule), in one walk."""
    latest: dict[bytes, int] = {}
    txn_batches: list[TxnBatch] = []
    for seg in segments:
        for entry in seg.verified_entries():
            batch = _read_batch(seg, entry.location)
            if batch.producer_id > 0:
                txn_batches.append(TxnBatch(batch.producer_id, batch.base_offset,
                                            batch.base_offset + batch.last_offset_delta, batch.attributes,
                                            max_timestamp_ms=batch.max_timestamp_ms))
            if fate(batch) != COMMITTED:
                continue
            for record in decode_records(batch):
                if record.HasField("key"):
                    latest[record.key] = batch.base_offset + record.offset_delta
    return latest, txn_batches


def _read_batch(seg: LogSegment, location: EntryLocation) -> records_pb2.RecordBatch:
    body = seg.read_bytes(location.position + ENTRY_HEADER_BYTES, location.size - ENTRY_HEADER_BYTES)
    return parse_batch(body)


def _clean_segment(
    seg: LogSegment, latest: dict[bytes, int], tombstone_horizon_ms: int, lag_horizon_ms: int | None,
    fate: Fate, removable: set[int],
) -> tuple[list[bytes], int, int, list[int]]:
    """The segment's entries after cleaning, with how many records and tombstones were removed and the
    offsets of the markers removed."""
    out: list[bytes] = []
    removed = tombstones = 0
    markers: list[int] = []
    for entry in seg.verified_entries():
        location = entry.location
        batch = _read_batch(seg, location)
        if batch.attributes & ATTR_CONTROL and batch.base_offset in removable:
            markers.append(batch.base_offset)
            continue
        records = decode_records(batch)
        batch_fate = fate(batch)
        if batch_fate == ABORTED:
            kept = []
            removed += len(records)
        elif batch_fate == OPEN or lag_horizon_ms is not None and batch.max_timestamp_ms > lag_horizon_ms:
            kept = records
        else:
            kept = []
            for record in records:
                offset = batch.base_offset + record.offset_delta
                if record.HasField("key") and latest[record.key] != offset:
                    removed += 1
                elif record.HasField("key") and not record.HasField("value") and (
                    batch.max_timestamp_ms <= tombstone_horizon_ms
                ):
                    removed += 1
                    tombstones += 1
                else:
                    kept.append(record)
        if len(kept) == len(records):
            out.append(seg.read_bytes(location.position, location.size))
        elif kept:
            out.append(_rewrite_batch(batch, kept))
    return out, removed, tombstones, markers


def _rewrite_batch(batch: records_pb2.RecordBatch, kept: list[records_pb2.Record]) -> bytes:
    producer_bytes = encode_batch(
        records_pb2.RecordList(records=kept).SerializeToString(),
        record_count=len(kept),
        last_offset_delta=batch.last_offset_delta,
        first_timestamp_ms=batch.first_timestamp_ms,
        max_timestamp_ms=batch.max_timestamp_ms,
        codec=batch.codec,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        attributes=batch.attributes,
    )
    suffix = broker_suffix(batch.base_offset, batch.partition_leader_epoch, batch.last_offset_delta)
    return frame_entry(producer_bytes + suffix)


def _swap(seg: LogSegment, entries: list[bytes]) -> LogSegment:
    cleaned = seg.log_path.with_name(seg.log_path.name + ".cleaned")
    with open(cleaned, "wb") as f:
        f.writelines(entries)
        f.flush()
        os.fsync(f.fileno())
    directory, base, interval = seg.directory, seg.base_offset, seg.index_interval_bytes
    # Indexes go first: a crash after this point finds them missing and rebuilds them from whichever
    # .log is in place, the original (the .cleaned file is then discarded) or the cleaned one.
    seg.close()
    seg.offset_index.delete()
    seg.time_index.delete()
    os.replace(cleaned, seg.log_path)
    fsync_directory(directory)
    return LogSegment.recovered(
        directory, base, interval
    )  # checks the rewritten entries, rebuilds both indexes
