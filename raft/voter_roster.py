"""VoterRoster: who the voters are now, for lookups that used to read `--peers` only.

Before any quorum change the voters are the configured ones; after one, the committed image's
VoterSetRecord names them (as kanal.metadata.quorum_voters.voters_of). Lookups by id or Raft address also
fall back to the configured voters, so a controller still knows the peers it was started with while its
image catches up. Read on any thread: each lookup reads the image under the store's lock.
"""

from __future__ import annotations

from collections.abc import Callable

from kanal.metadata.image import QuorumVoter
from kanal.raft.controller_config import Address, ControllerConfig, Voter


def to_quorum_voter(voter: Voter) -> QuorumVoter:
    return QuorumVoter(voter.controller_id, str(voter.raft), str(voter.grpc))


def to_voter(voter: QuorumVoter) -> Voter:
    return Voter(voter.controller_id, Address.parse(voter.raft_endpoint, "voter raft"),
                 Address.parse(voter.grpc_endpoint, "voter grpc"))


class VoterRoster:
    def __init__(self, config: ControllerConfig, image_voters: Callable[[], tuple[QuorumVoter, ...]]) -> None:
        self.controller_id = config.controller_id
        self.configured = tuple(sorted(to_quorum_voter(v) for v in config.voters))
        self._config = config
        self._image_voters = image_voters

    def __repr__(self) -> str:
        return f"<VoterRoster {[v.controller_id for v in self.quorum_voters()]}>"

    def quorum_voters(self) -> tuple[QuorumVoter, ...]:
        """The voters as the committed image names them (the configured ones before any change)."""
        return self._image_voters() or self.configured

    @property
    def voters(self) -> tuple[Voter, ...]:
        return tuple(to_voter(v) for v in self.quorum_voters())

    @property
    def others(self) -> tuple[Voter, ...]:
        return tuple(v for v in self.voters if v.controller_id != self.controller_id)

    def voter(self, controller_id: int) -> Voter | None:
        for v in (*self.voters, *self._config.voters):
            if v.controller_id == controller_id:
                return v
        return None

    def voter_by_raft(self, raft_address: str) -> Voter | None:
        for v in (*self.voters, *self._config.voters):
            if str(v.raft) == raft_address:
                return v
        return None

