"""Producer-state snapshot files: a ProducerStateTable as of an offset, so a restart or a new leader
replays only the batches after it instead of the whole log.

File `<offset:020d>.snapshot` in the partition directory, where `offset` is the log end offset when it
was taken (normally a segment's base offset, written when the previous segment rolls): the table covers
every batch below `offset` and none at or after it. Binary, big-endian:

    offset  size  field
    0       4     magic b"KPST"
    4       2     version, u16 = 2 (1 is still read: no coordinator epoch, -1)
    6       2     reserved, u16 = 0
    8       8     snapshot offset, i64 (equals the number in the file name)
    16      4     producer count N, u32
    20      ...   N producers, by strictly increasing producer id:
                    0   8  producer id, i64 (> 0)
                    8   4  producer epoch, i32 (>= 0)
                    12  8  last timestamp ms, i64
                    20  4  coordinator epoch, i32 (>= -1; version 2 only: version 1 entries end at 20)
                    24  1  batch count B, u8 (1 .. 5; 0 when a marker moved the producer to its epoch,
                           then the coordinator epoch is >= 0)
                    25  B x 24 bytes, oldest first:
                          0   4  first sequence, i32 (0 .. 2^31-1)
                          4   4  last sequence, i32 (0 .. 2^31-1)
                          8   8  base offset, i64
                          16  8  last offset, i64 (>= base offset, < snapshot offset)
    end-4   4     CRC-32C (Castagnoli) of every byte before it, u32

A reader rejects (SnapshotDamaged) anything that does not match exactly: wrong magic or version, a CRC
mismatch, a count that does not fit the length, trailing bytes, out-of-range values, or an offset that
differs from the file name. The shell then tries the next older snapshot, down to a full replay of the
log: a snapshot is derived data, the log is the truth.

Files are written to `<name>.tmp`, fsynced and renamed, so a crash leaves the old set intact; the shell
removes a stray `.snapshot.tmp` at open with `delete_stray_files`. Only this module touches the files; the
table itself (producer_state.py) is pure.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from kanal.broker.producer_state import (
    BATCHES_PER_PRODUCER_MAX,
    NO_COORDINATOR_EPOCH,
    SEQUENCE_MAX,
    BatchMetadata,
    ProducerEntry,
    ProducerEpoch,
    ProducerStateTable,
    SequenceNumber,
)
from kanal.broker.storage.ids import Offset
from kanal.metadata.ids import ProducerId
from kanal.v1.error import ErrorCode, KanalError

SUFFIX = ".snapshot"
MAGIC = b"KPST"
VERSION = 2
VERSIONS_READ = (1, 2)
_HEADER = struct.Struct(">4sHHqI")  # magic, version, reserved, snapshot offset, producer count
_PRODUCER = struct.Struct(">qiqiB")  # producer id, epoch, last timestamp, coordinator epoch, batch count
_PRODUCER_V1 = struct.Struct(">qiqB")  # producer id, epoch, last timestamp, batch count
_BATCH = struct.Struct(">iiqq")  # first sequence, last sequence, base offset, last offset
_CRC = struct.Struct(">I")


class SnapshotDamaged(KanalError):
    """A snapshot file that cannot be trusted; `path` says which."""

    def __init__(self, path: Path | None, reason: str) -> None:
        super().__init__(
            ErrorCode.CORRUPT_MESSAGE, f"producer snapshot {path.name if path else ''}: {reason}"
        )
        self.path = path


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def encode_snapshot(table: ProducerStateTable, offset: int) -> bytes:
    """The file bytes for `table` as of `offset` (>= table.next_offset: batches the table did not record
    below `offset` are not idempotent ones)."""
    if offset < table.next_offset:
        raise ValueError(f"snapshot offset {offset} is below the table's next offset {table.next_offset}")
    entries = table.entries()
    parts = [_HEADER.pack(MAGIC, VERSION, 0, offset, len(entries))]
    for entry in entries:
        parts.append(_PRODUCER.pack(entry.producer_id, entry.producer_epoch, entry.last_timestamp_ms,
                                    entry.coordinator_epoch, len(entry.batches)))
        for b in entry.batches:
            parts.append(_BATCH.pack(b.first_sequence, b.last_sequence, b.base_offset, b.last_offset))
    body = b"".join(parts)
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_snapshot(data: bytes, path: Path | None = None) -> tuple[Offset, ProducerStateTable]:
    """Parse and check snapshot bytes -> (snapshot offset, table). SnapshotDamaged when anything is off."""
    if len(data) < _HEADER.size + _CRC.size:
        raise SnapshotDamaged(path, f"{len(data)} bytes is shorter than a header")
    body, (crc,) = data[: -_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    magic, version, reserved, offset, count = _HEADER.unpack_from(body, 0)
    if magic != MAGIC:
        raise SnapshotDamaged(path, f"magic {magic!r} is not {MAGIC!r}")
    if version not in VERSIONS_READ:
        raise SnapshotDamaged(path, f"version {version} is not one of {VERSIONS_READ}")
    if crc32c.crc32c(body) != crc:
        raise SnapshotDamaged(path, "CRC does not match")
    if reserved != 0 or offset < 0:
        raise SnapshotDamaged(path, f"reserved field {reserved} or offset {offset} out of range")
    # Each producer takes at least its header: a count beyond that is damage, and checking
    # it first keeps a damaged count from making us loop for billions.
    producer_struct = _PRODUCER if version == 2 else _PRODUCER_V1
    if count * producer_struct.size > len(body) - _HEADER.size:
        raise SnapshotDamaged(path, f"producer count {count} does not fit {len(body)} bytes")
    pos = _HEADER.size
    entries = []
    previous_id = 0
    for _ in range(count):
        if pos + producer_struct.size > len(body):
            raise SnapshotDamaged(path, "truncated producer entry")
        if version == 2:
            producer_id, epoch, last_ts, coordinator_epoch, batch_count = _PRODUCER.unpack_from(body, pos)
        else:
            producer_id, epoch, last_ts, batch_count = _PRODUCER_V1.unpack_from(body, pos)
            coordinator_epoch = NO_COORDINATOR_EPOCH
        pos += producer_struct.size
        fewest_batches = 0 if coordinator_epoch >= 0 else 1  # a marker-only entry has none
        if (producer_id <= previous_id or epoch < 0 or coordinator_epoch < NO_COORDINATOR_EPOCH
                or not fewest_batches <= batch_count <= BATCHES_PER_PRODUCER_MAX):
            raise SnapshotDamaged(
                path,
                f"producer {producer_id} epoch {epoch} coordinator epoch {coordinator_epoch} "
                f"with {batch_count} batches is out of order or out of range",
            )
        previous_id = producer_id
        entry = ProducerEntry(ProducerId(producer_id), ProducerEpoch(epoch), last_timestamp_ms=last_ts,
                              coordinator_epoch=coordinator_epoch)
        previous_last = -1
        for _ in range(batch_count):
            if pos + _BATCH.size > len(body):
                raise SnapshotDamaged(path, "truncated batch entry")
            first_seq, last_seq, base, last = _BATCH.unpack_from(body, pos)
            pos += _BATCH.size
            if not (0 <= first_seq <= SEQUENCE_MAX and 0 <= last_seq <= SEQUENCE_MAX
                    and previous_last < base <= last < offset):
                raise SnapshotDamaged(path, f"producer {producer_id} batch [{base}, {last}] seq "
                                            f"[{first_seq}, {last_seq}] out of range")
            previous_last = last
            entry.batches.append(BatchMetadata(SequenceNumber(first_seq), SequenceNumber(last_seq),
                                               Offset(base), Offset(last)))
        entries.append(entry)
    if pos != len(body):
        raise SnapshotDamaged(path, f"{len(body) - pos} trailing bytes")
    return Offset(offset), ProducerStateTable.from_entries(entries, offset)


def write_snapshot(directory: Path, table: ProducerStateTable, offset: int) -> Path:
    """Write `<offset>.snapshot` atomically (write, fsync, rename) and return its path."""
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(encode_snapshot(table, offset))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_snapshot(path: Path) -> ProducerStateTable:
    """Load one snapshot file; SnapshotDamaged when it is damaged or its name disagrees with its content."""
    offset = _offset_of(path)
    if offset is None:
        raise SnapshotDamaged(path, "file name is not <offset:020d>.snapshot")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SnapshotDamaged(path, "file is missing") from None
    stored, table = decode_snapshot(data, path)
    if stored != offset:
        raise SnapshotDamaged(path, f"holds offset {stored}, not the {offset} of its name")
    return table


def list_snapshots(directory: Path) -> list[tuple[Offset, Path]]:
    """Snapshot files in the directory, oldest first."""
    found = []
    for path in directory.glob(f"*{SUFFIX}"):
        offset = _offset_of(path)
        if offset is not None:
            found.append((offset, path))
    return sorted(found)


@dataclass(frozen=True, slots=True)
class LoadedProducerState:
    """The result of `load_producer_state`: replay the log's batches from `replay_from_offset` on top of
    `table` (ProducerStateTable.rebuild(batches, start=table))."""

    table: ProducerStateTable
    replay_from_offset: Offset
    # Snapshots that were damaged (delete them), with the reason, for the log line.
    damaged: tuple[SnapshotDamaged, ...]


def load_producer_state(directory: Path, log_start_offset: int, log_end_offset: int) -> LoadedProducerState:
    """The newest readable snapshot at or below the log end, or an empty table replaying from the log
    start. Snapshots above the log end (the log was truncated below them) are skipped; delete them with
    `delete_snapshots_above`. Only reads files."""
    damaged = []
    for offset, path in reversed(list_snapshots(directory)):
        if offset > log_end_offset:
            continue
        try:
            table = read_snapshot(path)
        except SnapshotDamaged as exc:
            damaged.append(exc)
            continue
        if offset < log_start_offset:
            # Retention moved the log start past the snapshot: the batches between are gone, and the
            # table already holds what they said.
            table.advance_to(log_start_offset)
            return LoadedProducerState(table, Offset(log_start_offset), tuple(damaged))
        return LoadedProducerState(table, offset, tuple(damaged))
    table = ProducerStateTable()
    table.advance_to(log_start_offset)
    return LoadedProducerState(table, Offset(log_start_offset), tuple(damaged))


def delete_snapshots_above(directory: Path, offset: int) -> list[Path]:
    """Delete snapshots taken past `offset` (after a truncation to `offset`: they describe batches that
    are gone)."""
    deleted = []
    for snap_offset, path in list_snapshots(directory):
        if snap_offset > offset:
            path.unlink(missing_ok=True)
            deleted.append(path)
    return deleted


def delete_snapshots_below(directory: Path, offset: int) -> list[Path]:
    """Delete snapshots older than `offset`, always keeping the newest one (it may hold producers whose
    batches retention deleted). Call with the log start offset after retention."""
    snapshots = list_snapshots(directory)
    deleted = []
    for snap_offset, path in snapshots[:-1]:
        if snap_offset < offset:
            path.unlink(missing_ok=True)
            deleted.append(path)
    return deleted


def delete_stray_files(directory: Path) -> None:
    """Remove `.snapshot.tmp` files a crash left behind."""
    for stray in directory.glob(f"*{SUFFIX}.tmp"):
        stray.unlink(missing_ok=True)


def _offset_of(path: Path) -> Offset | None:
    stem = path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else ""
    if len(stem) != 20 or not stem.isdigit():
        return None
    return Offset(int(stem))
