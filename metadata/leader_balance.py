"""Preferred-leader election: on demand (ElectLeaders) and automatic (Kafka's auto.leader.rebalance).

A partition's preferred leader is its first replica; placement spreads preferred leaders evenly, so
leadership is balanced when every partition is led by its preferred replica. Failures move leadership
away (election.py) and nothing brings it back by itself: these decisions do, through `elect_preferred`,
which only ever elects a preferred replica that is live and in the ISR (never outside the ISR, so no
acknowledged record can be lost by it).

Automatic rebalance (Kafka's rule). For each broker B: preferred(B) = partitions whose preferred leader is
B, and imbalance(B) = the share of preferred(B) that B does not lead. When imbalance(B) exceeds
`imbalance_percentage_max` %, preferred elections run for B's partitions (those `elect_preferred` allows).
A broker at or under the threshold is left alone, so a cluster that is almost balanced is not churned.
"""

from __future__ import annotations

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.election import elect_preferred
from kanal.metadata.ids import BrokerId
from kanal.metadata.image import MetadataImage, PartitionState, TopicImage
from kanal.v1 import metadata_pb2, operations_pb2
from kanal.v1.error import ErrorCode

_Result = operations_pb2.PartitionOperationResult


def leader_imbalance(image: MetadataImage) -> dict[BrokerId, float]:
    """Broker -> the fraction (0..1) of the partitions it is preferred leader of that it does not lead."""
    preferred: dict[BrokerId, int] = {}
    misled: dict[BrokerId, int] = {}
    for _, p in image.iter_partitions():
        b = p.preferred_leader
        preferred[b] = preferred.get(b, 0) + 1
        if p.leader != b:
            misled[b] = misled.get(b, 0) + 1
    return {b: misled.get(b, 0) / n for b, n in preferred.items()}


def decide_auto_leader_rebalance(
    image: MetadataImage, *, imbalance_percentage_max: int, now_ms: int, principal: str = "controller",
    request_id: str
) -> Decision[list[tuple[str, int]]]:
    """Preferred elections for the partitions of every broker whose imbalance is above the threshold.
    The reply lists the partitions moved."""
    stamp = Stamp(now_ms, principal, request_id)
    over = {b for b, share in leader_imbalance(image).items() if share * 100 > imbalance_percentage_max}
    live = set(image.live_brokers())
    records = []
    moved = []
    for topic, p in image.iter_partitions():
        if p.preferred_leader not in over:
            continue
        election = elect_preferred(p, live)
        if election is None:
            continue
        records.append(stamp.record(partition_change=election.to_record(
            topic.topic_id, p.partition_id,
            f"leader rebalance: broker {p.preferred_leader} above {imbalance_percentage_max}% imbalance")))
        moved.append((topic.name, int(p.partition_id)))
    return Decision(records, moved)


def decide_elect_leaders(
    image: MetadataImage, request: operations_pb2.ElectLeadersRequest, *, now_ms: int, principal: str,
    request_id: str
) -> Decision[operations_pb2.ElectLeadersResponse]:
    """Preferred elections on demand: for the named partitions (each gets a result), or for every
    partition not led by its preferred replica (a result per partition moved or refused)."""
    stamp = Stamp(now_ms, principal, request_id)
    live = set(image.live_brokers())
    targets: list[tuple[str, int, TopicImage | None, PartitionState | None]] = []
    if request.partitions:
        for ref in request.partitions:
            topic = image.topics.get(ref.topic)
            state = (topic.partitions[ref.partition]
                     if topic is not None and 0 <= ref.partition < len(topic.partitions) else None)
            targets.append((ref.topic, ref.partition, topic, state))
    else:
        targets = [(t.name, int(p.partition_id), t, p) for t, p in image.iter_partitions()
                   if p.leader != p.preferred_leader]
    records: list[metadata_pb2.MetadataRecord] = []
    results: list[_Result] = []
    seen: set[tuple[str, int]] = set()
    for name, index, topic, p in targets:
        if (name, index) in seen:
            results.append(_Result(topic=name, partition=index, error=ErrorCode.INVALID_REQUEST,
                                   error_message="partition named more than once in this request"))
            continue
        seen.add((name, index))
        if topic is None or p is None:
            results.append(_Result(topic=name, partition=index, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   error_message=f"partition {name}-{index} does not exist"))
            continue
        results.append(_elect_one(stamp, topic, p, live, records))
    return Decision(records, operations_pb2.ElectLeadersResponse(results=results))


def _elect_one(stamp: Stamp, topic: TopicImage, p: PartitionState, live: set[BrokerId],
               records: list[metadata_pb2.MetadataRecord]) -> _Result:
    result = _Result(topic=topic.name, partition=p.partition_id)
    if p.leader == p.preferred_leader:
        return result  # already led by its preferred replica
    election = elect_preferred(p, live)
    if election is None:
        why = ("not live" if p.preferred_leader not in live
               else "not in the ISR" if p.preferred_leader not in p.isr else "the partition is offline")
        result.error = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        result.error_message = (
            f"{topic.name}-{p.partition_id}: preferred replica {p.preferred_leader} is {why} "
            f"(isr {list(p.isr)}); leader stays {p.leader}"
        )
        return result
    records.append(stamp.record(partition_change=election.to_record(
        topic.topic_id, p.partition_id, "preferred leader election (requested)")))
    return result
