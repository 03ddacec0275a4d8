"""The snapshot file given to pysyncobj: a MetadataSnapshot and pysyncobj's bookkeeping, never a pickle."""

from __future__ import annotations

import pickle
import zlib

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
    assert data[:4] == b"KRS2"
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)


def test_damage_is_detected(chain):
    data = encode_snapshot(_snapshot(chain))
    for damaged in (data[:-1], data[:10], b"XXXX" + data[4:], data[:40] + bytes([data[40] ^ 1]) + data[41:]):
        with pytest.raises(RaftSnapshotError):
            decode_snapshot(damaged)


def test_unknown_proposal_and_empty_image_round_trip(chain):
    snapshot = RaftSnapshot(
        (b"x", 1, 0), (b"y", 0, 0), ProposalIdSource().next(), image_to_snapshot(chain.image)
    )
    assert decode_snapshot(encode_snapshot(snapshot)) == snapshot


def test_membership_round_trips_and_a_krs1_file_has_none(chain):
    """The Raft membership pysyncobj restores when it loads the dump (quorum changes); a KRS1 file (written
    before them) still loads, with no membership recorded."""
    members = ("127.0.0.1:9701", "127.0.0.1:9702", "127.0.0.1:9704")
    snapshot = RaftSnapshot(
        (b"x", 1, 0), (b"y", 0, 0), ProposalIdSource().next(), image_to_snapshot(chain.image), members
    )
    assert decode_snapshot(encode_snapshot(snapshot)).members == members
    # A KRS1 file: the same bytes without the membership section, under the old magic, its own CRC.
    data = encode_snapshot(RaftSnapshot(snapshot.last_entry, snapshot.previous_entry, snapshot.last_proposal,
                                        snapshot.metadata))
    body = b"KRS1" + data[4:-8]  # drop the CRC and the empty membership count
    old = body + zlib.crc32(body).to_bytes(4, "big")
    loaded = decode_snapshot(old)
    assert loaded.members is None and loaded.metadata == snapshot.metadata


def test_a_loaded_membership_leaves_this_node_out():
    """pysyncobj drops itself from a loaded membership only when an entry equals its own Node object; the
    addresses are strings, so this node's own address must be taken out before they reach it (else a lone
    controller restarted from a snapshot counts itself twice and never wins an election)."""
    from pysyncobj.node import TCPNode

    from kanal.raft.raft_node import others_than

    me = TCPNode("127.0.0.1:9701")
    assert others_than(("127.0.0.1:9701", "127.0.0.1:9702", "127.0.0.1:9703"), me) == (
        "127.0.0.1:9702", "127.0.0.1:9703")
    assert others_than(("127.0.0.1:9701",), me) == ()
