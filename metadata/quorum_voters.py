"""Controller quorum changes (KIP-853 in spirit): the voter set and whether a change may be made.

The voter set lives in the metadata log as a `VoterSetRecord` (the whole set after a change). Until the
first one, the voters are the ones every controller was started with (`--peers`): `voters_of` answers
either way. A change is one voter at a time (Raft's single-server rule: any majority of the old set and
any majority of the new set overlap, so no joint consensus is needed) and is decided here, purely:

- AddVoter: refused when the id, Raft address or gRPC address is a voter's already, when the new voter
  did not answer (adding a silent voter raises the majority without adding a live member), or when the
  live voters would not be a majority of the new set.
- RemoveVoter: refused for an id that is not a voter, for the last voter, for the active controller
  (pysyncobj cannot remove its own leader: stop it, its successor removes it), and when the live voters
  left would not be a majority of the smaller set.
- Either: refused while another change is in progress, i.e. the voter set the log names differs from
  the Raft membership (pysyncobj's), which the active controller changes to match after the record
  commits (raft/quorum_change.py).

Every refusal is INVALID_QUORUM_CHANGE with the reason, and no record.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TypeVar

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.image import MetadataImage, QuorumVoter
from kanal.v1 import metadata_pb2, operations_pb2
from kanal.v1.error import ErrorCode

# The reply of a voter change: both carry error, error_message and the voter ids after the change.
VoterReply = TypeVar("VoterReply", operations_pb2.AddVoterResponse, operations_pb2.RemoveVoterResponse)


def voters_of(image: MetadataImage, configured: Iterable[QuorumVoter]) -> tuple[QuorumVoter, ...]:
    """The voters: the last VoterSetRecord's, or the configured ones (`--peers`) before any change."""
    return image.voters if image.voters else tuple(sorted(configured))


def check_voter_set(voters: Collection[QuorumVoter]) -> str | None:
    """Why a voter set is not well formed (None when it is): at least one voter, ids >= 0, addresses
    given, ids and addresses distinct."""
    if not voters:
        return "a voter set needs at least one voter"
    for v in voters:
        if v.controller_id < 0 or not v.raft_endpoint or not v.grpc_endpoint:
            return f"voter {v} needs an id >= 0, a Raft and a gRPC endpoint"
    for what, values in (
        ("controller ids", [v.controller_id for v in voters]),
        ("Raft endpoints", [v.raft_endpoint for v in voters]),
        ("gRPC endpoints", [v.grpc_endpoint for v in voters]),
    ):
        if len(set(values)) != len(values):
            return f"voters' {what} must be distinct, got {sorted(values)}"
    return None


def has_live_majority(voter_ids: Collection[int], live_ids: Collection[int]) -> bool:
    """More than half of `voter_ids` are live."""
    live = sum(1 for v in voter_ids if v in live_ids)
    return 2 * live > len(voter_ids)


def change_in_progress(voters: Iterable[QuorumVoter], raft_members: Collection[str]) -> str | None:
    """Why a change is still in progress (None when none is): the log's voters and the Raft membership
    (Raft endpoints) differ."""
    named = {v.raft_endpoint for v in voters}
    members = set(raft_members)
    if named == members:
        return None
    return (f"a quorum change is in progress: the voter set names {sorted(named)}, the Raft membership is "
            f"{sorted(members)}; retry once `kanal quorum describe` lists the new set")


@dataclass(frozen=True, slots=True)
class QuorumView:
    """What a quorum decision needs besides the image: the configured voters, who answers, the Raft
    membership and the active controller's id (all read by the shell at decision time)."""

    configured: tuple[QuorumVoter, ...]
    live_ids: frozenset[int]
    raft_members: frozenset[str]
    active_id: int


def decide_add_voter(
    image: MetadataImage,
    request: operations_pb2.AddVoterRequest,
    *,
    view: QuorumView,
    candidate_live: bool,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[operations_pb2.AddVoterResponse]:
    voters = voters_of(image, view.configured)
    new = QuorumVoter(request.controller_id, request.raft_endpoint, request.grpc_endpoint)

    def refuse(why: str) -> Decision[operations_pb2.AddVoterResponse]:
        return _refusal(operations_pb2.AddVoterResponse, voters, why)

    busy = change_in_progress(voters, view.raft_members)
    if busy is not None:
        return refuse(busy)
    after = tuple(sorted((*voters, new)))
    malformed = check_voter_set(after)
    if malformed is not None:
        present = [v for v in voters if v.controller_id == new.controller_id]
        if present:
            return refuse(f"controller {new.controller_id} is a voter already ({present[0].raft_endpoint})")
        return refuse(f"cannot add {new.controller_id}: {malformed}")
    if not candidate_live:
        return refuse(
            f"controller {new.controller_id} at {new.grpc_endpoint} did not answer as controller "
            f"{new.controller_id}: start it (with --peers naming the current voters and itself) first"
        )
    live = view.live_ids | {new.controller_id}
    if not has_live_majority([v.controller_id for v in after], live):
        return refuse(f"adding {new.controller_id} would leave {len(after)} voters with only "
                      f"{sum(1 for v in after if v.controller_id in live)} live: not a majority")
    return _write(
        after, operations_pb2.AddVoterResponse, now_ms=now_ms, principal=principal, request_id=request_id
    )


def decide_remove_voter(
    image: MetadataImage,
    request: operations_pb2.RemoveVoterRequest,
    *,
    view: QuorumView,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[operations_pb2.RemoveVoterResponse]:
    voters = voters_of(image, view.configured)

    def refuse(why: str) -> Decision[operations_pb2.RemoveVoterResponse]:
        return _refusal(operations_pb2.RemoveVoterResponse, voters, why)

    busy = change_in_progress(voters, view.raft_members)
    if busy is not None:
        return refuse(busy)
    gone = request.controller_id
    if gone not in {v.controller_id for v in voters}:
        return refuse(f"controller {gone} is not a voter (voters: {[v.controller_id for v in voters]})")
    if len(voters) == 1:
        return refuse(f"controller {gone} is the last voter")
    if gone == view.active_id:
        return refuse(f"controller {gone} is the active controller: stop it (SIGTERM hands leadership to "
                      f"another voter), then remove it")
    after = tuple(v for v in voters if v.controller_id != gone)
    if not has_live_majority([v.controller_id for v in after], view.live_ids):
        live = sorted(v.controller_id for v in after if v.controller_id in view.live_ids)
        return refuse(
            f"removing {gone} would leave voters {[v.controller_id for v in after]} with only {live} "
            f"live: not a majority"
        )
    decision = _write(after, operations_pb2.RemoveVoterResponse, now_ms=now_ms, principal=principal,
                      request_id=request_id)
    recorded = image.controller_directories.get(gone)
    if recorded is not None:
        # Its disk identity goes with it (after the voter set, which it checks): the id may come back on a
        # new, empty disk and be added again (KIP-853), which the old record would refuse forever.
        decision.records.append(Stamp(now_ms, principal, request_id).record(
            controller_registration=metadata_pb2.ControllerRegistrationRecord(
                controller_id=gone, directory_id=recorded, removed=True)))
    return decision


def _refusal(reply: type[VoterReply], voters: tuple[QuorumVoter, ...], why: str) -> Decision[VoterReply]:
    return Decision([], reply(error=ErrorCode.INVALID_QUORUM_CHANGE, error_message=why,
                              voter_ids=[v.controller_id for v in voters]))


def _write(
    after: tuple[QuorumVoter, ...], reply: type[VoterReply], *, now_ms: int, principal: str, request_id: str
) -> Decision[VoterReply]:
    stamp = Stamp(now_ms, principal, request_id)
    record = stamp.record(voter_set=metadata_pb2.VoterSetRecord(voters=[v.to_proto() for v in after]))
    return Decision([record], reply(voter_ids=[v.controller_id for v in after]))
