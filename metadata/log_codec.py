"""The metadata log's batches as log entries, both ways: the one codec the controllers (which write and
serve the log), the brokers (which follow it) and the Spark replay use.

One MetadataBatch (one Raft entry, applied atomically) is stored as one RecordBatch:

    record i        value = the i-th MetadataRecord's bytes, no key, no headers,
                    timestamp = that record's time_ms
    batch           partition_leader_epoch = the MetadataBatch's controller_epoch (set by Log.append through
                    the broker suffix); no producer id; base offset = the metadata offset of its first record

The controllers write the record bytes exactly as they came in the Raft entry (`encode_record_values`,
sliced out of the MetadataBatch, not re-serialized), so every controller's files hold the same bytes;
`encode_metadata_batch` is the same format from a MetadataBatch message (tests, tools). Readers get each
batch as a `LogBatch` (`iter_batches`, CRCs checked) and apply `batch.metadata_batch()` at its base offset.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kanal.v1.batch import NewRecord, build_batch, decode_records, iter_entries, parse_batch
from kanal.v1.metadata_pb2 import MetadataBatch, MetadataRecord


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One stored batch of the metadata log, as bytes: where it starts, its controller epoch, and each
    record's value (a serialized MetadataRecord) and timestamp."""

    base_offset: int
    controller_epoch: int
    values: tuple[bytes, ...]
    timestamps_ms: tuple[int, ...]

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.values)

    def metadata_batch(self) -> MetadataBatch:
        return MetadataBatch(
            controller_epoch=self.controller_epoch,
            records=[MetadataRecord.FromString(v) for v in self.values],
        )

    def __repr__(self) -> str:
        return f"<LogBatch [{self.base_offset}, {self.end_offset}) epoch={self.controller_epoch}>"


def encode_record_values(values: Sequence[bytes], timestamps_ms: Sequence[int]) -> bytes:
    """Producer bytes of the RecordBatch that stores these record values with these timestamps (append
    with leader_epoch = the batch's controller epoch)."""
    if len(values) != len(timestamps_ms) or not values:
        raise ValueError(f"{len(values)} record values with {len(timestamps_ms)} timestamps")
    return build_batch([NewRecord(value=v, timestamp_ms=t) for v, t in zip(values, timestamps_ms)])


def encode_metadata_batch(batch: MetadataBatch) -> bytes:
    """Producer bytes of the RecordBatch that stores `batch`, its records serialized here."""
    if not batch.records:
        raise ValueError("a metadata batch needs at least one record")
    return encode_record_values(
        [r.SerializeToString() for r in batch.records], [r.time_ms for r in batch.records]
    )


def decode_entry(stored: bytes | memoryview) -> LogBatch:
    """One stored batch of the metadata log (CORRUPT_MESSAGE when damaged)."""
    record_batch = parse_batch(stored)
    records = decode_records(record_batch)
    return LogBatch(
        base_offset=record_batch.base_offset,
        controller_epoch=record_batch.partition_leader_epoch,
        values=tuple(r.value for r in records),
        timestamps_ms=tuple(record_batch.first_timestamp_ms + r.timestamp_delta_ms for r in records),
    )


def iter_batches(entries: bytes | memoryview) -> Iterator[LogBatch]:
    """Each batch of framed log entries (segment bytes, a Log.read or a FetchMetadata reply), CRCs checked."""
    for entry in iter_entries(entries, verify_crc=True):
        yield decode_entry(entry.batch)
