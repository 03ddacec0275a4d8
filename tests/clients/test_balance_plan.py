"""The balance planner (kanal.clients.balance_plan): its rules as Hypothesis properties, and examples."""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kanal.clients.balance_plan import (
    PlanError,
    changed,
    count_moves,
    naive_plan,
    plan_balance,
    racks_needed,
)


@st.composite
def clusters(draw, racked: bool | None = None):
    """(assignment, brokers): up to 9 brokers (equal-sized racks when racked), up to 24 partitions with
    replicas on any brokers, some of which may have left the target set."""
    use_racks = draw(st.booleans()) if racked is None else racked
    if use_racks:
        rack_count = draw(st.integers(2, 3))
        per_rack = draw(st.integers(1, 3))
        ids = draw(
            st.lists(
                st.integers(0, 40),
                min_size=rack_count * per_rack,
                max_size=rack_count * per_rack,
                unique=True,
            )
        )
        brokers = {b: f"rack-{i % rack_count}" for i, b in enumerate(ids)}
    else:
        ids = draw(st.lists(st.integers(0, 40), min_size=1, max_size=9, unique=True))
        brokers = {b: "" for b in ids}
    old_brokers = sorted(set(ids) | set(draw(st.lists(st.integers(41, 45), max_size=3))))
    rf_max = min(len(brokers), racks_count(brokers) if use_racks else len(brokers), 3)
    assignment = {}
    for p in range(draw(st.integers(0, 24))):
        rf = draw(st.integers(1, rf_max))
        replicas = draw(st.lists(st.sampled_from(old_brokers), min_size=rf, max_size=rf, unique=True))
        assignment[(f"t{p % 3}", p)] = tuple(replicas)
    return assignment, brokers


def racks_count(brokers):
    return len(set(brokers.values()))


def _check_valid(assignment, brokers, plan):
    assert set(plan) == set(assignment)
    rack = {b: r or f"\0{b}" for b, r in brokers.items()}
    for key, replicas in plan.items():
        rf = len(set(assignment[key]))
        assert len(replicas) == rf and len(set(replicas)) == rf, (key, replicas)
        assert all(b in brokers for b in replicas), (key, replicas)
        assert len({rack[b] for b in replicas}) == racks_needed(rf, brokers), (key, replicas)


def _caps(assignment, brokers):
    total = sum(len(set(r)) for r in assignment.values())
    return math.ceil(total / len(brokers)), math.ceil(len(assignment) / len(brokers))


def _balanced(plan, brokers, assignment):
    """Both caps hold: replicas and preferred leaders per broker."""
    cap, lcap = _caps(assignment, brokers)
    replica_counts = Counter(b for r in plan.values() for b in r)
    leader_counts = Counter(r[0] for r in plan.values())
    return max(replica_counts.values(), default=0) <= cap and max(leader_counts.values(), default=0) <= lcap


def _rack_valid(plan, brokers):
    rack = {b: r or f"\0{b}" for b, r in brokers.items()}
    return all(all(b in brokers for b in r) and len(set(r)) == len(r)
               and len({rack[b] for b in r}) == racks_needed(len(r), brokers) for r in plan.values())


def _balanced_plan_exists(assignment, brokers):
    """Brute force (small clusters only): is there any assignment of these replication factors that keeps
    the racks and both caps? Depth-first over partitions, memoised on the loads so far."""
    cap, lcap = _caps(assignment, brokers)
    ids = sorted(brokers)
    rack = {b: r or f"\0{b}" for b, r in brokers.items()}
    factors = sorted(len(set(r)) for r in assignment.values())
    options = {}
    for rf in set(factors):
        options[rf] = [(ids.index(lead), tuple(ids.index(b) for b in chosen))
                       for chosen in itertools.combinations(ids, rf)
                       if len({rack[b] for b in chosen}) == racks_needed(rf, brokers) for lead in chosen]

    @functools.cache
    def search(i, loads, leads):
        if i == len(factors):
            return True
        for lead, chosen in options[factors[i]]:
            if leads[lead] >= lcap or any(loads[j] >= cap for j in chosen):
                continue
            new_loads = tuple(n + (j in chosen) for j, n in enumerate(loads))
            new_leads = tuple(n + (j == lead) for j, n in enumerate(leads))
            if search(i + 1, new_loads, new_leads):
                return True
        return False

    return search(0, (0,) * len(ids), (0,) * len(ids))


@st.composite
def small_racked_clusters(draw):
    """Up to 6 brokers in uneven racks (some rackless), up to 6 partitions: small enough to brute force."""
    ids = draw(st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True))
    brokers = {b: draw(st.sampled_from(["", "r0", "r1", "r2"])) for b in ids}
    old_brokers = sorted(set(ids) | {10, 11})
    rf_max = min(len(brokers), 3)
    assignment = {}
    for p in range(draw(st.integers(0, 6))):
        rf = draw(st.integers(1, rf_max))
        assignment[("t", p)] = tuple(draw(st.lists(st.sampled_from(old_brokers), min_size=rf, max_size=rf,
                                                   unique=True)))
    return assignment, brokers


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_racked_clusters())
# Found by Hypothesis against the greedy planner this one replaced: 6 brokers in 3 racks, three RF-3
# partitions, where greedy filling left a broker above the replica cap.
@example(({("t", 0): (0, 1, 2), ("t", 1): (0, 1, 2), ("t", 2): (0, 1, 2)},
          {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}))
# Nine single-replica-heavy partitions on nine brokers: greedy leader hand-overs ended one above the cap.
@example(({("t", p): (p % 2,) for p in range(5)} | {("t", 5): (0, 1)}, {b: "" for b in range(6)}))
# The one case found (in 3,843 random clusters with a balanced plan) where the flows and the repair end one
# leadership over the cap (every broker exactly at both caps, relieving it takes more than one replica
# exchange): the exact search finds the balanced plan.
@example(({("t", 0): (5, 11), ("t", 1): (4, 6, 5), ("t", 2): (6, 10, 0), ("t", 3): (4,), ("t", 4): (5,)},
          {6: "r2", 5: "r0", 4: "r0", 0: "r1", 8: "r2"}))
def test_balanced_whenever_a_balanced_plan_exists(cluster):
    """Replicas and leaders within both caps whenever any rack-respecting plan is."""
    assignment, brokers = cluster
    plan = plan_balance(assignment, brokers)
    _check_valid(assignment, brokers, plan)
    cap, lcap = _caps(assignment, brokers)
    if _balanced_plan_exists(assignment, brokers):
        assert max(Counter(b for r in plan.values() for b in r).values(), default=0) <= cap
        assert max(Counter(r[0] for r in plan.values()).values(), default=0) <= lcap
    else:
        assert not _balanced(plan, brokers, assignment)  # the search and the planner agree it cannot be


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
# Found by Hypothesis: a naive planner blind to racks "moved" less by leaving both replicas on rack-1.
@example(
    (
        {("t0", 0): (0,), ("t1", 1): (1, 2)},
        {0: "rack-0", 1: "rack-1", 3: "rack-0", 2: "rack-1", 4: "rack-0", 5: "rack-1"},
    )
)
def test_plan_is_valid_balanced_and_moves_less_than_naive(cluster):
    assignment, brokers = cluster
    plan = plan_balance(assignment, brokers)
    _check_valid(assignment, brokers, plan)
    naive = naive_plan(assignment, brokers)
    if not any(brokers.values()):
        assert _balanced(plan, brokers, assignment)  # without racks a balanced plan always exists
    if _rack_valid(naive, brokers) and _balanced(naive, brokers, assignment):
        # The naive plan is one of the plans the planner chooses among: it cannot do worse on either count.
        assert _balanced(plan, brokers, assignment)
        assert count_moves(assignment, plan) <= count_moves(assignment, naive)
    cap, _lcap = _caps(assignment, brokers)
    naive_loads = Counter(b for r in naive.values() for b in r)
    # Replica placement alone: the planner's replica flow minimises moves under the same rules, except that
    # it also keeps single-replica partitions (their replica is their leader) within the leader cap.
    if (_rack_valid(naive, brokers) and max(naive_loads.values(), default=0) <= cap
            and all(len(r) > 1 for r in assignment.values())):
        assert count_moves(assignment, plan) <= count_moves(assignment, naive)


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_plan_of_a_plan_moves_nothing(cluster):
    """A balanced assignment is left as it is: planning twice changes nothing the second time."""
    assignment, brokers = cluster
    plan = plan_balance(assignment, brokers)
    if _balanced(plan, brokers, assignment):
        assert plan_balance(plan, brokers) == plan


@settings(max_examples=100, deadline=None)
@given(clusters(racked=False))
def test_moves_are_minimal_without_racks(cluster):
    """Without racks, moves are forced ones: a replica on a broker that left or above the replica cap, a
    swap when the only broker with room already holds the partition, or a leadership no hand-over can
    relieve (bounded by the preferred leaders above the leader cap)."""
    assignment, brokers = cluster
    plan = plan_balance(assignment, brokers)
    total = sum(len(set(r)) for r in assignment.values())
    cap = math.ceil(total / len(brokers)) if assignment else 0
    load = Counter(b for r in assignment.values() for b in r if b in brokers)
    forced = sum(1 for r in assignment.values() for b in r if b not in brokers)
    forced += sum(max(0, n - cap) for n in load.values())
    lcap = math.ceil(len(assignment) / len(brokers)) if assignment else 0
    leads = Counter(r[0] for r in assignment.values())
    leader_excess = sum(max(0, n - lcap) for b, n in leads.items() if b in brokers)
    leader_excess += sum(n for b, n in leads.items() if b not in brokers)
    extra = count_moves(assignment, plan) - forced
    assert 0 <= extra <= forced + leader_excess


def test_new_broker_gets_its_share_and_leaders_spread():
    assignment = {("orders", p): (p % 3, (p + 1) % 3, (p + 2) % 3) for p in range(6)}
    brokers = {0: "", 1: "", 2: "", 3: ""}
    plan = plan_balance(assignment, brokers)
    counts = Counter(b for r in plan.values() for b in r)
    assert counts == {0: 5, 1: 5, 2: 5, 3: 3}  # cap ceil(18 / 4) = 5: each old broker sheds one
    assert count_moves(assignment, plan) == 3  # only the replicas broker 3 takes over
    assert max(Counter(r[0] for r in plan.values()).values()) <= 2


def test_decommissioned_broker_is_emptied_rack_aware():
    brokers = {1: "a", 2: "b", 3: "a", 4: "b"}
    assignment = {("t", 0): (1, 5), ("t", 1): (5, 2), ("t", 2): (3, 4)}
    plan = plan_balance(assignment, brokers)
    assert all(5 not in r for r in plan.values())
    assert all({brokers[b] for b in r} == {"a", "b"} for r in plan.values())
    assert changed(assignment, plan).keys() == {("t", 0), ("t", 1)}


def test_refusals():
    with pytest.raises(PlanError, match="no brokers"):
        plan_balance({("t", 0): (1,)}, {})
    with pytest.raises(PlanError, match="replication factor 3, more than the 2 brokers"):
        plan_balance({("t", 0): (1, 2, 3)}, {1: "", 2: ""})


def test_thousands_of_partitions_are_planned_balanced():
    """Scale: 5,000 RF-3 partitions crowded onto 9 of 12 brokers in 3 racks (3 brokers just added): the
    plan is valid and balanced, and moves at least what the new brokers take, no more than round-robin."""
    brokers = {b: f"rack-{b % 3}" for b in range(12)}
    assignment = {("big", p): tuple(3 * ((p + k) % 3) + k for k in range(3)) for p in range(5000)}
    for p in range(0, 5000, 7):
        assignment[("big", p)] = (0, 4, 8)
    plan = plan_balance(assignment, brokers)
    _check_valid(assignment, brokers, plan)
    assert _balanced(plan, brokers, assignment)
    replica_counts = Counter(b for r in plan.values() for b in r)
    assert sum(replica_counts[b] for b in (9, 10, 11)) <= count_moves(assignment, plan)
    assert count_moves(assignment, plan) <= count_moves(assignment, naive_plan(assignment, brokers))
