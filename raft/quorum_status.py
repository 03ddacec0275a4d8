"""QuorumStatus: the Raft quorum as this controller sees it, read from pysyncobj's getStatus().

pysyncobj reports a flat dict: `state` (0 follower, 1 candidate, 2 leader), `leader` (a node or None),
`raft_term`, `commit_idx`, `last_applied`, `partner_node_status_server_<addr>` (2 = connected) and, on
the leader only, `match_idx_server_<addr>` (the highest index each follower has acknowledged).
`from_status` turns that into typed values keyed by controller id; `describe` builds the
DescribeQuorumResponse. Match indexes and lags are known only on the leader (-1 elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kanal.raft.controller_config import ControllerConfig
from kanal.v1 import admin_pb2

if TYPE_CHECKING:
    from kanal.raft.voter_roster import VoterRoster

_LEADER_STATE = 2


@dataclass(frozen=True, slots=True)
class VoterStatus:
    controller_id: int
    endpoint: str
    is_leader: bool
    # Highest Raft index the voter has acknowledged, as the leader knows it; -1 when unknown.
    match_index: int
    reachable: bool


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    # Controller id of the Raft leader as this controller knows it; -1 when none.
    leader_id: int
    term: int
    commit_index: int
    last_applied: int
    is_leader: bool
    has_quorum: bool
    voters: tuple[VoterStatus, ...]

    def lag(self, voter: VoterStatus) -> int:
        if voter.match_index < 0:
            return -1
        return max(0, self.commit_index - voter.match_index)

    def describe(self, metadata_end_offset: int) -> admin_pb2.DescribeQuorumResponse:
        return admin_pb2.DescribeQuorumResponse(
            leader_id=self.leader_id,
            term=self.term,
            commit_index=self.commit_index,
            metadata_end_offset=metadata_end_offset,
            voters=[
                admin_pb2.ControllerDescription(
                    controller_id=v.controller_id,
                    endpoint=v.endpoint,
                    is_active=v.is_leader,
                    match_index=v.match_index,
                    lag=self.lag(v),
                    reachable=v.reachable,
                )
                for v in self.voters
            ],
        )

    def __repr__(self) -> str:
        return (
            f"<QuorumStatus leader={self.leader_id} term={self.term} commit={self.commit_index} "
            f"applied={self.last_applied} quorum={self.has_quorum}>"
        )


def from_status(status: Mapping[str, Any], config: ControllerConfig | VoterRoster) -> QuorumStatus:
    """`config`: the voters to report (a VoterRoster: the current ones; a ControllerConfig: as started)."""
    leader_node = status.get("leader")
    leader_address = getattr(leader_node, "address", None) if leader_node is not None else None
    leader = config.voter_by_raft(leader_address) if leader_address else None
    leader_id = leader.controller_id if leader is not None else -1
    is_leader = status.get("state") == _LEADER_STATE
    commit_index = int(status.get("commit_idx") or 0)
    voters = []
    for v in config.voters:
        address = str(v.raft)
        if v.controller_id == config.controller_id:
            match = commit_index if is_leader else -1
            reachable = True
        else:
            match = int(status.get(f"match_idx_server_{address}", -1)) if is_leader else -1
            reachable = status.get(f"partner_node_status_server_{address}") == 2
        voters.append(
            VoterStatus(v.controller_id, str(v.grpc), v.controller_id == leader_id, match, reachable)
        )
    return QuorumStatus(
        leader_id=leader_id,
        term=int(status.get("raft_term") or 0),
        commit_index=commit_index,
        last_applied=int(status.get("last_applied") or 0),
        is_leader=is_leader,
        has_quorum=bool(status.get("has_quorum")),
        voters=tuple(voters),
    )
