"""Topic decisions: CreateTopics, DeleteTopics, CreatePartitions.

Each topic (or target) in a request succeeds or fails on its own; a failed one gets an error in its
result and contributes no records. Rules:

- Names: errors.proto INVALID_TOPIC rules (topic_name.py); "__cluster_metadata" is reserved; a name equal
  to an existing (or earlier in the request) one up to '.' vs '_' collides (INVALID_TOPIC), as in Kafka.
- A name that exists, or appears earlier in the same request, is TOPIC_ALREADY_EXISTS.
- Partitions: 1 .. TOPIC_PARTITIONS_MAX per topic (INVALID_PARTITIONS). CreatePartitions only grows a
  topic: the new count must be larger than today's.
- Replication factor: 1 .. the number of live (unfenced) brokers (INVALID_REPLICATION_FACTOR). New
  partitions of an existing topic keep its replication factor, which must still fit the live brokers.
- Configs: known keys with legal values (topic_config.py), each key at most once, and with the cluster
  and broker defaults the rules between keys (topic_config_rules.py: remote.storage.enable not with a
  compacting cleanup.policy nor on an internal topic, local.retention.* within retention.*) (INVALID_CONFIG).
  An internal topic created while a default sets remote.storage.enable gets remote.storage.enable=false
  of its own, so a default of true never keeps the coordinators from creating their topics.
- Internal topics (__consumer_offsets) cannot be deleted (POLICY_VIOLATION).
- New partitions start with ISR = replicas, leader = the first replica, epochs 0; placement.py chooses
  the replicas. Topic ids are random UUIDs drawn from the `rng` argument.
- validate_only runs every check and writes nothing (results carry no topic id).

Cost: a decision reads the image's indexes (per-broker replica and preferred-leader counts, collision
keys; image.py) instead of scanning it, so creating a topic costs O(its partitions x replication factor
x live brokers) however many topics exist. Growing a topic also reads that topic's partitions.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.ids import BrokerId, TopicId
from kanal.metadata.image import MetadataImage, TopicImage
from kanal.metadata.placement import count_load, place_replicas_by_load
from kanal.metadata.topic_config import parse_topic_config
from kanal.metadata.topic_config_rules import REMOTE_STORAGE_ENABLE, check_topic_change
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import INTERNAL_TOPICS, check_topic_name, collision_key

# Partitions per topic. A topic is created in one batch (one Raft entry), so this also bounds the size
# of that entry: about 70 bytes per PartitionRecord with its stamp, so 10,000 partitions are ~0.7 MB.
TOPIC_PARTITIONS_MAX = 10_000


class _Planner:
    """What the decisions of one request have claimed so far: names, ids, and replicas placed.

    Only this request's claims are held here; the image's are read from its indexes, so a planner
    costs nothing per existing topic."""

    def __init__(self, image: MetadataImage, rng: random.Random) -> None:
        self.image = image
        self.rng = rng
        self.live = {b: reg.rack for b, reg in image.live_brokers().items()}
        self.names: set[str] = set()
        # Collision key -> name, for the topics this request creates.
        self.new_collisions: dict[str, str] = {}
        self.new_topic_ids: set[str] = set()
        # Preferred leads and replicas of the partitions this request has placed.
        self.placed_leads: Counter[BrokerId] = Counter()
        self.placed_holds: Counter[BrokerId] = Counter()

    def collision(self, name: str) -> str | None:
        """A topic, existing or claimed earlier in this request, whose name collides with `name`."""
        key = collision_key(name)
        claimed = self.new_collisions.get(key)
        if claimed is not None:
            return claimed
        existing = self.image.collision_names.get(key)
        return existing[0] if existing else None

    def claim(self, name: str) -> None:
        self.new_collisions[collision_key(name)] = name

    def place(
        self, partition_count: int, replication_factor: int, grown: TopicImage | None = None
    ) -> list[tuple[BrokerId, ...]]:
        """Place new partitions (of a new topic, or of `grown`) given the cluster's load and this
        request's placements so far; the result counts as placed."""
        topic_leads: Counter[BrokerId] = Counter()
        topic_holds: Counter[BrokerId] = Counter()
        if grown is not None:
            topic_leads, topic_holds = count_load(p.replicas for p in grown.partitions)
        # The rest of the cluster: the image's counts plus this request's placements, minus the grown
        # topic's own partitions (they weigh as the topic's). Only live brokers are ever placed on.
        leads, holds = self.image.preferred_leader_counts, self.image.replica_counts
        cluster_leads = {b: leads.get(b, 0) + self.placed_leads[b] - topic_leads[b] for b in self.live}
        cluster_holds = {b: holds.get(b, 0) + self.placed_holds[b] - topic_holds[b] for b in self.live}
        placements = place_replicas_by_load(
            self.live,
            partition_count,
            replication_factor,
            self.rng,
            topic_leads=topic_leads,
            topic_holds=topic_holds,
            cluster_leads=cluster_leads,
            cluster_holds=cluster_holds,
        )
        new_leads, new_holds = count_load(placements)
        self.placed_leads.update(new_leads)
        self.placed_holds.update(new_holds)
        return placements

    def check_replication_factor(self, replication_factor: int) -> None:
        if not 1 <= replication_factor <= len(self.live):
            raise KanalError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} is outside 1..{len(self.live)} "
                f"(the number of live brokers)",
            )

    def new_topic_id(self) -> TopicId:
        while True:
            topic_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
            if topic_id not in self.image.topics_by_id and topic_id not in self.new_topic_ids:
                self.new_topic_ids.add(topic_id)
                return TopicId(topic_id)


def decide_create_topics(
    image: MetadataImage,
    request: admin_pb2.CreateTopicsRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
    rng: random.Random,
) -> Decision[admin_pb2.CreateTopicsResponse]:
    """Create topics: per topic a TopicRecord, its ConfigRecords and one PartitionRecord per partition."""
    stamp = Stamp(now_ms, principal, request_id)
    planner = _Planner(image, rng)
    records: list[metadata_pb2.MetadataRecord] = []
    results = []
    for creatable in request.topics:
        try:
            configs = _check_creatable(planner, creatable)
        except KanalError as exc:
            results.append(
                admin_pb2.CreateTopicResult(name=creatable.name, error=exc.code, error_message=exc.message)
            )
            planner.names.add(creatable.name)
            continue
        planner.names.add(creatable.name)
        planner.claim(creatable.name)
        if request.validate_only:
            results.append(admin_pb2.CreateTopicResult(name=creatable.name))
            continue
        topic_id = planner.new_topic_id()
        records.append(stamp.record(topic=metadata_pb2.TopicRecord(name=creatable.name, topic_id=topic_id)))
        for key in sorted(configs):
            records.append(
                stamp.record(
                    config=metadata_pb2.ConfigRecord(
                        resource_type=metadata_pb2.CONFIG_RESOURCE_TOPIC,
                        resource_name=creatable.name,
                        key=key,
                        value=configs[key],
                    )
                )
            )
        placements = planner.place(creatable.partitions, creatable.replication_factor)
        records.extend(_partition_records(image, stamp, topic_id, 0, placements))
        results.append(admin_pb2.CreateTopicResult(name=creatable.name, topic_id=topic_id))
    return Decision(records, admin_pb2.CreateTopicsResponse(results=results))


def _check_creatable(planner: _Planner, creatable: admin_pb2.CreatableTopic) -> dict[str, str]:
    name = creatable.name
    check_topic_name(name)
    if name in planner.names:
        raise KanalError(
            ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} is named more than once in this request"
        )
    if name in planner.image.topics:
        raise KanalError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    other = planner.collision(name)
    if other is not None:
        raise KanalError(
            ErrorCode.INVALID_TOPIC,
            f"topic {name!r} collides with {other!r} ('.' and '_' are not told apart)",
        )
    _check_partition_count(creatable.partitions)
    planner.check_replication_factor(creatable.replication_factor)
    configs: dict[str, str] = {}
    for entry in creatable.configs:
        if entry.key in configs:
            raise KanalError(ErrorCode.INVALID_CONFIG, f"config {entry.key!r} is given more than once")
        parse_topic_config(entry.key, entry.value)
        configs[entry.key] = entry.value
    defaults = planner.image.broker_configs
    # A default would reach an internal topic: pin it off, or a cluster with remote.storage.enable=true as
    # its default could never create the coordinators' topics (internal topics are never tiered).
    reached = any(REMOTE_STORAGE_ENABLE in texts for texts in defaults.values())
    if name in INTERNAL_TOPICS and REMOTE_STORAGE_ENABLE not in configs and reached:
        configs[REMOTE_STORAGE_ENABLE] = "false"
    check_topic_change(name, None, configs, defaults)
    return configs


def _check_partition_count(count: int) -> None:
    if not 1 <= count <= TOPIC_PARTITIONS_MAX:
        raise KanalError(
            ErrorCode.INVALID_PARTITIONS, f"partition count {count} is outside 1..{TOPIC_PARTITIONS_MAX}"
        )


def _partition_records(
    image: MetadataImage,
    stamp: Stamp,
    topic_id: str,
    first_partition: int,
    placements: list[tuple[BrokerId, ...]],
) -> list[metadata_pb2.MetadataRecord]:
    # Placement picks live brokers only, so every replica is registered; its log starts on the disk it
    # registered with, which is what the ISR records (see election.py).
    return [
        stamp.record(
            partition=metadata_pb2.PartitionRecord(
                topic_id=topic_id,
                partition_id=first_partition + i,
                replicas=replicas,
                isr=replicas,
                leader=replicas[0],
                leader_epoch=0,
                partition_epoch=0,
                isr_directory_ids=[image.brokers[b].directory_id for b in replicas],
            )
        )
        for i, replicas in enumerate(placements)
    ]


def decide_delete_topics(
    image: MetadataImage,
    request: admin_pb2.DeleteTopicsRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[admin_pb2.DeleteTopicsResponse]:
    """Delete topics by name: one RemoveTopicRecord each (partitions and configs go with it)."""
    stamp = Stamp(now_ms, principal, request_id)
    records = []
    results = []
    seen: set[str] = set()
    for name in request.names:
        try:
            if name in seen:
                raise KanalError(
                    ErrorCode.INVALID_REQUEST, f"topic {name!r} is named more than once in this request"
                )
            seen.add(name)
            topic = image.topics.get(name)
            if topic is None:
                raise KanalError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
            if name in INTERNAL_TOPICS:
                raise KanalError(
                    ErrorCode.POLICY_VIOLATION, f"{name!r} is an internal topic and cannot be deleted"
                )
        except KanalError as exc:
            results.append(admin_pb2.TopicResult(name=name, error=exc.code, error_message=exc.message))
            continue
        records.append(stamp.record(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=topic.topic_id)))
        results.append(admin_pb2.TopicResult(name=name))
    return Decision(records, admin_pb2.DeleteTopicsResponse(results=results))


def decide_create_partitions(
    image: MetadataImage,
    request: admin_pb2.CreatePartitionsRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
    rng: random.Random,
) -> Decision[admin_pb2.CreatePartitionsResponse]:
    """Grow topics to a new total partition count; new partitions keep the topic's replication factor."""
    stamp = Stamp(now_ms, principal, request_id)
    planner = _Planner(image, rng)
    records: list[metadata_pb2.MetadataRecord] = []
    results = []
    for target in request.targets:
        try:
            if target.name in planner.names:
                raise KanalError(
                    ErrorCode.INVALID_REQUEST,
                    f"topic {target.name!r} is named more than once in this request",
                )
            planner.names.add(target.name)
            topic = image.topics.get(target.name)
            if topic is None:
                raise KanalError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {target.name!r} does not exist"
                )
            current = len(topic.partitions)
            if target.count <= current:
                raise KanalError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"topic {target.name!r} has {current} partitions; "
                    f"the new count {target.count} must be larger",
                )
            _check_partition_count(target.count)
            replication_factor = len(topic.partitions[0].replicas)
            planner.check_replication_factor(replication_factor)
        except KanalError as exc:
            results.append(admin_pb2.TopicResult(name=target.name, error=exc.code, error_message=exc.message))
            continue
        results.append(admin_pb2.TopicResult(name=target.name))
        if request.validate_only:
            continue
        placements = planner.place(target.count - current, replication_factor, grown=topic)
        records.extend(_partition_records(image, stamp, topic.topic_id, current, placements))
    return Decision(records, admin_pb2.CreatePartitionsResponse(results=results))
