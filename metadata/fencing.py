"""Fencing and unfencing brokers: the records that change a broker's state and move leadership with it.

Shared by the decisions that fence (session timeout, controlled shutdown, a new incarnation replacing an
old one) and unfence (a broker caught up with the log). The registration change comes first in the
records, so that when the partition changes are applied the image already treats the broker as fenced
(or live); all partitions are re-evaluated against the final set of live brokers, so fencing several
brokers at once writes one change per partition (see election.py for the rules).
"""

from __future__ import annotations

from collections.abc import Collection

from kanal.metadata.config_resource import unclean_election_enabled
from kanal.metadata.decision import Stamp
from kanal.metadata.election import elect
from kanal.metadata.ids import NO_LEADER, BrokerId
from kanal.metadata.image import CLUSTER_DEFAULT_BROKER, MetadataImage, PartitionState, TopicImage
from kanal.v1 import metadata_pb2


def fence_records(
    image: MetadataImage, broker_ids: Collection[BrokerId], stamp: Stamp, reason: str, *,
    controlled_shutdown: bool = False,
) -> list[metadata_pb2.MetadataRecord]:
    """Fence every listed broker that is registered and live, and re-elect the partitions it held.

    Brokers already fenced or not registered are left out; the result is empty when none is left.
    `controlled_shutdown`: the brokers asked to shut down, and stay fenced until they register again.
    """
    to_fence = sorted(b for b in set(broker_ids) if image.is_live(b))
    if not to_fence:
        return []
    records = [
        stamp.record(
            broker_registration_change=metadata_pb2.BrokerRegistrationChangeRecord(
                broker_id=b,
                broker_epoch=image.brokers[b].broker_epoch,
                fenced=True,
                reason=reason,
                in_controlled_shutdown=controlled_shutdown,
            )
        )
        for b in to_fence
    ]
    fenced = set(to_fence)
    live = set(image.live_brokers()) - fenced
    directories = registered_directories(image)
    context = f"broker{'s' if len(to_fence) > 1 else ''} {', '.join(map(str, to_fence))} fenced ({reason})"
    cluster_defaults = image.broker_configs.get(CLUSTER_DEFAULT_BROKER, {})
    for topic in image.topics.values():
        unclean = unclean_election_enabled(topic.configs, cluster_defaults)
        for partition in topic.partitions:
            if fenced.isdisjoint(partition.replicas):
                continue
            _append_election(records, topic, partition, live, unclean, stamp, context, directories)
    return records


def unfence_records(
    image: MetadataImage, broker_id: BrokerId, stamp: Stamp, reason: str
) -> list[metadata_pb2.MetadataRecord]:
    """Unfence a registered, fenced broker and give offline partitions it can lead a leader again.

    Partitions that have a leader are left alone: the broker rejoins their ISR through the leader's
    AlterPartition once it has caught up with the leader's log. A broker back from an unclean shutdown
    (its registration says so) is not trusted to hold what its ISR entries vouch for: partitions it is
    the last in-sync replica of start recovering instead of taking it as leader (election.py).
    """
    reg = image.brokers.get(broker_id)
    if reg is None or not reg.fenced:
        return []
    records = [
        stamp.record(
            broker_registration_change=metadata_pb2.BrokerRegistrationChangeRecord(
                broker_id=broker_id,
                broker_epoch=reg.broker_epoch,
                fenced=False,
                reason=reason,
            )
        )
    ]
    live = set(image.live_brokers()) | {broker_id}
    directories = registered_directories(image)
    restarted_unclean = frozenset({broker_id}) if reg.unclean_shutdown else frozenset()
    after = ", after an unclean shutdown" if restarted_unclean else ""
    context = f"broker {broker_id} unfenced ({reason}{after})"
    cluster_defaults = image.broker_configs.get(CLUSTER_DEFAULT_BROKER, {})
    for topic in image.topics.values():
        unclean = None
        for partition in topic.partitions:
            if partition.leader != NO_LEADER or broker_id not in partition.replicas:
                continue
            if unclean is None:
                unclean = unclean_election_enabled(topic.configs, cluster_defaults)
            _append_election(records, topic, partition, live, unclean, stamp, context, directories,
                             restarted_unclean)
    return records


def offline_election_records(
    image: MetadataImage, topic_names: Collection[str], stamp: Stamp, context: str, *, unclean: bool
) -> list[metadata_pb2.MetadataRecord]:
    """Elections for the offline partitions of the named topics (after unclean election was switched on)."""
    live = set(image.live_brokers())
    directories = registered_directories(image)
    records: list[metadata_pb2.MetadataRecord] = []
    for name in sorted(topic_names):
        topic = image.topics[name]
        for partition in topic.partitions:
            if partition.leader != NO_LEADER:
                continue
            _append_election(records, topic, partition, live, unclean, stamp, context, directories)
    return records


def registered_directories(image: MetadataImage) -> dict[BrokerId, str]:
    """Each registered broker's current directory id (what elect compares ISR entries with)."""
    return {b: reg.directory_id for b, reg in image.brokers.items()}


def _append_election(records: list[metadata_pb2.MetadataRecord], topic: TopicImage, partition: PartitionState,
                     live: set[BrokerId], unclean: bool, stamp: Stamp, context: str,
                     directories: dict[BrokerId, str],
                     restarted_unclean: frozenset[BrokerId] = frozenset()) -> None:
    """Elect a leader for `partition` among `live` and, when that changes anything, add the stamped
    PartitionChange record (the one step fencing, unfencing and unclean-election switches share)."""
    election = elect(partition, live, unclean, directories, restarted_unclean)
    if election is not None:
        records.append(
            stamp.record(partition_change=election.to_record(topic.topic_id, partition.partition_id, context))
        )
