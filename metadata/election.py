"""Partition leader election rules (KRaft's), as pure functions of a partition and the live brokers.

`elect(partition, live, unclean_allowed)` re-evaluates one partition after the set of live brokers
changed (a broker was fenced, unfenced or replaced, or unclean election was switched on):

- ISR: members that are not live leave it, except that the ISR never becomes empty: when no member is
  live, the last in-sync replica stays listed (the leader, if it was in the ISR) so that a later election
  knows which replica holds every committed record.
- Leader: a live leader in the ISR keeps leading. Otherwise the first replica, in assignment order (the
  preferred leader first), that is live and in the ISR leads: CAUSE_LEADER_FENCED, or
  CAUSE_LEADER_RECOVERED when the partition was offline.
- No live ISR member: the partition goes (or stays) offline, leader -1, unless the topic allows unclean
  election; then the first live replica leads and becomes the whole ISR (CAUSE_UNCLEAN_ELECTION; records
  acknowledged only by the old ISR may be lost).
- Only the ISR changed: CAUSE_REPLICA_FENCED.

`elect_preferred(partition, live)` moves leadership back to the preferred replica when it is live and in
the ISR (CAUSE_PREFERRED_ELECTION).

Epochs are not computed here: applying the change bumps leader_epoch when the leader changes and
partition_epoch always.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.ids import NO_LEADER, BrokerId
from kanal.metadata.image import MetadataImage, PartitionState
from kanal.v1 import metadata_pb2


@dataclass(frozen=True, slots=True)
class Election:
    """The outcome of re-evaluating one partition: a new leader and/or ISR (None: unchanged), and why."""

    leader: BrokerId | None
    isr: tuple[BrokerId, ...] | None
    cause: metadata_pb2.PartitionChangeCause.ValueType
    summary: str

    def __repr__(self) -> str:
        return f"<Election {metadata_pb2.PartitionChangeCause.Name(self.cause)}: {self.summary}>"

    def to_record(self, topic_id: str, partition_id: int, context: str) -> metadata_pb2.PartitionChangeRecord:
        """The PartitionChangeRecord for this outcome; `context` says what happened ("broker 2 fenced")."""
        record = metadata_pb2.PartitionChangeRecord(
            topic_id=topic_id,
            partition_id=partition_id,
            cause=self.cause,
            reason=f"{context}; {self.summary}",
        )
        if self.leader is not None:
            record.leader = self.leader
        if self.isr is not None:
            record.isr.broker_ids.extend(self.isr)
        return record


def elect(partition: PartitionState, live: AbstractSet[BrokerId], unclean_allowed: bool) -> Election | None:
    """What must change in `partition` now that exactly `live` brokers are live; None when nothing."""
    old_leader, old_isr = partition.leader, partition.isr
    isr = tuple(b for b in old_isr if b in live)
    if not isr:
        isr = (old_leader,) if old_leader in old_isr else old_isr
    if old_leader != NO_LEADER and old_leader in live and old_leader in isr:
        leader = old_leader
        cause = metadata_pb2.CAUSE_REPLICA_FENCED
    else:
        clean = [b for b in partition.replicas if b in isr and b in live]
        unclean = [b for b in partition.replicas if b in live]
        if clean:
            leader = clean[0]
            recovered = old_leader == NO_LEADER
            cause = metadata_pb2.CAUSE_LEADER_RECOVERED if recovered else metadata_pb2.CAUSE_LEADER_FENCED
        elif unclean_allowed and unclean:
            leader = unclean[0]
            isr = (leader,)
            cause = metadata_pb2.CAUSE_UNCLEAN_ELECTION
        else:
            leader = NO_LEADER
            cause = metadata_pb2.CAUSE_LEADER_FENCED
    if leader == old_leader and isr == old_isr:
        return None
    return Election(
        leader=leader if leader != old_leader else None,
        isr=isr if isr != old_isr else None,
        cause=cause,
        summary=_summary(partition, leader, isr),
    )


def elect_preferred(partition: PartitionState, live: AbstractSet[BrokerId]) -> Election | None:
    """Move leadership to the preferred replica when it is live, in the ISR and not leading already."""
    preferred = partition.preferred_leader
    if partition.leader == NO_LEADER or partition.leader == preferred:
        return None  # offline partitions are `elect`'s business
    if preferred not in live or preferred not in partition.isr:
        return None
    return Election(
        leader=preferred,
        isr=None,
        cause=metadata_pb2.CAUSE_PREFERRED_ELECTION,
        summary=_summary(partition, preferred, partition.isr),
    )


def _summary(partition: PartitionState, leader: BrokerId, isr: tuple[BrokerId, ...]) -> str:
    parts = []
    if leader != partition.leader:
        parts.append(f"leader {partition.leader} -> {leader}")
    if isr != partition.isr:
        parts.append(f"isr {list(partition.isr)} -> {list(isr)}")
    return ", ".join(parts)


def decide_preferred_leader_elections(
    image: MetadataImage, *, now_ms: int, principal: str = "controller", request_id: str
) -> Decision[list[tuple[str, int]]]:
    """Move leadership back to preferred replicas where `elect_preferred` allows (Kafka's automatic
    leader rebalance, run by the shell now and then). The reply lists the (topic, partition) moved."""
    stamp = Stamp(now_ms, principal, request_id)
    live = set(image.live_brokers())
    records = []
    moved = []
    for topic, partition in image.iter_partitions():
        election = elect_preferred(partition, live)
        if election is None:
            continue
        moved.append((topic.name, int(partition.partition_id)))
        records.append(
            stamp.record(
                partition_change=election.to_record(
                    topic.topic_id, partition.partition_id, "preferred leader election"
                )
            )
        )
    return Decision(records, moved)
