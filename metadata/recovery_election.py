"""Recovery elections: the log ends brokers report for recovering partitions, and the elections they allow.

A partition is *recovering* when its last in-sync replica came back after an unclean shutdown
(election.py): no replica is known to hold every acknowledged record, so the controller asks them all.
Brokers report, with each heartbeat, where their log of every recovering partition they are a replica
of ends (BrokerHeartbeatRequest.recovery_log_ends). The reports never go through Raft: the active
controller keeps the latest set from each broker in memory (raft/broker_sessions.py), as it keeps
heartbeat times, and a new active controller simply collects them again.

A report counts only while it describes the broker's current registration (broker epoch) and the
partition as it is now (partition epoch): a log that followed a leader since, or a process that
restarted, may end elsewhere. While a partition has no leader its replicas' logs do not move, so a
report for its current epoch stays true until the partition changes.

Pure: the shell passes the reports and the image.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kanal.metadata.decision import Stamp
from kanal.metadata.election import LogEnd, elect_recovering
from kanal.metadata.fencing import registered_directories
from kanal.metadata.ids import BrokerId, TopicId
from kanal.metadata.image import MetadataImage
from kanal.v1 import controller_pb2, metadata_pb2

PartitionKey = tuple[str, int]  # (topic id, partition index)


@dataclass(frozen=True, slots=True)
class ReportedLogEnd:
    """One broker's report for one partition, with the epochs it was made at."""

    broker_epoch: int
    partition_epoch: int
    end: LogEnd


LogEndReports = Mapping[PartitionKey, Mapping[BrokerId, ReportedLogEnd]]


def merge_reports(known: LogEndReports, broker_id: int, broker_epoch: int,
                  reports: Iterable[controller_pb2.ReplicaLogEnd],
                  ) -> dict[PartitionKey, dict[BrokerId, ReportedLogEnd]]:
    """`known` with broker `broker_id`'s reports replaced by `reports` (its latest heartbeat's): a
    partition it no longer reports on is one that stopped recovering, or that it no longer hosts."""
    b = BrokerId(broker_id)
    merged = {key: {other: r for other, r in by_broker.items() if other != b}
              for key, by_broker in known.items()}
    for report in reports:
        key = (report.topic_id, report.partition_id)
        merged.setdefault(key, {})[b] = ReportedLogEnd(
            broker_epoch, report.partition_epoch, LogEnd(report.last_leader_epoch, report.log_end_offset)
        )
    return {key: by_broker for key, by_broker in merged.items() if by_broker}


def recovery_election_records(image: MetadataImage, reports: LogEndReports, keys: Iterable[PartitionKey],
                              stamp: Stamp) -> list[metadata_pb2.MetadataRecord]:
    """The recovery elections the reports allow now, for the partitions in `keys`."""
    live = set(image.live_brokers())
    directories = registered_directories(image)
    records = []
    for topic_id, partition_id in sorted(set(keys)):
        topic = image.topics_by_id.get(TopicId(topic_id))
        if topic is None or not 0 <= partition_id < len(topic.partitions):
            continue  # deleted meanwhile
        partition = topic.partitions[partition_id]
        current = {}
        for broker_id, reported in reports.get((topic_id, partition_id), {}).items():
            reg = image.brokers.get(broker_id)
            if reg is not None and reg.broker_epoch == reported.broker_epoch \
                    and reported.partition_epoch == partition.partition_epoch:
                current[broker_id] = reported.end
        election = elect_recovering(partition, live, current, directories)
        if election is not None:
            records.append(stamp.record(partition_change=election.to_record(
                topic.topic_id, partition.partition_id, "every replica reported its log end")))
    return records
