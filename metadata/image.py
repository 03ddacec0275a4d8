"""MetadataImage: the cluster as the metadata log describes it, at one offset.

A plain object: brokers and their registrations, topics and their partitions (replicas, ISR, leader and
epochs), the partitions' remote logs (tiered storage), topic and broker configs, client quotas,
access-control entries, the next producer id, the highest controller epoch seen and the next metadata
offset, and the schema registry's state (schemas, subjects and their versions, compatibility configs and
modes: see "The schema registry" below). It changes only through `kanal.metadata.apply`
(records in, state changed), so every replica of it (active controller, standbys, brokers, Spark replay) is
the same function of the log. Images compare equal when they describe the same cluster at the same offset.

Partition states, remote logs and broker registrations are frozen values: a change replaces them, which
keeps `apply_batch`'s rollback a matter of putting the old objects back.

Indexes. Decisions that would otherwise scan every partition or topic read three derived maps instead,
kept up to date by `apply` (so an image restored from a snapshot, which is rebuilt through `apply`, has
them too):

- `replica_counts`: broker id -> partitions with a replica on it;
- `preferred_leader_counts`: broker id -> partitions whose preferred leader (first replica) it is;
- `collision_names`: `collision_key(name)` -> the topic names with that key.

Placement weighs assignments, not current leaders: replica lists only change when partitions are created
or removed, while leaders move with every failure and come back through preferred elections. A count is
never 0 (the key is removed) and a name tuple never empty, so a from-scratch `build_indexes` gives equal
maps. They are functions of `topics`, so equality ignores them; `check_image` checks they match.

The schema registry (issue 45). Confluent's model, kept by the metadata log so ids come from the active
controller and survive failover:

| field | holds |
|---|---|
| `schemas` | id -> `StoredSchema` (type, text, references): every schema ever recorded, never removed |
| `subjects` | subject -> version -> `SchemaVersion` (schema id, soft-deleted); no empty subject |
| `registry_configs` | subject ("" the registry's) -> `RegistryConfig` (compatibility level, normalize) |
| `registry_modes` | subject ("" the registry's) -> `RegistryMode` (READWRITE, READONLY, IMPORT) |
| `next_schema_id` | one more than the highest id recorded: where a new schema's id comes from |

A hard delete removes a subject's version, never the schema its id names: the id then answers nothing
(no version holds it, so reads say SCHEMA_NOT_FOUND), but it is never given to another text, and a snapshot
(which writes every schema) carries the highest id across a restore. A schema no version holds is an
*orphan*; registering its text again gives it back its id. Three more indexes, derived from `schemas` and
`subjects` the same way (left out of equality, checked by `check_image`, `build_registry_indexes`):

- `schema_holders`: schema id -> the (subject, version)s holding it, soft-deleted ones too; no empty set;
- `schema_ids_by_content`: (type, text, references) -> the ids with exactly that content (more than one
  only through IMPORT, which takes the caller's ids), ascending;
- `referenced_by`: (subject, version) -> the ids of schemas whose references name it, ascending.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, NewType

from kanal.metadata.acl import AclResource, AclSet
from kanal.metadata.ids import (
    NO_LEADER,
    BrokerEpoch,
    BrokerId,
    ControllerEpoch,
    LeaderEpoch,
    MetadataOffset,
    PartitionEpoch,
    PartitionId,
    ProducerId,
    TopicId,
)
from kanal.schemas.compatibility import DEFAULT_LEVEL, CompatibilityLevel
from kanal.schemas.schema_types import Reference, SchemaType
from kanal.security.scram import ScramCredential
from kanal.v1 import metadata_pb2, schema_registry_pb2
from kanal.v1.topic_name import collision_key

# Broker config resource name that holds cluster-wide defaults (Kafka's "<default>" entity).
CLUSTER_DEFAULT_BROKER = ""

# An empty image: no producer id handed out, no controller epoch seen, no offset applied.
# 0 means "not idempotent" in RecordBatch.producer_id, so ids handed out start at 1.
_FIRST_PRODUCER_ID = ProducerId(1)
_NO_CONTROLLER_EPOCH = ControllerEpoch(-1)
_FIRST_OFFSET = MetadataOffset(0)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One registered broker."""

    broker_id: BrokerId
    incarnation_id: str
    broker_epoch: BrokerEpoch
    endpoint: str
    rack: str
    fenced: bool
    metrics_endpoint: str = ""
    # directory.id of the broker's data directory ("" when the registration predates directory ids).
    directory_id: str = ""
    # The broker asked to shut down (BrokerRegistrationChangeRecord.in_controlled_shutdown): it stays
    # fenced until it registers again, whatever its heartbeats say. Only ever True with `fenced`.
    in_controlled_shutdown: bool = False
    # The broker's previous run ended without a clean shutdown (RegisterBrokerRecord.unclean_shutdown): its
    # logs may miss writes that were never fsynced. Cleared when the registration is first unfenced: the
    # unfencing decision is the one that acts on it (fencing.py), and later fence/unfence cycles of the
    # same process lose nothing.
    unclean_shutdown: bool = False
    # host:port of the broker's listener for other nodes ("": `endpoint` serves them too).
    inter_node_endpoint: str = ""
    # host:port of the broker's Kafka wire-protocol listener ("": it has none).
    kafka_endpoint: str = ""

    @property
    def peer_endpoint(self) -> str:
        """Where another broker dials this one."""
        return self.inter_node_endpoint or self.endpoint

    def __repr__(self) -> str:
        state = "fenced" if self.fenced else "live"
        state = "in controlled shutdown" if self.in_controlled_shutdown else state
        rack = f" rack={self.rack}" if self.rack else ""
        return f"<Broker {self.broker_id} epoch={self.broker_epoch} {self.endpoint}{rack} {state}>"


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition: assigned replicas (preferred leader first), ISR, leader and epochs."""

    partition_id: PartitionId
    replicas: tuple[BrokerId, ...]
    isr: tuple[BrokerId, ...]
    leader: BrokerId
    leader_epoch: LeaderEpoch
    partition_epoch: PartitionEpoch
    # The directory id each ISR member's log had when it joined the ISR, in ISR order ("" = unknown:
    # records from before directory ids). Kept by apply at the length of `isr`; () reads as all unknown.
    isr_directory_ids: tuple[str, ...] = ()
    # A reassignment in progress (PartitionReassignmentRecord): the replicas being added and those to be
    # removed once every target replica is in the ISR. Both empty when none is.
    adding_replicas: tuple[BrokerId, ...] = ()
    removing_replicas: tuple[BrokerId, ...] = ()
    # No ISR member is known to hold every acknowledged record (the last one came back after an unclean
    # shutdown): offline until a recovery election or an unclean one (election.py). Only with no leader.
    recovering: bool = False

    def __post_init__(self) -> None:
        if not self.isr_directory_ids:  # left out: all unknown, so equal states compare equal
            object.__setattr__(self, "isr_directory_ids", ("",) * len(self.isr))

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER

    def recorded_directory(self, broker_id: int) -> str:
        """The directory id recorded for ISR member `broker_id` ("" when unknown or not a member)."""
        if len(self.isr_directory_ids) != len(self.isr) or broker_id not in self.isr:
            return ""
        return self.isr_directory_ids[self.isr.index(BrokerId(broker_id))]

    @property
    def preferred_leader(self) -> BrokerId:
        return self.replicas[0]

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[BrokerId, ...]:
        """Where a reassignment in progress is going (the replicas when none is)."""
        return tuple(b for b in self.replicas if b not in self.removing_replicas)

    def __repr__(self) -> str:
        moving = (f" adding={list(self.adding_replicas)} removing={list(self.removing_replicas)}"
                  if self.reassigning else "")
        moving += " recovering" if self.recovering else ""
        return (
            f"<Partition {self.partition_id} leader={self.leader} epoch={self.leader_epoch} "
            f"pepoch={self.partition_epoch} replicas={list(self.replicas)} isr={list(self.isr)}{moving}>"
        )


class EpochStart(NamedTuple):
    """A leader epoch's first offset inside a remote segment (RemoteLogEpochStart)."""

    epoch: LeaderEpoch
    start_offset: int


class AbortedTransaction(NamedTuple):
    """A transaction whose ABORT marker (at `last_offset`) is inside a remote segment."""

    producer_id: ProducerId
    first_offset: int
    last_offset: int


class OpenTransaction(NamedTuple):
    """A transaction still open at a remote segment's end offset."""

    producer_id: ProducerId
    first_offset: int


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One segment of a partition's remote log, as its RemoteLogSegmentRecord describes it (offsets are the
    partition's log offsets; `end_offset` is exclusive)."""

    base_offset: int
    end_offset: int
    size_bytes: int
    meta_bytes: int
    max_timestamp_ms: int
    leader_epoch: LeaderEpoch
    broker_id: BrokerId
    epochs: tuple[EpochStart, ...]
    aborted_transactions: tuple[AbortedTransaction, ...] = ()
    open_transactions: tuple[OpenTransaction, ...] = ()

    @classmethod
    def from_record(cls, r: metadata_pb2.RemoteLogSegmentRecord) -> RemoteSegment:
        return cls(
            r.base_offset,
            r.end_offset,
            r.size_bytes,
            r.meta_bytes,
            r.max_timestamp_ms,
            LeaderEpoch(r.leader_epoch),
            BrokerId(r.broker_id),
            tuple(EpochStart(LeaderEpoch(e.epoch), e.start_offset) for e in r.epochs),
            tuple(
                AbortedTransaction(ProducerId(a.producer_id), a.first_offset, a.last_offset)
                for a in r.aborted_transactions
            ),
            tuple(OpenTransaction(ProducerId(o.producer_id), o.first_offset) for o in r.open_transactions),
        )

    def to_record(self, topic_id: str, partition_id: int) -> metadata_pb2.RemoteLogSegmentRecord:
        return metadata_pb2.RemoteLogSegmentRecord(
            topic_id=topic_id,
            partition_id=partition_id,
            base_offset=self.base_offset,
            end_offset=self.end_offset,
            size_bytes=self.size_bytes,
            meta_bytes=self.meta_bytes,
            max_timestamp_ms=self.max_timestamp_ms,
            leader_epoch=self.leader_epoch,
            broker_id=self.broker_id,
            epochs=[metadata_pb2.RemoteLogEpochStart(epoch=e.epoch, start_offset=e.start_offset)
                    for e in self.epochs],
            aborted_transactions=[
                metadata_pb2.RemoteLogAbortedTransaction(
                    producer_id=a.producer_id, first_offset=a.first_offset, last_offset=a.last_offset
                )
                for a in self.aborted_transactions
            ],
            open_transactions=[
                metadata_pb2.RemoteLogOpenTransaction(producer_id=o.producer_id, first_offset=o.first_offset)
                for o in self.open_transactions
            ],
        )

    @property
    def last_epoch(self) -> LeaderEpoch:
        return self.epochs[-1].epoch

    def __repr__(self) -> str:
        return (f"<RemoteSegment [{self.base_offset}, {self.end_offset}) {self.size_bytes} B "
                f"epochs={[e.epoch for e in self.epochs]} by broker {self.broker_id} at {self.leader_epoch}>")


@dataclass(frozen=True, slots=True)
class RemoteLog:
    """A partition's remote log (tiered storage): its segments in offset order, contiguous, and its start.

    With segments, the start lies in the first one (base <= start < end: a start record drops the
    segments that end at or below it); without, it is where the next segment may start at the earliest
    and the end equals it. Changed only by replacing the whole value (remote_log.py's rules, apply.py)."""

    segments: tuple[RemoteSegment, ...]
    log_start_offset: int

    @property
    def end_offset(self) -> int:
        """Where the next uploaded segment starts: the last segment's end, or the start when empty."""
        return self.segments[-1].end_offset if self.segments else self.log_start_offset

    def __repr__(self) -> str:
        return (f"<RemoteLog [{self.log_start_offset}, {self.end_offset}) "
                f"segments={len(self.segments)}>")


# -- the schema registry --------------------------------------------------------------------------------

# A registered schema's global id: positive, never reused (module docstring).
SchemaId = NewType("SchemaId", int)
_FIRST_SCHEMA_ID = SchemaId(1)

# The subject key of the registry-wide config and mode (Confluent's global `/config` and `/mode`).
GLOBAL_SUBJECT = ""


class RegistryMode(StrEnum):
    """What a subject (or the registry) accepts: Confluent's modes."""

    READWRITE = "READWRITE"  # registrations and deletes
    READONLY = "READONLY"  # reads only
    IMPORT = "IMPORT"  # registrations with the caller's ids and versions, unchecked (a migration)


DEFAULT_REGISTRY_MODE = RegistryMode.READWRITE


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """A subject's (or the registry's) compatibility level, and whether schemas are normalized."""

    compatibility: CompatibilityLevel
    normalize: bool = False

    def __repr__(self) -> str:
        return f"<RegistryConfig {self.compatibility}{' normalize' if self.normalize else ''}>"


# In effect when neither the subject nor the registry has a config (Confluent's defaults).
DEFAULT_REGISTRY_CONFIG = RegistryConfig(DEFAULT_LEVEL, False)


class SchemaContent(NamedTuple):
    """What makes two registered schemas the same one: type, text and references (Confluent's lookup key,
    with the text as stored)."""

    schema_type: SchemaType
    text: str
    references: tuple[Reference, ...]


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """A schema as its SchemaRecord recorded it (the text as registered: normalized when registered with
    normalize). Its references name (subject, version)s resolved at registration."""

    schema_id: SchemaId
    schema_type: SchemaType
    text: str
    references: tuple[Reference, ...] = ()

    @property
    def content(self) -> SchemaContent:
        return SchemaContent(self.schema_type, self.text, self.references)

    @classmethod
    def from_record(cls, r: metadata_pb2.SchemaRecord) -> StoredSchema:
        """ValueError when the type is not one of the registry's."""
        return cls(SchemaId(r.id), SchemaType(r.schema_type), r.schema,
                   tuple(Reference(ref.name, ref.subject, ref.version) for ref in r.references))

    def to_record(self) -> metadata_pb2.SchemaRecord:
        return metadata_pb2.SchemaRecord(
            id=self.schema_id, schema_type=self.schema_type, schema=self.text,
            references=[reference_to_proto(ref) for ref in self.references],
        )

    def __repr__(self) -> str:
        refs = [f"{r.subject}/{r.version}" for r in self.references]
        refs_text = f" references={refs}" if refs else ""
        return f"<Schema {self.schema_id} {self.schema_type} {len(self.text)} chars{refs_text}>"


def reference_to_proto(ref: Reference) -> schema_registry_pb2.SchemaReference:
    return schema_registry_pb2.SchemaReference(name=ref.name, subject=ref.subject, version=ref.version)


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One version of a subject: the id of the schema it holds, and whether it is soft-deleted (kept,
    hidden from reads that do not ask for deleted versions, and its number not reused while it stays)."""

    schema_id: SchemaId
    deleted: bool = False

    def __repr__(self) -> str:
        return f"<SchemaVersion schema={self.schema_id}{' deleted' if self.deleted else ''}>"


class RegistryIndexes(NamedTuple):
    """The derived maps of the registry's state (module docstring)."""

    schema_holders: dict[SchemaId, frozenset[tuple[str, int]]]
    schema_ids_by_content: dict[SchemaContent, tuple[SchemaId, ...]]
    referenced_by: dict[tuple[str, int], tuple[SchemaId, ...]]


def build_registry_indexes(
    schemas: Mapping[SchemaId, StoredSchema], subjects: Mapping[str, Mapping[int, SchemaVersion]]
) -> RegistryIndexes:
    """The registry's indexes computed from scratch: O(schemas + versions + references).

    What `apply` keeps incrementally must always equal this; `check_image` compares the two."""
    holders: dict[SchemaId, set[tuple[str, int]]] = {}
    for subject, versions in subjects.items():
        for version, state in versions.items():
            holders.setdefault(state.schema_id, set()).add((subject, version))
    by_content: dict[SchemaContent, list[SchemaId]] = {}
    referrers: dict[tuple[str, int], set[SchemaId]] = {}
    for schema_id, schema in schemas.items():
        by_content.setdefault(schema.content, []).append(schema_id)
        for ref in schema.references:
            referrers.setdefault((ref.subject, ref.version), set()).add(schema_id)
    return RegistryIndexes(
        {schema_id: frozenset(held) for schema_id, held in holders.items()},
        {content: tuple(sorted(ids)) for content, ids in by_content.items()},
        {key: tuple(sorted(ids)) for key, ids in referrers.items()},
    )


@dataclass(eq=True, slots=True)
class TopicImage:
    """One topic: name, id, config overrides (key -> text) and partitions (list index = partition id)."""

    name: str
    topic_id: TopicId
    partitions: list[PartitionState] = field(default_factory=list)
    configs: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        offline = sum(1 for p in self.partitions if p.offline)
        return f"<Topic {self.name} id={self.topic_id} partitions={len(self.partitions)} offline={offline}>"


@dataclass(frozen=True, slots=True, order=True)
class QuorumVoter:
    """One controller quorum voter as a VoterSetRecord names it (quorum_voters.py)."""

    controller_id: int
    raft_endpoint: str
    grpc_endpoint: str

    def to_proto(self) -> metadata_pb2.QuorumVoter:
        return metadata_pb2.QuorumVoter(
            controller_id=self.controller_id,
            raft_endpoint=self.raft_endpoint,
            grpc_endpoint=self.grpc_endpoint,
        )

    @classmethod
    def from_proto(cls, proto: metadata_pb2.QuorumVoter) -> QuorumVoter:
        return cls(proto.controller_id, proto.raft_endpoint, proto.grpc_endpoint)


@dataclass(eq=True)
class MetadataImage:
    """The whole cluster metadata at `next_offset` (exclusive). Start empty: `MetadataImage()`."""

    brokers: dict[BrokerId, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicImage] = field(default_factory=dict)
    # The same TopicImage objects by id; derived from `topics`, so left out of equality.
    topics_by_id: dict[TopicId, TopicImage] = field(default_factory=dict, compare=False)
    # Broker resource name (decimal broker id, or "" for cluster-wide defaults) -> key -> text.
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # (entity_type, entity_name) -> quota key -> value.
    client_quotas: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    # Kafka's user+client-id entities: (user name, client id) -> quota key -> value ("" a default).
    user_client_quotas: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    # The cluster's id (ClusterIdentityRecord, written once by the first active controller); "" until then.
    cluster_id: str = ""
    # Controller id -> the directory id the quorum recorded for its data directory (KIP-853).
    controller_directories: dict[int, str] = field(default_factory=dict)
    # The controller quorum's voters as the last VoterSetRecord named them, by id; () before any change
    # (the voters are then the configured ones: quorum_voters.voters_of).
    voters: tuple[QuorumVoter, ...] = ()
    # Access-control entries by (resource type, pattern type, resource name) (acl.py); never an empty set.
    acls: dict[AclResource, AclSet] = field(default_factory=dict)
    # User name -> SCRAM mechanism -> its credential (UserScramCredentialRecord); no empty inner maps.
    scram_credentials: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)
    # Tiered storage: (topic id, partition) -> its remote log, for partitions that ever had a segment
    # recorded (RemoteLogSegmentRecord / RemoteLogStartRecord); removed with the topic.
    remote_logs: dict[tuple[TopicId, PartitionId], RemoteLog] = field(default_factory=dict)
    # The schema registry (the module docstring's table): schemas by id (never removed), subject -> version
    # -> its state (no empty subjects), configs and modes by subject ("" the registry's), the next id.
    schemas: dict[SchemaId, StoredSchema] = field(default_factory=dict)
    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    registry_configs: dict[str, RegistryConfig] = field(default_factory=dict)
    registry_modes: dict[str, RegistryMode] = field(default_factory=dict)
    next_schema_id: SchemaId = _FIRST_SCHEMA_ID
    next_producer_id: ProducerId = _FIRST_PRODUCER_ID
    controller_epoch: ControllerEpoch = _NO_CONTROLLER_EPOCH
    next_offset: MetadataOffset = _FIRST_OFFSET
    # The request ids of the last REQUEST_IDS_REMEMBERED_MAX decisions applied -> the offset of their last
    # record (apply_batch keeps it): a controller refuses an admin write whose id is here (DUPLICATE_REQUEST),
    # the late attempt of a call a broker already retried elsewhere. Not in snapshots (an image loaded from
    # one remembers only what it applied since), so left out of equality.
    recent_request_ids: dict[str, MetadataOffset] = field(default_factory=dict, compare=False)
    # Indexes derived from `topics` (see the module docstring); kept by apply, left out of equality.
    replica_counts: dict[BrokerId, int] = field(default_factory=dict, compare=False)
    preferred_leader_counts: dict[BrokerId, int] = field(default_factory=dict, compare=False)
    # Sorted names; more than one only if a log holds a collision the decisions would have refused.
    collision_names: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False)
    # The registry's indexes, derived from `schemas` and `subjects` (module docstring); kept by apply.
    schema_holders: dict[SchemaId, frozenset[tuple[str, int]]] = field(default_factory=dict, compare=False)
    schema_ids_by_content: dict[SchemaContent, tuple[SchemaId, ...]] = field(
        default_factory=dict, compare=False)
    referenced_by: dict[tuple[str, int], tuple[SchemaId, ...]] = field(default_factory=dict, compare=False)

    # -- lookups -----------------------------------------------------------------------------------

    def topic_by_id(self, topic_id: str) -> TopicImage | None:
        return self.topics_by_id.get(TopicId(topic_id))

    def partition(self, topic_id: str, partition_id: int) -> PartitionState | None:
        topic = self.topics_by_id.get(TopicId(topic_id))
        if topic is None or not 0 <= partition_id < len(topic.partitions):
            return None
        return topic.partitions[partition_id]

    def remote_log(self, topic_id: str, partition_id: int) -> RemoteLog | None:
        """The partition's remote log; None when none of its segments was ever recorded."""
        return self.remote_logs.get((TopicId(topic_id), PartitionId(partition_id)))

    def live_brokers(self) -> dict[BrokerId, BrokerRegistration]:
        """Registered, unfenced brokers: the ones that may lead, be in an ISR and get new replicas."""
        return {b: reg for b, reg in self.brokers.items() if not reg.fenced}

    def is_live(self, broker_id: int) -> bool:
        reg = self.brokers.get(BrokerId(broker_id))
        return reg is not None and not reg.fenced

    def iter_partitions(self) -> Iterator[tuple[TopicImage, PartitionState]]:
        for topic in self.topics.values():
            for partition in topic.partitions:
                yield topic, partition

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    def copy(self) -> MetadataImage:
        """An independent image equal to this one (states are frozen, so containers are all we copy)."""
        topics = {
            name: TopicImage(t.name, t.topic_id, list(t.partitions), dict(t.configs))
            for name, t in self.topics.items()
        }
        return MetadataImage(
            brokers=dict(self.brokers),
            topics=topics,
            topics_by_id={t.topic_id: t for t in topics.values()},
            broker_configs={k: dict(v) for k, v in self.broker_configs.items()},
            client_quotas={k: dict(v) for k, v in self.client_quotas.items()},
            user_client_quotas={k: dict(v) for k, v in self.user_client_quotas.items()},
            cluster_id=self.cluster_id,
            controller_directories=dict(self.controller_directories),
            voters=self.voters,  # a tuple of frozen values
            acls=dict(self.acls),  # AclSets are immutable
            scram_credentials={k: dict(v) for k, v in self.scram_credentials.items()},
            remote_logs=dict(self.remote_logs),  # RemoteLogs are frozen values
            schemas=dict(self.schemas),  # frozen values, like the versions, configs and modes below
            subjects={subject: dict(versions) for subject, versions in self.subjects.items()},
            registry_configs=dict(self.registry_configs),
            registry_modes=dict(self.registry_modes),
            next_schema_id=self.next_schema_id,
            next_producer_id=self.next_producer_id,
            controller_epoch=self.controller_epoch,
            next_offset=self.next_offset,
            # Values are ints and tuples (immutable): a shallow copy of each map is independent.
            replica_counts=dict(self.replica_counts),
            preferred_leader_counts=dict(self.preferred_leader_counts),
            collision_names=dict(self.collision_names),
            schema_holders=dict(self.schema_holders),  # frozensets and tuples: immutable values
            schema_ids_by_content=dict(self.schema_ids_by_content),
            referenced_by=dict(self.referenced_by),
            recent_request_ids=dict(self.recent_request_ids),
        )

    def indexes(self) -> ImageIndexes:
        """The indexes as kept by apply (the live maps, not copies)."""
        return ImageIndexes(self.replica_counts, self.preferred_leader_counts, self.collision_names)

    def registry_indexes(self) -> RegistryIndexes:
        """The registry's indexes as kept by apply (the live maps, not copies)."""
        return RegistryIndexes(self.schema_holders, self.schema_ids_by_content, self.referenced_by)

    def __repr__(self) -> str:
        fenced = sum(1 for b in self.brokers.values() if b.fenced)
        return (
            f"<MetadataImage offset={self.next_offset} controller_epoch={self.controller_epoch} "
            f"brokers={len(self.brokers)} fenced={fenced} topics={len(self.topics)} "
            f"partitions={self.partition_count()} schemas={len(self.schemas)} subjects={len(self.subjects)}>"
        )


class ImageIndexes(NamedTuple):
    """The derived maps of a MetadataImage (see the module docstring)."""

    replica_counts: dict[BrokerId, int]
    preferred_leader_counts: dict[BrokerId, int]
    collision_names: dict[str, tuple[str, ...]]


def build_indexes(topics: Iterable[TopicImage]) -> ImageIndexes:
    """The indexes of these topics computed from scratch: O(partitions x replication factor).

    What `apply` keeps incrementally must always equal this; `check_image` compares the two."""
    holds: dict[BrokerId, int] = {}
    leads: dict[BrokerId, int] = {}
    names: dict[str, list[str]] = {}
    for topic in topics:
        names.setdefault(collision_key(topic.name), []).append(topic.name)
        for partition in topic.partitions:
            first = partition.replicas[0]
            leads[first] = leads.get(first, 0) + 1
            for broker in partition.replicas:
                holds[broker] = holds.get(broker, 0) + 1
    return ImageIndexes(holds, leads, {key: tuple(sorted(group)) for key, group in names.items()})
