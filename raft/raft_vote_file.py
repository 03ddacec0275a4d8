"""TermVoteFile: Raft's term, vote and commit index on disk, durable before anyone hears of them.

Raft needs `currentTerm` and `votedFor` on stable storage before a vote is granted or requested: a voter
that forgets its vote after a power cut can vote twice in one term, and two leaders get elected. The
commit index is kept beside them as a hint for the restart (which entries may be replayed at once).

File `<data-dir>/raft/term-vote`: two slots of 512 bytes, written alternately in place (a double-buffered
superblock), so a write torn by a power cut leaves the other slot whole. Integers big-endian:

    offset  size  field (each slot)
    0       4     magic b"KRV1"
    4       8     sequence number (the slot with the highest valid one wins; slot = sequence % 2)
    12      8     current term
    20      8     Raft commit index
    28      2     N: length of the vote (0 = no vote in this term)
    30      N     the id of the node voted for in this term (pysyncobj's node id, "host:port"), UTF-8
    ...           zero padding
    508     4     CRC-32 (zlib.crc32) of bytes 0..507 of the slot

`store` writes one slot and fdatasyncs it before returning (one fdatasync per term or vote change: only
elections pay it). A missing file is term 0, no vote. A slot whose magic or CRC does not match is
ignored; a file with no valid slot but non-zero bytes raises TermVoteFileError (it is not this format).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from kanal.broker.storage.durable_files import fsync_directory

MAGIC = b"KRV1"
SLOT_BYTES = 512
VOTE_BYTES_MAX = SLOT_BYTES - 30 - 4
_HEAD = struct.Struct(">4sQQQH")
_CRC = struct.Struct(">I")


class TermVoteFileError(Exception):
    """The term/vote file is damaged beyond its two slots or is not this format."""


@dataclass(frozen=True, slots=True)
class TermVote:
    term: int = 0
    voted_for: str | None = None
    commit_index: int = 1

    def __repr__(self) -> str:
        return f"<TermVote term={self.term} vote={self.voted_for} commit={self.commit_index}>"


def encode_slot(sequence: int, state: TermVote) -> bytes:
    vote = (state.voted_for or "").encode()
    if len(vote) > VOTE_BYTES_MAX:
        raise ValueError(f"a node id of {len(vote)} bytes does not fit the term/vote file")
    body = _HEAD.pack(MAGIC, sequence, state.term, state.commit_index, len(vote)) + vote
    body += b"\0" * (SLOT_BYTES - _CRC.size - len(body))
    return body + _CRC.pack(zlib.crc32(body))


def decode_slot(slot: bytes) -> tuple[int, TermVote] | None:
    """(sequence, state) of a valid slot, None for a torn, empty or foreign one."""
    if len(slot) != SLOT_BYTES:
        return None
    body = slot[: SLOT_BYTES - _CRC.size]
    if _CRC.unpack_from(slot, len(body))[0] != zlib.crc32(body):
        return None
    magic, sequence, term, commit, vote_len = _HEAD.unpack_from(body)
    if magic != MAGIC or vote_len > VOTE_BYTES_MAX:
        return None
    vote = bytes(body[_HEAD.size : _HEAD.size + vote_len]).decode() if vote_len else None
    return sequence, TermVote(term, vote, commit)


class TermVoteFile:
    """Not thread-safe: pysyncobj's tick thread is its only writer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sequence = 0
        self._state = TermVote()
        self.syncs = 0
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        best = None
        for start in (0, SLOT_BYTES):
            decoded = decode_slot(data[start : start + SLOT_BYTES])
            if decoded is not None and (best is None or decoded[0] > best[0]):
                best = decoded
        if best is None:
            if data.strip(b"\0"):
                raise TermVoteFileError(f"{path} has no valid term/vote slot")
            return
        self._sequence, self._state = best

    @property
    def state(self) -> TermVote:
        return self._state

    def store(self, state: TermVote) -> None:
        """Write `state` into the older slot and fdatasync it; durable when this returns."""
        sequence = self._sequence + 1
        slot = encode_slot(sequence, state)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, slot, (sequence % 2) * SLOT_BYTES)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_directory(self.path.parent)  # the new file's name must survive too
        self.syncs += 1
        self._sequence, self._state = sequence, state

    def __repr__(self) -> str:
        return f"<TermVoteFile {self.path} seq={self._sequence} {self._state!r}>"


