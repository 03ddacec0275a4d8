"""MetadataCommand: what one Raft entry holds — a MetadataBatch and the condition under which it applies.

Byte layout of a command (the bytes pysyncobj replicates; integers big-endian):

    offset  size  field
    0       4     magic b"KMC1" (format version 1)
    4       16    proposal id: 8 bytes chosen at random when the proposing process starts (its
                  incarnation), then an 8-byte sequence number; unique across the cluster's life
    20      16    parent: the proposal id of the batch this one must directly follow in the metadata
                  log; 16 zero bytes = unconditional
    36      8     expected base offset (signed): the metadata offset the batch was decided for; -1 when
                  unconditional. Redundant with `parent`; checked so that a broken chain stops the process
    44      ...   a serialized MetadataBatch (metadata.proto)

Why a condition. The active controller decides against an image that includes every batch it has
proposed (README of kanal.metadata). Raft alone does not make that safe: pysyncobj forwards a proposal
queued by a leader that was just deposed to the new leader, which commits it after its own entries, and
a proposal may time out and still commit later. A batch is therefore applied only when its `parent` is
the last batch applied — the exact image it was decided on — and its controller epoch is not below the
highest seen. Every controller judges each entry the same way (`judge` is a pure function of the entry
and the committed state), so a rejected entry is skipped everywhere: it takes no metadata offset and is
not written to the metadata log. (kanal.metadata's apply_batch can consume the offsets of a fenced batch
and leave it in the log, but the shared segment log refuses a leader epoch below one it already holds,
and a stale batch stored under a newer epoch would be applied by every replayer of the log; so fenced
batches never reach apply_batch or the log.)

Unconditional commands are only the NoOp batch a controller writes when it becomes active: it changes
nothing, and once it is applied every older proposal of any controller is rejected.

Group entries (group commit of decisions). One Raft entry may carry several commands, proposed together
by the active controller: the decisions taken while earlier entries were in flight (active_controller.py).

    offset  size  field
    0       4     magic b"KMG1"
    4       4     count of commands (>= 2)
    8       ...   count times: 4-byte length, then a command as above (b"KMC1" ...)

A group is judged command by command, in order, exactly as if each command were its own Raft entry:
each keeps its own parent, offset and fate (a rejected command makes its descendants in the group stale
like anywhere else), and each becomes its own batch in the metadata log. So the metadata log, the
conditions and the replies are the same whether decisions travel alone or grouped; only pysyncobj's
per-entry work (pickling, encryption, journal record, acknowledgement) is shared. An entry holding one
command is that command's bytes (b"KMC1"), as before groups existed. Controllers of a version without
groups stop (exit 70, CommandFormatError) on a group entry: upgrade every controller before the active one.
"""

from __future__ import annotations

import enum
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from google.protobuf.message import DecodeError

from kanal.v1.metadata_pb2 import MetadataBatch

MAGIC = b"KMC1"
GROUP_MAGIC = b"KMG1"
_HEADER = struct.Struct(">4s16s16sq")
_GROUP_HEADER = struct.Struct(">4sI")
_LENGTH = struct.Struct(">I")
HEADER_BYTES = _HEADER.size  # 44
UNCONDITIONAL_OFFSET = -1


class CommandFormatError(Exception):
    """A Raft entry that is not a metadata command: a damaged journal or a foreign writer. Not expected
    in operation; the controller stops rather than skip an entry every other controller applied."""


@dataclass(frozen=True, slots=True, order=True)
class ProposalId:
    """16 bytes: proposer incarnation (8) + sequence (8). ProposalId.NONE (all zeros) means "no parent"."""

    raw: bytes

    NONE: ClassVar[ProposalId]  # all zeros, assigned below the class

    def __post_init__(self) -> None:
        if len(self.raw) != 16:
            raise ValueError(f"a proposal id is 16 bytes, got {len(self.raw)}")

    @property
    def is_none(self) -> bool:
        return self.raw == bytes(16)

    def __repr__(self) -> str:
        if self.is_none:
            return "<Proposal none>"
        return f"<Proposal {self.raw[:8].hex()}:{int.from_bytes(self.raw[8:], 'big')}>"


ProposalId.NONE = ProposalId(bytes(16))


class ProposalIdSource:
    """Hands out unique proposal ids: a random incarnation per process, then a counter."""

    def __init__(self, incarnation: bytes | None = None) -> None:
        self._incarnation = incarnation if incarnation is not None else os.urandom(8)
        if len(self._incarnation) != 8 or self._incarnation == bytes(8):
            raise ValueError("an incarnation is 8 bytes, not all zero")
        self._next = 1

    def next(self) -> ProposalId:
        seq = self._next
        self._next += 1
        return ProposalId(self._incarnation + seq.to_bytes(8, "big"))

    def __repr__(self) -> str:
        return f"<ProposalIdSource {self._incarnation.hex()} next={self._next}>"


@dataclass(frozen=True, slots=True)
class MetadataCommand:
    """A decoded command. `batch_bytes` is kept as received: the metadata log stores its records' bytes."""

    proposal: ProposalId
    parent: ProposalId
    expected_base_offset: int
    batch_bytes: bytes

    @property
    def unconditional(self) -> bool:
        return self.parent.is_none

    def parse_batch(self) -> MetadataBatch:
        try:
            batch = MetadataBatch.FromString(self.batch_bytes)
        except DecodeError as exc:
            raise CommandFormatError(f"{self.proposal!r}: MetadataBatch does not parse: {exc}") from None
        if not batch.records:
            raise CommandFormatError(f"{self.proposal!r}: empty MetadataBatch")
        return batch

    def __repr__(self) -> str:
        parent = "none" if self.parent.is_none else repr(self.parent)
        return (
            f"<MetadataCommand {self.proposal!r} parent={parent} at={self.expected_base_offset} "
            f"bytes={len(self.batch_bytes)}>"
        )


def encode_command(
    proposal: ProposalId, parent: ProposalId, expected_base_offset: int, batch: MetadataBatch | bytes
) -> bytes:
    """The bytes of a command. An unconditional command (parent NONE) must expect offset -1."""
    if proposal.is_none:
        raise ValueError("a command needs a proposal id")
    if parent.is_none != (expected_base_offset == UNCONDITIONAL_OFFSET):
        raise ValueError("an unconditional command expects offset -1, a conditional one an offset >= 0")
    if expected_base_offset < UNCONDITIONAL_OFFSET:
        raise ValueError(f"bad expected base offset {expected_base_offset}")
    body = batch if isinstance(batch, bytes) else batch.SerializeToString()
    return _HEADER.pack(MAGIC, proposal.raw, parent.raw, expected_base_offset) + body


def decode_command(data: bytes) -> MetadataCommand:
    """The command in `data`; CommandFormatError when it is not one."""
    if not isinstance(data, bytes) or len(data) <= HEADER_BYTES:
        raise CommandFormatError(f"a metadata command is bytes longer than {HEADER_BYTES}, got {type(data)}")
    magic, proposal, parent, expected = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CommandFormatError(f"metadata command with unknown magic {magic!r}")
    if ProposalId(proposal).is_none:
        raise CommandFormatError("metadata command without a proposal id")
    if ProposalId(parent).is_none != (expected == UNCONDITIONAL_OFFSET) or expected < UNCONDITIONAL_OFFSET:
        raise CommandFormatError(f"metadata command with parent/offset mismatch (offset {expected})")
    return MetadataCommand(ProposalId(proposal), ProposalId(parent), expected, data[HEADER_BYTES:])


def encode_entry(commands: Sequence[bytes]) -> bytes:
    """One Raft entry for commands (encode_command's bytes) proposed together, in chain order: a single
    command as it is, several as a group."""
    if not commands:
        raise ValueError("an entry needs at least one command")
    if len(commands) == 1:
        return commands[0]
    parts = [_GROUP_HEADER.pack(GROUP_MAGIC, len(commands))]
    for command in commands:
        if command[:4] != MAGIC:
            raise ValueError("a group holds commands only")
        parts.append(_LENGTH.pack(len(command)))
        parts.append(command)
    return b"".join(parts)


def decode_entry(data: bytes) -> list[MetadataCommand]:
    """The commands of one Raft entry, in order; CommandFormatError when it is not an entry."""
    if not isinstance(data, bytes) or data[:4] != GROUP_MAGIC:
        return [decode_command(data)]
    if len(data) < _GROUP_HEADER.size:
        raise CommandFormatError("a group entry shorter than its header")
    _, count = _GROUP_HEADER.unpack_from(data)
    if count < 2:
        raise CommandFormatError(f"a group entry of {count} commands (a group holds at least 2)")
    commands = []
    position = _GROUP_HEADER.size
    for _ in range(count):
        if position + _LENGTH.size > len(data):
            raise CommandFormatError("a group entry ends inside a length")
        (length,) = _LENGTH.unpack_from(data, position)
        position += _LENGTH.size
        if position + length > len(data):
            raise CommandFormatError("a group entry ends inside a command")
        commands.append(decode_command(data[position : position + length]))
        position += length
    if position != len(data):
        raise CommandFormatError(f"a group entry has {len(data) - position} bytes after its last command")
    return commands


class Verdict(enum.Enum):
    """How a committed command is judged: applied, or skipped everywhere for one of two reasons."""

    APPLY = "apply"
    # Its parent is not the last applied batch: it was decided on an image that is no longer current.
    STALE_PARENT = "stale-parent"
    # Its controller epoch is below the highest applied: a deposed controller wrote it.
    STALE_EPOCH = "stale-epoch"


def judge(
    command: MetadataCommand, controller_epoch: int, *, highest_epoch: int, last_proposal: ProposalId
) -> Verdict:
    """Whether a committed command applies, given the committed state. Pure: every controller agrees."""
    if controller_epoch < highest_epoch:
        return Verdict.STALE_EPOCH
    if not command.unconditional and command.parent != last_proposal:
        return Verdict.STALE_PARENT
    return Verdict.APPLY
