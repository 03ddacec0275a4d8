"""Partition assignors: exact splits, Hypothesis properties and the two-round cooperative hand-over."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kanal.clients.assignors import (
    ASSIGNORS,
    MemberSubscription,
    assignor,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError

M = MemberSubscription
RANGE = assignor("range")
ROUNDROBIN = assignor("roundrobin")
STICKY = assignor("cooperative-sticky")
EAGER = [RANGE, ROUNDROBIN]


def tps(topic: str, *partitions: int) -> list[tuple[str, int]]:
    return [(topic, p) for p in partitions]


# -- examples ----------------------------------------------------------------------------------------


def test_registry_and_unknown_name():
    assert sorted(ASSIGNORS) == ["cooperative-sticky", "range", "roundrobin"]
    assert [ASSIGNORS[n].rebalance_protocol for n in ("range", "roundrobin", "cooperative-sticky")] == [
        "eager",
        "eager",
        "cooperative",
    ]
    with pytest.raises(KanalError) as e:
        assignor("sticky-ish")
    assert e.value.code == ErrorCode.INVALID_CONFIG


def test_range_six_partitions_four_members():
    members = [M(x, ("t",)) for x in "dcba"]
    assert RANGE.assign({"t": 6}, members) == {
        "a": tps("t", 0, 1),
        "b": tps("t", 2, 3),
        "c": tps("t", 4),
        "d": tps("t", 5),
    }


def test_roundrobin_six_partitions_four_members():
    members = [M(x, ("t",)) for x in "dcba"]
    assert ROUNDROBIN.assign({"t": 6}, members) == {
        "a": tps("t", 0, 4),
        "b": tps("t", 1, 5),
        "c": tps("t", 2),
        "d": tps("t", 3),
    }


def test_range_two_topics_different_subscriptions():
    members = [M("a", ("t0", "t1")), M("b", ("t0",)), M("c", ("t1", "gone"))]
    assert RANGE.assign({"t0": 3, "t1": 4}, members) == {
        "a": tps("t0", 0, 1) + tps("t1", 0, 1),
        "b": tps("t0", 2),
        "c": tps("t1", 2, 3),
    }


def test_roundrobin_skips_members_not_subscribed():
    members = [M("c0", ("t0",)), M("c1", ("t0", "t1")), M("c2", ("t0", "t1", "t2"))]
    assert ROUNDROBIN.assign({"t0": 1, "t1": 2, "t2": 3}, members) == {
        "c0": tps("t0", 0),
        "c1": tps("t1", 0),
        "c2": tps("t1", 1) + tps("t2", 0, 1, 2),
    }


def test_static_members_rank_first_by_instance_id():
    members = [
        M("a", ("t",)),
        M("z-1", ("t",), group_instance_id="i2"),
        M("y-9", ("t",), group_instance_id="i1"),
    ]
    assert RANGE.assign({"t": 3}, members) == {"y-9": tps("t", 0), "z-1": tps("t", 1), "a": tps("t", 2)}


def test_every_member_has_an_entry_and_unknown_topics_are_ignored():
    members = [M("a", ("t",)), M("b", ("gone",)), M("c", ())]
    for a in ASSIGNORS.values():
        assert a.assign({"t": 2, "empty": 0}, members) == {"a": tps("t", 0, 1), "b": [], "c": []}


def test_bad_input_is_rejected():
    for a in ASSIGNORS.values():
        with pytest.raises(KanalError) as e:
            a.assign({"t": 1}, [M("a", ("t",)), M("a", ("t",))])
        assert e.value.code == ErrorCode.INVALID_REQUEST
        with pytest.raises(KanalError) as e:
            a.assign({"t": -1}, [M("a", ("t",))])
        assert e.value.code == ErrorCode.INVALID_PARTITIONS


def test_sticky_fresh_group_is_balanced():
    members = [M(x, ("t",)) for x in "abc"]
    assert [len(ps) for ps in STICKY.assign({"t": 7}, members).values()] == [3, 2, 2]


def test_sticky_new_member_waits_one_round_for_what_moves():
    old = M("a", ("t",), owned=tuple(tps("t", *range(6))), generation=3)
    first = STICKY.assign({"t": 6}, [old, M("b", ("t",))])
    # a revokes half; b gets nothing yet because a still consumes those partitions.
    assert first == {"a": tps("t", 3, 4, 5), "b": []}
    second = STICKY.assign(
        {"t": 6}, [M("a", ("t",), owned=tuple(first["a"]), generation=4), M("b", ("t",), generation=4)]
    )
    assert second == {"a": tps("t", 3, 4, 5), "b": tps("t", 0, 1, 2)}


def test_sticky_leaving_member_partitions_go_without_moving_the_rest():
    members = [
        M("a", ("t",), owned=tuple(tps("t", 0, 1)), generation=2),
        M("b", ("t",), owned=tuple(tps("t", 2, 3)), generation=2),
    ]  # c, which owned 4 and 5, left
    assert STICKY.assign({"t": 6}, members) == {"a": tps("t", 0, 1, 4), "b": tps("t", 2, 3, 5)}


def test_sticky_double_claim_goes_to_the_higher_generation():
    zombie = M("a", ("t",), owned=tuple(tps("t", 0, 1)), generation=4)
    current = M("b", ("t",), owned=tuple(tps("t", 0)), generation=5)
    assert STICKY.assign({"t": 2}, [zombie, current]) == {"a": tps("t", 1), "b": tps("t", 0)}
    # Same generation: the better-ranked member keeps it.
    tie = M("b", ("t",), owned=tuple(tps("t", 0, 2)), generation=4)
    assert STICKY.assign({"t": 3}, [zombie, tie]) == {"a": tps("t", 0, 1), "b": tps("t", 2)}
    # A newer claim from a member that no longer subscribes still makes the older one stale.
    newer = M("b", ("u",), owned=tuple(tps("t", 0)), generation=5)
    assert STICKY.assign({"t": 2, "u": 1}, [zombie, newer]) == {"a": tps("t", 1), "b": tps("u", 0)}


def test_sticky_drops_invalid_owned_and_withholds_them_until_revoked():
    a = M("a", ("t",), owned=(("t", 0), ("t", 1), ("t", 9), ("u", 0), ("gone", 0)), generation=1)
    b = M("b", ("t", "u"), owned=(("u", 1),), generation=1)
    # a no longer subscribes to u: u-0 goes to b, but only after a has revoked it.
    assert STICKY.assign({"t": 2, "u": 2}, [a, b]) == {"a": tps("t", 0, 1), "b": tps("u", 1)}
    a2 = M("a", ("t",), owned=tuple(tps("t", 0, 1)), generation=2)
    b2 = M("b", ("t", "u"), owned=(("u", 1),), generation=2)
    assert STICKY.assign({"t": 2, "u": 2}, [a2, b2]) == {"a": tps("t", 0, 1), "b": tps("u", 0, 1)}


def test_sticky_differing_subscriptions_balance_what_they_can():
    members = [M("a", ("t",)), M("b", ("t", "u")), M("c", ("u",))]
    result = STICKY.assign({"t": 4, "u": 4}, members)
    assert {m: len(ps) for m, ps in result.items()} == {"a": 2, "b": 3, "c": 3}
    assert_balanced(result, members, {"t": 4, "u": 4})


# -- properties --------------------------------------------------------------------------------------

TOPICS = ["a", "b", "c"]


@st.composite
def groups(draw, with_owned: bool = False, same_subscriptions: bool = False):
    counts = draw(st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 9), max_size=3))
    n = draw(st.integers(0, 6))
    shared = tuple(draw(st.lists(st.sampled_from(TOPICS + ["gone"]), unique=True, max_size=4)))
    members = []
    for i in range(n):
        topics = (
            shared
            if same_subscriptions
            else tuple(draw(st.lists(st.sampled_from(TOPICS + ["gone"]), unique=True, max_size=4)))
        )
        owned: tuple = ()
        if with_owned:
            owned = tuple(
                draw(st.lists(st.tuples(st.sampled_from(TOPICS + ["gone"]), st.integers(0, 11)), max_size=8))
            )
        static = draw(st.booleans())
        members.append(
            M(
                f"m{i}",
                topics,
                owned=owned,
                group_instance_id=f"i{draw(st.integers(0, 99))}-{i}" if static else "",
                generation=draw(st.integers(-1, 3)),
            )
        )
    return counts, members


def valid_partitions(counts, members):
    """Every partition of a known topic that at least one member subscribes to."""
    wanted = {t for m in members for t in m.topics}
    return {(t, p) for t, n in counts.items() if t in wanted for p in range(n)}


def assert_sound(result, members, counts):
    """Every member has an entry; no partition twice; only valid partitions of subscribed topics."""
    assert set(result) == {m.member_id for m in members}
    everything = [tp for ps in result.values() for tp in ps]
    assert len(everything) == len(set(everything))
    for m in members:
        for t, p in result[m.member_id]:
            assert t in m.topics and 0 <= p < counts[t]
        assert result[m.member_id] == sorted(result[m.member_id])


def assert_complete(result, members, counts):
    assert {tp for ps in result.values() for tp in ps} == valid_partitions(counts, members)


def assert_balanced(result, members, counts):
    """No chain of moves, each to a member subscribed to the partition's topic, leads from a member
    with load L to one with load L - 2 or less: then no assignment is more even. Members with
    identical subscriptions are therefore within one of each other (checked too, directly)."""
    load = {m: len(ps) for m, ps in result.items()}
    for source in members:
        reached, frontier = {source.member_id}, [source.member_id]
        while frontier:
            holder = frontier.pop()
            for topic in {t for t, _ in result[holder]}:
                for other in members:
                    if topic in other.topics and other.member_id not in reached:
                        reached.add(other.member_id)
                        frontier.append(other.member_id)
        assert all(load[m] >= load[source.member_id] - 1 for m in reached)
    for m in members:
        same = [
            load[o.member_id] for o in members if set(o.topics) & set(counts) == set(m.topics) & set(counts)
        ]
        assert max(same) - min(same) <= 1


def shuffled(members, seed):
    members = list(members)
    random.Random(seed).shuffle(members)
    return members


@given(groups(), st.integers())
def test_eager_assign_every_partition_once_deterministically(group, seed):
    counts, members = group
    for a in EAGER:
        result = a.assign(counts, members)
        assert_sound(result, members, counts)
        assert_complete(result, members, counts)
        assert a.assign(counts, shuffled(members, seed)) == result


@given(groups(same_subscriptions=True))
def test_eager_balance_with_identical_subscriptions(group):
    counts, members = group
    loads = list(map(len, ROUNDROBIN.assign(counts, members).values()))
    assert not loads or max(loads) - min(loads) <= 1
    result = RANGE.assign(counts, members)
    for topic in counts:  # range balances per topic, not overall
        per_topic = [sum(1 for t, _ in ps if t == topic) for ps in result.values()]
        assert not per_topic or max(per_topic) - min(per_topic) <= 1


@given(groups())
def test_range_gives_contiguous_ranges_in_rank_order(group):
    counts, members = group
    result = RANGE.assign(counts, members)
    rank = {m.member_id: i for i, m in enumerate(sorted(members, key=rank_key))}
    for topic in counts:
        holders = sorted((m for m in result if any(t == topic for t, _ in result[m])), key=rank.get)
        flat = [p for m in holders for t, p in result[m] if t == topic]
        assert flat == sorted(flat)
        sizes = [len(ps) for ps in (([p for t, p in result[m] if t == topic]) for m in holders)]
        assert sizes == sorted(sizes, reverse=True)


def rank_key(m):
    return (0, m.group_instance_id) if m.group_instance_id else (1, m.member_id)


@given(groups(with_owned=True), st.integers())
def test_sticky_is_sound_deterministic_and_never_hands_over_what_another_owns(group, seed):
    counts, members = group
    result = STICKY.assign(counts, members)
    assert_sound(result, members, counts)
    assert STICKY.assign(counts, shuffled(members, seed)) == result
    for m in members:
        for tp in result[m.member_id]:
            for other in members:
                if other is not m and tp in other.owned:
                    # Only a contested partition whose claim m won: m owns it too, from no older generation.
                    assert tp in m.owned and m.generation >= other.generation


def next_round(members, result):
    """What each member reports after applying a cooperative result: it revoked what it lost and
    gained what it was given, one generation later."""
    return [
        M(m.member_id, m.topics, tuple(result[m.member_id]), m.group_instance_id, max(m.generation, 0) + 1)
        for m in members
    ]


@given(groups(with_owned=True))
def test_sticky_converges_in_two_rounds_and_then_stays(group):
    counts, members = group
    members = next_round(members, STICKY.assign(counts, members))
    second = STICKY.assign(counts, members)
    assert_sound(second, members, counts)
    assert_complete(second, members, counts)
    assert_balanced(second, members, counts)
    assert STICKY.assign(counts, next_round(members, second)) == second


@given(groups(), st.integers(0, 3), st.integers(0, 3))
def test_sticky_is_as_even_as_the_best_assignment(group, count_b, count_c):
    # Brute force over every assignment of a small group: none has a smaller sum of squared loads.
    _, members = group
    counts = {"b": count_b, "c": count_c}
    members = members[:3]
    result = STICKY.assign(counts, members)
    choices = [[m.member_id for m in members if t in m.topics] for t, n in counts.items() for _ in range(n)]
    choices = [c for c in choices if c]
    best = min(
        (sum(v * v for v in Counter(pick).values()) for pick in itertools.product(*choices)), default=0
    )
    assert sum(len(ps) ** 2 for ps in result.values()) == best


def settle(counts, members):
    members = next_round(members, STICKY.assign(counts, members))
    return next_round(members, STICKY.assign(counts, members))


@given(groups(same_subscriptions=True))
def test_sticky_new_member_moves_only_the_minimum(group):
    counts, members = group
    settled = settle(counts, members)
    topics = members[0].topics if members else ("a",)
    joined = [*settled, M("new", topics)]
    result = STICKY.assign(counts, joined)
    for m in settled:
        assert set(result[m.member_id]) <= set(m.owned)
    # The newcomer gets only what nobody owned: everything that moves to it waits a round.
    assert not set(result["new"]) & {tp for m in settled for tp in m.owned}
    # The fewest revocations that let the newcomer be balanced: the biggest owners keep one extra.
    total = len(valid_partitions(counts, joined))
    each, extra = divmod(total, len(joined))
    loads = sorted((len(m.owned) for m in settled), reverse=True)
    minimum = sum(max(0, load - each - (1 if i < extra else 0)) for i, load in enumerate(loads))
    revoked = sum(len(m.owned) - len(result[m.member_id]) for m in settled)
    assert revoked == minimum


@given(groups(same_subscriptions=True), st.integers(0, 5))
def test_sticky_leaving_member_moves_nothing_else(group, leaver):
    counts, members = group
    settled = settle(counts, members)
    if not settled:
        return
    stay = [m for i, m in enumerate(settled) if i != leaver % len(settled)]
    result = STICKY.assign(counts, stay)
    for m in stay:
        assert set(m.owned) <= set(result[m.member_id])
    assert_complete(result, stay, counts)
    assert_balanced(result, stay, counts)


# -- wire --------------------------------------------------------------------------------------------

partition_lists = st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 2**31 - 1)), max_size=10)


@given(
    st.lists(st.sampled_from(TOPICS), unique=True),
    partition_lists,
    st.integers(-1, 2**31 - 1),
    st.binary(max_size=8),
)
def test_subscription_round_trip(topics, owned, generation, user_data):
    data = encode_subscription(topics, owned, user_data=user_data, rack_id="r1", generation=generation)
    decoded = decode_subscription("m-1", "inst", data)
    assert decoded == M("m-1", tuple(topics), tuple(sorted(set(owned))), "inst", generation)
    message = broker_pb2.ConsumerSubscription.FromString(data)
    assert message.rack_id == "r1" and message.user_data.endswith(user_data)


def test_subscription_without_generation_is_plain_and_unknown_versions_read_as_unknown():
    assert broker_pb2.ConsumerSubscription.FromString(encode_subscription(["t"])).user_data == b""
    foreign = broker_pb2.ConsumerSubscription(
        topics=["t"], user_data=b"\x07\x00\x00\x00\x05"
    ).SerializeToString()
    assert decode_subscription("m", "", foreign).generation == -1


@given(partition_lists, st.binary(max_size=8))
def test_assignment_round_trip(partitions, user_data):
    data = encode_assignment(partitions, user_data)
    assert decode_assignment(data) == sorted(set(partitions))
    assert broker_pb2.ConsumerAssignment.FromString(data).user_data == user_data


def test_undecodable_bytes_are_an_invalid_request():
    for decode in (lambda d: decode_subscription("m", "", d), decode_assignment):
        with pytest.raises(KanalError) as e:
            decode(b"\xff\xff\xff")
        assert e.value.code == ErrorCode.INVALID_REQUEST
