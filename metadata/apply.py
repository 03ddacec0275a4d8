"""apply: the only way a MetadataImage changes.

`apply_batch(image, batch, base_offset)` applies one MetadataBatch (one Raft entry, one RecordBatch in the
metadata segment log) atomically; `apply(image, record)` applies a single record. The same functions run
on the active controller, the standbys, the brokers, in tests and in the Spark replay, so each of them
holds the same image at the same offset.

Rules apply_batch keeps:

- `base_offset` must equal `image.next_offset`: a gap or an overlap means the caller lost or repeated a
  batch, and the image would silently stop matching the log.
- A batch whose controller_epoch is below the highest seen was written by a deposed controller (pysyncobj
  forwards a proposal to the new leader, so it can land after the new controller's batches; it was
  decided on an image that may be stale). The raft layer drops such batches before they get here
  (raft/command.py's `judge`): they are never applied nor written to the metadata log. Should one
  arrive anyway, apply_batch fences it as a second line of defence: its offsets are consumed, nothing
  else changes, and it returns False. Every replica decides this the same way, so nothing diverges.
- Every record is checked against the image before it changes anything: the first one that does not fit
  (an unknown partition, a leader outside the ISR, a fenced leader, ...) raises MetadataInvariantError
  and the whole batch is rolled back, so the image is never left half-changed.
- When the batch ends: every topic created in it has a partition, and every broker fenced or
  unregistered in it leads no partition and is in no ISR of a partition that has a leader.

The schema registry (issue 45; image.py's table): a SchemaRecord's id is positive and unused (ids are never
reused), its type one of the registry's, its text non-empty, its references well formed; a
SubjectVersionRecord names a recorded schema and a version >= 1, and one for a version that exists may only
soft-delete or undelete it (a version's schema never changes); RemoveSubjectVersion (a hard delete) takes
only a soft-deleted version. Neither deletion may leave a reference dangling: a version stays live while a
live version holds a schema that references it, and stays at all while any version (soft-deleted too)
holds one, as Confluent's decisions refuse (SCHEMA_REFERENCED). RegistryConfig / RegistryMode records carry
a level or mode by Confluent's name, or "" to remove a setting that exists (the registry's "" too: it is
then back at BACKWARD / READWRITE). The registry's indexes (image.py) are kept with them.

Remote logs (tiered storage): RemoteLogSegment and RemoteLogStart keep remote_log.py's rules (contiguous
offsets, epochs that never go back, a start that only moves forward); RemoveTopic drops the topic's remote
logs with it.

Indexes (image.py): the per-broker replica and preferred-leader counts and the topic-name collision
keys change with TopicRecord, PartitionRecord, PartitionReassignment and RemoveTopic. Count changes are
summed per call and folded into the image once, at the end (journaled like every other change), so a
10,000-partition batch touches each broker's count once; nothing reads them while a batch is being applied.

Epochs: a PartitionChange that sets `leader` must change it and bumps leader_epoch; every
PartitionChange bumps partition_epoch; so does every PartitionReassignment, which bumps leader_epoch
when it changes the leader and may only keep or drop ISR members, never add one (a replica joins the ISR
through AlterPartition alone). A RegisterBroker for an id that is registered is an error: a new
incarnation first unregisters the old one in the same batch (see broker_registration.py). A
BrokerRegistrationChange for an older broker epoch changes nothing, as metadata.proto specifies.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, MutableMapping, MutableSequence
from contextlib import contextmanager
from typing import Any, TypeVar

from kanal.metadata.acl import EMPTY_ACL_SET, AclEntry, check_entry
from kanal.metadata.client_quota import QUOTA_ENTITY_TYPES, QUOTA_KEYS
from kanal.metadata.cluster_identity import cluster_id_problem
from kanal.metadata.config_resource import check_broker_resource_name, check_stored_config_value
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
from kanal.metadata.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionState,
    QuorumVoter,
    RegistryConfig,
    RegistryMode,
    RemoteSegment,
    SchemaId,
    SchemaVersion,
    StoredSchema,
    TopicImage,
    build_indexes,
    build_registry_indexes,
)
from kanal.metadata.invariant import MetadataInvariantError
from kanal.metadata.quorum_voters import check_voter_set
from kanal.metadata.remote_log import (
    NO_REMOTE_LOG,
    RemoteTail,
    check_new_start,
    check_segment,
    with_segment,
    with_start,
)
from kanal.metadata.request_ids import remember
from kanal.schemas.compatibility import CompatibilityLevel
from kanal.security.scram import ITERATIONS_MAX, ITERATIONS_MIN, MECHANISMS, ScramCredential
from kanal.v1 import metadata_pb2
from kanal.v1.error import KanalError
from kanal.v1.metadata_pb2 import MetadataBatch, MetadataRecord
from kanal.v1.topic_name import check_topic_name, collision_key

K = TypeVar("K")
V = TypeVar("V")


class _Journal:
    """Undo steps for every change made while applying a batch, so a failed batch can be rolled back."""

    __slots__ = ("_undo",)

    def __init__(self) -> None:
        self._undo: list[Callable[[], object]] = []  # what an undo step returns is dropped

    def put(self, mapping: MutableMapping[K, V], key: K, value: V) -> None:
        if key in mapping:
            old = mapping[key]
            self._undo.append(lambda: mapping.__setitem__(key, old))
        else:
            self._undo.append(lambda: mapping.__delitem__(key))
        mapping[key] = value

    def delete(self, mapping: MutableMapping[K, V], key: K) -> None:
        old = mapping.pop(key)
        self._undo.append(lambda: mapping.__setitem__(key, old))

    def replace(self, items: MutableSequence[V], index: int, value: V) -> None:
        old = items[index]
        self._undo.append(lambda: items.__setitem__(index, old))
        items[index] = value

    def append(self, items: MutableSequence[V], value: V) -> None:
        self._undo.append(items.pop)
        items.append(value)

    def set(self, obj: object, name: str, value: object) -> None:
        old = getattr(obj, name)
        self._undo.append(lambda: setattr(obj, name, old))
        setattr(obj, name, value)

    def rollback(self) -> None:
        while self._undo:
            self._undo.pop()()

    @contextmanager
    def all_or_nothing(self) -> Iterator[None]:
        """Undo every journaled change when the block raises, then let the exception go on. Any exception,
        BaseException too: an interrupt halfway must not leave a half-applied record or batch behind."""
        try:
            yield
        except BaseException:
            self.rollback()
            raise


class _Context:
    """What one apply call changed, for the end-of-batch checks and the index counts."""

    __slots__ = ("created_topics", "departed_brokers", "hold_deltas", "journal", "lead_deltas")

    def __init__(self) -> None:
        self.journal = _Journal()
        self.created_topics: list[TopicImage] = []
        self.departed_brokers: set[BrokerId] = set()
        # Changes to image.preferred_leader_counts / replica_counts, folded in by _update_counts.
        self.lead_deltas: Counter[BrokerId] = Counter()
        self.hold_deltas: Counter[BrokerId] = Counter()

    def count_replicas(self, replicas: tuple[BrokerId, ...], sign: int) -> None:
        self.lead_deltas[replicas[0]] += sign
        holds = self.hold_deltas
        for broker in replicas:
            holds[broker] += sign


def apply(image: MetadataImage, record: MetadataRecord) -> None:
    """Apply one record at offset `image.next_offset` and advance it by one.

    Raises MetadataInvariantError (leaving the image unchanged) when the record does not fit. The
    end-of-batch checks do not run: a TopicRecord alone is legal here, its partitions may follow.
    """
    ctx = _Context()
    with ctx.journal.all_or_nothing():
        _apply_record(image, record, ctx)
        _update_counts(image, ctx)
        ctx.journal.set(image, "next_offset", MetadataOffset(image.next_offset + 1))


def apply_records(image: MetadataImage, records: Iterable[MetadataRecord]) -> None:
    """Apply records one after another as `apply` would (each at the next offset, no end-of-batch
    checks), all of them or none.

    For image_from_snapshot: one journal and one fold of the index counts for the whole snapshot,
    instead of per record, which made restoring a 15,000-partition image ~60% slower."""
    ctx = _Context()
    with ctx.journal.all_or_nothing():
        offset = int(image.next_offset)
        for record in records:
            _apply_record(image, record, ctx)
            offset += 1
        _update_counts(image, ctx)
        ctx.journal.set(image, "next_offset", MetadataOffset(offset))


def apply_batch(image: MetadataImage, batch: MetadataBatch, base_offset: int) -> bool:
    """Apply one batch whose first record is at `base_offset`, all records or none.

    Returns True when applied, False when the batch came from a deposed controller (its controller
    epoch is below the highest seen) and was fenced: its offsets are consumed, nothing else changes.
    Raises MetadataInvariantError, leaving the image as it was, when a record does not fit.
    """
    if base_offset != image.next_offset:
        raise MetadataInvariantError(
            f"batch at offset {base_offset} does not follow the image, which ends at {image.next_offset}"
        )
    if not batch.records:
        # An empty batch would take no offset and leave no audit trace: a decision with no records is
        # not written at all.
        raise MetadataInvariantError(f"empty metadata batch at offset {base_offset}")
    end = MetadataOffset(base_offset + len(batch.records))
    if batch.controller_epoch < image.controller_epoch:
        image.next_offset = end
        return False
    ctx = _Context()
    with ctx.journal.all_or_nothing():
        ctx.journal.set(image, "controller_epoch", ControllerEpoch(batch.controller_epoch))
        for record in batch.records:
            _apply_record(image, record, ctx)
        _check_batch_end(image, ctx)
        _update_counts(image, ctx)
        ctx.journal.set(image, "next_offset", end)
    remember(image, batch.records, MetadataOffset(end - 1))  # request_ids.py: repeats are refused
    return True


def check_image(image: MetadataImage) -> None:
    """Run the end-of-batch checks over the whole image, and check that its indexes equal a
    recomputation from scratch (used after loading a snapshot, and by tests): O(partitions)."""
    ctx = _Context()
    ctx.created_topics.extend(image.topics.values())
    ctx.departed_brokers.update(b for b, reg in image.brokers.items() if reg.fenced)
    _check_batch_end(image, ctx)
    _check_indexes(image)
    _check_remote_logs(image)
    _check_registry(image)


def _check_remote_logs(image: MetadataImage) -> None:
    # RemoveTopic drops a topic's remote logs; one left behind would point readers and the orphan sweep at
    # objects of a topic that no longer exists.
    for (topic_id, partition_id), remote in image.remote_logs.items():
        if image.partition(topic_id, partition_id) is None:
            raise _fail(f"remote log {remote!r} of unknown partition {topic_id}/{partition_id}")
        first = remote.segments[0] if remote.segments else None
        if first is not None and not first.base_offset <= remote.log_start_offset < first.end_offset:
            raise _fail(f"remote log {remote!r} of {topic_id}/{partition_id}: its start is not in its first "
                        "segment")


def _check_registry(image: MetadataImage) -> None:
    # Versions name recorded schemas and the next id is above every recorded one: apply keeps both record by
    # record; a snapshot that breaks them would hand out an id twice or serve a version without a schema.
    for subject, versions in image.subjects.items():
        if not versions:
            raise _fail(f"subject {subject!r} without versions")
        for version, state in versions.items():
            if state.schema_id not in image.schemas:
                raise _fail(f"version {version} of subject {subject!r} holds unknown schema "
                            f"{state.schema_id}")
    if image.schemas and image.next_schema_id <= max(image.schemas):
        raise _fail(f"next schema id {image.next_schema_id} is not above the highest recorded, "
                    f"{max(image.schemas)}")
    expected = build_registry_indexes(image.schemas, image.subjects)
    for name, want, have in zip(expected._fields, expected, image.registry_indexes(), strict=True):
        if want != have:
            raise _fail(f"registry index {name} is {have}, a recomputation gives {want}")


def _check_indexes(image: MetadataImage) -> None:
    # Decisions trust the indexes instead of scanning; a drifted index would silently skew placement or
    # let a colliding topic name through, so a mismatch is a broken invariant like any other.
    expected = build_indexes(image.topics.values())
    actual = image.indexes()
    for name, want, have in zip(expected._fields, expected, actual, strict=True):
        if want != have:
            raise _fail(f"image index {name} is {have}, a recomputation from the topics gives {want}")


# -- dispatch ------------------------------------------------------------------------------------------


def _apply_record(image: MetadataImage, record: MetadataRecord, ctx: _Context) -> None:
    kind = record.WhichOneof("record")
    if kind is None:
        raise MetadataInvariantError(f"metadata record without a body: {record}")
    _HANDLERS[kind](image, getattr(record, kind), ctx)


def _fail(message: str) -> MetadataInvariantError:
    return MetadataInvariantError(message)


# -- brokers -------------------------------------------------------------------------------------------


def _register_broker(image: MetadataImage, r: metadata_pb2.RegisterBrokerRecord, ctx: _Context) -> None:
    if r.broker_id < 0:
        raise _fail(f"RegisterBroker with negative broker id {r.broker_id}")
    existing = image.brokers.get(BrokerId(r.broker_id))
    if existing is not None:
        raise _fail(
            f"RegisterBroker for broker {r.broker_id}, which is registered already ({existing!r}); "
            "a new incarnation must follow an UnregisterBroker"
        )
    if r.broker_epoch < 0 or not r.incarnation_id or not r.endpoint:
        raise _fail(f"RegisterBroker for broker {r.broker_id} needs an epoch >= 0, incarnation and endpoint")
    registration = BrokerRegistration(
        broker_id=BrokerId(r.broker_id),
        incarnation_id=r.incarnation_id,
        broker_epoch=BrokerEpoch(r.broker_epoch),
        endpoint=r.endpoint,
        rack=r.rack,
        fenced=r.fenced,
        metrics_endpoint=r.metrics_endpoint,
        directory_id=r.directory_id,
        unclean_shutdown=r.unclean_shutdown,
        inter_node_endpoint=r.inter_node_endpoint,
        kafka_endpoint=r.kafka_endpoint,
    )
    ctx.journal.put(image.brokers, registration.broker_id, registration)


def _registration_change(
    image: MetadataImage, r: metadata_pb2.BrokerRegistrationChangeRecord, ctx: _Context
) -> None:
    existing = image.brokers.get(BrokerId(r.broker_id))
    if existing is None:
        raise _fail(f"BrokerRegistrationChange for unregistered broker {r.broker_id}")
    if r.broker_epoch < existing.broker_epoch:
        return  # metadata.proto: a change for an older registration is ignored (it no longer exists).
    if r.broker_epoch > existing.broker_epoch:
        raise _fail(
            f"BrokerRegistrationChange for broker {r.broker_id} epoch {r.broker_epoch}, "
            f"newer than its registration epoch {existing.broker_epoch}"
        )
    if r.in_controlled_shutdown and not r.fenced:
        raise _fail(f"BrokerRegistrationChange unfences broker {r.broker_id} in controlled shutdown")
    if existing.in_controlled_shutdown and not r.fenced:
        # Sticky until the broker registers again (metadata.proto): the process is on its way out.
        raise _fail(f"BrokerRegistrationChange unfences broker {r.broker_id}, in controlled shutdown")
    shutdown = existing.in_controlled_shutdown or r.in_controlled_shutdown
    if r.fenced == existing.fenced and shutdown == existing.in_controlled_shutdown:
        state = "fenced" if r.fenced else "unfenced"
        raise _fail(f"BrokerRegistrationChange leaves broker {r.broker_id} {state}: it changes nothing")
    ctx.journal.put(image.brokers, existing.broker_id, _with_fenced(existing, r.fenced, shutdown))
    if r.fenced:
        ctx.departed_brokers.add(existing.broker_id)


def _with_fenced(reg: BrokerRegistration, fenced: bool, in_controlled_shutdown: bool) -> BrokerRegistration:
    return BrokerRegistration(
        reg.broker_id,
        reg.incarnation_id,
        reg.broker_epoch,
        reg.endpoint,
        reg.rack,
        fenced,
        reg.metrics_endpoint,
        reg.directory_id,
        in_controlled_shutdown,
        # image.py: the unclean-shutdown mark is acted on when the registration is first unfenced.
        reg.unclean_shutdown and fenced,
        reg.inter_node_endpoint,
        reg.kafka_endpoint,
    )


def _unregister_broker(image: MetadataImage, r: metadata_pb2.UnregisterBrokerRecord, ctx: _Context) -> None:
    existing = image.brokers.get(BrokerId(r.broker_id))
    if existing is None or existing.broker_epoch != r.broker_epoch:
        raise _fail(
            f"UnregisterBroker for broker {r.broker_id} epoch {r.broker_epoch}, not registered as such"
        )
    if not existing.fenced:
        # Fencing first moves its leaderships away; unregistering a live leader would strand partitions.
        raise _fail(f"UnregisterBroker for broker {r.broker_id}, which is not fenced")
    ctx.journal.delete(image.brokers, existing.broker_id)
    ctx.departed_brokers.add(existing.broker_id)


# -- topics and partitions -----------------------------------------------------------------------------


def _topic(image: MetadataImage, r: metadata_pb2.TopicRecord, ctx: _Context) -> None:
    try:
        check_topic_name(r.name)
    except KanalError as exc:
        raise _fail(f"TopicRecord with an illegal name: {exc.message}") from None
    if r.name in image.topics:
        raise _fail(f"TopicRecord for {r.name!r}, which exists already")
    if not r.topic_id or r.topic_id in image.topics_by_id:
        raise _fail(f"TopicRecord for {r.name!r} with an empty or used topic id {r.topic_id!r}")
    topic = TopicImage(r.name, TopicId(r.topic_id))
    ctx.journal.put(image.topics, topic.name, topic)
    ctx.journal.put(image.topics_by_id, topic.topic_id, topic)
    ctx.created_topics.append(topic)
    key = collision_key(topic.name)
    names = image.collision_names.get(key, ())
    ctx.journal.put(image.collision_names, key, tuple(sorted((*names, topic.name))))


def _remove_topic(image: MetadataImage, r: metadata_pb2.RemoveTopicRecord, ctx: _Context) -> None:
    topic = image.topics_by_id.get(TopicId(r.topic_id))
    if topic is None:
        raise _fail(f"RemoveTopic for unknown topic id {r.topic_id!r}")
    ctx.journal.delete(image.topics, topic.name)
    ctx.journal.delete(image.topics_by_id, topic.topic_id)
    key = collision_key(topic.name)
    names = image.collision_names.get(key, ())
    if topic.name not in names:
        raise _fail(f"RemoveTopic for {topic.name!r}, which the collision index does not hold: it is broken")
    rest = tuple(n for n in names if n != topic.name)
    if rest:
        ctx.journal.put(image.collision_names, key, rest)
    else:
        ctx.journal.delete(image.collision_names, key)
    for partition in topic.partitions:
        ctx.count_replicas(partition.replicas, -1)
        # The remote logs go with the topic, in the same record: a recreated name has a new topic id, so
        # nothing can ever read or extend them again (their objects are the brokers' to delete).
        remote = (topic.topic_id, partition.partition_id)
        if remote in image.remote_logs:
            ctx.journal.delete(image.remote_logs, remote)


def _partition(image: MetadataImage, r: metadata_pb2.PartitionRecord, ctx: _Context) -> None:
    topic = image.topics_by_id.get(TopicId(r.topic_id))
    if topic is None:
        raise _fail(f"PartitionRecord for unknown topic id {r.topic_id!r}")
    where = f"{topic.name}-{r.partition_id}"
    # Partition ids are dense (0..n-1) and created in order, so a topic's partitions are a list.
    if r.partition_id != len(topic.partitions):
        raise _fail(f"PartitionRecord {where}: the next partition of {topic.name} is {len(topic.partitions)}")
    if r.leader_epoch < 0 or r.partition_epoch < 0:
        raise _fail(f"PartitionRecord {where} with a negative epoch")
    replicas = tuple(BrokerId(b) for b in r.replicas)
    isr = tuple(BrokerId(b) for b in r.isr)
    leader = BrokerId(r.leader)
    _check_partition_shape(image, where, replicas, isr, leader)
    if r.recovering and leader != NO_LEADER:
        raise _fail(f"PartitionRecord {where} is recovering with leader {leader}: only offline ones recover")
    directories = _isr_directories(where, isr, tuple(r.isr_directory_ids), {})
    adding, removing = _check_reassignment_shape(where, replicas, r.adding_replicas, r.removing_replicas)
    state = PartitionState(
        PartitionId(r.partition_id),
        replicas,
        isr,
        leader,
        LeaderEpoch(r.leader_epoch),
        PartitionEpoch(r.partition_epoch),
        directories,
        adding,
        removing,
        r.recovering,
    )
    ctx.journal.append(topic.partitions, state)
    ctx.count_replicas(replicas, +1)


def _partition_change(image: MetadataImage, r: metadata_pb2.PartitionChangeRecord, ctx: _Context) -> None:
    topic = image.topics_by_id.get(TopicId(r.topic_id))
    if topic is None or not 0 <= r.partition_id < len(topic.partitions):
        raise _fail(f"PartitionChange for unknown partition {r.topic_id}/{r.partition_id}")
    old = topic.partitions[r.partition_id]
    where = f"{topic.name}-{r.partition_id}"
    if r.cause == metadata_pb2.CAUSE_UNSPECIFIED:
        raise _fail(f"PartitionChange {where} without a cause")
    has_leader = r.HasField("leader")
    has_isr = r.HasField("isr")
    leader = BrokerId(r.leader) if has_leader else old.leader
    isr = tuple(BrokerId(b) for b in r.isr.broker_ids) if has_isr else old.isr
    if has_leader and leader == old.leader:
        raise _fail(f"PartitionChange {where} sets the leader to the current leader {leader}")
    if r.HasField("recovering") and r.recovering and leader != NO_LEADER:
        raise _fail(
            f"PartitionChange {where} sets recovering with leader {leader}: only offline ones recover"
        )
    # A new leader ends recovery (metadata.proto); otherwise the record says, or it is unchanged.
    recovering = r.recovering if r.HasField("recovering") else old.recovering
    recovering = recovering and leader == NO_LEADER
    if not has_leader and isr == old.isr and recovering == old.recovering:
        raise _fail(f"PartitionChange {where} changes neither the leader, the ISR nor recovery")
    _check_partition_shape(image, where, old.replicas, isr, leader)
    if has_isr:
        kept = {b: old.recorded_directory(b) for b in old.isr}
        directories = _isr_directories(where, isr, tuple(r.isr_directory_ids), kept)
    else:
        if r.isr_directory_ids:
            raise _fail(f"PartitionChange {where} gives ISR directory ids without an ISR")
        directories = (
            old.isr_directory_ids if len(old.isr_directory_ids) == len(old.isr) else ("",) * len(isr)
        )
    new = PartitionState(
        old.partition_id,
        old.replicas,
        isr,
        leader,
        LeaderEpoch(old.leader_epoch + 1) if has_leader else old.leader_epoch,
        PartitionEpoch(old.partition_epoch + 1),
        directories,
        old.adding_replicas,
        old.removing_replicas,
        recovering,
    )
    ctx.journal.replace(topic.partitions, r.partition_id, new)


def _partition_reassignment(
    image: MetadataImage, r: metadata_pb2.PartitionReassignmentRecord, ctx: _Context
) -> None:
    """A partition's replica set changes (a reassignment starts, completes or is cancelled): the
    record carries the replicas, adding and removing after it; leader and ISR when they change."""
    topic = image.topics_by_id.get(TopicId(r.topic_id))
    if topic is None or not 0 <= r.partition_id < len(topic.partitions):
        raise _fail(f"PartitionReassignment for unknown partition {r.topic_id}/{r.partition_id}")
    old = topic.partitions[r.partition_id]
    where = f"{topic.name}-{r.partition_id}"
    replicas = tuple(BrokerId(b) for b in r.replicas)
    has_leader = r.HasField("leader")
    leader = BrokerId(r.leader) if has_leader else old.leader
    isr = tuple(BrokerId(b) for b in r.isr.broker_ids) if r.HasField("isr") else old.isr
    _check_partition_shape(image, where, replicas, isr, leader)
    adding, removing = _check_reassignment_shape(where, replicas, r.adding_replicas, r.removing_replicas)
    # Only replicas that were there, or are being added now, may be in sync: a reassignment never
    # vouches for a replica that has not caught up through the leader's AlterPartition.
    if not set(isr) <= set(old.isr):
        raise _fail(f"PartitionReassignment {where} puts {sorted(set(isr) - set(old.isr))} into the ISR")
    if r.HasField("isr"):
        kept = {b: old.recorded_directory(b) for b in old.isr}
        directories = _isr_directories(where, isr, tuple(r.isr_directory_ids), kept)
    elif r.isr_directory_ids:
        raise _fail(f"PartitionReassignment {where} gives ISR directory ids without an ISR")
    else:
        directories = old.isr_directory_ids
    changed_leader = has_leader and leader != old.leader
    new = PartitionState(
        old.partition_id,
        replicas,
        isr,
        leader,
        LeaderEpoch(old.leader_epoch + 1) if changed_leader else old.leader_epoch,
        PartitionEpoch(old.partition_epoch + 1),
        directories,
        adding,
        removing,
        old.recovering and leader == NO_LEADER,
    )
    ctx.journal.replace(topic.partitions, r.partition_id, new)
    ctx.count_replicas(old.replicas, -1)
    ctx.count_replicas(replicas, +1)


def _check_reassignment_shape(
    where: str, replicas: tuple[BrokerId, ...], adding: Iterable[int], removing: Iterable[int]
) -> tuple[tuple[BrokerId, ...], tuple[BrokerId, ...]]:
    """Adding and removing replicas are distinct members of `replicas`, apart from each other, and leave
    at least one target replica (what a reassignment moves to)."""
    add = tuple(BrokerId(b) for b in adding)
    remove = tuple(BrokerId(b) for b in removing)
    if len(set(add)) != len(add) or len(set(remove)) != len(remove) or set(add) & set(remove):
        raise _fail(f"partition {where}: adding {list(add)} and removing {list(remove)} must be distinct")
    if not set(add) | set(remove) <= set(replicas):
        raise _fail(
            f"partition {where}: adding/removing replicas must be among its replicas {list(replicas)}"
        )
    if len(remove) >= len(replicas):
        raise _fail(f"partition {where}: a reassignment cannot remove every replica")
    return add, remove


def _isr_directories(
    where: str, isr: tuple[BrokerId, ...], given: tuple[str, ...], kept: dict[BrokerId, str]
) -> tuple[str, ...]:
    """The ISR's directory ids: `given` (one per member, in ISR order) when a record carries them; else
    what members that stay had (`kept`) and "" (unknown) for new ones, which is how records written
    before directory ids replay."""
    if not given:
        return tuple(kept.get(b, "") for b in isr)
    if len(given) != len(isr):
        raise _fail(f"partition {where}: {len(given)} ISR directory ids for an ISR of {len(isr)}")
    return given


def _check_partition_shape(
    image: MetadataImage,
    where: str,
    replicas: tuple[BrokerId, ...],
    isr: tuple[BrokerId, ...],
    leader: BrokerId,
) -> None:
    if not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
        raise _fail(f"partition {where}: replicas {list(replicas)} must be distinct broker ids, at least one")
    # The ISR is never empty: when the last in-sync replica goes, it stays listed (KRaft's rule) so
    # that an election knows which replica holds every committed record.
    if not isr or len(set(isr)) != len(isr) or not set(isr) <= set(replicas):
        raise _fail(
            f"partition {where}: ISR {list(isr)} must be distinct replicas of {list(replicas)}, at least one"
        )
    if leader == NO_LEADER:
        return
    if leader not in isr:
        raise _fail(f"partition {where}: leader {leader} is not in the ISR {list(isr)}")
    for broker in isr:
        # Fenced brokers lead nothing and leave every ISR that has a leader; an election that put one
        # back would give the partition a replica nobody checks on.
        if not image.is_live(broker):
            raise _fail(f"partition {where}: ISR member {broker} of a led partition is not a live broker")


# -- remote logs (tiered storage) ----------------------------------------------------------------------


def _remote_log_segment(
    image: MetadataImage, r: metadata_pb2.RemoteLogSegmentRecord, ctx: _Context
) -> None:
    key = (TopicId(r.topic_id), PartitionId(r.partition_id))
    if image.partition(r.topic_id, r.partition_id) is None:
        raise _fail(f"RemoteLogSegment for unknown partition {r.topic_id}/{r.partition_id}")
    log = image.remote_logs.get(key, NO_REMOTE_LOG)
    segment = RemoteSegment.from_record(r)
    try:
        check_segment(RemoteTail.of(log), segment)
    except KanalError as exc:
        raise _fail(
            f"RemoteLogSegment of {r.topic_id}/{r.partition_id} after {log!r}: {exc.message}"
        ) from None
    ctx.journal.put(image.remote_logs, key, with_segment(log, segment))


def _remote_log_start(image: MetadataImage, r: metadata_pb2.RemoteLogStartRecord, ctx: _Context) -> None:
    key = (TopicId(r.topic_id), PartitionId(r.partition_id))
    if image.partition(r.topic_id, r.partition_id) is None:
        raise _fail(f"RemoteLogStart for unknown partition {r.topic_id}/{r.partition_id}")
    log = image.remote_logs.get(key, NO_REMOTE_LOG)
    try:
        check_new_start(RemoteTail.of(log), r.log_start_offset)
    except KanalError as exc:
        raise _fail(f"RemoteLogStart of {r.topic_id}/{r.partition_id} on {log!r}: {exc.message}") from None
    ctx.journal.put(image.remote_logs, key, with_start(log, r.log_start_offset))


# -- configs, quotas, producer ids ---------------------------------------------------------------------


def _config(image: MetadataImage, r: metadata_pb2.ConfigRecord, ctx: _Context) -> None:
    if r.resource_type == metadata_pb2.CONFIG_RESOURCE_TOPIC:
        topic = image.topics.get(r.resource_name)
        if topic is None:
            raise _fail(f"ConfigRecord for unknown topic {r.resource_name!r}")
        configs = topic.configs
    elif r.resource_type == metadata_pb2.CONFIG_RESOURCE_BROKER:
        try:
            check_broker_resource_name(r.resource_name)
        except KanalError as exc:
            raise _fail(f"ConfigRecord: {exc.message}") from None
        configs = image.broker_configs.get(r.resource_name, {})
    else:
        raise _fail(f"ConfigRecord with unknown resource type {r.resource_type}")
    where = f"{metadata_pb2.ConfigResourceType.Name(r.resource_type)} {r.resource_name!r}"
    if r.HasField("value"):
        try:
            check_stored_config_value(r.key, r.value)
        except KanalError as exc:
            raise _fail(f"ConfigRecord for {where}: {exc.message}") from None
        if (
            r.resource_type == metadata_pb2.CONFIG_RESOURCE_BROKER
            and r.resource_name not in image.broker_configs
        ):
            ctx.journal.put(image.broker_configs, r.resource_name, configs)
        ctx.journal.put(configs, r.key, r.value)
        return
    if r.key not in configs:
        raise _fail(f"ConfigRecord removes {r.key!r} from {where}, where it is not set")
    ctx.journal.delete(configs, r.key)
    # Keep the image canonical: no empty config maps (a snapshot could not reproduce them).
    if not configs and r.resource_type == metadata_pb2.CONFIG_RESOURCE_BROKER:
        ctx.journal.delete(image.broker_configs, r.resource_name)


def _client_quota(image: MetadataImage, r: metadata_pb2.ClientQuotaRecord, ctx: _Context) -> None:
    if r.entity_type not in QUOTA_ENTITY_TYPES or r.key not in QUOTA_KEYS:
        raise _fail(f"ClientQuotaRecord with unknown entity type {r.entity_type!r} or key {r.key!r}")
    # A user+client-id entity (client_id set, user entities only) lives in its own map.
    if r.HasField("client_id"):
        if r.entity_type != "user":
            raise _fail(f"ClientQuotaRecord gives a client id to a {r.entity_type!r} entity")
        entities, entity = image.user_client_quotas, (r.entity_name, r.client_id)
    else:
        entities, entity = image.client_quotas, (r.entity_type, r.entity_name)
    quotas = entities.get(entity)
    if r.HasField("value"):
        if not math.isfinite(r.value) or r.value <= 0:
            raise _fail(f"ClientQuotaRecord sets {r.key} of {entity} to {r.value}, not a finite number > 0")
        if quotas is None:
            quotas = {}
            ctx.journal.put(entities, entity, quotas)
        ctx.journal.put(quotas, r.key, r.value)
        return
    if quotas is None or r.key not in quotas:
        raise _fail(f"ClientQuotaRecord removes {r.key} of {entity}, which is not set")
    ctx.journal.delete(quotas, r.key)
    if not quotas:
        ctx.journal.delete(entities, entity)


def _producer_ids(image: MetadataImage, r: metadata_pb2.ProducerIdsRecord, ctx: _Context) -> None:
    # Producer ids are never handed out twice: the counter only grows.
    if r.next_producer_id <= image.next_producer_id:
        raise _fail(
            f"ProducerIdsRecord moves next producer id from {image.next_producer_id} to {r.next_producer_id}"
        )
    # broker_id -1 marks the record a snapshot writes, which restores the counter for no broker.
    if r.broker_id >= 0:
        reg = image.brokers.get(BrokerId(r.broker_id))
        if reg is None or reg.broker_epoch != r.broker_epoch:
            raise _fail(f"ProducerIdsRecord for broker {r.broker_id} epoch {r.broker_epoch}, not registered")
    ctx.journal.set(image, "next_producer_id", ProducerId(r.next_producer_id))


def _controller_registration(
    image: MetadataImage, r: metadata_pb2.ControllerRegistrationRecord, ctx: _Context
) -> None:
    if r.controller_id < 0 or not r.directory_id:
        raise _fail(f"ControllerRegistration needs a controller id >= 0 and a directory id, got {r}")
    recorded = image.controller_directories.get(r.controller_id)
    if r.removed:
        if recorded != r.directory_id:
            raise _fail(f"ControllerRegistration removal of controller {r.controller_id} directory "
                        f"{r.directory_id}, recorded as {recorded}")
        if any(v.controller_id == r.controller_id for v in image.voters):
            raise _fail(f"ControllerRegistration removal of controller {r.controller_id}, still a voter")
        ctx.journal.delete(image.controller_directories, r.controller_id)
        return
    if recorded is not None and recorded != r.directory_id:
        # KIP-853: a voter's directory id is what tells its disk from an empty or another one; it is
        # never overwritten (the decision refuses), or the check at start would pass on a wrong disk.
        raise _fail(
            f"ControllerRegistration of controller {r.controller_id} with directory {r.directory_id}, "
            f"recorded already with {recorded}"
        )
    ctx.journal.put(image.controller_directories, r.controller_id, r.directory_id)


def _access_control_entry(
    image: MetadataImage, r: metadata_pb2.AccessControlEntryRecord, ctx: _Context
) -> None:
    entry = _acl_entry(r.entry, "AccessControlEntry")
    present = image.acls.get(entry.resource, EMPTY_ACL_SET)
    if entry in present:
        # The decision leaves out entries that exist: a second copy would make one removal not enough.
        raise _fail(f"AccessControlEntry {entry!r} exists already")
    ctx.journal.put(image.acls, entry.resource, present.with_entry(entry))


def _remove_access_control_entry(
    image: MetadataImage, r: metadata_pb2.RemoveAccessControlEntryRecord, ctx: _Context
) -> None:
    entry = _acl_entry(r.entry, "RemoveAccessControlEntry")
    present = image.acls.get(entry.resource, EMPTY_ACL_SET)
    if entry not in present:
        raise _fail(f"RemoveAccessControlEntry {entry!r}, which does not exist")
    rest = present.without(entry)
    if rest:
        ctx.journal.put(image.acls, entry.resource, rest)
    else:
        # No empty sets: the image stays canonical (a snapshot could not reproduce one).
        ctx.journal.delete(image.acls, entry.resource)


def _acl_entry(proto: metadata_pb2.AccessControlEntry, what: str) -> AclEntry:
    entry = AclEntry.from_proto(proto)
    try:
        check_entry(entry)
    except KanalError as exc:
        raise _fail(f"{what} that is not well formed: {exc.message}") from None
    return entry


def _user_scram_credential(
    image: MetadataImage, r: metadata_pb2.UserScramCredentialRecord, ctx: _Context
) -> None:
    if not r.name or r.mechanism not in MECHANISMS or not ITERATIONS_MIN <= r.iterations <= ITERATIONS_MAX:
        raise _fail(f"UserScramCredentialRecord for {r.name!r} with mechanism {r.mechanism!r} and "
                    f"{r.iterations} iterations")
    if not r.salt or not r.stored_key or not r.server_key:
        raise _fail(f"UserScramCredentialRecord for {r.name!r} without salt, stored key or server key")
    credentials = image.scram_credentials.get(r.name)
    if credentials is None:
        credentials = {}
        ctx.journal.put(image.scram_credentials, r.name, credentials)
    ctx.journal.put(credentials, r.mechanism,
                    ScramCredential(r.mechanism, r.salt, r.iterations, r.stored_key, r.server_key))


def _remove_user_scram_credential(
    image: MetadataImage, r: metadata_pb2.RemoveUserScramCredentialRecord, ctx: _Context
) -> None:
    credentials = image.scram_credentials.get(r.name)
    if credentials is None or r.mechanism not in credentials:
        raise _fail(f"RemoveUserScramCredentialRecord removes {r.mechanism} of {r.name!r}, which is not set")
    ctx.journal.delete(credentials, r.mechanism)
    if not credentials:  # canonical: no empty maps (a snapshot could not reproduce them)
        ctx.journal.delete(image.scram_credentials, r.name)


def _voter_set(image: MetadataImage, r: metadata_pb2.VoterSetRecord, ctx: _Context) -> None:
    # The whole set after a change, so a replay needs no earlier record; the set's well-formedness is the
    # only rule here (majority and one-at-a-time are the decision's, against live state: quorum_voters.py).
    voters = tuple(sorted(QuorumVoter.from_proto(v) for v in r.voters))
    malformed = check_voter_set(voters)
    if malformed is not None:
        raise _fail(f"VoterSetRecord: {malformed}")
    ctx.journal.set(image, "voters", voters)


def _cluster_identity(image: MetadataImage, r: metadata_pb2.ClusterIdentityRecord, ctx: _Context) -> None:
    problem = cluster_id_problem(r.cluster_id)
    if problem is not None:
        raise _fail(f"ClusterIdentityRecord: {problem}")
    if image.cluster_id and image.cluster_id != r.cluster_id:
        # Written once (cluster_identity.py decides only on an image without one): a second, different id
        # would make every node's meta.properties name the wrong cluster.
        raise _fail(f"ClusterIdentityRecord {r.cluster_id!r}: the log records cluster {image.cluster_id!r}")
    ctx.journal.set(image, "cluster_id", r.cluster_id)


# -- the schema registry -------------------------------------------------------------------------------


def _schema(image: MetadataImage, r: metadata_pb2.SchemaRecord, ctx: _Context) -> None:
    if r.id <= 0:
        raise _fail(f"SchemaRecord with id {r.id}: schema ids are positive")
    if SchemaId(r.id) in image.schemas:
        # The decision takes image.next_schema_id or an IMPORT id it checked is free: a second text for an
        # id would make every record already written with that id decode as something else.
        raise _fail(f"SchemaRecord for id {r.id}, which names {image.schemas[SchemaId(r.id)]!r} already")
    try:
        schema = StoredSchema.from_record(r)
    except ValueError:
        raise _fail(f"SchemaRecord {r.id} of unknown type {r.schema_type!r}") from None
    if not schema.text:
        raise _fail(f"SchemaRecord {r.id} without a schema text")
    for ref in schema.references:
        if not ref.name or not ref.subject or ref.version < 1:
            raise _fail(f"SchemaRecord {r.id} with malformed reference {ref}: a name, a subject, a "
                        "version >= 1")
    journal = ctx.journal
    journal.put(image.schemas, schema.schema_id, schema)
    content = schema.content
    journal.put(image.schema_ids_by_content, content,
                tuple(sorted((*image.schema_ids_by_content.get(content, ()), schema.schema_id))))
    for key in {(ref.subject, ref.version) for ref in schema.references}:
        journal.put(image.referenced_by, key,
                    tuple(sorted((*image.referenced_by.get(key, ()), schema.schema_id))))
    if schema.schema_id >= image.next_schema_id:
        journal.set(image, "next_schema_id", SchemaId(schema.schema_id + 1))


def _subject_version(image: MetadataImage, r: metadata_pb2.SubjectVersionRecord, ctx: _Context) -> None:
    where = f"version {r.version} of subject {r.subject!r}"
    if not r.subject or r.version < 1:
        raise _fail(f"SubjectVersionRecord for {where}: a subject and a version >= 1")
    schema_id = SchemaId(r.schema_id)
    if schema_id not in image.schemas:
        raise _fail(f"SubjectVersionRecord for {where} names unknown schema {r.schema_id}")
    versions = image.subjects.get(r.subject)
    existing = versions.get(r.version) if versions is not None else None
    if versions is not None and existing is not None:
        # A client that read version N keeps decoding with its schema: a version never changes schema; the
        # record only soft-deletes it or brings it back (an IMPORT of the same schema at that version).
        if existing.schema_id != schema_id:
            raise _fail(f"SubjectVersionRecord moves {where} from schema {existing.schema_id} to "
                        f"{r.schema_id}")
        if existing.deleted == r.deleted:
            raise _fail(f"SubjectVersionRecord for {where} changes nothing ({existing!r})")
        if r.deleted:
            _check_unreferenced(image, r.subject, r.version, live_only=True)
        ctx.journal.put(versions, r.version, SchemaVersion(schema_id, r.deleted))
        return
    if versions is None:
        versions = {}
        ctx.journal.put(image.subjects, r.subject, versions)
    ctx.journal.put(versions, r.version, SchemaVersion(schema_id, r.deleted))
    ctx.journal.put(image.schema_holders, schema_id,
                    image.schema_holders.get(schema_id, frozenset()) | {(r.subject, r.version)})


def _remove_subject_version(
    image: MetadataImage, r: metadata_pb2.RemoveSubjectVersionRecord, ctx: _Context
) -> None:
    where = f"version {r.version} of subject {r.subject!r}"
    versions = image.subjects.get(r.subject)
    existing = versions.get(r.version) if versions is not None else None
    if versions is None or existing is None:
        raise _fail(f"RemoveSubjectVersionRecord for {where}, which does not exist")
    if not existing.deleted:
        # Confluent's two steps: a hard delete only follows a soft one, so no live version vanishes at once.
        raise _fail(f"RemoveSubjectVersionRecord for {where}, which is not soft-deleted")
    _check_unreferenced(image, r.subject, r.version, live_only=False)
    ctx.journal.delete(versions, r.version)
    if not versions:  # canonical: no empty subjects (a snapshot could not reproduce one)
        ctx.journal.delete(image.subjects, r.subject)
    held = image.schema_holders[existing.schema_id] - {(r.subject, r.version)}
    if held:
        ctx.journal.put(image.schema_holders, existing.schema_id, held)
    else:  # an orphan now: kept in image.schemas (its id is never reused), held by no version
        ctx.journal.delete(image.schema_holders, existing.schema_id)


def _check_unreferenced(image: MetadataImage, subject: str, version: int, *, live_only: bool) -> None:
    """Refuse to delete a version a held schema references: the referrer could no longer be parsed. A soft
    delete (`live_only`) minds live holders only, as Confluent does: a soft-deleted referrer is hidden too."""
    for schema_id in image.referenced_by.get((subject, version), ()):
        for holder_subject, holder_version in sorted(image.schema_holders.get(schema_id, ())):
            if live_only and image.subjects[holder_subject][holder_version].deleted:
                continue
            raise _fail(f"deleting version {version} of subject {subject!r}, which schema {schema_id} "
                        f"(version {holder_version} of {holder_subject!r}) references")


def _registry_config(image: MetadataImage, r: metadata_pb2.RegistryConfigRecord, ctx: _Context) -> None:
    where = f"subject {r.subject!r}" if r.subject else "the registry"
    if not r.compatibility:
        if r.normalize:
            raise _fail(f"RegistryConfigRecord removes the config of {where} and sets normalize")
        if r.subject not in image.registry_configs:
            raise _fail(f"RegistryConfigRecord removes the config of {where}, which has none")
        ctx.journal.delete(image.registry_configs, r.subject)
        return
    try:
        level = CompatibilityLevel(r.compatibility)
    except ValueError:
        raise _fail(f"RegistryConfigRecord for {where} with unknown level {r.compatibility!r}") from None
    ctx.journal.put(image.registry_configs, r.subject, RegistryConfig(level, r.normalize))


def _registry_mode(image: MetadataImage, r: metadata_pb2.RegistryModeRecord, ctx: _Context) -> None:
    where = f"subject {r.subject!r}" if r.subject else "the registry"
    if not r.mode:
        if r.subject not in image.registry_modes:
            raise _fail(f"RegistryModeRecord removes the mode of {where}, which has none")
        ctx.journal.delete(image.registry_modes, r.subject)
        return
    try:
        mode = RegistryMode(r.mode)
    except ValueError:
        raise _fail(f"RegistryModeRecord for {where} with unknown mode {r.mode!r}") from None
    ctx.journal.put(image.registry_modes, r.subject, mode)


def _no_op(image: MetadataImage, r: metadata_pb2.NoOpRecord, ctx: _Context) -> None:
    """Changes nothing: it only makes a new controller's epoch visible in the log."""


_HANDLERS: dict[str, Callable[[MetadataImage, Any, _Context], None]] = {
    "register_broker": _register_broker,
    "broker_registration_change": _registration_change,
    "unregister_broker": _unregister_broker,
    "topic": _topic,
    "partition": _partition,
    "partition_change": _partition_change,
    "partition_reassignment": _partition_reassignment,
    "remove_topic": _remove_topic,
    "config": _config,
    "client_quota": _client_quota,
    "producer_ids": _producer_ids,
    "no_op": _no_op,
    "cluster_identity": _cluster_identity,
    "voter_set": _voter_set,
    "controller_registration": _controller_registration,
    "access_control_entry": _access_control_entry,
    "remove_access_control_entry": _remove_access_control_entry,
    "user_scram_credential": _user_scram_credential,
    "remove_user_scram_credential": _remove_user_scram_credential,
    "remote_log_segment": _remote_log_segment,
    "remote_log_start": _remote_log_start,
    "schema": _schema,
    "subject_version": _subject_version,
    "remove_subject_version": _remove_subject_version,
    "registry_config": _registry_config,
    "registry_mode": _registry_mode,
}


# -- end of batch --------------------------------------------------------------------------------------


def _update_counts(image: MetadataImage, ctx: _Context) -> None:
    """Fold the call's replica and preferred-leader count changes into the image's indexes."""
    for counts, deltas in (
        (image.preferred_leader_counts, ctx.lead_deltas),
        (image.replica_counts, ctx.hold_deltas),
    ):
        for broker, delta in deltas.items():
            if delta == 0:
                continue
            count = counts.get(broker, 0) + delta
            if count < 0:
                raise _fail(f"replica counts of broker {broker} would go negative: an index is broken")
            if count == 0:
                # No zero entries: the index must equal build_indexes, which has none.
                ctx.journal.delete(counts, broker)
            else:
                ctx.journal.put(counts, broker, count)


def _check_batch_end(image: MetadataImage, ctx: _Context) -> None:
    for topic in ctx.created_topics:
        # A topic is created with its partitions in one batch; a topic without any could never be used.
        if image.topics.get(topic.name) is topic and not topic.partitions:
            raise _fail(f"topic {topic.name} was created without partitions")
    gone = {b for b in ctx.departed_brokers if not image.is_live(b)}
    if not gone:
        return
    for topic, partition in image.iter_partitions():
        if partition.leader in gone:
            raise _fail(
                f"{topic.name}-{partition.partition_id} is still led by fenced broker {partition.leader}"
            )
        if partition.leader != NO_LEADER and gone.intersection(partition.isr):
            raise _fail(
                f"{topic.name}-{partition.partition_id} keeps fenced brokers "
                f"{sorted(gone & set(partition.isr))} in its ISR"
            )
