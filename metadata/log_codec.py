"""The metadata log's records as log entries, both ways.

One MetadataBatch (one Raft entry, applied atomically) is stored as one RecordBatch: one Record per
MetadataRecord, no key, the serialized MetadataRecord as the value, the record's time_ms as its
timestamp (so every controller writes identical bytes), and partition_leader_epoch = the batch's
controller epoch (set by Log.append through the broker suffix). The controller writes with
`encode_metadata_batch`; brokers following FetchMetadata, tools and the Spark replay read with
`decode_metadata_entries`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kanal.v1 import metadata_pb2
from kanal.v1.batch import NewRecord, build_batch, decode_records, iter_entries, parse_batch


@dataclass(frozen=True, slots=True)
class StoredMetadataBatch:
    """A MetadataBatch as read back from the log, with the offset of its first record."""

    base_offset: int
    batch: metadata_pb2.MetadataBatch

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.batch.records)


def encode_metadata_batch(batch: metadata_pb2.MetadataBatch) -> bytes:
    """Producer bytes of the RecordBatch that stores `batch` (append with leader_epoch =
    batch.controller_epoch)."""
    if not batch.records:
        raise ValueError("a metadata batch needs at least one record")
    return build_batch([NewRecord(value=r.SerializeToString(), timestamp_ms=r.time_ms) for r in batch.records])


def decode_metadata_entries(entries: bytes | memoryview) -> Iterator[StoredMetadataBatch]:
    """Metadata batches from log entries (segment bytes or a FetchMetadata reply), CRCs checked."""
    for entry in iter_entries(entries, verify_crc=True):
        stored = parse_batch(entry.batch)
        records = [metadata_pb2.MetadataRecord.FromString(r.value) for r in decode_records(stored)]
        yield StoredMetadataBatch(
            stored.base_offset,
            metadata_pb2.MetadataBatch(controller_epoch=stored.partition_leader_epoch, records=records),
        )
