"""A cluster's data directory built with the real storage code, for the committed-read tests: three
controllers' metadata logs (kanal.metadata records, applied with apply_batch to prove they fit) and three
brokers' partition logs, written the way a leader appends and a follower replicates (Log.append on the
leader, Log.append_replicated of the leader's Log.read bytes on a follower), each with its
meta.properties and partition.metadata.

The history (`failover_cluster`):

- topic `orders` (1 partition, replicas [0, 1, 2]): broker 0 leads in epoch 0; 100 records are
  replicated to brokers 1 and 2 (committed). Brokers 1 and 2 stop fetching; broker 0 takes 500 acks=1
  records it never replicates, then dies. The controller fences it: broker 1 leads in epoch 1 with ISR
  [1, 2], and takes 100 acks=all records, replicated to broker 2. Broker 0's copy is the longest (600)
  and diverges at offset 100.
- topic `events` (id E1, 1 partition on broker 0 only) is deleted while broker 0 is down and re-created
  (id E2, on brokers 1 and 2): broker 0 still holds the old incarnation's directory.
- then `orders` grows from 1 to 2 partitions, and the internal topic `__consumer_offsets` is created
  (metadata only: no partition data is written for either).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.meta_properties import load_or_create
from kanal.broker.storage.partition_metadata import write_topic_id
from kanal.metadata import MetadataImage, apply_batch
from kanal.metadata.log_codec import encode_metadata_batch
from kanal.v1 import metadata_pb2 as m
from kanal.v1.batch import NewRecord, build_batch

T0 = 1_700_000_000_000
SEGMENTS = LogConfig(segment_bytes_max=2048, batch_bytes_max=1024, timestamp_difference_ms_max=None)
METADATA_SEGMENTS = LogConfig(segment_bytes_max=2048, batch_bytes_max=1024, retention_ms=None)
ORDERS_ID = "00000000-0000-4000-8000-00000000000a"
EVENTS_OLD_ID = "00000000-0000-4000-8000-0000000000e1"
EVENTS_NEW_ID = "00000000-0000-4000-8000-0000000000e2"
OFFSETS_ID = "00000000-0000-4000-8000-0000000000c0"
RECORDS_PER_BATCH = 10


@dataclass(frozen=True)
class Failover:
    root: Path
    committed: dict[int, bytes]  # orders-0: offset -> value of every committed record
    events: dict[int, bytes]  # events-0 (the current incarnation): offset -> value
    divergent_from: int  # the offset broker 0's copy parts at


def _stamp(i: int) -> dict:
    return {"time_ms": T0 + i * 1000, "principal": "User:ops", "request_id": f"r{i}"}


def metadata_batches() -> list[m.MetadataBatch]:
    """The cluster's metadata history as batches (controller epoch 1)."""
    batches = []
    for b in range(3):
        batches.append([m.MetadataRecord(register_broker=m.RegisterBrokerRecord(
            broker_id=b, incarnation_id=f"inc-{b}", broker_epoch=b + 1, endpoint=f"127.0.0.1:{9000 + b}",
            fenced=False), **_stamp(len(batches)))])
    batches.append([
        m.MetadataRecord(topic=m.TopicRecord(name="orders", topic_id=ORDERS_ID), **_stamp(len(batches))),
        m.MetadataRecord(partition=m.PartitionRecord(topic_id=ORDERS_ID, partition_id=0, replicas=[0, 1, 2],
                                                     isr=[0, 1, 2], leader=0), **_stamp(len(batches)))])
    batches.append([
        m.MetadataRecord(topic=m.TopicRecord(name="events", topic_id=EVENTS_OLD_ID), **_stamp(len(batches))),
        m.MetadataRecord(partition=m.PartitionRecord(topic_id=EVENTS_OLD_ID, partition_id=0, replicas=[0],
                                                     isr=[0], leader=0), **_stamp(len(batches)))])
    batches.append(
        [
            m.MetadataRecord(
                broker_registration_change=m.BrokerRegistrationChangeRecord(
                    broker_id=0, broker_epoch=1, fenced=True, reason="session timed out"
                ),
                **_stamp(len(batches)),
            ),
            m.MetadataRecord(
                partition_change=m.PartitionChangeRecord(
                    topic_id=ORDERS_ID,
                    partition_id=0,
                    leader=1,
                    isr=m.ReplicaList(broker_ids=[1, 2]),
                    cause=m.CAUSE_LEADER_FENCED,
                ),
                **_stamp(len(batches)),
            ),
            m.MetadataRecord(
                partition_change=m.PartitionChangeRecord(
                    topic_id=EVENTS_OLD_ID, partition_id=0, leader=-1, cause=m.CAUSE_LEADER_FENCED
                ),
                **_stamp(len(batches)),
            ),
        ]
    )
    batches.append(
        [m.MetadataRecord(remove_topic=m.RemoveTopicRecord(topic_id=EVENTS_OLD_ID), **_stamp(len(batches)))]
    )
    batches.append([
        m.MetadataRecord(topic=m.TopicRecord(name="events", topic_id=EVENTS_NEW_ID), **_stamp(len(batches))),
        m.MetadataRecord(partition=m.PartitionRecord(topic_id=EVENTS_NEW_ID, partition_id=0, replicas=[1, 2],
                                                     isr=[1, 2], leader=1), **_stamp(len(batches)))])
    batches.append([m.MetadataRecord(partition=m.PartitionRecord(  # a partition increase: 1 -> 2
        topic_id=ORDERS_ID, partition_id=1, replicas=[1, 2], isr=[1, 2], leader=1), **_stamp(len(batches)))])
    batches.append(
        [
            m.MetadataRecord(
                topic=m.TopicRecord(name="__consumer_offsets", topic_id=OFFSETS_ID), **_stamp(len(batches))
            ),
            m.MetadataRecord(
                partition=m.PartitionRecord(
                    topic_id=OFFSETS_ID, partition_id=0, replicas=[1], isr=[1], leader=1
                ),
                **_stamp(len(batches)),
            ),
        ]
    )
    out = [m.MetadataBatch(controller_epoch=1, records=records) for records in batches]
    image = MetadataImage()
    offset = 0
    for batch in out:  # the history must be one the controllers could have written
        if not apply_batch(image, batch, offset):
            raise ValueError("a test batch was fenced")
        offset += len(batch.records)
    if image.topics["orders"].partitions[0].leader_epoch != 1:
        raise ValueError(f"unexpected history: {image.topics['orders'].partitions[0]}")
    return out


def write_metadata_log(directory: Path, batches: list[m.MetadataBatch]) -> Path:
    log = Log.open(directory, METADATA_SEGMENTS)
    for batch in batches:
        log.append(encode_metadata_batch(batch), leader_epoch=batch.controller_epoch, now_ms=T0)
    log.close()
    return directory


def _node(root: Path, name: str, node_id: int) -> Path:
    directory = root / name
    load_or_create(directory, node_id)
    return directory


def _partition(node: Path, name: str, topic_id: str) -> Log:
    directory = node / name
    write_topic_id(directory, topic_id)
    return Log.open(directory, SEGMENTS)


def _records(tag: str, first: int, count: int) -> list[list[NewRecord]]:
    return [[NewRecord(value=f"{tag}-{first + b * RECORDS_PER_BATCH + i}".encode(), key=f"k{i}".encode(),
                       timestamp_ms=T0 + first + b * RECORDS_PER_BATCH + i)
             for i in range(RECORDS_PER_BATCH)] for b in range(count // RECORDS_PER_BATCH)]


def _lead(log: Log, batches: list[list[NewRecord]], epoch: int) -> dict[int, bytes]:
    written = {}
    for records in batches:
        info = log.append(build_batch(records), leader_epoch=epoch, now_ms=records[-1].timestamp_ms)
        written.update((info.base_offset + i, r.value) for i, r in enumerate(records))
    return written


def _follow(follower: Log, leader: Log, upto: int) -> None:
    while follower.log_end_offset < upto:
        data = leader.read(follower.log_end_offset, 1 << 20, offset_limit=upto).data
        follower.append_replicated(data, now_ms=T0)


def failover_cluster(root: Path) -> Failover:
    for c in range(3):
        write_metadata_log(
            _node(root, f"controller-{c}", 100 + c) / "__cluster_metadata-0", metadata_batches()
        )
    nodes = [_node(root, f"broker-{b}", b) for b in range(3)]
    orders = [_partition(n, "orders-0", ORDERS_ID) for n in nodes]
    committed = _lead(orders[0], _records("before", 0, 100), epoch=0)
    for follower in orders[1:]:
        _follow(follower, orders[0], 100)
    _lead(orders[0], _records("unreplicated", 100, 500), epoch=0)  # acks=1, never replicated
    committed |= _lead(orders[1], _records("after", 100, 100), epoch=1)
    _follow(orders[2], orders[1], 200)
    old_events = _partition(nodes[0], "events-0", EVENTS_OLD_ID)
    _lead(old_events, _records("old-events", 0, 300), epoch=0)
    new_events = [_partition(n, "events-0", EVENTS_NEW_ID) for n in nodes[1:]]
    events = _lead(new_events[0], _records("new-events", 0, 50), epoch=0)
    _follow(new_events[1], new_events[0], 50)
    for log in [*orders, old_events, *new_events]:
        log.close()
    return Failover(root, committed, events, 100)
