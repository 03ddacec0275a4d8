"""The `balance` planner: a new replica assignment that spreads replicas and preferred leaders evenly over a
set of brokers, rack-aware, moving as few replicas as it can. Pure: assignments and racks in, a plan out.

Terms. A partition's replicas are an ordered tuple, preferred leader first. A *move* is one replica added
to a partition (a broker that was not in its set); reordering a partition's replicas moves no data.

Rules, in priority order (tested with Hypothesis in tests/clients/test_balance_plan.py, against a brute
force search on small clusters):

1. Valid: every replica on one of the given brokers, a partition keeps its replication factor (RF) and
   never holds a broker twice. An RF above the number of brokers is refused (PlanError).
2. Racks, a hard rule: a partition spans min(RF, racks) racks (at most one replica per rack when RF <=
   racks, every rack when RF > racks). A broker without a rack counts as a rack of its own.
3. Balance: no broker above ceil(total replicas / brokers) replicas nor ceil(partitions / brokers)
   preferred leaderships. Replicas: exact (if any rack-respecting plan is within the cap, the plan is;
   else the cap rises one at a time until one is). Leaders: within the cap whenever a balanced plan
   exists (the last resort is an exact search; Limits below).
4. Fewest moves: among the plans keeping 1-3, one adding the fewest replicas (exact, see Method); then
   the fewest changes of preferred leader.

Method: two min-cost flows (min_cost_flow.py). Replicas: source -> partition group (RF units each) ->
(group, rack) (at most one unit per partition when RF <= racks; when RF > racks the first unit per
partition is free and the others cost a rack penalty, so a plan missing a rack is never cheaper) ->
broker (at most one unit per partition; cost 0 where the partition has a replica now, 1 otherwise, a move)
-> sink (capacity: the replica cap). Partitions with the same RF and the same current replicas (among
the given brokers) form one group whose capacities are multiplied by its size, so thousands of
partitions are a few hundred nodes. A group's flow is split back into partitions by laying its units out
rack by rack, broker by broker, and dealing them round-robin: each broker's units (at most one per
partition) and each rack's units land on distinct partitions. Single-replica partitions route through a
per-broker leader node (cap: the leader cap, beyond it a penalty above any number of moves), since their
replica is their leader. Leaders: source -> group of partitions with the same replicas and old leader ->
broker among its replicas (cost 0 for the old leader, 1 for another) -> sink (capacity: the leader cap).
The leader flow runs on the replica sets the first flow chose. When those sets admit no leaders within
the cap (every broker of some replica sets already leads enough; Hypothesis found such cases), the planner
tries leaders first: chosen from all brokers (old leader, then the first flow's sets preferred), each
pinned as one of its partition's replicas, and the replica flow places the others. If that placement
does not fit the caps either, it keeps the first flow's sets, takes the leader choice with the fewest
leaderships over the cap, and repairs (`_repair_leaders`): a leadership moves along a chain of
partitions to a broker below the cap, or, where no chain reaches one, a partition led inside the chains'
reach swaps one replica for a broker outside it (directly, or exchanging with another partition).

Last resort: when the repair still leaves a leadership over the cap, a depth-first search over the
partitions (largest replication factor first; each partition's options cheapest first: fewest added
replicas, then its old leader kept; states that failed remembered) looks for sets and leaders within both
caps, and its plan is taken when it finds one.

Limits. With the flows and the repair alone, the brute force of the tests (3,843 random clusters of up to 6
brokers in uneven racks and 6 partitions that have a balanced plan) found 1 case ending one leadership over
the cap (in the tests as an example); the search finds its balanced plan. The search gives up after
EXACT_SEARCH_STEPS_MAX options tried, so on a large cluster that needs it a leadership may stay over the
cap. The fallbacks are not move-minimal (the exact move count holds when the first flow's sets admit
balanced leaders, the common case). An exact joint method in polynomial time (replica and leader caps at
once) is not a plain flow: a partition's leader and followers share its per-broker limit.

`naive_plan` (round-robin from scratch, what a planner that ignores the current assignment does) is the
baseline the tests compare moves against.

The CLI (`kanal reassign balance|generate`) reads the assignment from Metadata and writes the plan as
reassignment JSON (reassignment_plan.py); the controller validates it again when it is executed.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence

from kanal.clients.min_cost_flow import FlowNetwork

PartitionKey = tuple[str, int]
Assignment = dict[PartitionKey, tuple[int, ...]]


# The exact search's budget: options tried before it gives up (about a second of Python).
EXACT_SEARCH_STEPS_MAX = 200_000


class PlanError(ValueError):
    """The planner cannot produce a plan for this input (said in one line)."""


def count_moves(old: Mapping[PartitionKey, Sequence[int]], new: Mapping[PartitionKey, Sequence[int]]) -> int:
    """Replicas `new` adds: brokers in a partition's new set that were not in its old one."""
    return sum(len(set(new[key]) - set(old.get(key, ()))) for key in new)


def _rack_of(brokers: Mapping[int, str]) -> dict[int, str]:
    # A rackless broker is a rack of its own: "\0" cannot be in a registered rack name.
    return {b: rack if rack else f"\0{b}" for b, rack in brokers.items()}


def racks_needed(replication_factor: int, brokers: Mapping[int, str]) -> int:
    """How many distinct racks a partition of this replication factor must span."""
    return min(replication_factor, len(set(_rack_of(brokers).values())))


def plan_balance(assignment: Mapping[PartitionKey, Sequence[int]], brokers: Mapping[int, str]) -> Assignment:
    """A balanced, rack-aware assignment of the same partitions over `brokers` (broker id -> rack, "" for
    none), keeping as much of `assignment` as the rules allow. Only partitions whose set or order changes
    need to be in a reassignment; `changed(old, new)` picks them."""
    if not brokers:
        raise PlanError("no brokers to place replicas on")
    n = len(brokers)
    for key, replicas in assignment.items():
        if not replicas:
            raise PlanError(f"partition {key[0]}-{key[1]} has no replicas")
        if len(set(replicas)) > n:
            raise PlanError(
                f"partition {key[0]}-{key[1]} has replication factor {len(set(replicas))}, more than the {n} "
                "brokers given")
    rack = _rack_of(brokers)
    keys = sorted(assignment)
    kept = {key: tuple(dict.fromkeys(b for b in assignment[key] if b in brokers)) for key in keys}
    rf = {key: len(set(assignment[key])) for key in keys}
    cap = math.ceil(sum(rf.values()) / n) if keys else 0
    lcap = math.ceil(len(keys) / n) if keys else 0
    # Both loops end: with a cap of len(keys) no broker limit binds, and racks alone can always be met.
    while (sets := _place_replicas(keys, kept, rf, rack, cap, lcap)) is None:
        cap += 1
    leaders = _choose_leaders(keys, sets, kept, assignment, lcap)
    if leaders is None:
        # The cheapest replica sets leave some broker leading too much. Leaders first instead: choose them
        # from all brokers (old leader, then current replicas preferred), then place the other replicas.
        leaders = _choose_leaders(keys, {key: tuple(sorted(brokers)) for key in keys}, sets, assignment, lcap)
        pinned_sets = None if leaders is None else _place_replicas(keys, kept, rf, rack, cap, lcap, leaders)
        if pinned_sets is not None:
            sets = pinned_sets
        else:  # the fewest leaderships over the cap, then replica exchanges that let chains relieve them
            leaders = _choose_leaders(keys, sets, kept, assignment, lcap, overflow=True)
            assert leaders is not None  # with overflow allowed every partition gets a leader
            sets = _repair_leaders(keys, sets, leaders, rack, cap, lcap)
            if max(Counter(leaders.values()).values()) > lcap:
                # Still over: an exact search, cheapest options first, within a step budget.
                found = _search_plan(keys, kept, rf, rack, cap, lcap, EXACT_SEARCH_STEPS_MAX)
                if found is not None:
                    sets, leaders = found
    assert leaders is not None  # pinned sets exist only for a leader choice
    return {key: (leaders[key], *(b for b in sets[key] if b != leaders[key])) for key in keys}


def _search_plan(
    keys: Sequence[PartitionKey],
    kept: Mapping[PartitionKey, tuple[int, ...]],
    rf: Mapping[PartitionKey, int],
    rack: Mapping[int, str],
    cap: int,
    lcap: int,
    steps_max: int,
) -> tuple[dict[PartitionKey, tuple[int, ...]], dict[PartitionKey, int]] | None:
    """Depth-first over partitions for replica sets and leaders within both caps and the rack rule; each
    partition's options cheapest first (fewest added replicas, then its old leader kept), states known to
    fail remembered. None when there is no such plan or `steps_max` options were tried first."""
    ids = sorted(rack)
    index = {b: i for i, b in enumerate(ids)}
    racks_total = len(set(rack.values()))
    combos: dict[int, list[tuple[int, ...]]] = {}
    for factor in set(rf.values()):
        combos[factor] = [c for c in itertools.combinations(ids, factor)
                          if len({rack[b] for b in c}) == min(factor, racks_total)]

    def options(key: PartitionKey) -> list[tuple[int, tuple[int, ...]]]:
        mine, old_leader = set(kept[key]), (kept[key][0] if kept[key] else None)
        choices = [(lead, c) for c in combos[rf[key]] for lead in c]
        return sorted(choices, key=lambda o: (len(set(o[1]) - mine), o[0] != old_leader))

    order = sorted(keys, key=lambda k: (-rf[k], k))  # the largest sets first: they constrain the most
    failed: set[tuple[int, tuple[int, ...], tuple[int, ...]]] = set()
    # An explicit stack (thousands of partitions would overflow Python's recursion): per depth, the loads
    # before it and the iterator over its options; `picks` the option taken at each depth so far.
    loads, leads = (0,) * len(ids), (0,) * len(ids)
    stack = [(loads, leads, iter(options(order[0])))] if order else []
    picks: list[tuple[int, tuple[int, ...]]] = []
    steps = 0
    while len(picks) < len(order):
        if not stack:
            return None
        loads, leads, untried = stack[-1]
        depth = len(stack) - 1
        for lead, c in untried:
            steps += 1
            if steps > steps_max:
                return None
            if leads[index[lead]] >= lcap or any(loads[index[b]] >= cap for b in c):
                continue
            new_loads = tuple(n + (ids[j] in c) for j, n in enumerate(loads))
            new_leads = tuple(n + (ids[j] == lead) for j, n in enumerate(leads))
            if (depth + 1, new_loads, new_leads) in failed:
                continue
            picks.append((lead, c))
            if depth + 1 < len(order):
                stack.append((new_loads, new_leads, iter(options(order[depth + 1]))))
            break
        else:  # every option of this depth failed from these loads: back up one
            failed.add((depth, loads, leads))
            stack.pop()
            if picks:
                picks.pop()
    chosen = dict(zip(order, picks))
    return {k: chosen[k][1] for k in keys}, {k: chosen[k][0] for k in keys}


def changed(
    old: Mapping[PartitionKey, Sequence[int]], new: Mapping[PartitionKey, Sequence[int]]
) -> Assignment:
    """The partitions whose replica tuple differs between `old` and `new`, with their new tuple."""
    return {
        key: tuple(replicas) for key, replicas in new.items() if tuple(old.get(key, ())) != tuple(replicas)
    }


def naive_plan(assignment: Mapping[PartitionKey, Sequence[int]], brokers: Mapping[int, str]) -> Assignment:
    """Round-robin from scratch, ignoring where replicas are, as Kafka's rack-aware assignment does: the
    brokers in rack-alternating order (first of each rack, then second of each, ...), and each partition
    takes the next brokers of one cycle over that list, so replica counts differ by at most one and, with
    racks of equal size, a partition's replicas are on distinct racks. The baseline the tests compare
    `plan_balance`'s moves against."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(_rack_of(brokers).items()):
        by_rack.setdefault(rack, []).append(broker)
    columns = [by_rack[r] for r in sorted(by_rack)]
    ids = [col[i] for i in range(max(map(len, columns))) for col in columns if i < len(col)]
    out: Assignment = {}
    cursor = 0
    for key in sorted(assignment):
        rf = len(set(assignment[key]))
        out[key] = tuple(ids[(cursor + j) % len(ids)] for j in range(rf))
        cursor += rf
    return out




def _place_replicas(
    keys: Sequence[PartitionKey],
    kept: Mapping[PartitionKey, tuple[int, ...]],
    rf: Mapping[PartitionKey, int],
    rack: Mapping[int, str],
    cap: int,
    lcap: int,
    pinned: Mapping[PartitionKey, int] | None = None,
) -> dict[PartitionKey, tuple[int, ...]] | None:
    """Replica sets within `cap` per broker that keep the racks, with the fewest moves; None if there are
    none. Each set lists the replicas kept (old order) first, then the added ones. `pinned` (a broker per
    partition, its chosen leader) is part of the partition's set; the flow places the others."""
    groups: dict[tuple[int, tuple[int, ...], int | None], list[PartitionKey]] = {}
    for key in keys:
        groups.setdefault((rf[key], tuple(sorted(kept[key])), pinned[key] if pinned else None), []).append(
            key
        )
    members: dict[str, list[int]] = {}
    for b in sorted(rack):
        members.setdefault(rack[b], []).append(b)
    rack_count = len(members)
    total = sum(rf.values())
    lead_penalty = total + 1  # above any number of moves
    rack_penalty = (total + 1) * (lead_penalty + 1)  # above any moves plus leader overflows
    net = FlowNetwork(2)
    source, sink = 0, 1
    broker_node = {b: net.add_node() for b in sorted(rack)}
    lead_node = {b: net.add_node() for b in sorted(rack)}
    pinned_load = {b: 0 for b in rack}
    for b in (pinned or {}).values():
        pinned_load[b] += 1
    for b, node in broker_node.items():
        if pinned_load[b] > cap:
            return None
        net.add_edge(node, sink, cap - pinned_load[b], 0)
        net.add_edge(lead_node[b], node, lcap, 0)
        net.add_edge(lead_node[b], node, len(keys), lead_penalty)
    to_broker: dict[tuple[int, tuple[int, ...], int | None], dict[int, int]] = {}
    first_per_rack: list[tuple[int, int]] = []
    for group, group_keys in groups.items():
        factor, held, pin = group
        count = len(group_keys)
        node = net.add_node()
        net.add_edge(source, node, count * (factor - (pin is not None)), 0)
        edges = to_broker[group] = {}
        for rack_name, all_in_rack in members.items():
            rack_brokers = [b for b in all_in_rack if b != pin]
            if pin is not None and rack_name == rack[pin]:
                if factor <= rack_count or not rack_brokers:
                    continue  # the pinned replica is this rack's one
                # RF > racks: the rack is covered; more replicas in it are extra ones, at the rack penalty.
                via = net.add_node()
                net.add_edge(node, via, count * len(rack_brokers), rack_penalty)
            elif factor <= rack_count and len(rack_brokers) == 1:
                via = node  # a one-broker rack: the broker's own limit is the rack's
            else:
                via = net.add_node()
                first = net.add_edge(node, via, count, 0)
                if factor > rack_count:  # every rack needed: the first unit per partition is the free one
                    first_per_rack.append((first, count))
                    if len(rack_brokers) > 1:
                        net.add_edge(node, via, count * (len(rack_brokers) - 1), rack_penalty)
            for b in rack_brokers:
                target = lead_node[b] if factor == 1 else broker_node[b]
                edges[b] = net.add_edge(via, target, count, 0 if b in held else 1)
    flow, _cost = net.min_cost_max_flow(source, sink)
    if flow < total - (len(keys) if pinned else 0):
        return None
    if any(net.flow_on(e) < need for e, need in first_per_rack):
        return None  # within this cap some partition would miss a rack
    sets: dict[PartitionKey, tuple[int, ...]] = {}
    for group, group_keys in groups.items():
        count = len(group_keys)
        # Rack by rack, broker by broker: a broker's (and, RF <= racks, a rack's) units are consecutive and
        # at most `count`, so dealing them round-robin gives each partition distinct brokers and racks.
        units = [b for rack_brokers in members.values() for b in rack_brokers if b in to_broker[group]
                 for _ in range(net.flow_on(to_broker[group][b]))]
        for i, key in enumerate(group_keys):
            chosen = set(units[i::count]) | ({group[2]} if group[2] is not None else set())
            stay = [b for b in kept[key] if b in chosen]
            sets[key] = (*stay, *sorted(chosen - set(stay)))
    return sets


def _choose_leaders(
    keys: Sequence[PartitionKey],
    candidates: Mapping[PartitionKey, tuple[int, ...]],
    kept: Mapping[PartitionKey, tuple[int, ...]],
    assignment: Mapping[PartitionKey, Sequence[int]],
    lcap: int,
    overflow: bool = False,
) -> dict[PartitionKey, int] | None:
    """A preferred leader per partition among its candidates, at most `lcap` per broker: the old leader
    where it can (cost 0), else a current replica (1), else any (2); None if no choice fits `lcap`. With
    `overflow`, leaderships above `lcap` are allowed at a penalty above any other cost (fewest of them)."""
    groups: dict[tuple[tuple[int, ...], int, tuple[int, ...]], list[PartitionKey]] = {}
    for key in keys:
        groups.setdefault((tuple(sorted(candidates[key])), assignment[key][0], tuple(sorted(kept[key]))),
                          []).append(key)
    net = FlowNetwork(2)
    source, sink = 0, 1
    broker_node: dict[int, int] = {}
    edges: dict[tuple[tuple[int, ...], int, tuple[int, ...]], dict[int, int]] = {}
    for group, group_keys in groups.items():
        among, old, held = group
        node = net.add_node()
        net.add_edge(source, node, len(group_keys), 0)
        edges[group] = {}
        for b in among:
            if b not in broker_node:
                broker_node[b] = net.add_node()
                net.add_edge(broker_node[b], sink, lcap, 0)
                if overflow:
                    net.add_edge(broker_node[b], sink, len(keys), 2 * len(keys) + 1)
            cost = 0 if b == old else 1 + (b not in held)
            edges[group][b] = net.add_edge(node, broker_node[b], len(group_keys), cost)
    flow, _cost = net.min_cost_max_flow(source, sink)
    if flow < len(keys):
        return None
    leaders: dict[PartitionKey, int] = {}
    for group, group_keys in groups.items():
        units = [b for b in edges[group] for _ in range(net.flow_on(edges[group][b]))]
        leaders.update(zip(group_keys, units, strict=True))
    return leaders


def _repair_leaders(keys: Sequence[PartitionKey], sets: Mapping[PartitionKey, tuple[int, ...]],
                    leaders: dict[PartitionKey, int], rack: Mapping[int, str], cap: int,
                    lcap: int) -> dict[PartitionKey, tuple[int, ...]]:
    """Relieve brokers leading more than `lcap` (updating `leaders`; returns the new sets). A leadership
    moves along a chain of partitions (each handed to another of its replicas) to a broker below the cap.
    Where no chain exists, every partition led inside the set B of brokers the chains reach has all its
    replicas in B; one of them then takes a broker y outside B below the leader cap in place of a follower
    x in B (or its leader, whose leadership then goes to y): directly if y has replica room, else by
    exchanging x and y with a partition holding y. The next chain reaches y. Stops when nothing relieves a
    broker (leaderships stay over the cap)."""
    current = {key: list(sets[key]) for key in keys}
    racks_total = len(set(rack.values()))
    load = {b: 0 for b in rack}
    leads = {b: 0 for b in rack}
    for key in keys:
        leads[leaders[key]] += 1
        for b in current[key]:
            load[b] += 1

    def racks_ok(replicas: list[int]) -> bool:
        return len({rack[b] for b in replicas}) == min(len(replicas), racks_total)

    def chain_from(start: int) -> set[int] | None:
        """Hand one leadership off `start` along the shortest chain; None if done, else the brokers
        reached."""
        led_by: dict[int, list[PartitionKey]] = {}
        for key in keys:
            led_by.setdefault(leaders[key], []).append(key)
        came_from: dict[int, tuple[int, PartitionKey]] = {}
        queue, seen = [start], {start}
        for broker in queue:
            for key in led_by.get(broker, []):
                for other in current[key]:
                    if other in seen:
                        continue
                    seen.add(other)
                    came_from[other] = (broker, key)
                    if leads[other] < lcap:
                        node = other
                        while node != start:
                            prev, via = came_from[node]
                            leaders[via] = node
                            node = prev
                        leads[other] += 1
                        leads[start] -= 1
                        return None
                    queue.append(other)
        return seen

    def widen(reached: set[int]) -> bool:
        """Give a partition led inside `reached` a replica outside it below the leader cap."""
        outside = sorted(
            (b for b in rack if b not in reached and leads[b] < lcap), key=lambda b: (load[b], b)
        )
        for key in keys:
            if leaders[key] not in reached:
                continue
            replicas = current[key]
            for x in replicas:  # x may be the leader: then the leadership goes to y with it
                for y in outside:
                    if y in replicas or not racks_ok([y if b == x else b for b in replicas]):
                        continue
                    if load[y] < cap:
                        replace(key, x, y)
                        return True
                    for other in keys:
                        theirs = current[other]
                        if (y in theirs and x not in theirs and leaders[other] != y
                                and racks_ok([x if b == y else b for b in theirs])):
                            replace(key, x, y)
                            replace(other, y, x)
                            return True
        return False

    def replace(key: PartitionKey, x: int, y: int) -> None:
        replicas = current[key]
        replicas[replicas.index(x)] = y
        load[x] -= 1
        load[y] += 1
        if leaders[key] == x:
            leaders[key] = y
            leads[x] -= 1
            leads[y] += 1

    for _ in range(4 * len(keys) + 1):  # each round relieves one leadership or widens once before it
        over = [b for b in sorted(leads) if leads[b] > lcap]
        if not over:
            break
        if not any((reached := chain_from(b)) is None or widen(reached) for b in over):
            break
    return {key: tuple(current[key]) for key in keys}
