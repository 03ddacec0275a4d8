"""The metadata snapshot file: a MetadataSnapshot at a metadata log offset, as the controllers store it.

Pure codec (bytes and names in, values out; no I/O): the controllers write these files
(raft/metadata_snapshots.py), the Spark replay reads them (spark/snapshot_files.py). They live in the
metadata log's directory `__cluster_metadata-0/`, next to its segments, named like KRaft's checkpoints:

    <next_offset:020d>-<controller_epoch:010d>.checkpoint

`next_offset` is the metadata offset the snapshot reaches (exclusive): the image holds every batch below
it, and the log continues exactly there (it is always a batch boundary). Integers big-endian:

    offset  size  field
    0       4     magic b"KMS1"
    4       8     u64 next_offset (equals the name's and the MetadataSnapshot's)
    12      8     u64 controller_epoch (equals the name's and the MetadataSnapshot's)
    20      8     u64 written_ms: the writing controller's clock when it wrote the file (not the same on
                  every controller; the history has no exact time for a snapshot)
    28      4     u32 N
    32      N     a kanal.v1.MetadataSnapshot (kanal.metadata.image_to_snapshot of the image)
    32+N    4     CRC-32 (zlib.crc32) of every byte before it

A file that is short, has another magic, fails its CRC, does not parse, or whose header disagrees with
its name or its snapshot raises SnapshotFileError: a damaged snapshot is skipped whole, never half-loaded.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from kanal.v1.metadata_pb2 import MetadataSnapshot

MAGIC = b"KMS1"
SUFFIX = ".checkpoint"
_HEAD = struct.Struct(">4sQQQI")
_CRC = struct.Struct(">I")
_NAME = re.compile(r"^(?P<offset>\d{20})-(?P<epoch>\d{10})\.checkpoint$")


class SnapshotFileError(Exception):
    """The file is damaged or not a metadata snapshot file."""


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """A decoded snapshot file."""

    snapshot: MetadataSnapshot
    written_ms: int

    @property
    def next_offset(self) -> int:
        return self.snapshot.next_offset

    @property
    def controller_epoch(self) -> int:
        return self.snapshot.controller_epoch

    def __repr__(self) -> str:
        return (f"<SnapshotFile offset={self.next_offset} epoch={self.controller_epoch} "
                f"records={len(self.snapshot.records)} written_ms={self.written_ms}>")


def snapshot_file_name(next_offset: int, controller_epoch: int) -> str:
    return f"{next_offset:020d}-{controller_epoch:010d}{SUFFIX}"


def parse_snapshot_file_name(name: str) -> tuple[int, int] | None:
    """(next_offset, controller_epoch) of a snapshot file's name; None for any other name."""
    m = _NAME.match(name)
    return (int(m["offset"]), int(m["epoch"])) if m else None


def encode_snapshot_file(snapshot: MetadataSnapshot, written_ms: int) -> bytes:
    body: bytes = snapshot.SerializeToString()  # protobuf's Message methods are untyped (no stubs)
    head = _HEAD.pack(MAGIC, snapshot.next_offset, snapshot.controller_epoch, written_ms, len(body))
    data = head + body
    return data + _CRC.pack(zlib.crc32(data))


def decode_snapshot_file(data: bytes, name: str | None = None) -> SnapshotFile:
    """The snapshot in `data`; when `name` is given, its offset and epoch must match the header's."""
    if len(data) < _HEAD.size + _CRC.size:
        raise SnapshotFileError(f"{len(data)} bytes is too short for a metadata snapshot file")
    magic, next_offset, epoch, written_ms, size = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise SnapshotFileError(f"not a metadata snapshot file (magic {magic!r})")
    if _HEAD.size + size + _CRC.size != len(data):
        raise SnapshotFileError(
            f"the snapshot says {size} bytes, the file holds {len(data) - _HEAD.size - 4}"
        )
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(data[: len(data) - _CRC.size]) != crc:
        raise SnapshotFileError("the metadata snapshot file's CRC does not match")
    try:
        snapshot = MetadataSnapshot.FromString(data[_HEAD.size : _HEAD.size + size])
    except DecodeError as exc:
        raise SnapshotFileError(f"the metadata snapshot does not parse: {exc}") from None
    if snapshot.next_offset != next_offset or snapshot.controller_epoch != epoch:
        raise SnapshotFileError(
            f"the header says offset {next_offset} epoch {epoch}, the snapshot offset {snapshot.next_offset} "
            f"epoch {snapshot.controller_epoch}"
        )
    if name is not None and parse_snapshot_file_name(name) != (next_offset, epoch):
        raise SnapshotFileError(f"the file name {name} does not match offset {next_offset} epoch {epoch}")
    return SnapshotFile(snapshot, written_ms)
