"""The metadata log: every applied MetadataBatch, in order, in the shared segment format.

Directory `<data_dir>/__cluster_metadata-0/`, written with kanal.broker.storage.log.Log (segment layout in
broker/storage/log.py and segment.py). Each applied MetadataBatch is one RecordBatch (one log entry) in
the format of kanal.metadata.log_codec, the one codec every reader shares, with the record values sliced
out of the Raft entry (`record_values`, not re-serialized). `now_ms` given to Log.append is the batch's
largest record time, so segment rolls happen at the same batches on every controller. Everything in a
batch comes from the Raft entry, so every controller's files hold the same bytes. Segments roll at
`segment_bytes_max` (--metadata-log-segment-bytes) or after 7 days. Retention is not the Log's own
(retention_ms/bytes are None here): MetadataStore deletes whole segments below the newest snapshot
(metadata_snapshots.py), so the log start moves past 0 and a reader below it loads a snapshot first.

Exactly once (MetadataLogWriter). pysyncobj replays its journal after a restart, so an entry can be
applied again that the log already holds. The metadata offset is the key: a batch for base offset B is
appended when the log ends at B, skipped when the log already goes past B and the stored batch at B is
exactly the one being applied, and a log that ends before B has lost batches: a broken invariant that
stops the controller.

Repair of an unconfirmed tail. The caller applies committed batches in Raft order, so everything below B
is confirmed by this run's Raft history. A stored batch at B that differs from the committed one was
written from a Raft history that no longer exists (a majority lost unsynced Raft state in a power cut,
before the Raft journal was made durable, or a disk that lied): the log is cut at B and the committed
batch written in its place (WriteResult.REPLACED, logged at WARNING), instead of stopping the
controller on every restart. The store never serves that tail before Raft confirms it (metadata_store.py).
"""

from __future__ import annotations

import enum
import logging
from pathlib import Path

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.metadata.cleanup_policy import DELETE
from kanal.metadata.log_codec import LogBatch, encode_record_values, iter_batches
from kanal.v1.batch import BROKER_SUFFIX_BYTES, iter_entries, read_broker_suffix
from kanal.v1.error import ErrorCode, KanalError

_log = logging.getLogger("kanal.raft.metadata_log")

METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
# Segment size of the metadata log; a metadata batch is at most a few MiB.
METADATA_SEGMENT_BYTES_MAX = 64 * 1024 * 1024
_TAG_RECORDS = (2 << 3) | 2  # MetadataBatch.records: field 2, length-delimited


class BelowLogStartError(Exception):
    """The batches asked for are below the other controllers' metadata log start (deleted by retention)."""


class MetadataLogGapError(Exception):
    """The metadata log does not hold what the applied entries say it must (a gap, or a different batch
    at an offset). A broken invariant: the controller stops."""


def metadata_log_config(
    batch_bytes_max: int, segment_bytes_max: int = METADATA_SEGMENT_BYTES_MAX
) -> LogConfig:
    # A RecordBatch wraps each MetadataRecord in a Record (offset and timestamp deltas, framing): allow
    # twice the metadata batch limit, which the active controller enforces before proposing.
    # ControllerConfig keeps segment_bytes_max above that.
    return LogConfig(
        segment_bytes_max=segment_bytes_max,
        batch_bytes_max=min(2 * batch_bytes_max, segment_bytes_max - 1),
        retention_ms=None,
        retention_bytes=None,
        cleanup_policy=DELETE,
        flush_batches_max=None,  # MetadataStore fsyncs once per group of applied batches
        flush_interval_ms=None,
        timestamp_difference_ms_max=None,
    )


def open_metadata_log(
    data_dir: Path, batch_bytes_max: int, segment_bytes_max: int = METADATA_SEGMENT_BYTES_MAX
) -> Log:
    return Log.open(data_dir / METADATA_LOG_DIR_NAME, metadata_log_config(batch_bytes_max, segment_bytes_max))


# -- the entry format ------------------------------------------------------------------------------


def record_values(batch_bytes: bytes) -> list[bytes]:
    """The serialized MetadataRecords of a serialized MetadataBatch, byte for byte, in order."""
    values = []
    view = memoryview(batch_bytes)
    pos, end = 0, len(view)
    while pos < end:
        key, pos = _varint(view, pos, end)
        wire_type = key & 7
        if key == _TAG_RECORDS:
            length, pos = _varint(view, pos, end)
            if pos + length > end:
                raise KanalError(ErrorCode.CORRUPT_MESSAGE, "MetadataBatch has a truncated record")
            values.append(bytes(view[pos : pos + length]))
            pos += length
        elif wire_type == 0:
            _, pos = _varint(view, pos, end)
        elif wire_type == 2:
            length, pos = _varint(view, pos, end)
            pos += length
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"MetadataBatch has wire type {wire_type}")
    if pos != end:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "MetadataBatch ends inside a field")
    return values


def _varint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise KanalError(ErrorCode.CORRUPT_MESSAGE, "MetadataBatch has a truncated varint")
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def read_all(log: Log, bytes_max: int = 1 << 20) -> list[LogBatch]:
    """Every batch of a metadata log, in order (tests, tools)."""
    out: list[LogBatch] = []
    offset = int(log.log_start_offset)
    while offset < log.log_end_offset:
        for batch in iter_batches(log.read(offset, bytes_max).data):
            out.append(batch)
            offset = batch.end_offset
    return out


# -- exactly-once writer ---------------------------------------------------------------------------


class WriteResult(enum.Enum):
    APPENDED = "appended"
    # The log already held this batch (pysyncobj replayed an entry after a restart).
    ALREADY_WRITTEN = "already-written"
    # The log held another batch at this offset, never confirmed by Raft: cut there, then appended.
    REPLACED = "replaced"


class MetadataLogWriter:
    """Appends applied batches to the metadata log exactly once. Not thread-safe: the store's applier
    thread is its only caller."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def write(self, batch: LogBatch) -> WriteResult:
        """Store `batch` at its base offset; see the module doc for the rules."""
        end = self.log.log_end_offset
        base_offset = batch.base_offset
        producer_bytes = encode_record_values(batch.values, batch.timestamps_ms)
        if end == base_offset:
            self._append(batch, producer_bytes)
            return WriteResult.APPENDED
        if end < base_offset:
            raise MetadataLogGapError(
                f"the metadata log ends at offset {end} but the next applied batch starts at {base_offset}: "
                f"{base_offset - end} metadata records are missing from {self.log.directory}"
            )
        stored_base, difference = self._difference(base_offset, len(batch.values), producer_bytes)
        if difference is None:
            return WriteResult.ALREADY_WRITTEN
        if stored_base != base_offset:
            # A stored batch straddles B: the caller's claim that everything below B is confirmed and
            # this log disagree on batch boundaries. Nothing here can be cut safely.
            raise MetadataLogGapError(f"at offset {base_offset}: {difference}")
        # Everything below base_offset is confirmed (the caller applies in Raft order); the stored tail
        # from here on is from a lost Raft history: cut it and write the committed batch.
        _log.warning(
            "the metadata log %s holds a batch at offset %d that Raft did not commit (%s): cutting the log "
            "at %d (dropping %d unconfirmed records) and writing the committed batch",
            self.log.directory, base_offset, difference, base_offset, end - base_offset,
        )
        self.trim_to(base_offset)
        self._append(batch, producer_bytes)
        return WriteResult.REPLACED

    def _append(self, batch: LogBatch, producer_bytes: bytes) -> None:
        base_offset = batch.base_offset
        now_ms = max(batch.timestamps_ms)
        info = self.log.append(producer_bytes, leader_epoch=batch.controller_epoch, now_ms=now_ms)
        if info.base_offset != base_offset or info.last_offset != batch.end_offset - 1:
            raise MetadataLogGapError(f"batch for offset {base_offset} landed at {info.base_offset}")

    def trim_to(self, offset: int) -> int:
        """Cut the log back to `offset` (nothing below it may go); how many records were dropped."""
        end = self.log.log_end_offset
        if end <= offset:
            return 0
        self.log.truncate_to(offset, high_watermark=offset)
        if self.log.log_end_offset != offset:
            raise MetadataLogGapError(
                f"trimming the metadata log to {offset} left it ending at {self.log.log_end_offset}"
            )
        return end - offset

    def _difference(self, base_offset: int, count: int, producer_bytes: bytes) -> tuple[int, str | None]:
        """The base offset of the stored batch holding `base_offset`, and None when it is exactly the
        batch being applied, else how it differs."""
        if base_offset < self.log.log_start_offset:
            return base_offset, None  # below the log start there is nothing left to compare with
        data = self.log.read(base_offset, 1).data
        stored = next(iter_entries(data, verify_crc=False)).batch
        suffix = read_broker_suffix(stored)
        if suffix.base_offset != base_offset or suffix.last_offset != base_offset + count - 1:
            return suffix.base_offset, (
                f"the committed batch [{base_offset}, {base_offset + count}) does not line up with the "
                f"stored batch [{suffix.base_offset}, {suffix.last_offset + 1})"
            )
        if bytes(stored[: len(stored) - BROKER_SUFFIX_BYTES]) != producer_bytes:
            return suffix.base_offset, "the stored batch differs from the committed one"
        return suffix.base_offset, None

    def __repr__(self) -> str:
        return f"<MetadataLogWriter {self.log!r}>"
