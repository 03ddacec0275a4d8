"""QuorumChange: adding and removing controller quorum voters on a live quorum (the I/O shell around
kanal.metadata.quorum_voters).

How a change flows (one at a time):

1. AddVoter / RemoveVoter reach the active controller (a standby forwards them). The shell reads what the
   pure decision needs (`view`): the voters the log names, who answers (pysyncobj's connection status on
   the leader), pysyncobj's membership and the active controller's id; for an add it also asks the new
   controller over gRPC whether it runs (DescribeQuorum names it with that gRPC endpoint).
2. The decision writes a VoterSetRecord (the whole set after the change) through the ordinary write path,
   or refuses (INVALID_QUORUM_CHANGE, nothing written).
3. `converge` (the active controller's loop, every step) sees the committed voter set differ from
   pysyncobj's membership and proposes pysyncobj's own membership entry for the one voter that differs
   (`RaftNode.change_membership`): pysyncobj applies it on every node when appended (Raft's
   single-server change) and allows one at a time. A leader that finds itself removed hands leadership
   off instead (pysyncobj cannot remove its own leader).
4. The caller's reply waits until pysyncobj's membership equals the new set, or its deadline
   (REQUEST_TIMED_OUT: recorded, still converging; `kanal quorum describe` shows when it is done).

Why the record comes first: it carries what pysyncobj's entry lacks (the controller id and gRPC endpoint),
and a new active controller that takes over between the two steps finishes the change from the log.
While the two differ, the next change is refused ("in progress").
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

import grpc

from kanal.metadata.quorum_voters import QuorumView, change_in_progress, decide_add_voter, decide_remove_voter
from kanal.net.channel_options import channel_options
from kanal.raft.active_controller import ActiveController
from kanal.raft.raft_node import RaftNode
from kanal.raft.voter_roster import VoterRoster
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.v1 import admin_pb2, controller_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

_log = logging.getLogger("kanal.raft.quorum")

# How long the active controller waits for a new voter's DescribeQuorum answer.
PROBE_TIMEOUT_S = 2.0
# Pause between checks while a caller waits for pysyncobj's membership to match the record.
_WAIT_STEP_S = 0.02


class QuorumChange:
    def __init__(self, controller: ActiveController, roster: VoterRoster, raft: RaftNode,
                 security: ClientSecurity | None) -> None:
        self._controller = controller
        self._roster = roster
        self._raft = raft
        self._security = security
        self._lock = threading.Lock()
        # A pysyncobj membership entry proposed and not settled yet (its address), guarded by _lock.
        self._pending: str | None = None

    def __repr__(self) -> str:
        return f"<QuorumChange pending={self._pending}>"

    def view(self) -> QuorumView:
        status = self._raft.status()
        live = frozenset(v.controller_id for v in status.voters if v.reachable)
        return QuorumView(self._roster.configured, live, self._raft.members(), status.leader_id)

    def add_decider(self, request: Any) -> Any:
        """decide_add_voter bound to the live view (probing the new controller only on the active one)."""
        candidate_live = self._controller.is_active() and self._probe(
            request.controller_id, request.grpc_endpoint
        )
        return functools.partial(decide_add_voter, view=self.view(), candidate_live=candidate_live)

    def remove_decider(self) -> Any:
        return functools.partial(decide_remove_voter, view=self.view())

    def wait_converged(self, voter_ids: list[int], deadline_s: float) -> None:
        """Wait until pysyncobj's membership is the committed voter set (on the active controller)."""
        while True:
            voters = self._roster.quorum_voters()
            if sorted(v.controller_id for v in voters) == sorted(voter_ids) and \
                    change_in_progress(voters, self._raft.members()) is None:
                return
            if time.monotonic() >= deadline_s:
                raise KanalError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"voter set {sorted(voter_ids)} recorded; the Raft membership is still "
                                 f"{sorted(self._raft.members())} (it converges in the background: see "
                                 f"kanal quorum describe)")
            time.sleep(_WAIT_STEP_S)

    def converge(self) -> None:
        """One step towards the committed voter set (the active controller's loop thread)."""
        if not self._controller.is_active():
            return
        target = {v.raft_endpoint for v in self._roster.quorum_voters()}
        members = self._raft.members()
        if target == set(members):
            return
        me = str(self._roster.voter(self._roster.controller_id).raft)  # type: ignore[union-attr]
        with self._lock:
            if self._pending is not None:
                return
            to_add = sorted(target - members)
            to_remove = sorted(members - target)
            if not to_add and to_remove == [me]:
                _log.info("this controller is no longer a voter: handing Raft leadership off")
                self._raft.hand_off_leadership()
                return
            address = to_add[0] if to_add else next(a for a in to_remove if a != me)
            self._pending = address

        def done(ok: bool) -> None:
            with self._lock:
                self._pending = None
            _log.log(logging.INFO if ok else logging.WARNING, "Raft membership: %s %s %s",
                     "adding" if to_add else "removing", address, "committed" if ok else "refused, retrying")

        _log.info(
            "Raft membership: %s %s (target %s)", "adding" if to_add else "removing", address, sorted(target)
        )
        if to_add:
            self._raft.change_membership(add=address, on_done=done)
        else:
            self._raft.change_membership(remove=address, on_done=done)

    def _probe(self, controller_id: int, grpc_endpoint: str) -> bool:
        """Whether a controller answers at `grpc_endpoint` and names itself `controller_id` there."""
        if not grpc_endpoint:
            return False
        try:
            channel = open_channel(grpc_endpoint, channel_options(4 << 20), self._security)
        except (ValueError, KanalError):
            return False
        try:
            reply = controller_pb2_grpc.ControllerStub(channel).DescribeQuorum(
                admin_pb2.DescribeQuorumRequest(), timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError as exc:
            _log.info("controller %d at %s did not answer: %s", controller_id, grpc_endpoint, exc.code().name)
            return False
        finally:
            channel.close()
        return any(v.controller_id == controller_id and v.endpoint == grpc_endpoint for v in reply.voters)
