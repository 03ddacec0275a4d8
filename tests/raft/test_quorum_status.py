"""Reading pysyncobj's getStatus() into DescribeQuorum."""

from __future__ import annotations

from kanal.raft.controller_config import parse_controller_args
from kanal.raft.quorum_status import from_status

PEERS = "1=127.0.0.1:7001=127.0.0.1:6001,2=127.0.0.1:7002=127.0.0.1:6002,3=127.0.0.1:7003=127.0.0.1:6003"
CONFIG = parse_controller_args(
    [
        "--id",
        "1",
        "--listen",
        "127.0.0.1:6001",
        "--raft",
        "127.0.0.1:7001",
        "--peers",
        PEERS,
        "--data-dir",
        "/tmp/x",
    ]
)


class _Node:
    def __init__(self, address: str) -> None:
        self.address = address


def test_leader_view_has_match_indexes_and_lags():
    status = {
        "state": 2,
        "leader": _Node("127.0.0.1:7001"),
        "raft_term": 4,
        "commit_idx": 100,
        "last_applied": 100,
        "has_quorum": True,
        "partner_node_status_server_127.0.0.1:7002": 2,
        "partner_node_status_server_127.0.0.1:7003": 0,
        "match_idx_server_127.0.0.1:7002": 97,
        "match_idx_server_127.0.0.1:7003": 40,
    }
    q = from_status(status, CONFIG)
    assert (q.leader_id, q.term, q.commit_index, q.is_leader) == (1, 4, 100, True)
    reply = q.describe(metadata_end_offset=77)
    assert reply.leader_id == 1 and reply.term == 4 and reply.metadata_end_offset == 77
    by_id = {v.controller_id: v for v in reply.voters}
    assert by_id[1].is_active and by_id[1].lag == 0 and by_id[1].endpoint == "127.0.0.1:6001"
    assert (by_id[2].match_index, by_id[2].lag, by_id[2].reachable) == (97, 3, True)
    assert (by_id[3].match_index, by_id[3].lag, by_id[3].reachable) == (40, 60, False)


def test_follower_view_knows_the_leader_but_no_match_indexes():
    status = {"state": 0, "leader": _Node("127.0.0.1:7003"), "raft_term": 5, "commit_idx": 10}
    reply = from_status(status, CONFIG).describe(3)
    assert reply.leader_id == 3
    assert [v.is_active for v in reply.voters] == [False, False, True]
    assert all(v.match_index == -1 and v.lag == -1 for v in reply.voters)


def test_no_leader():
    reply = from_status({"state": 1, "leader": None, "raft_term": 6}, CONFIG).describe(0)
    assert reply.leader_id == -1
    assert not any(v.is_active for v in reply.voters)


def test_a_raft_node_answers_with_the_status_its_tick_published_never_a_live_read():
    # Regression (kanal chaos, seed 3021): pysyncobj handles a vote request for a higher term by setting the
    # term, fsyncing it, then dropping the leader; DescribeQuorum read getStatus() from a gRPC thread in
    # between and paired "I am the leader" with the new term: two active controllers in one epoch. The
    # status is now taken on the tick thread, after the tick, and status() only reads that.
    from kanal.raft.raft_node import RaftNode

    node = object.__new__(RaftNode)  # no cluster: the attributes status() and the tick's last step use
    node._kanal_config = CONFIG
    node._kanal_roster = CONFIG
    published = {"state": 0, "leader": None, "raft_term": 2, "commit_idx": 7}
    node._kanal_status = published

    def torn_read():  # what a read in the middle of the vote's handling would see
        return {"state": 2, "leader": _Node("127.0.0.1:7001"), "raft_term": 2, "commit_idx": 7}

    node.getStatus = torn_read
    q = node.status()
    assert (q.leader_id, q.term, q.is_leader) == (-1, 2, False)
