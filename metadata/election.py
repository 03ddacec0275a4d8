"""Partition leader election rules (KRaft's), as pure functions of a partition and the live brokers.

`elect(partition, live, unclean_allowed, directories)` re-evaluates one partition after the set of live
brokers changed (a broker was fenced, unfenced or replaced, or unclean election was switched on).
`directories` maps brokers to the directory id of their current registration (meta.properties'
`directory.id`); the partition records, per ISR member, the directory id its log had when it joined the
ISR (`PartitionState.isr_directory_ids`).

- Disk identity (KIP-966's gap closed): an ISR member whose current directory id differs from the one
  recorded for it came back on an empty or replaced disk: its log is not the one the ISR vouched for.
  It counts as not live for this partition: it is never elected from the ISR, and when it is the last
  in-sync replica the partition stays offline (`offline_reason` says why) rather than making every
  other replica truncate to its empty log. An unknown id on either side ("", written before directory
  ids) is not a mismatch.
- ISR: members that are not live (or lost their disk) leave it, except that the ISR never becomes empty: when
  no member is live, the last in-sync replica stays listed (the leader, if it was in the ISR) so that a later
  election knows which replica holds every committed record.
- Leader: a live leader in the ISR keeps leading. Otherwise the first replica, in assignment order (the
  preferred leader first), that is live and in the ISR leads: CAUSE_LEADER_FENCED, or
  CAUSE_LEADER_RECOVERED when the partition was offline.
- No live ISR member: the partition goes (or stays) offline, leader -1, unless the topic allows unclean
  election; then the first live replica leads and becomes the whole ISR (CAUSE_UNCLEAN_ELECTION; records
  acknowledged only by the old ISR may be lost). Replicas known to have lost their disk come last in
  that order: any other live replica holds at least as much.
- Only the ISR changed: CAUSE_REPLICA_FENCED.
- Unclean restarts (KIP-966's other gap): `restarted_unclean` names brokers being unfenced whose process
  did not shut down cleanly (killed, or lost power). Brokers fsync on segment roll only, so such a log may
  have lost a tail of acknowledged records that another replica still holds. Such a broker leaves the
  ISR when another member can stay, and is never elected from it. When it is the last member, the
  partition is marked *recovering* (CAUSE_UNCLEAN_RESTART) and stays offline: no replica is known to
  hold every acknowledged record. A recovering partition elects nobody from its ISR; `elect_recovering`
  ends it. A partition with a single replica has nothing to compare: its replica leads at once
  (CAUSE_RECOVERY_ELECTION).

`elect_recovering(partition, live, log_ends, directories)` runs the recovery election: once every
replica is live and has reported where its log ends (for the current partition epoch), the replica with
the highest last leader epoch, then the highest end offset, leads, alone in the ISR
(CAUSE_RECOVERY_ELECTION); ties go to the earlier replica in assignment order. Raft's rule for the most
up-to-date log: a replica whose last batch has a later leader epoch saw every batch an earlier leader
committed, and among logs ending in the same epoch the longer one holds the other as a prefix. Waiting
for every replica is the strict choice: a replica that is down may hold the only copy; an operator who
knows it is gone for good allows unclean election instead.

`elect_preferred(partition, live)` moves leadership back to the preferred replica when it is live and in
the ISR (CAUSE_PREFERRED_ELECTION).

Epochs are not computed here: applying the change bumps leader_epoch when the leader changes and
partition_epoch always.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    cause: metadata_pb2.PartitionChangeCause
    summary: str
    # With `isr`: the directory id of each member's log, in ISR order.
    isr_directory_ids: tuple[str, ...] = ()
    # The partition's new recovering state; None: unchanged.
    recovering: bool | None = None

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
            record.isr_directory_ids.extend(self.isr_directory_ids)
        if self.recovering is not None:
            record.recovering = self.recovering
        return record


@dataclass(frozen=True, slots=True)
class LogEnd:
    """Where one replica's log ends, as its broker reported it (ReplicaLogEnd)."""

    last_leader_epoch: int
    log_end_offset: int

    def __repr__(self) -> str:
        return f"<LogEnd epoch={self.last_leader_epoch} end={self.log_end_offset}>"


def lost_disk(partition: PartitionState, broker_id: int, directories: Mapping[BrokerId, str]) -> bool:
    """True when ISR member `broker_id` is registered with another directory than its ISR entry recorded:
    its log is not the one the ISR vouched for (an empty or replaced disk)."""
    recorded = partition.recorded_directory(broker_id)
    current = directories.get(BrokerId(broker_id), "")
    return bool(recorded) and bool(current) and recorded != current


def elect(
    partition: PartitionState,
    live: AbstractSet[BrokerId],
    unclean_allowed: bool,
    directories: Mapping[BrokerId, str] | None = None,
    restarted_unclean: AbstractSet[BrokerId] = frozenset(),
) -> Election | None:
    """What must change in `partition` now that exactly `live` brokers are live (registered with the
    `directories` given; `restarted_unclean` are being unfenced after an unclean shutdown); None when
    nothing."""
    dirs: Mapping[BrokerId, str] = directories or {}
    old_leader, old_isr = partition.leader, partition.isr

    def vouched(b: BrokerId) -> bool:
        # The member's log is the one the ISR vouched for: not replaced, not cut by a crash.
        return not lost_disk(partition, b, dirs) and b not in restarted_unclean

    isr = tuple(b for b in old_isr if b in live and vouched(b))
    if not isr:
        isr = (old_leader,) if old_leader in old_isr else old_isr
    usable = set() if partition.recovering else {b for b in isr if b in live and vouched(b)}
    recovering = partition.recovering
    if old_leader != NO_LEADER and old_leader in usable:
        leader = old_leader
        cause = metadata_pb2.CAUSE_REPLICA_FENCED
    else:
        clean = [b for b in partition.replicas if b in usable]
        unclean = sorted((b for b in partition.replicas if b in live),
                         key=lambda b: lost_disk(partition, b, dirs))  # stable: replica order otherwise
        if clean:
            leader = clean[0]
            recovered = old_leader == NO_LEADER
            cause = metadata_pb2.CAUSE_LEADER_RECOVERED if recovered else metadata_pb2.CAUSE_LEADER_FENCED
        elif unclean_allowed and unclean:
            leader = unclean[0]
            isr = (leader,)
            cause = metadata_pb2.CAUSE_UNCLEAN_ELECTION
            recovering = False
        elif _sole_replica(partition) in restarted_unclean and _sole_replica(partition) in live:
            # One replica: its log is the only copy there is, so there is nothing to wait for.
            leader = partition.replicas[0]
            isr = (leader,)
            cause = metadata_pb2.CAUSE_RECOVERY_ELECTION
            recovering = False
        else:
            leader = NO_LEADER
            cause = metadata_pb2.CAUSE_LEADER_FENCED
            if any(b in restarted_unclean for b in isr):
                recovering = True
                if not partition.recovering:
                    cause = metadata_pb2.CAUSE_UNCLEAN_RESTART
    if leader == old_leader and isr == old_isr and recovering == partition.recovering:
        return None
    # Members that stay keep the directory recorded when they joined; an unclean leader joins now,
    # with the directory it is registered with.
    isr_dirs = tuple(
        partition.recorded_directory(b)
        if b in old_isr and cause != metadata_pb2.CAUSE_UNCLEAN_ELECTION
        else dirs.get(b, "")
        for b in isr
    )
    return Election(
        leader=leader if leader != old_leader else None,
        isr=isr if isr != old_isr else None,
        cause=cause,
        summary=_summary(partition, leader, isr, recovering),
        isr_directory_ids=isr_dirs if isr != old_isr else (),
        recovering=recovering if recovering != partition.recovering else None,
    )


def _sole_replica(partition: PartitionState) -> BrokerId:
    """The one replica of a partition with a single one (NO_LEADER otherwise)."""
    return partition.replicas[0] if len(partition.replicas) == 1 else NO_LEADER


def elect_recovering(
    partition: PartitionState,
    live: AbstractSet[BrokerId],
    log_ends: Mapping[BrokerId, LogEnd],
    directories: Mapping[BrokerId, str] | None = None,
) -> Election | None:
    """The recovery election of a recovering partition: None until every replica is live and in
    `log_ends` (reports for the partition's current epoch), then the most up-to-date log leads."""
    if not partition.recovering or not partition.offline:
        return None
    if any(b not in live or b not in log_ends for b in partition.replicas):
        return None
    order = {b: i for i, b in enumerate(partition.replicas)}
    leader = max(partition.replicas, key=lambda b: (log_ends[b].last_leader_epoch,
                                                    log_ends[b].log_end_offset, -order[b]))
    end = log_ends[leader]
    return Election(
        leader=leader,
        isr=(leader,) if partition.isr != (leader,) else None,
        cause=metadata_pb2.CAUSE_RECOVERY_ELECTION,
        summary=f"{_summary(partition, leader, (leader,), False)} (longest log: last leader epoch "
        f"{end.last_leader_epoch}, end offset {end.log_end_offset})",
        isr_directory_ids=((directories or {}).get(leader, ""),) if partition.isr != (leader,) else (),
        recovering=False,
    )


def offline_reason(partition: PartitionState, live: AbstractSet[BrokerId],
                   directories: Mapping[BrokerId, str]) -> str:
    """Why an offline partition has no leader, in one line for operators ("" when it has one)."""
    if not partition.offline:
        return ""
    if partition.recovering:
        down = [b for b in partition.replicas if b not in live]
        waiting = f" (down: {', '.join(map(str, down))})" if down else ""
        return (f"the last in-sync replica{'s' if len(partition.isr) > 1 else ''} "
                f"{', '.join(map(str, partition.isr))} came back after an unclean shutdown and may miss "
                "acknowledged records that were not fsynced; the longest log of all replicas will lead once "
                f"every replica has reported{waiting}"
                "; or allow unclean.leader.election.enable to elect a live replica now (may lose data)")
    lost = [b for b in partition.isr if b in live and lost_disk(partition, b, directories)]
    if lost:
        return (f"in-sync replica{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} came back "
                "with another data directory (empty or replaced disk: recorded "
                f"{', '.join(partition.recorded_directory(b) for b in lost)}) and cannot be elected; bring "
                "back the old disk, or allow unclean.leader.election.enable to elect another replica (may "
                "lose data)")
    return (f"no in-sync replica is live (isr {list(partition.isr)}); waiting for one to return, or allow "
            "unclean.leader.election.enable (may lose data)")


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
        summary=_summary(partition, preferred, partition.isr, partition.recovering),
    )


def _summary(partition: PartitionState, leader: BrokerId, isr: tuple[BrokerId, ...],
             recovering: bool) -> str:
    parts = []
    if leader != partition.leader:
        parts.append(f"leader {partition.leader} -> {leader}")
    if isr != partition.isr:
        parts.append(f"isr {list(partition.isr)} -> {list(isr)}")
    if recovering and not partition.recovering:
        parts.append("recovering: waiting for every replica's log end")
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
