"""RaftSnapshot: the file pysyncobj calls its "full dump" — a metadata snapshot plus pysyncobj's bookkeeping.

pysyncobj compacts its journal by asking for a dump of the state machine at its last applied entry
(written to `<data-dir>/raft/dump`), and ships that file to a follower that is too far behind for the
journal. Its default format pickles the state machine object; kanal gives it a custom serializer that
writes this format instead (never a pickle of kanal's objects). Integers big-endian:

    offset  size  field
    0       4     magic b"KRS2" (b"KRS1": the same without the membership section, read as "none recorded")
    4       ...   two Raft entries, the last applied one first, then the one before it (pysyncobj keeps
                  both in its journal after a compaction and checks them on load); each:
                  u64 index, u64 term, u32 N, N bytes of the entry as pysyncobj stores it (opaque here)
    ...     16    the proposal id of the last applied metadata batch (command.py)
    ...     u32 M, M bytes: a kanal.v1.MetadataSnapshot (kanal.metadata.image_to_snapshot of the image)
    ...     KRS2 only: u32 K, then K times u32 N, N bytes UTF-8: the Raft membership (every voter's Raft
                  address, this one included, sorted) as pysyncobj had it when it asked for the dump;
                  pysyncobj restores its membership from it when it loads the dump (dynamic membership)
    ...     4     CRC-32 (zlib.crc32) of every byte before it

A file that does not parse or whose CRC fails raises RaftSnapshotError: a damaged snapshot is never
half-loaded.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from kanal.broker.storage.durable_files import fsync_directory
from kanal.raft.command import ProposalId
from kanal.v1.metadata_pb2 import MetadataSnapshot

MAGIC = b"KRS2"
MAGIC_V1 = b"KRS1"
_ENTRY_HEAD = struct.Struct(">QQI")
_U32 = struct.Struct(">I")

# A pysyncobj journal entry: (entry bytes, index, term).
RaftEntry = tuple[bytes, int, int]


class RaftSnapshotError(Exception):
    """The snapshot file is damaged or not a kanal snapshot."""


@dataclass(frozen=True, slots=True)
class RaftSnapshot:
    last_entry: RaftEntry
    previous_entry: RaftEntry
    last_proposal: ProposalId
    metadata: MetadataSnapshot
    # Raft addresses of every voter when the dump was taken, sorted; None in a KRS1 file (kept before
    # quorum changes existed: the configured voters then).
    members: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return (
            f"<RaftSnapshot raft_index={self.last_entry[1]} term={self.last_entry[2]} "
            f"metadata_offset={self.metadata.next_offset} records={len(self.metadata.records)}>"
        )


def encode_snapshot(snapshot: RaftSnapshot) -> bytes:
    parts = [MAGIC]
    for data, index, term in (snapshot.last_entry, snapshot.previous_entry):
        data = bytes(data)
        parts.append(_ENTRY_HEAD.pack(index, term, len(data)))
        parts.append(data)
    parts.append(snapshot.last_proposal.raw)
    metadata = snapshot.metadata.SerializeToString()
    parts.append(_U32.pack(len(metadata)))
    parts.append(metadata)
    members = sorted(snapshot.members or ())
    parts.append(_U32.pack(len(members)))
    for address in members:
        raw = address.encode()
        parts.append(_U32.pack(len(raw)))
        parts.append(raw)
    body = b"".join(parts)
    return body + _U32.pack(zlib.crc32(body))


def decode_snapshot(data: bytes) -> RaftSnapshot:
    if len(data) < len(MAGIC) + 4 or data[: len(MAGIC)] not in (MAGIC, MAGIC_V1):
        raise RaftSnapshotError("not a kanal Raft snapshot (bad magic)")
    body, crc = data[:-4], _U32.unpack_from(data, len(data) - 4)[0]
    if zlib.crc32(body) != crc:
        raise RaftSnapshotError("Raft snapshot CRC does not match")
    try:
        pos = len(MAGIC)
        entries = []
        for _ in range(2):
            index, term, size = _ENTRY_HEAD.unpack_from(body, pos)
            pos += _ENTRY_HEAD.size
            entries.append((bytes(body[pos : pos + size]), index, term))
            pos += size
        last_proposal = ProposalId(bytes(body[pos : pos + 16]))
        pos += 16
        (size,) = _U32.unpack_from(body, pos)
        pos += 4
        metadata = MetadataSnapshot.FromString(body[pos : pos + size])
        pos += size
        members: tuple[str, ...] | None = None
        if body[: len(MAGIC)] == MAGIC:
            (count,) = _U32.unpack_from(body, pos)
            pos += 4
            found = []
            for _ in range(count):
                (size,) = _U32.unpack_from(body, pos)
                pos += 4
                found.append(bytes(body[pos : pos + size]).decode())
                pos += size
            members = tuple(found) or None  # a membership always holds this voter: none recorded
        if pos != len(body):
            raise RaftSnapshotError("Raft snapshot has trailing or missing bytes")
    except (struct.error, ValueError, DecodeError) as exc:
        raise RaftSnapshotError(f"Raft snapshot does not parse: {exc}") from None
    return RaftSnapshot(entries[0], entries[1], last_proposal, metadata, members)


def write_snapshot_file(path: Path, snapshot: RaftSnapshot) -> None:
    """Write and fsync `path` (pysyncobj renames it into place afterwards)."""
    with open(path, "wb") as f:
        f.write(encode_snapshot(snapshot))
        f.flush()
        os.fsync(f.fileno())


def read_snapshot_file(path: Path) -> RaftSnapshot:
    return decode_snapshot(Path(path).read_bytes())


def sync_file_and_directory(path: Path) -> None:
    """fsync a file that someone else wrote, and its directory (its name)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(path.parent)
