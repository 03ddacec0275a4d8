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

The cost is O(partitions x replication factor x brokers).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from kanal.metadata.ids import BrokerId


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
    if partition_count < 0:
        raise ValueError(f"partition_count must be >= 0, got {partition_count}")
    if not 1 <= replication_factor <= len(brokers):
        raise ValueError(f"replication factor {replication_factor} needs 1..{len(brokers)} live brokers")
    ids = sorted(brokers)
    rank = {b: i for i, b in enumerate(rng.sample(ids, len(ids)))}
    topic_leads: Counter[BrokerId] = Counter()
    topic_holds: Counter[BrokerId] = Counter()
    cluster_leads: Counter[BrokerId] = Counter()
    cluster_holds: Counter[BrokerId] = Counter()
    _count(topic_replicas, brokers, topic_leads, topic_holds)
    _count(cluster_replicas, brokers, cluster_leads, cluster_holds)

    def leader_key(b: BrokerId) -> tuple[int, int, int, int, int]:
        return (topic_leads[b], topic_holds[b], cluster_leads[b], cluster_holds[b], rank[b])

    placements: list[tuple[BrokerId, ...]] = []
    for _ in range(partition_count):
        leader = min(ids, key=leader_key)
        chosen = [leader]
        racks_used: Counter[str] = Counter({brokers[leader]: 1})
        for _ in range(replication_factor - 1):
            follower = min(
                (b for b in ids if b not in chosen),
                key=lambda b: (racks_used[brokers[b]], topic_holds[b], cluster_holds[b], rank[b]),
            )
            chosen.append(follower)
            racks_used[brokers[follower]] += 1
        topic_leads[leader] += 1
        cluster_leads[leader] += 1
        for b in chosen:
            topic_holds[b] += 1
            cluster_holds[b] += 1
        placements.append(tuple(chosen))
    return placements


def _count(
    replica_lists: Iterable[Sequence[int]],
    brokers: Mapping[BrokerId, str],
    leads: Counter[BrokerId],
    holds: Counter[BrokerId],
) -> None:
    for replicas in replica_lists:
        if replicas and replicas[0] in brokers:
            leads[BrokerId(replicas[0])] += 1
        for b in replicas:
            if b in brokers:
                holds[BrokerId(b)] += 1
