"""The snapshot file given to pysyncobj: a MetadataSnapshot and pysyncobj's bookkeeping, never a pickle."""

from __future__ import annotations

import pickle

import pytest

from kanal.metadata import image_from_snapshot, image_to_snapshot
from kanal.raft.command import ProposalIdSource
from kanal.raft.raft_snapshot import (
    RaftSnapshot,
    RaftSnapshotError,
    decode_snapshot,
    encode_snapshot,
    read_snapshot_file,
    write_snapshot_file,
)


def _snapshot(chain) -> RaftSnapshot:
    chain.noop(1)
    chain.register(1, 1)
    chain.register(2, 1)
    return RaftSnapshot(
        last_entry=(b"\x00entry-b", 12, 3),
        previous_entry=(b"\x00entry-a", 11, 3),
        last_proposal=chain.last,
        metadata=image_to_snapshot(chain.image),
    )


def test_round_trip(tmp_path, chain):
    snapshot = _snapshot(chain)
    write_snapshot_file(tmp_path / "dump", snapshot)
    loaded = read_snapshot_file(tmp_path / "dump")
    assert loaded == snapshot
    assert image_from_snapshot(loaded.metadata) == chain.image
    data = (tmp_path / "dump").read_bytes()
    assert data[:4] == b"KRS1"
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)


def test_damage_is_detected(chain):
    data = encode_snapshot(_snapshot(chain))
    for damaged in (data[:-1], data[:10], b"XXXX" + data[4:], data[:40] + bytes([data[40] ^ 1]) + data[41:]):
        with pytest.raises(RaftSnapshotError):
            decode_snapshot(damaged)


def test_unknown_proposal_and_empty_image_round_trip(chain):
    snapshot = RaftSnapshot((b"x", 1, 0), (b"y", 0, 0), ProposalIdSource().next(), image_to_snapshot(chain.image))
    assert decode_snapshot(encode_snapshot(snapshot)) == snapshot
