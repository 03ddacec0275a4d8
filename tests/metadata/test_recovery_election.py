"""The last in-sync replica back from an unclean shutdown does not lead on its word: the partition
recovers from the longest log of all replicas (the data loss chaos seed 15 found, KIP-966's gap)."""

from __future__ import annotations

import pytest

from kanal.metadata import apply_batch, image_from_snapshot, image_to_snapshot, offline_reason
from kanal.metadata.decision import Stamp
from kanal.metadata.election import LogEnd, elect, elect_recovering
from kanal.metadata.ids import NO_LEADER, BrokerId
from kanal.metadata.image import PartitionState
from kanal.metadata.invariant import MetadataInvariantError
from kanal.metadata.recovery_election import ReportedLogEnd, recovery_election_records
from kanal.v1 import controller_pb2
from kanal.v1 import metadata_pb2 as m

from .conftest import Harness


def end(h: Harness, broker: int, last_epoch: int, end_offset: int, topic: str = "t",
        pid: int = 0) -> controller_pb2.ReplicaLogEnd:
    """What broker `broker`'s heartbeat reports for a recovering partition, at the epoch it sees."""
    t = h.image.topics[topic]
    return controller_pb2.ReplicaLogEnd(topic_id=t.topic_id, partition_id=pid,
                                        partition_epoch=t.partitions[pid].partition_epoch,
                                        last_leader_epoch=last_epoch, log_end_offset=end_offset)


def last_member_down(h: Harness) -> tuple[int, int, int]:
    """Topic t (1 partition, 3 replicas): the followers go first, then the leader, the last in-sync
    replica, so the partition is offline with ISR [leader]. The followers come back (not in sync)."""
    h.create_topic("t", 1, 3)
    p = h.image.topics["t"].partitions[0]
    leader, f1, f2 = p.leader, *[b for b in p.replicas if b != p.leader]
    h.fence(f1, f2)
    assert h.image.topics["t"].partitions[0].isr == (leader,)
    h.fence(leader)
    p = h.image.topics["t"].partitions[0]
    assert (p.leader, p.isr) == (NO_LEADER, (leader,))
    for b in (f1, f2):
        h.register(b)
        assert not h.heartbeat(b).fenced
    assert h.image.topics["t"].partitions[0].leader == NO_LEADER  # not in sync: they cannot lead
    return leader, f1, f2


def test_clean_restart_of_the_last_in_sync_replica_leads_again(cluster3: Harness) -> None:
    h = cluster3
    leader, _, _ = last_member_down(h)
    h.register(leader, unclean_shutdown=False)
    h.heartbeat(leader)
    p = h.image.topics["t"].partitions[0]
    assert (p.leader, p.recovering) == (leader, False)


def test_unclean_restart_waits_for_every_log_end_and_the_longest_log_leads(cluster3: Harness) -> None:
    h = cluster3
    leader, f1, f2 = last_member_down(h)
    # The leader lost its power: its log is empty now; f1 holds the 780 acknowledged records.
    h.register(leader, unclean_shutdown=True)
    h.heartbeat(leader)
    p = h.image.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.recovering) == (NO_LEADER, (leader,), True)
    assert not h.image.brokers[leader].unclean_shutdown  # acted on: the mark lasts until the first unfence
    assert "unclean shutdown" in offline_reason(p, set(h.image.live_brokers()), {})
    epoch_before = p.leader_epoch
    # Reports trickle in; nobody is elected until all three replicas have reported.
    h.heartbeat(leader, log_ends=[end(h, leader, -1, 0)])
    h.heartbeat(f2, log_ends=[end(h, f2, 0, 300)])
    assert h.image.topics["t"].partitions[0].leader == NO_LEADER
    h.heartbeat(f1, log_ends=[end(h, f1, 0, 780)])
    p = h.image.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.recovering) == (f1, (f1,), False)
    assert p.leader_epoch == epoch_before + 1
    assert p.recorded_directory(f1) == f"dir-{f1}"


def test_recovery_waits_for_a_replica_that_is_down(cluster3: Harness) -> None:
    h = cluster3
    leader, f1, f2 = last_member_down(h)
    h.fence(f2)
    h.register(leader, unclean_shutdown=True)
    h.heartbeat(leader, log_ends=[])
    h.heartbeat(leader, log_ends=[end(h, leader, 2, 10)])
    h.heartbeat(f1, log_ends=[end(h, f1, 1, 900)])
    p = h.image.topics["t"].partitions[0]
    assert p.leader == NO_LEADER and p.recovering
    assert f"(down: {f2})" in offline_reason(p, set(h.image.live_brokers()), {})
    h.register(f2)
    h.heartbeat(f2)
    h.heartbeat(f2, log_ends=[end(h, f2, 1, 950)])
    # The highest last leader epoch wins over a longer log of an older epoch.
    assert h.image.topics["t"].partitions[0].leader == leader


def test_stale_reports_do_not_count(cluster3: Harness) -> None:
    h = cluster3
    leader, f1, f2 = last_member_down(h)
    h.register(leader, unclean_shutdown=True)
    h.heartbeat(leader)
    stale = end(h, f1, 5, 10_000)
    stale.partition_epoch -= 1  # made from an older image: the log may have moved since
    h.heartbeat(f1, log_ends=[stale])
    h.heartbeat(f2, log_ends=[end(h, f2, 0, 5)])
    h.heartbeat(leader, log_ends=[end(h, leader, 0, 7)])
    assert h.image.topics["t"].partitions[0].leader == NO_LEADER  # f1's report is stale
    # A report of f1's previous process does not count for the one that replaced it.
    old_epoch = h.image.brokers[f1].broker_epoch
    h.fence(f1)
    h.register(f1)
    h.heartbeat(f1)
    h.heartbeat(f2, log_ends=[end(h, f2, 0, 5)])
    assert h.image.topics["t"].partitions[0].leader == NO_LEADER
    t = h.image.topics["t"]
    kept = {BrokerId(b): ReportedLogEnd(h.image.brokers[b].broker_epoch, t.partitions[0].partition_epoch,
                                        LogEnd(0, 5)) for b in (leader, f2)}
    kept[BrokerId(f1)] = ReportedLogEnd(old_epoch, t.partitions[0].partition_epoch, LogEnd(0, 9))
    stamp = Stamp(h.now_ms, "test", "r")
    assert recovery_election_records(h.image, {(t.topic_id, 0): kept}, [(t.topic_id, 0)], stamp) == []
    h.heartbeat(f1, log_ends=[end(h, f1, 0, 6)])
    assert h.image.topics["t"].partitions[0].leader == leader  # 7 > 6 > 5


def test_a_member_back_from_an_unclean_shutdown_leaves_the_isr_when_another_can_stay() -> None:
    b1, b2, b3 = BrokerId(1), BrokerId(2), BrokerId(3)
    p = PartitionState(0, (b1, b2, b3), (b1, b2), NO_LEADER, 4, 9)
    election = elect(p, {BrokerId(1), BrokerId(2), BrokerId(3)}, False, {}, frozenset({BrokerId(1)}))
    assert election is not None
    assert (election.leader, election.isr, election.recovering) == (2, (2,), None)


def test_unclean_election_ends_recovery() -> None:
    p = PartitionState(0, (BrokerId(1), BrokerId(2)), (BrokerId(1),), NO_LEADER, 4, 9, recovering=True)
    assert elect(p, {BrokerId(1), BrokerId(2)}, False, {}) is None
    election = elect(p, {BrokerId(2)}, True, {})
    assert election is not None
    assert (election.leader, election.cause, election.recovering) == (2, m.CAUSE_UNCLEAN_ELECTION, False)


def test_equal_logs_go_to_the_earlier_replica() -> None:
    p = PartitionState(0, (BrokerId(3), BrokerId(1)), (BrokerId(1),), NO_LEADER, 4, 9, recovering=True)
    same = LogEnd(4, 100)
    election = elect_recovering(p, {BrokerId(1), BrokerId(3)}, {BrokerId(1): same, BrokerId(3): same})
    assert election is not None and election.leader == 3


def test_snapshots_keep_the_recovering_state(cluster3: Harness) -> None:
    h = cluster3
    leader, _, _ = last_member_down(h)
    h.register(leader, unclean_shutdown=True)
    copy = image_from_snapshot(image_to_snapshot(h.image))
    assert copy.brokers[leader].unclean_shutdown  # registered, not yet unfenced
    h.heartbeat(leader)
    copy = image_from_snapshot(image_to_snapshot(h.image))
    assert copy.topics["t"].partitions[0].recovering and not copy.brokers[leader].unclean_shutdown


def test_a_partition_with_a_leader_cannot_be_recovering(cluster3: Harness) -> None:
    h = cluster3
    t = h.create_topic("t", 1, 3)
    record = m.PartitionChangeRecord(topic_id=t.topic_id, partition_id=0, cause=m.CAUSE_UNCLEAN_RESTART,
                                     recovering=True)
    batch = m.MetadataBatch(controller_epoch=h.controller_epoch,
                            records=[m.MetadataRecord(partition_change=record)])
    with pytest.raises(MetadataInvariantError, match="only offline ones recover"):
        apply_batch(h.image, batch, h.image.next_offset)
    p = h.image.topics["t"].partitions[0]
    assert p.leader != NO_LEADER and not p.recovering


def test_a_single_replica_back_from_an_unclean_shutdown_leads_at_once(cluster3: Harness) -> None:
    """Nothing to compare with one replica: no wait for reports (a replication factor 1 topic is back as
    soon as its broker is)."""
    h = cluster3
    h.create_topic("solo", 1, 1)
    only = h.image.topics["solo"].partitions[0].leader
    h.fence(only)
    assert h.image.topics["solo"].partitions[0].leader == NO_LEADER
    h.register(only, unclean_shutdown=True)
    h.heartbeat(only)
    p = h.image.topics["solo"].partitions[0]
    assert (p.leader, p.isr, p.recovering) == (only, (only,), False)
