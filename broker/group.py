"""Group: one consumer group's membership state machine (Kafka's classic protocol), pure.

No I/O, no threads, no clock: every call takes `now_ms`, and answers come back as effects that the shell
(group_coordinator.py) carries out in order.

States and moves:

  Empty ──join──► PreparingRebalance ──all known members rejoined, or rebalance timeout──► CompletingRebalance
    ▲                  ▲      │ (no member left: back to Empty, generation + 1)                 │
    │                  │      └──────────────────────────────────────────────────────────────┐  │ leader's
    │   join / leave / session expiry / leader rejoin ◄── Stable ◄──────────────────────────────┼──┘ SyncGroup
    └── last member leaves or expires (via PreparingRebalance) ─────────────────────────────────┘

  Dead: the group was deleted or its partition moved away; every pending call is answered.

Rules, and why:
- A dynamic member's first JoinGroup (no member id) gets MEMBER_ID_REQUIRED with a fresh id and must
  join again with it (KIP-394): a client that dies between the two calls leaves no member behind to wait
  for. The id is remembered for one session timeout.
- A static member (group.instance.id) gets a fresh member id on every JoinGroup without one; the old id
  of that instance is fenced (FENCED_INSTANCE_ID). If the group is Stable and the member's protocols are
  unchanged, it gets the current generation back with no rebalance (KIP-345), and SyncGroup returns its
  old assignment: a restarted static member keeps its partitions.
- The join completes when every known member has a pending JoinGroup (and, for a group that was Empty,
  `initial_rebalance_delay_ms` has passed so members starting together land in one generation), or at
  the rebalance deadline (the largest rebalance timeout of the members); members that did not rejoin by
  then are removed. Completion bumps the generation, picks the protocol every member supports (each
  member votes for its first supported one; ties go to the earliest in the leader's list), keeps the
  leader when it rejoined (else the first member to join), and answers every pending join.
- SyncGroup from the leader hands out its assignments, makes the group Stable and persists the group's
  metadata (a Persist effect); followers' SyncGroup waits for that. The Replies after a Persist go out
  only once it is written; if it fails, `persist_failed` starts another rebalance.
- A member with a pending JoinGroup or SyncGroup does not expire (it is waiting on the coordinator, not
  silent); any other member expires `session_timeout_ms` after its last heartbeat, join, sync or commit.
- Generations fence zombies: Heartbeat, SyncGroup and OffsetCommit with another generation are
  ILLEGAL_GENERATION. Commits are allowed in PreparingRebalance (members commit what they processed before
  they rejoin) but not in CompletingRebalance (the new assignment is not known yet).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from kanal.v1 import broker_pb2, groups_pb2
from kanal.v1.error import ErrorCode, KanalError


class GroupState(StrEnum):
    """A group's state, spelled as Kafka's (DescribeGroups and the group-state metric labels show it)."""

    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    GroupState.EMPTY, GroupState.PREPARING, GroupState.COMPLETING, GroupState.STABLE, GroupState.DEAD)
GROUP_ID_LENGTH_MAX = 255


def offset_applies(value: groups_pb2.OffsetCommitValue, current_topic_id: str | None) -> bool:
    """Whether a committed offset is a position in the topic that has its name now. A topic deleted and
    recreated under the same name has a new id (KIP-516), and the old topic's offsets must never apply to
    it. An offset without a topic id (written before kanal stored it) applies to whatever topic has the
    name; so does any offset while the name is unknown (expiry, not this, removes those)."""
    return not value.topic_id or current_topic_id is None or value.topic_id == current_topic_id


@dataclass(frozen=True)
class GroupLimits:
    """Coordinator-wide bounds (group.min/max.session.timeout.ms, group.initial.rebalance.delay.ms,
    group.max.size in Kafka)."""

    session_timeout_ms_min: int = 6_000
    session_timeout_ms_max: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    members_max: int = 1_000
    # offsets.retention.minutes (KIP-211): an Empty group's offsets are deleted this long after both the
    # group became Empty and the offset was committed.
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000

    def __post_init__(self) -> None:
        if not 1 <= self.session_timeout_ms_min <= self.session_timeout_ms_max:
            raise KanalError(
                ErrorCode.INVALID_CONFIG, "group session timeout bounds must satisfy 1 <= min <= max"
            )
        if not 0 <= self.initial_rebalance_delay_ms <= 300_000:
            raise KanalError(ErrorCode.INVALID_CONFIG, "initial_rebalance_delay_ms must be in [0, 300000]")
        if not 1 <= self.members_max <= 100_000:
            raise KanalError(ErrorCode.INVALID_CONFIG, "members_max must be in [1, 100000]")
        if not 1_000 <= self.offsets_retention_ms <= 10 * 365 * 24 * 3600 * 1000:
            raise KanalError(ErrorCode.INVALID_CONFIG, "offsets_retention_ms must be in [1000, 10 years]")


@dataclass(frozen=True)
class Reply:
    """Effect: answer the pending call `call` (a token the shell passed in) with `response`."""

    call: object
    response: object


@dataclass(frozen=True)
class Persist:
    """Effect: write the group's metadata record; the effects after it wait until it is written."""

    group_id: str
    generation: int
    value: groups_pb2.GroupMetadataValue


Effect = Reply | Persist


@dataclass
class Member:
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    expires_at_ms: int = 0
    join_call: object | None = None
    sync_call: object | None = None

    def __repr__(self) -> str:
        return (
            f"<Member {self.member_id} instance={self.group_instance_id or '-'} expires={self.expires_at_ms}>"
        )

    def metadata_for(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def waiting(self) -> bool:
        return self.join_call is not None or self.sync_call is not None


def check_group_id(group_id: str) -> None:
    if not group_id or len(group_id) > GROUP_ID_LENGTH_MAX:
        raise KanalError(ErrorCode.INVALID_GROUP_ID,
                         f"group id must be 1..{GROUP_ID_LENGTH_MAX} characters, got {len(group_id)}")


class Group:
    """One group's members, generation, assignments and committed offsets."""

    def __init__(self, group_id: str, limits: GroupLimits) -> None:
        self.group_id = group_id
        self.limits = limits
        self.state: GroupState = EMPTY
        self.generation = 0
        self.protocol_type = ""
        self.protocol_name = ""
        self.leader = ""
        self.members: dict[str, Member] = {}  # in join order: the first is the default leader
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_member_ids: dict[str, int] = {}  # ids handed out with MEMBER_ID_REQUIRED -> expiry
        self.offsets: dict[tuple[str, int], groups_pb2.OffsetCommitValue] = {}
        self.rebalance_deadline_ms = 0
        self.join_not_before_ms = 0
        # When the group last became Empty; 0 for a group that never had members (offsets committed
        # outside any generation), whose offsets then age from their own commit times.
        self.empty_since_ms = 0

    def __repr__(self) -> str:
        return (
            f"<Group {self.group_id} {self.state} gen={self.generation} protocol={self.protocol_name or '-'} "
            f"leader={self.leader or '-'} members={len(self.members)} offsets={len(self.offsets)}>"
        )

    # ---- JoinGroup ----

    def join(self, call: object, req: broker_pb2.JoinGroupRequest, client_host: str, now_ms: int,
             new_member_id: str) -> list[Effect]:
        """A JoinGroup; `new_member_id` is the id to hand out if the member needs one."""
        try:
            self._check_join(req)
        except KanalError as exc:
            return [Reply(call, _join_error(exc, req.member_id))]
        if not req.member_id:
            if req.group_instance_id:
                return self._join_static_unknown_id(call, req, client_host, now_ms, new_member_id)
            self.pending_member_ids[new_member_id] = now_ms + req.session_timeout_ms
            return [Reply(call, broker_pb2.JoinGroupResponse(
                error=ErrorCode.MEMBER_ID_REQUIRED, member_id=new_member_id,
                error_message="join again with this member id"))]
        member = self.members.get(req.member_id)
        if member is None:
            if self.pending_member_ids.pop(req.member_id, None) is None:
                return [Reply(call, _join_error(KanalError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"member {req.member_id} is not in group {self.group_id}"),
                    req.member_id))]
            if len(self.members) >= self.limits.members_max:
                return [
                    Reply(
                        call,
                        _join_error(
                            KanalError(
                                ErrorCode.INVALID_REQUEST,
                                f"group {self.group_id} is full ({self.limits.members_max})",
                            ),
                            "",
                        ),
                    )
                ]
            return self._add_member(call, req, req.member_id, client_host, now_ms)
        if member.group_instance_id != req.group_instance_id:
            return [
                Reply(
                    call,
                    _join_error(
                        KanalError(
                            ErrorCode.FENCED_INSTANCE_ID, "member id and group.instance.id do not match"
                        ),
                        req.member_id,
                    ),
                )
            ]
        return self._rejoin(call, member, req, now_ms)

    def _check_join(self, req: broker_pb2.JoinGroupRequest) -> None:
        lo, hi = self.limits.session_timeout_ms_min, self.limits.session_timeout_ms_max
        if not lo <= req.session_timeout_ms <= hi:
            raise KanalError(ErrorCode.INVALID_SESSION_TIMEOUT,
                             f"session timeout {req.session_timeout_ms} ms is outside [{lo}, {hi}]")
        if req.rebalance_timeout_ms <= 0:
            raise KanalError(ErrorCode.INVALID_REQUEST, "rebalance_timeout_ms must be > 0")
        if not req.protocol_type or not req.protocols:
            raise KanalError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "a member needs a protocol type and protocols"
            )
        if self.members and self.state != DEAD:
            names = {p.name for p in req.protocols}
            others = [m for m in self.members.values() if m.member_id != req.member_id]
            if req.protocol_type != self.protocol_type or (
                    others and not names & _common_protocols(others)):
                raise KanalError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                 f"protocols {sorted(names)} share nothing with group {self.group_id}'s")
        if self.state == DEAD:
            raise KanalError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {self.group_id} is being unloaded")

    def _join_static_unknown_id(self, call: object, req: broker_pb2.JoinGroupRequest, client_host: str,
                                now_ms: int, new_member_id: str) -> list[Effect]:
        old_id = self.static_members.get(req.group_instance_id)
        if old_id is None or old_id not in self.members:
            return self._add_member(call, req, new_member_id, client_host, now_ms)
        # A restarted static member takes over its old membership under a new id; the old one is fenced.
        member = self.members.pop(old_id)
        effects = _fence_calls(member)
        unchanged = member.protocols == _protocols(req)
        member.member_id = new_member_id
        member.client_host = client_host
        member.client_id = req.client_id
        self._update_timeouts(member, req, now_ms)
        self.members[new_member_id] = member
        self.static_members[req.group_instance_id] = new_member_id
        if self.leader == old_id:
            self.leader = new_member_id
        if self.state == STABLE and unchanged:
            # KIP-345: nothing changed for the group; the member syncs and gets its old assignment. The new
            # member id is written before the answer, as Kafka does: a coordinator that loads the group
            # after a failover must know it, or it fences the restarted member (FENCED_INSTANCE_ID) with
            # the id of the one it replaced. A failed write makes the group rebalance (persist_failed).
            reply = self._join_response(member, include_members=False)
            if self.leader == new_member_id:
                reply.skip_assignment = True
                reply.members.extend(self._join_members())
            return [
                *effects,
                Persist(self.group_id, self.generation, self.metadata_value(now_ms)),
                Reply(call, reply),
            ]
        member.join_call = call
        member.protocols = _protocols(req)
        return effects + self._prepare_rebalance(now_ms)

    def _add_member(self, call: object, req: broker_pb2.JoinGroupRequest, member_id: str, client_host: str,
                    now_ms: int) -> list[Effect]:
        member = Member(member_id, req.group_instance_id, req.client_id, client_host, req.session_timeout_ms,
                        req.rebalance_timeout_ms, _protocols(req), join_call=call,
                        expires_at_ms=now_ms + req.session_timeout_ms)
        if not self.members:
            self.protocol_type = req.protocol_type
        self.members[member_id] = member
        if req.group_instance_id:
            self.static_members[req.group_instance_id] = member_id
        return self._prepare_rebalance(now_ms)

    def _rejoin(
        self, call: object, member: Member, req: broker_pb2.JoinGroupRequest, now_ms: int
    ) -> list[Effect]:
        protocols = _protocols(req)
        unchanged = protocols == member.protocols
        self._update_timeouts(member, req, now_ms)
        if self.state == STABLE and unchanged and member.member_id != self.leader:
            # A follower that rejoins with nothing new gets the current generation again (Kafka does too):
            # no need to disturb the others.
            return [Reply(call, self._join_response(member, include_members=False))]
        effects = _fence_calls(
            member,
            code=ErrorCode.REBALANCE_IN_PROGRESS,
            message="superseded by a newer JoinGroup",
            join_only=True,
        )
        member.protocols = protocols
        member.join_call = call
        if self.state == PREPARING:
            return effects + self._maybe_complete_join(now_ms)
        return effects + self._prepare_rebalance(now_ms)

    @staticmethod
    def _update_timeouts(member: Member, req: broker_pb2.JoinGroupRequest, now_ms: int) -> None:
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.expires_at_ms = now_ms + req.session_timeout_ms

    def _prepare_rebalance(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        if self.state == COMPLETING:
            # The assignment being handed out is void: followers waiting in SyncGroup must rejoin.
            for m in self.members.values():
                if m.sync_call is not None:
                    effects.append(Reply(m.sync_call, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS)))
                    m.sync_call = None
        if self.state != PREPARING:
            self.join_not_before_ms = now_ms + (
                self.limits.initial_rebalance_delay_ms if self.state == EMPTY else 0
            )
            self.state = PREPARING
            for m in self.members.values():
                m.assignment = b""
        self.rebalance_deadline_ms = now_ms + max(
            (m.rebalance_timeout_ms for m in self.members.values()), default=0
        )
        return effects + self._maybe_complete_join(now_ms)

    def _maybe_complete_join(self, now_ms: int) -> list[Effect]:
        if self.state != PREPARING:
            return []
        everyone = all(m.join_call is not None for m in self.members.values())
        if not ((everyone and now_ms >= self.join_not_before_ms) or now_ms >= self.rebalance_deadline_ms):
            return []
        for m in [m for m in self.members.values() if m.join_call is None]:
            self._remove(m)
        self.generation += 1
        if not self.members:
            self.state = EMPTY
            self.empty_since_ms = now_ms
            self.protocol_name = self.leader = ""
            return [Persist(self.group_id, self.generation, self.metadata_value(now_ms))]
        self.protocol_name = self._choose_protocol()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.state = COMPLETING
        effects: list[Effect] = []
        for m in self.members.values():
            reply = self._join_response(m, include_members=m.member_id == self.leader)
            effects.append(Reply(m.join_call, reply))
            m.join_call = None
            m.expires_at_ms = now_ms + m.session_timeout_ms
        return effects

    def _choose_protocol(self) -> str:
        candidates = _common_protocols(self.members.values())
        votes: dict[str, int] = {}
        for m in self.members.values():
            first = next(name for name, _ in m.protocols if name in candidates)
            votes[first] = votes.get(first, 0) + 1
        leader = self.members.get(self.leader) or next(iter(self.members.values()))
        order = [name for name, _ in leader.protocols if name in candidates]
        return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))

    def _join_members(self) -> list[broker_pb2.JoinGroupMember]:
        return [broker_pb2.JoinGroupMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                           metadata=m.metadata_for(self.protocol_name))
                for m in self.members.values()]

    def _join_response(self, member: Member, *, include_members: bool) -> broker_pb2.JoinGroupResponse:
        reply = broker_pb2.JoinGroupResponse(
            generation_id=self.generation, protocol_type=self.protocol_type, protocol_name=self.protocol_name,
            leader=self.leader, member_id=member.member_id)
        if include_members:
            reply.members.extend(self._join_members())
        return reply

    # ---- SyncGroup ----

    def sync(self, call: object, req: broker_pb2.SyncGroupRequest, now_ms: int) -> list[Effect]:
        try:
            member = self._member(req.member_id, req.group_instance_id, req.generation_id)
        except KanalError as exc:
            return [Reply(call, _sync_error(exc.code, exc.message))]
        if self.state == PREPARING:
            return [
                Reply(call, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing: rejoin"))
            ]
        member.expires_at_ms = now_ms + member.session_timeout_ms
        if self.state == STABLE:
            return [Reply(call, self._sync_response(member))]
        # CompletingRebalance: wait for the leader's assignment.
        if member.sync_call is not None:
            stale, member.sync_call = member.sync_call, None
            effects: list[Effect] = [Reply(stale, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS, "superseded"))]
        else:
            effects = []
        member.sync_call = call
        if member.member_id != self.leader:
            return effects
        assignments = {a.member_id: a.assignment for a in req.assignments}
        for m in self.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        self.state = STABLE
        effects.append(Persist(self.group_id, self.generation, self.metadata_value(now_ms)))
        for m in self.members.values():
            if m.sync_call is not None:
                effects.append(Reply(m.sync_call, self._sync_response(m)))
                m.sync_call = None
        return effects

    def _sync_response(self, member: Member) -> broker_pb2.SyncGroupResponse:
        return broker_pb2.SyncGroupResponse(assignment=member.assignment, protocol_type=self.protocol_type,
                                            protocol_name=self.protocol_name)

    def persist_failed(self, generation: int, now_ms: int) -> list[Effect]:
        """The metadata of `generation` could not be written: its assignment must not stand."""
        if generation != self.generation or self.state != STABLE:
            return []
        return self._prepare_rebalance(now_ms)

    # ---- Heartbeat, LeaveGroup ----

    def heartbeat(self, req: broker_pb2.HeartbeatRequest, now_ms: int) -> broker_pb2.HeartbeatResponse:
        try:
            member = self._member(req.member_id, req.group_instance_id, req.generation_id)
        except KanalError as exc:
            return broker_pb2.HeartbeatResponse(error=exc.code, error_message=exc.message)
        member.expires_at_ms = now_ms + member.session_timeout_ms
        if self.state == PREPARING:
            return broker_pb2.HeartbeatResponse(error=ErrorCode.REBALANCE_IN_PROGRESS,
                                                error_message="the group is rebalancing: rejoin")
        return broker_pb2.HeartbeatResponse()

    def leave(self, req: broker_pb2.LeaveGroupRequest, now_ms: int) -> tuple[broker_pb2.LeaveGroupResponse,
                                                                            list[Effect]]:
        effects: list[Effect] = []
        unknown = []
        for who in req.members:
            member_id = who.member_id or self.static_members.get(who.group_instance_id, "")
            member = self.members.get(member_id)
            if member is None or (
                who.group_instance_id and member.group_instance_id != who.group_instance_id
            ):
                unknown.append(who.member_id or who.group_instance_id)
                continue
            effects += _fence_calls(member, code=ErrorCode.UNKNOWN_MEMBER_ID)
            self._remove(member)
        if len(unknown) == len(req.members):
            return broker_pb2.LeaveGroupResponse(
                error=ErrorCode.UNKNOWN_MEMBER_ID, error_message=f"not members of {self.group_id}: {unknown}"
            ), effects
        return broker_pb2.LeaveGroupResponse(), effects + self._membership_changed(now_ms)

    def _membership_changed(self, now_ms: int) -> list[Effect]:
        if self.state in (STABLE, COMPLETING):
            return self._prepare_rebalance(now_ms)
        if self.state == PREPARING:
            return self._maybe_complete_join(now_ms)
        return []

    def _remove(self, member: Member) -> None:
        self.members.pop(member.member_id, None)
        if member.group_instance_id and self.static_members.get(member.group_instance_id) == member.member_id:
            del self.static_members[member.group_instance_id]

    # ---- time ----

    def tick(self, now_ms: int) -> list[Effect]:
        """Expire silent members and finish a join whose deadline passed."""
        for member_id in [i for i, t in self.pending_member_ids.items() if t <= now_ms]:
            del self.pending_member_ids[member_id]
        expired = [m for m in self.members.values() if not m.waiting() and m.expires_at_ms <= now_ms]
        for m in expired:
            self._remove(m)
        if expired:
            return self._membership_changed(now_ms)
        return self._maybe_complete_join(now_ms)

    def next_deadline_ms(self) -> int | None:
        times = [m.expires_at_ms for m in self.members.values() if not m.waiting()]
        if self.state == PREPARING:
            times += [self.rebalance_deadline_ms, self.join_not_before_ms]
        times += self.pending_member_ids.values()
        return min(times) if times else None

    # ---- offsets ----

    def check_commit(self, generation_id: int, member_id: str, group_instance_id: str, now_ms: int) -> None:
        """Raise unless a commit with these credentials may be stored now."""
        if generation_id < 0 and not member_id:
            if self.members:
                raise KanalError(
                    ErrorCode.ILLEGAL_GENERATION,
                    f"group {self.group_id} has active members: only they may commit, with their generation",
                )
            return
        member = self._member(member_id, group_instance_id, generation_id)
        if self.state == COMPLETING:
            raise KanalError(
                ErrorCode.REBALANCE_IN_PROGRESS, "the group is completing a rebalance: rejoin first"
            )
        member.expires_at_ms = now_ms + member.session_timeout_ms

    def expired_offsets(self, now_ms: int, topic_id_of: Callable[[str], str | None]) -> list[tuple[str, int]]:
        """The committed offsets to delete now: those of topics that no longer exist, or that were
        committed for another topic id than the one the name has now (the topic was deleted and recreated),
        whatever the state (Kafka drops them when the topic is deleted); and, while the group is Empty, those
        for which `offsets_retention_ms` has passed since both the group became Empty and the offset's
        commit. A group with members keeps its offsets: they are its position. `topic_id_of(name)` is the
        topic's current id, None when there is no such topic."""
        retention_ms = self.limits.offsets_retention_ms
        empty = self.is_empty()
        return [tp for tp, value in self.offsets.items()
                if topic_id_of(tp[0]) is None or not offset_applies(value, topic_id_of(tp[0]))
                or (empty and now_ms >= max(self.empty_since_ms, value.commit_timestamp_ms) + retention_ms)]

    def current_offsets(self, topic_id_of: Callable[[str], str | None]) -> dict[tuple[str, int],
                                                                                groups_pb2.OffsetCommitValue]:
        """The committed offsets that are positions in the topics their names have now: an offset committed
        for an earlier topic of the same name (another topic id) is left out, even before it is deleted."""
        return {tp: value for tp, value in self.offsets.items() if offset_applies(value, topic_id_of(tp[0]))}

    # ---- lifecycle ----

    def close(self, code: ErrorCode, message: str) -> list[Effect]:
        """The group is deleted or unloaded: answer every pending call with `code`."""
        effects: list[Effect] = []
        for m in self.members.values():
            effects += _fence_calls(m, code=code, message=message)
        self.state = DEAD
        return effects

    def is_empty(self) -> bool:
        return self.state == EMPTY and not self.members

    def metadata_value(self, now_ms: int) -> groups_pb2.GroupMetadataValue:
        value = groups_pb2.GroupMetadataValue(
            protocol_type=self.protocol_type, generation_id=self.generation, protocol_name=self.protocol_name,
            leader=self.leader, state_timestamp_ms=now_ms)
        for m in self.members.values():
            value.members.add(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata_for(self.protocol_name),
                assignment=m.assignment,
            )
        return value

    def restore(self, value: groups_pb2.GroupMetadataValue, now_ms: int) -> None:
        """Take the state a GroupMetadataValue describes (a coordinator loading its partition). Members get
        a fresh session: the live ones keep heartbeating to the new coordinator, the dead ones expire."""
        self.protocol_type = value.protocol_type
        self.generation = value.generation_id
        self.protocol_name = value.protocol_name
        self.leader = value.leader
        self.members = {}
        self.static_members = {}
        for m in value.members:
            self.members[m.member_id] = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                m.rebalance_timeout_ms, [(value.protocol_name, m.subscription)], assignment=m.assignment,
                expires_at_ms=now_ms + m.session_timeout_ms)
            if m.group_instance_id:
                self.static_members[m.group_instance_id] = m.member_id
        self.state = STABLE if self.members else EMPTY
        self.empty_since_ms = 0 if self.members else value.state_timestamp_ms

    def _member(self, member_id: str, group_instance_id: str, generation_id: int) -> Member:
        member = self.members.get(member_id)
        if member is None:
            if group_instance_id and group_instance_id in self.static_members:
                raise KanalError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"instance {group_instance_id} has rejoined under another member id")
            raise KanalError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {self.group_id}"
            )
        if member.group_instance_id != group_instance_id:
            raise KanalError(ErrorCode.FENCED_INSTANCE_ID, "member id and group.instance.id do not match")
        if generation_id != self.generation:
            raise KanalError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation_id} is not group {self.group_id}'s current {self.generation}",
            )
        return member


def _protocols(req: broker_pb2.JoinGroupRequest) -> list[tuple[str, bytes]]:
    return [(p.name, p.metadata) for p in req.protocols]


def _common_protocols(members: Iterable[Member]) -> set[str]:
    common: set[str] | None = None
    for m in members:
        names = {name for name, _ in m.protocols}
        common = names if common is None else common & names
    return common or set()


def _fence_calls(member: Member, *, code: ErrorCode = ErrorCode.FENCED_INSTANCE_ID, message: str = "",
                 join_only: bool = False) -> list[Effect]:
    """Answer a member's pending calls with an error (it was replaced, left, or the group went away)."""
    effects: list[Effect] = []
    message = message or f"member {member.member_id}: {ErrorCode.Name(code)}"
    if member.join_call is not None:
        effects.append(Reply(member.join_call, broker_pb2.JoinGroupResponse(
            error=code, error_message=message, member_id=member.member_id)))
        member.join_call = None
    if member.sync_call is not None and not join_only:
        effects.append(Reply(member.sync_call, _sync_error(code, message)))
        member.sync_call = None
    return effects


def _join_error(exc: KanalError, member_id: str) -> broker_pb2.JoinGroupResponse:
    return broker_pb2.JoinGroupResponse(error=exc.code, error_message=exc.message, member_id=member_id)


def _sync_error(code: ErrorCode, message: str = "") -> broker_pb2.SyncGroupResponse:
    return broker_pb2.SyncGroupResponse(error=code, error_message=message or ErrorCode.Name(code))
