"""The group state machine (broker/group.py) driven by hand: no sockets, no threads, time as an argument."""

from __future__ import annotations

import itertools

from kanal.broker.group import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    Group,
    GroupLimits,
    Persist,
    Reply,
    offset_applies,
)
from kanal.broker.group_records import apply_record, group_record, offset_record
from kanal.v1 import broker_pb2, groups_pb2
from kanal.v1.error import ErrorCode, KanalError

LIMITS = GroupLimits(session_timeout_ms_min=100, session_timeout_ms_max=60_000, initial_rebalance_delay_ms=0)
SESSION_MS, REBALANCE_MS = 1_000, 5_000
_ids = itertools.count(1)


def join_req(member_id="", instance="", protocols=(("range", b"sub"),), session_ms=SESSION_MS):
    return broker_pb2.JoinGroupRequest(
        group_id="g", session_timeout_ms=session_ms, rebalance_timeout_ms=REBALANCE_MS, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer", client_id="c",
        protocols=[broker_pb2.GroupProtocol(name=n, metadata=m) for n, m in protocols])


def replies(effects) -> dict:
    return {e.call: e.response for e in effects if isinstance(e, Reply)}


def join_new(group: Group, now_ms: int, **kw) -> tuple[str, list]:
    """A dynamic member's two-step join: MEMBER_ID_REQUIRED, then the join with that id."""
    first = replies(group.join("ask", join_req(**kw), "h", now_ms, f"m{next(_ids)}"))["ask"]
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED
    call = f"join-{first.member_id}"
    return first.member_id, group.join(call, join_req(member_id=first.member_id, **kw), "h", now_ms, "unused")


def sync(group: Group, member_id: str, now_ms: int, assignments=None, generation=None, instance=""):
    req = broker_pb2.SyncGroupRequest(group_id="g", member_id=member_id, group_instance_id=instance,
                                      generation_id=group.generation if generation is None else generation)
    for m, a in (assignments or {}).items():
        req.assignments.add(member_id=m, assignment=a)
    return group.sync(f"sync-{member_id}", req, now_ms)


def stable_group(n: int, now_ms: int = 0) -> tuple[Group, list[str]]:
    """A Stable group of n dynamic members, each assigned b'<its id>'."""
    group = Group("g", LIMITS)
    ids = []
    for _ in range(n):
        member_id, _ = join_new(group, now_ms)
        ids.append(member_id)
    # Each new member started a rebalance; the members already answered rejoin until one round completes.
    while group.state == PREPARING:
        for m in [m for m in group.members.values() if m.join_call is None]:
            group.join(f"join-{m.member_id}", join_req(member_id=m.member_id), "h", now_ms, "unused")
    assert group.state == COMPLETING
    for m in ids:
        if m != group.leader:
            assert sync(group, m, now_ms) == []  # followers wait for the leader
    sync(group, group.leader, now_ms, {m: m.encode() for m in ids})
    assert group.state == STABLE
    return group, ids


def test_first_join_needs_a_member_id_then_a_lone_member_leads_generation_1():
    group = Group("g", LIMITS)
    member_id, effects = join_new(group, 0)
    reply = replies(effects)[f"join-{member_id}"]
    assert reply.error == ErrorCode.NONE
    assert (reply.generation_id, reply.leader, reply.member_id, reply.protocol_name) == (
        1,
        member_id,
        member_id,
        "range",
    )
    assert [m.member_id for m in reply.members] == [member_id]
    assert group.state == COMPLETING


def test_leader_sync_hands_out_assignments_persists_and_answers_waiting_followers():
    group = Group("g", LIMITS)
    a, _ = join_new(group, 0)
    b, effects = join_new(group, 0)  # b joining puts the group in PreparingRebalance, waiting for a
    assert group.state == PREPARING and replies(effects) == {}
    effects = group.join("join-a2", join_req(member_id=a), "h", 0, "unused")
    joined = replies(effects)
    assert joined["join-a2"].leader == a and len(joined["join-a2"].members) == 2
    assert joined[f"join-{b}"].members == []  # only the leader sees the members
    assert sync(group, b, 1) == []
    effects = sync(group, a, 2, {a: b"A", b: b"B"})
    assert isinstance(effects[0], Persist)  # the state is written before anyone hears of it
    assert [m.assignment for m in effects[0].value.members] == [b"A", b"B"]
    got = replies(effects)
    assert got[f"sync-{a}"].assignment == b"A" and got[f"sync-{b}"].assignment == b"B"
    assert group.state == STABLE and group.generation == 2


def test_join_completes_at_the_rebalance_deadline_without_members_that_did_not_rejoin():
    group, (a, b, c) = stable_group(3)
    gen = group.generation
    group.join("rejoin-a", join_req(member_id=a), "h", 10, "unused")  # a's rejoin starts a rebalance
    group.join("rejoin-b", join_req(member_id=b), "h", 20, "unused")
    assert group.state == PREPARING
    # c keeps heartbeating (and is told of the rebalance) but never rejoins.
    for now_ms in range(30, 10 + REBALANCE_MS, 500):
        hb = group.heartbeat(
            broker_pb2.HeartbeatRequest(group_id="g", member_id=c, generation_id=gen), now_ms
        )
        assert hb.error == ErrorCode.REBALANCE_IN_PROGRESS
        assert group.tick(now_ms) == []
    effects = group.tick(10 + REBALANCE_MS)
    assert set(replies(effects)) == {"rejoin-a", "rejoin-b"}
    assert set(group.members) == {a, b} and group.generation == gen + 1


def test_silent_member_expires_after_its_session_and_the_group_rebalances():
    group, (a, b) = stable_group(2)
    group.heartbeat(
        broker_pb2.HeartbeatRequest(group_id="g", member_id=a, generation_id=group.generation), 900
    )
    group.tick(SESSION_MS)  # b's session (from its last sync at 0) ends at 1000
    assert b not in group.members and group.state == PREPARING
    effects = group.join("rejoin-a", join_req(member_id=a), "h", 1001, "unused")
    assert replies(effects)["rejoin-a"].members[0].member_id == a
    assert group.state == COMPLETING


def test_waiting_members_do_not_expire():
    group = Group("g", LIMITS)
    _a, _ = join_new(group, 0)
    b, _ = join_new(group, 0)  # b waits in JoinGroup for a
    group.tick(SESSION_MS + 1)  # a is silent: it expires; b is parked in a call and stays
    assert set(group.members) == {b}
    assert group.state == COMPLETING  # b was the only one left, so its join completed


def test_zombie_from_an_old_generation_cannot_heartbeat_sync_or_commit():
    group, (a, b) = stable_group(2)
    old = group.generation
    group.join("rejoin-a", join_req(member_id=a), "h", 0, "unused")
    group.join("rejoin-b", join_req(member_id=b), "h", 0, "unused")
    assert group.generation == old + 1
    hb = group.heartbeat(broker_pb2.HeartbeatRequest(group_id="g", member_id=a, generation_id=old), 1)
    assert hb.error == ErrorCode.ILLEGAL_GENERATION
    assert replies(sync(group, a, 1, generation=old))[f"sync-{a}"].error == ErrorCode.ILLEGAL_GENERATION
    try:
        group.check_commit(old, a, "", 1)
        raise AssertionError("a commit from the old generation was accepted")
    except KanalError as exc:
        assert exc.code == ErrorCode.ILLEGAL_GENERATION


def test_commits_allowed_while_preparing_refused_while_completing():
    group, (a, b) = stable_group(2)
    gen = group.generation
    group.join("rejoin-a", join_req(member_id=a), "h", 0, "unused")
    assert group.state == PREPARING
    group.check_commit(gen, b, "", 1)  # b commits what it processed before rejoining: allowed
    group.join("rejoin-b", join_req(member_id=b), "h", 1, "unused")
    assert group.state == COMPLETING
    try:
        group.check_commit(gen + 1, b, "", 2)
        raise AssertionError("a commit during CompletingRebalance was accepted")
    except KanalError as exc:
        assert exc.code == ErrorCode.REBALANCE_IN_PROGRESS


def test_simple_commits_only_to_groups_without_members():
    group = Group("g", LIMITS)
    group.check_commit(-1, "", "", 0)
    stable, _ = stable_group(1)
    try:
        stable.check_commit(-1, "", "", 0)
        raise AssertionError("a simple commit to an active group was accepted")
    except KanalError as exc:
        assert exc.code == ErrorCode.ILLEGAL_GENERATION


def test_leave_of_the_last_member_makes_the_group_empty_and_persists_it():
    group, (a,) = stable_group(1)
    gen = group.generation
    reply, effects = group.leave(broker_pb2.LeaveGroupRequest(group_id="g", members=[
        broker_pb2.LeaveGroupRequest.Member(member_id=a)]), 5)
    assert reply.error == ErrorCode.NONE
    assert group.state == EMPTY and group.generation == gen + 1 and group.is_empty()
    assert [type(e) for e in effects] == [Persist] and not effects[0].value.members


def test_unknown_member_and_bad_session_timeout_are_refused():
    group = Group("g", LIMITS)
    effects = group.join("x", join_req(member_id="nobody"), "h", 0, "unused")
    assert replies(effects)["x"].error == ErrorCode.UNKNOWN_MEMBER_ID
    effects = group.join("y", join_req(session_ms=50), "h", 0, "unused")
    assert replies(effects)["y"].error == ErrorCode.INVALID_SESSION_TIMEOUT
    assert group.members == {} and group.state == EMPTY


def test_inconsistent_protocols_are_refused():
    group, _ = stable_group(1)
    effects = group.join("x", join_req(protocols=(("roundrobin", b""),)), "h", 0, "new")
    assert replies(effects)["x"].error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_is_the_one_every_member_supports_by_vote():
    group = Group("g", LIMITS)
    both = (("cooperative-sticky", b""), ("range", b""))
    a, _ = join_new(group, 0, protocols=both)
    _b, _ = join_new(group, 0, protocols=(("range", b""),))
    group.join("ra", join_req(member_id=a, protocols=both), "h", 0, "unused")
    assert group.state == COMPLETING and group.protocol_name == "range"


def test_static_member_restart_keeps_its_assignment_without_a_rebalance():
    group = Group("g", LIMITS)
    effects = group.join("s1", join_req(instance="i-1"), "h", 0, "static-1")  # no MEMBER_ID_REQUIRED
    assert replies(effects)["s1"].member_id == "static-1"
    b, _ = join_new(group, 0)
    group.join("s1b", join_req(member_id="static-1", instance="i-1"), "h", 0, "unused")
    leader = group.leader
    instance = {"static-1": "i-1", b: ""}
    follower = b if leader == "static-1" else "static-1"
    sync(group, follower, 0, instance=instance[follower])
    sync(group, leader, 0, {"static-1": b"S", b: b"B"}, instance=instance[leader])
    assert group.state == STABLE
    gen = group.generation
    # The static member restarts: a JoinGroup with its instance id and no member id.
    effects = group.join("again", join_req(instance="i-1"), "h", 10, "static-2")
    reply = replies(effects)["again"]
    assert reply.error == ErrorCode.NONE and reply.generation_id == gen and reply.member_id == "static-2"
    assert group.state == STABLE
    # The new member id is written before the answer: a coordinator that loads the group after a failover
    # must not fence the restarted member with the id of the one it replaced.
    kinds = [type(e) for e in effects]
    assert Persist in kinds and kinds.index(Persist) < kinds.index(Reply)
    persisted = next(e for e in effects if isinstance(e, Persist)).value
    assert {(m.member_id, m.group_instance_id) for m in persisted.members} >= {("static-2", "i-1")}
    assert "static-1" not in {m.member_id for m in persisted.members}
    assert replies(sync(group, "static-2", 11, instance="i-1"))["sync-static-2"].assignment == b"S"
    # The old incarnation is fenced.
    hb = group.heartbeat(broker_pb2.HeartbeatRequest(group_id="g", member_id="static-1", generation_id=gen,
                                                     group_instance_id="i-1"), 12)
    assert hb.error == ErrorCode.FENCED_INSTANCE_ID


def test_records_replay_restores_groups_and_offsets_with_tombstones():
    group, (a, b) = stable_group(2)
    groups: dict[str, Group] = {}

    def new(gid):
        return Group(gid, LIMITS)

    apply_record(groups, group_record("g", group.metadata_value(0)), new, 100)
    apply_record(groups, offset_record("g", "t", 0, groups_pb2.OffsetCommitValue(offset=5)), new, 100)
    apply_record(groups, offset_record("g", "t", 0, groups_pb2.OffsetCommitValue(offset=9)), new, 100)
    apply_record(groups, offset_record("g", "t", 1, groups_pb2.OffsetCommitValue(offset=3)), new, 100)
    apply_record(groups, offset_record("g", "t", 1, None), new, 100)
    loaded = groups["g"]
    assert loaded.state == STABLE and loaded.generation == group.generation and loaded.leader == group.leader
    assert {m: loaded.members[m].assignment for m in loaded.members} == {a: a.encode(), b: b.encode()}
    assert {tp: v.offset for tp, v in loaded.offsets.items()} == {("t", 0): 9}
    # Members restored from the log get a fresh session from the load time.
    assert all(m.expires_at_ms == 100 + SESSION_MS for m in loaded.members.values())
    # Deleting: tombstones for the offsets and the group remove it entirely.
    apply_record(groups, offset_record("g", "t", 0, None), new, 200)
    apply_record(groups, group_record("g", None), new, 200)
    assert groups == {}


# ---- offsets retention ----

RETENTION_MS = 10_000


def commit(group: Group, topic: str, partition: int, at_ms: int) -> None:
    group.offsets[(topic, partition)] = groups_pb2.OffsetCommitValue(offset=1, commit_timestamp_ms=at_ms)


def test_offsets_of_a_group_with_members_are_kept_past_retention_but_not_for_deleted_topics():
    group, _ = stable_group(1)
    group.limits = GroupLimits(session_timeout_ms_min=100, initial_rebalance_delay_ms=0,
                               offsets_retention_ms=RETENTION_MS)
    commit(group, "t", 0, 0)
    commit(group, "gone", 0, 0)
    assert group.expired_offsets(10 * RETENTION_MS, {"t": "id-t"}.get) == [("gone", 0)]


def test_offsets_of_an_emptied_group_expire_a_retention_after_both_the_emptying_and_the_commit():
    group, (a,) = stable_group(1)
    group.limits = GroupLimits(session_timeout_ms_min=100, initial_rebalance_delay_ms=0,
                               offsets_retention_ms=RETENTION_MS)
    commit(group, "t", 0, 1_000)
    commit(group, "t", 1, 8_000)
    group.leave(broker_pb2.LeaveGroupRequest(group_id="g", members=[
        broker_pb2.LeaveGroupRequest.Member(member_id=a)]), 5_000)
    assert group.is_empty() and group.empty_since_ms == 5_000
    exists = {"t": "id-t"}.get
    assert group.expired_offsets(5_000 + RETENTION_MS - 1, exists) == []
    assert group.expired_offsets(5_000 + RETENTION_MS, exists) == [("t", 0)]  # committed before it emptied
    assert sorted(group.expired_offsets(8_000 + RETENTION_MS, exists)) == [("t", 0), ("t", 1)]


def test_offsets_committed_outside_any_generation_age_from_their_commit_and_reload_keeps_the_clock():
    limits = GroupLimits(
        session_timeout_ms_min=100, initial_rebalance_delay_ms=0, offsets_retention_ms=RETENTION_MS
    )
    groups: dict[str, Group] = {}

    def new(gid):
        return Group(gid, limits)

    apply_record(
        groups,
        offset_record("s", "t", 0, groups_pb2.OffsetCommitValue(offset=4, commit_timestamp_ms=2_000)),
        new,
        50_000,
    )
    simple = groups["s"]
    assert simple.expired_offsets(2_000 + RETENTION_MS - 1, {"t": "id-t"}.get) == []
    assert simple.expired_offsets(2_000 + RETENTION_MS, {"t": "id-t"}.get) == [("t", 0)]
    # A group that had members and was persisted Empty at 30 s: the reload takes that time, not the load's.
    apply_record(groups, group_record("e", groups_pb2.GroupMetadataValue(
        protocol_type="consumer", generation_id=3, state_timestamp_ms=30_000)), new, 50_000)
    apply_record(
        groups,
        offset_record("e", "t", 0, groups_pb2.OffsetCommitValue(offset=1, commit_timestamp_ms=1)),
        new,
        50_000,
    )
    emptied = groups["e"]
    assert emptied.is_empty() and emptied.empty_since_ms == 30_000
    assert emptied.expired_offsets(30_000 + RETENTION_MS - 1, {"t": "id-t"}.get) == []
    assert emptied.expired_offsets(30_000 + RETENTION_MS, {"t": "id-t"}.get) == [("t", 0)]


def test_offsets_of_an_earlier_topic_of_the_same_name_never_apply_and_expire_at_once():
    group, _ = stable_group(1)  # a group with members: retention alone would keep its offsets
    group.offsets[("t", 0)] = groups_pb2.OffsetCommitValue(offset=7, topic_id="old")
    group.offsets[("t", 1)] = groups_pb2.OffsetCommitValue(offset=3, topic_id="new")
    group.offsets[("u", 0)] = groups_pb2.OffsetCommitValue(offset=5)  # written before topic ids: applies
    ids = {"t": "new", "u": "id-u"}.get
    assert set(group.current_offsets(ids)) == {("t", 1), ("u", 0)}
    assert group.expired_offsets(0, ids) == [("t", 0)]
    # While the topic is recreated under the old id's name, the old offsets are still no position in it.
    assert offset_applies(groups_pb2.OffsetCommitValue(topic_id="old"), "new") is False
    assert offset_applies(groups_pb2.OffsetCommitValue(topic_id="old"), "old") is True


def test_offsets_retention_is_validated():
    for bad in (0, 999):
        try:
            GroupLimits(offsets_retention_ms=bad)
        except KanalError as exc:
            assert exc.code == ErrorCode.INVALID_CONFIG
        else:
            raise AssertionError(f"offsets_retention_ms={bad} was accepted")
