"""Replica placement: even leaders and replicas, rack awareness, determinism."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kanal.metadata import BrokerId, decide_create_partitions, place_replicas
from kanal.v1 import admin_pb2


def brokers(racks: dict[int, str]) -> dict[BrokerId, str]:
    return {BrokerId(b): r for b, r in racks.items()}


def leaders(placements) -> Counter:
    return Counter(replicas[0] for replicas in placements)


def holdings(placements) -> Counter:
    return Counter(b for replicas in placements for b in replicas)


def test_three_brokers_thirty_partitions_each_leads_ten() -> None:
    placements = place_replicas(brokers({0: "", 1: "", 2: ""}), 30, 3, random.Random(1))
    assert leaders(placements) == {0: 10, 1: 10, 2: 10}
    assert all(len(set(r)) == 3 for r in placements)


@pytest.mark.parametrize(("n_brokers", "partitions", "rf"), [(6, 60, 2), (5, 50, 3), (4, 12, 1), (7, 70, 3)])
def test_leaders_and_replicas_spread_evenly(n_brokers: int, partitions: int, rf: int) -> None:
    placements = place_replicas(brokers({b: "" for b in range(n_brokers)}), partitions, rf, random.Random(3))
    assert len(placements) == partitions
    assert set(leaders(placements).values()) == {partitions // n_brokers}
    assert set(holdings(placements).values()) == {partitions * rf // n_brokers}
    assert all(len(set(r)) == rf for r in placements)


def test_replicas_of_a_partition_are_on_distinct_racks() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    placements = place_replicas(brokers(racks), 60, 3, random.Random(5))
    for replicas in placements:
        assert sorted(racks[b] for b in replicas) == ["a", "b", "c"]
    assert set(leaders(placements).values()) == {10}
    assert set(holdings(placements).values()) == {30}


def test_racks_are_reused_evenly_once_exhausted() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    placements = place_replicas(brokers(racks), 40, 3, random.Random(5))
    for replicas in placements:
        per_rack = Counter(racks[b] for b in replicas)
        assert sorted(per_rack.values()) == [1, 2]


def test_a_lone_rack_gets_a_replica_of_every_partition() -> None:
    racks = {0: "a", 1: "a", 2: "a", 3: "b"}
    placements = place_replicas(brokers(racks), 12, 2, random.Random(5))
    assert all(3 in replicas for replicas in placements)
    assert set(leaders(placements).values()) == {3}


def test_same_seed_same_placement_other_seeds_start_elsewhere() -> None:
    ids = brokers({b: "" for b in range(5)})
    assert place_replicas(ids, 10, 3, random.Random(9)) == place_replicas(ids, 10, 3, random.Random(9))
    first_leaders = {place_replicas(ids, 1, 1, random.Random(seed))[0][0] for seed in range(40)}
    assert len(first_leaders) > 1


def test_existing_load_is_filled_in() -> None:
    ids = brokers({0: "", 1: "", 2: ""})
    existing = [(0, 1), (0, 2), (0, 1)]  # broker 0 leads all three of this topic's partitions
    placements = place_replicas(ids, 3, 2, random.Random(1), topic_replicas=existing)
    assert 0 not in leaders(placements)
    cluster = [(1, 2)] * 6  # other topics: 1 and 2 are busy
    fresh = place_replicas(ids, 1, 1, random.Random(1), cluster_replicas=cluster)
    assert fresh == [(0,)]


def test_impossible_replication_factor_raises() -> None:
    with pytest.raises(ValueError, match="replication factor"):
        place_replicas(brokers({0: ""}), 1, 2, random.Random(1))
    with pytest.raises(ValueError, match="replication factor"):
        place_replicas(brokers({0: ""}), 1, 0, random.Random(1))


def test_created_partitions_extend_the_topic_evenly(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 3, 2)
    h.commit(
        decide_create_partitions(
            h.image,
            admin_pb2.CreatePartitionsRequest(
                targets=[admin_pb2.CreatePartitionsRequest.Target(name="t", count=30)]
            ),
            rng=h.rng,
            **h.ctx(),
        )
    )
    partitions = h.image.topics["t"].partitions
    assert [p.partition_id for p in partitions] == list(range(30))
    assert leaders([p.replicas for p in partitions]) == {0: 10, 1: 10, 2: 10}
    assert set(holdings([p.replicas for p in partitions]).values()) == {20}
