"""The Raft command codec and the rule that decides whether a committed command applies."""

from __future__ import annotations

import pytest

from kanal.raft.command import (
    HEADER_BYTES,
    UNCONDITIONAL_OFFSET,
    CommandFormatError,
    ProposalId,
    ProposalIdSource,
    Verdict,
    decode_command,
    decode_entry,
    encode_command,
    encode_entry,
    judge,
)
from kanal.v1 import metadata_pb2


def _batch(epoch: int = 3) -> metadata_pb2.MetadataBatch:
    record = metadata_pb2.MetadataRecord(
        time_ms=5, principal="p", request_id="r", no_op=metadata_pb2.NoOpRecord()
    )
    return metadata_pb2.MetadataBatch(controller_epoch=epoch, records=[record])


def test_round_trip_keeps_every_field_and_the_batch_bytes():
    ids = ProposalIdSource(b"\x01" * 8)
    proposal, parent = ids.next(), ids.next()
    batch = _batch()
    data = encode_command(proposal, parent, 42, batch)
    command = decode_command(data)
    assert command.proposal == proposal
    assert command.parent == parent
    assert command.expected_base_offset == 42
    assert command.batch_bytes == batch.SerializeToString()
    assert command.parse_batch() == batch
    assert not command.unconditional
    assert data[:4] == b"KMC1" and len(data) == HEADER_BYTES + len(batch.SerializeToString())


def test_unconditional_command_has_no_parent_and_offset_minus_one():
    proposal = ProposalIdSource().next()
    command = decode_command(encode_command(proposal, ProposalId.NONE, UNCONDITIONAL_OFFSET, _batch()))
    assert command.unconditional
    with pytest.raises(ValueError):
        encode_command(proposal, ProposalId.NONE, 7, _batch())
    with pytest.raises(ValueError):
        encode_command(proposal, proposal, UNCONDITIONAL_OFFSET, _batch())


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"KMC1",
        b"XXXX" + bytes(40) + b"\x08\x01",
        # a proposal id of zeros
        b"KMC1" + bytes(16) + bytes(16) + (-1).to_bytes(8, "big", signed=True) + b"\x08\x01",
    ],
)
def test_malformed_commands_are_refused(data):
    with pytest.raises(CommandFormatError):
        decode_command(data)


def test_command_whose_batch_does_not_parse_or_is_empty_is_refused():
    proposal = ProposalIdSource().next()
    garbage = decode_command(encode_command(proposal, ProposalId.NONE, UNCONDITIONAL_OFFSET, b"\xff\xff\xff"))
    with pytest.raises(CommandFormatError):
        garbage.parse_batch()
    empty_bytes = metadata_pb2.MetadataBatch(controller_epoch=1).SerializeToString()
    empty = decode_command(encode_command(proposal, ProposalId.NONE, UNCONDITIONAL_OFFSET, empty_bytes))
    with pytest.raises(CommandFormatError):
        empty.parse_batch()


def test_proposal_ids_are_unique_within_and_across_sources():
    a, b = ProposalIdSource(), ProposalIdSource()
    ids = [a.next() for _ in range(100)] + [b.next() for _ in range(100)]
    assert len(set(ids)) == 200
    assert all(not i.is_none for i in ids)


def test_judge_applies_only_after_the_parent_and_not_below_the_highest_epoch():
    ids = ProposalIdSource(b"\x02" * 8)
    head, other, proposal = ids.next(), ids.next(), ids.next()
    follows = decode_command(encode_command(proposal, head, 10, _batch()))
    assert judge(follows, 3, highest_epoch=3, last_proposal=head) is Verdict.APPLY
    assert judge(follows, 4, highest_epoch=3, last_proposal=head) is Verdict.APPLY
    assert judge(follows, 3, highest_epoch=3, last_proposal=other) is Verdict.STALE_PARENT
    assert judge(follows, 2, highest_epoch=3, last_proposal=head) is Verdict.STALE_EPOCH
    noop = decode_command(encode_command(proposal, ProposalId.NONE, UNCONDITIONAL_OFFSET, _batch()))
    assert judge(noop, 3, highest_epoch=3, last_proposal=other) is Verdict.APPLY
    assert judge(noop, 2, highest_epoch=3, last_proposal=other) is Verdict.STALE_EPOCH


def test_an_entry_of_one_command_is_the_command_and_a_group_keeps_every_command_in_order():
    ids = ProposalIdSource(b"\x02" * 8)
    first, second, third = ids.next(), ids.next(), ids.next()
    commands = [encode_command(first, ProposalId(b"\x09" * 16), 7, _batch()),
                encode_command(second, first, 8, _batch()),
                encode_command(third, second, 9, _batch(epoch=4))]
    assert encode_entry(commands[:1]) == commands[0]
    assert decode_entry(commands[0]) == [decode_command(commands[0])]
    group = encode_entry(commands)
    assert group[:4] == b"KMG1"
    assert decode_entry(group) == [decode_command(c) for c in commands]


def test_damaged_group_entries_are_refused():
    ids = ProposalIdSource(b"\x03" * 8)
    first, second = ids.next(), ids.next()
    commands = [
        encode_command(first, ProposalId(b"\x09" * 16), 7, _batch()),
        encode_command(second, first, 8, _batch()),
    ]
    group = encode_entry(commands)
    for damaged in (
        group[:-1],  # ends inside a command
        group + b"\x00",  # bytes after the last command
        group[:9],  # ends inside a length
        b"KMG1"
        + (1).to_bytes(4, "big")
        + len(commands[0]).to_bytes(4, "big")
        + commands[0],  # a group of one
        b"KMG1" + (2).to_bytes(4, "big") + (5).to_bytes(4, "big") + b"KMG1x" + commands[0],  # not a command
    ):
        with pytest.raises(CommandFormatError):
            decode_entry(damaged)
    with pytest.raises(ValueError):
        encode_entry([])
    with pytest.raises(ValueError):
        encode_entry([group, commands[0]])  # groups do not nest
