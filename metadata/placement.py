"""Replica placement: which live brokers hold the replicas of new partitions, and which one leads.

Rules, in priority order, for each new partition:

1. Only live (registered, unfenced) brokers get replicas; a partition's replicas are distinct.
2. Rack awareness: the replicas of one partition go to distinct racks while there are racks left; past
   that, racks are reused as evenly as possible. Brokers without a rack share the rack "".
3. The preferred leader (first replica) goes to the broker that leads the fewest partitions of this
   topic, then holds the fewest replicas of this topic, then leads and holds the fewest in the whole
   cluster. Followers go to the brokers holding the fewest replicas of this topic, then of the cluster.
   So a topic's leaders and replicas spread evenly (3 brokers, 30 partitions: each leads 10) and a new
   topic fills in where the cluster is light.
4. Remaining ties are broken by a random order of the brokers drawn once per call from `rng`, so topics
   created on an empty cluster do not all start on the lowest broker id.

Two entry points with the same rules and results. `place_replicas_by_load` takes the existing load as
per-broker counts (the controller reads them from the image's indexes) and costs O(new partitions x
replication factor x brokers), whatever the cluster's size. `place_replicas` takes replica lists and
counts them first, adding O(existing partitions x replication factor).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from kanal.metadata.ids import BrokerId

_NO_LOAD: Mapping[BrokerId, int] = MappingProxyType({})


def place_replicas(
    brokers: Mapping[BrokerId, str],
    partition_count: int,
    replication_factor: int,
    rng: random.Random,
    *,
    topic_replicas: Iterable[Sequence[int]] = (),
    cluster_replicas: Iterable[Sequence[int]] = (),
) -> list[tuple[BrokerId, ...]]:
    """Replica lists (preferred leader first) for `partition_count` new partitions.

    `brokers` maps each live broker to its rack ("" when unknown). `topic_replicas` are the replica lists
    of the topic's existing partitions (when it grows), `cluster_replicas` those of every other partition;
    both only weigh the choice. Raises ValueError when the replication factor cannot be met (callers
    validate first and answer INVALID_REPLICATION_FACTOR).
    """
    _check_counts(brokers, partition_count, replication_factor)
    topic_leads, topic_holds = count_load(topic_replicas)
    cluster_leads, cluster_holds = count_load(cluster_replicas)
    return place_replicas_by_load(
        brokers,
        partition_count,
        replication_factor,
        rng,
        topic_leads=topic_leads,
        topic_holds=topic_holds,
        cluster_leads=cluster_leads,
        cluster_holds=cluster_holds,
    )


def place_replicas_by_load(
    brokers: Mapping[BrokerId, str],
    partition_count: int,
    replication_factor: int,
    rng: random.Random,
    *,
    topic_leads: Mapping[BrokerId, int] = _NO_LOAD,
    topic_holds: Mapping[BrokerId, int] = _NO_LOAD,
    cluster_leads: Mapping[BrokerId, int] = _NO_LOAD,
    cluster_holds: Mapping[BrokerId, int] = _NO_LOAD,
) -> list[tuple[BrokerId, ...]]:
    """`place_replicas` with the existing load given as counts (missing broker = 0).

    `*_leads`: partitions each broker is the preferred leader (first replica) of; `*_holds`: partitions
    it has a replica of. `topic_*` count the topic's existing partitions, `cluster_*` every other
    partition. Brokers not in `brokers` may appear and are ignored. Reads only the live brokers' counts.
    """
    _check_counts(brokers, partition_count, replication_factor)
    ids = sorted(brokers)
    rank = {b: i for i, b in enumerate(rng.sample(ids, len(ids)))}
    # Working copies for the live brokers only: they grow as this call places replicas.
    t_leads = {b: topic_leads.get(b, 0) for b in ids}
    t_holds = {b: topic_holds.get(b, 0) for b in ids}
    c_leads = {b: cluster_leads.get(b, 0) for b in ids}
    c_holds = {b: cluster_holds.get(b, 0) for b in ids}

    def leader_key(b: BrokerId) -> tuple[int, int, int, int, int]:
        return (t_leads[b], t_holds[b], c_leads[b], c_holds[b], rank[b])

    placements: list[tuple[BrokerId, ...]] = []
    for _ in range(partition_count):
        leader = min(ids, key=leader_key)
        chosen = [leader]
        racks_used: Counter[str] = Counter({brokers[leader]: 1})
        for _ in range(replication_factor - 1):
            follower = min(
                (b for b in ids if b not in chosen),
                key=lambda b: (racks_used[brokers[b]], t_holds[b], c_holds[b], rank[b]),
            )
            chosen.append(follower)
            racks_used[brokers[follower]] += 1
        t_leads[leader] += 1
        c_leads[leader] += 1
        for b in chosen:
            t_holds[b] += 1
            c_holds[b] += 1
        placements.append(tuple(chosen))
    return placements


def _check_counts(brokers: Mapping[BrokerId, str], partition_count: int, replication_factor: int) -> None:
    if partition_count < 0:
        raise ValueError(f"partition_count must be >= 0, got {partition_count}")
    if not 1 <= replication_factor <= len(brokers):
        raise ValueError(f"replication factor {replication_factor} needs 1..{len(brokers)} live brokers")


def count_load(replica_lists: Iterable[Sequence[int]]) -> tuple[Counter[BrokerId], Counter[BrokerId]]:
    """(preferred leads, replicas held) per broker over these replica lists: O(lists x length)."""
    leads: Counter[BrokerId] = Counter()
    holds: Counter[BrokerId] = Counter()
    for replicas in replica_lists:
        if replicas:
            leads[BrokerId(replicas[0])] += 1
        for b in replicas:
            holds[BrokerId(b)] += 1
    return leads, holds
