"""Replay: the metadata log applied in order, turned into the cluster's history. A pure core.

Topic lifecycle events: `topic_created`, `partitions_increased` (a decision adding partitions to a topic
that already existed: "N -> M partitions"), `topic_deleted`; each carries the topic id, so a name deleted
and re-created is two topics.

Schema registry events (issue 45): `schema_registered` (a subject's new version; its detail says whether
the id is new), `schema_restored` (a soft-deleted version registered again, IMPORT), `schema_soft_deleted`,
`schema_hard_deleted`, `registry_config_set` / `registry_config_removed` and `registry_mode_set` /
`registry_mode_removed` (`subject` null for the registry-wide setting); each with subject, version, schema id
and type where they apply, and the principal who asked.

Input: the log's records in offset order (`ReplayRow`: offset, batch, controller epoch, time, principal,
request id, the serialized MetadataRecord, or a damage report). Output (`History`): one `Event` per
thing that happened, intervals of partition trouble (under-replicated, offline) and broker fencing, and
the final image.

Two images. `image` is the one that counts: each batch goes through kanal.metadata.apply_batch, exactly as
on the controllers, the brokers and in tests, so the final image is comparable with the controllers'.
`trail` follows the same records one at a time with kanal.metadata.apply, so each event can say what a
record changed (leader before and after, the ISR it shrank from, the config value it replaced). A batch
that apply_batch fences (a deposed controller's) is skipped by both.

Damage and invariant failures stop the replay: a state machine cannot skip a record and stay right. The
stop is an event (`log_damage` or `replay_error`) and the final image is the one reached before it, so the
comparison with the controllers reports the difference instead of hiding it.

A log whose start is past 0 (the controllers deleted segments below a snapshot) is replayed from a
snapshot file (replay_start.py): its image is the initial state of both images, recorded as a
`snapshot_loaded` event (time: when the controller wrote the file), fenced brokers and troubled
partitions in it open intervals there, rows below its offset are skipped, and the log must continue
exactly at its offset. The history before it is not available.

Intervals are closed by the record that ends them; those still open at the end of the log end at the last
record's time with `open` set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import groupby
from typing import cast

from google.protobuf.message import DecodeError

from kanal.metadata import MetadataImage, MetadataInvariantError, apply, apply_batch, image_from_snapshot
from kanal.metadata.acl import operation_name, pattern_name, permission_name, resource_type_name
from kanal.metadata.image import GLOBAL_SUBJECT, RemoteSegment, SchemaId, SchemaVersion
from kanal.metadata.snapshot import SNAPSHOT_PRINCIPAL
from kanal.spark.replay_start import ReplayStart
from kanal.v1 import metadata_pb2
from kanal.v1.wire_enum import enum_name

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class ReplayRow:
    offset: int
    batch_offset: int | None
    controller_epoch: int | None
    time_ms: int | None
    record: bytes | None
    corrupt: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to the cluster, as a row of the audit's `events` table."""

    offset: int
    batch_offset: int
    controller_epoch: int
    time_ms: int
    principal: str
    request_id: str
    event: str
    topic: str | None = None
    topic_id: str | None = None
    partition: int | None = None
    broker_id: int | None = None
    broker_epoch: int | None = None
    leader_before: int | None = None
    leader_after: int | None = None
    leader_epoch: int | None = None
    isr_before: list[int] | None = None
    isr_after: list[int] | None = None
    replicas: list[int] | None = None
    isr_change: str | None = None  # shrink, expand, replace
    cause: str | None = None
    reason: str | None = None
    resource_type: str | None = None
    resource: str | None = None
    key: str | None = None
    value_before: str | None = None
    value_after: str | None = None
    duration_ms: int | None = None  # unfence: how long the broker was fenced
    detail: str | None = None
    # Tiered storage: remote_segment_uploaded's segment [base_offset, end_offset) of size_bytes;
    # remote_log_start_moved's new remote log start.
    base_offset: int | None = None
    end_offset: int | None = None
    size_bytes: int | None = None
    log_start_offset: int | None = None
    # The schema registry: the subject (None: the registry-wide config or mode), its version, the schema.
    subject: str | None = None
    version: int | None = None
    schema_id: int | None = None
    schema_type: str | None = None


@dataclass(slots=True)
class Interval:
    """A stretch of time a partition was in trouble or a broker was fenced."""

    kind: str  # under_replicated, offline, fenced
    start_ms: int
    start_offset: int
    topic: str | None = None
    topic_id: str | None = None
    partition: int | None = None
    broker_id: int | None = None
    broker_epoch: int | None = None
    start_reason: str | None = None
    end_ms: int | None = None
    end_offset: int | None = None
    end_reason: str | None = None
    open: bool = False

    @property
    def duration_ms(self) -> int:
        return (self.end_ms if self.end_ms is not None else self.start_ms) - self.start_ms


@dataclass(slots=True)
class History:
    """What a replay produced. replay() fills every field; the audit's replay in Spark (replay_job.py)
    streams `events` and closed `intervals` into tables instead, so on its driver they hold only the
    intervals still open at the end."""

    events: list[Event] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    image: MetadataImage = field(default_factory=MetadataImage)
    records_applied: int = 0
    batches_applied: int = 0
    batches_fenced: int = 0
    stopped: str | None = None  # why the replay stopped early, None when it reached the end
    last_time_ms: int = 0


def replay(rows: Iterable[ReplayRow], start: ReplayStart | None = None) -> History:
    """Apply every batch in order and record what each record did. With `start` (a log whose start is
    past 0): begin from its snapshot's image and apply only the rows from the snapshot's offset on."""
    return Replayer(start).run(rows)


def interval_order(i: Interval) -> tuple:
    """The order of the intervals tables: by where they start, ties broken so the order is total."""
    return (i.start_offset, i.kind, i.topic or "", i.partition or 0, i.broker_id or 0)


class Replayer:
    def __init__(self, start: ReplayStart | None = None) -> None:
        self.h = History()
        self.trail = MetadataImage()
        self.open: dict[tuple, Interval] = {}
        self.start = start
        self.first_offset = 0  # rows below it are in the snapshot the replay starts from
        self.pending: list[ReplayRow] = []  # the last batch's rows, until its end is known (feed)

    def run(self, rows: Iterable[ReplayRow]) -> History:
        self.begin()
        self.feed(rows)
        self.flush()
        return self.finish()

    # The replay in steps, for a replay fed in parts (replay_job.py: chunk after chunk, the replayer
    # pickled between them): begin once, feed rows in offset order, flush where a part ends on a batch
    # boundary, finish once at the log's end. `events` and `intervals` of `self.h` only grow; a caller
    # that streams them out takes them away between feeds (take_output).

    def begin(self) -> None:
        """Set the initial state: empty, or the snapshot the replay starts from."""
        start, self.start = self.start, None  # the snapshot is in the images now; do not carry it along
        if start is not None and start.log_start_offset > 0:
            if start.snapshot is None:
                why = (f"the metadata log starts at offset {start.log_start_offset} and no readable "
                       f"snapshot at or past it is there: nothing can be replayed")
                self.h.stopped = f"offset {start.log_start_offset}: {why}"
                self.h.events.append(
                    Event(start.log_start_offset, start.log_start_offset, 0, 0, "", "", "replay_error",
                          detail=why)
                )
                return
            self.first_offset = self._load_snapshot(start)

    def feed(self, rows: Iterable[ReplayRow]) -> None:
        """Apply rows in offset order. The last batch's rows are held back until the next feed or flush:
        a batch's rows may arrive in two feeds."""
        for _key, group in groupby(rows, key=lambda r: (r.batch_offset, r.corrupt is not None)):
            if self.h.stopped is not None:
                return
            batch = list(group)
            if self.pending and (self.pending[0].batch_offset, self.pending[0].corrupt is not None) == _key:
                self.pending.extend(batch)
                continue
            self.flush()
            self.pending = batch

    def flush(self) -> None:
        """Apply the rows held back: the caller says no more rows of that batch follow."""
        batch, self.pending = self.pending, []
        if not batch or self.h.stopped is not None:
            return
        first = batch[0]
        if first.corrupt is None and first.offset < self.first_offset:
            return  # in the log, but before the snapshot the replay starts from
        if first.corrupt is not None:
            self._stop(first, "log_damage", first.corrupt)
            return
        self._batch(batch)

    def finish(self) -> History:
        """The log's end: what is still open ends at the last record's time, marked open."""
        self.flush()
        for interval in self.open.values():
            interval.end_ms = self.h.last_time_ms
            interval.open = True
            self.h.intervals.append(interval)
        self.open.clear()
        self.h.intervals.sort(key=interval_order)
        return self.h

    def take_output(self) -> tuple[list[Event], list[Interval]]:
        """The events and closed intervals since the last call, taken out of the history."""
        events, intervals = self.h.events, self.h.intervals
        self.h.events, self.h.intervals = [], []
        return events, intervals

    def _load_snapshot(self, start: ReplayStart) -> int:
        """The snapshot's image as the initial state, recorded as a `snapshot_loaded` event; what was
        already wrong in it (fenced brokers, troubled partitions) opens intervals that start there."""
        loaded = start.snapshot
        if loaded is None:
            raise ValueError("a replay start without a snapshot")
        snapshot = loaded.snapshot
        self.h.image = image_from_snapshot(snapshot)
        self.trail = image_from_snapshot(snapshot)
        offset = snapshot.next_offset
        at = offset - 1  # the last offset the snapshot holds, so the event sorts before the log after it
        time_ms = loaded.written_ms
        self.h.last_time_ms = time_ms
        self.h.events.append(
            Event(
                at,
                at,
                snapshot.controller_epoch,
                time_ms,
                SNAPSHOT_PRINCIPAL,
                f"snapshot-{offset}",
                "snapshot_loaded",
                detail=(
                    f"initial state: the image at offset {offset} from {start.snapshot_path}; the history of "
                    f"offsets below {offset} is not in the metadata log any more (log start "
                    f"{start.log_start_offset})"
                ),
            )
        )
        reason = "already at the snapshot"
        for broker in self.h.image.brokers.values():
            if broker.fenced:
                self._begin(("fenced", broker.broker_id), Interval(
                    "fenced", time_ms, at, broker_id=broker.broker_id, broker_epoch=broker.broker_epoch,
                    start_reason=reason))
        for topic, p in self.h.image.iter_partitions():
            self._health_at(
                at,
                time_ms,
                topic.name,
                topic.topic_id,
                p.partition_id,
                list(p.replicas),
                list(p.isr),
                p.leader,
                reason,
            )
        return offset

    def _stop(self, row: ReplayRow, event: str, why: str) -> None:
        self.h.stopped = f"offset {row.offset}: {why}"
        self.h.events.append(
            Event(
                row.offset,
                row.batch_offset if row.batch_offset is not None else row.offset,
                row.controller_epoch or 0,
                row.time_ms or self.h.last_time_ms,
                "",
                "",
                event,
                detail=why,
            )
        )

    def _batch(self, rows: list[ReplayRow]) -> bool:
        first = rows[0]
        try:
            records = [metadata_pb2.MetadataRecord.FromString(r.record or b"") for r in rows]
        except DecodeError as exc:
            self._stop(first, "replay_error", f"a record does not parse: {exc}")
            return False
        batch = metadata_pb2.MetadataBatch(controller_epoch=first.controller_epoch or 0, records=records)
        base = first.batch_offset if first.batch_offset is not None else first.offset
        try:
            applied = apply_batch(self.h.image, batch, base)
        except MetadataInvariantError as exc:
            self._stop(first, "replay_error", str(exc))
            return False
        if not applied:
            self.h.batches_fenced += 1
            self.trail.next_offset = self.h.image.next_offset
            self._event(
                first,
                records[0],
                "fenced_batch_skipped",
                detail=f"batch of {len(rows)} records from deposed controller epoch {batch.controller_epoch}",
            )
            return True
        self.h.batches_applied += 1
        for row, record in zip(rows, records):
            self.h.last_time_ms = max(self.h.last_time_ms, record.time_ms)
            self._record(row, record, batch)
            self.h.records_applied += 1
        return True

    # -- events ------------------------------------------------------------------------------------

    def _event(self, row: ReplayRow, record: metadata_pb2.MetadataRecord, event: str, **fields) -> Event:
        e = Event(
            row.offset,
            row.batch_offset if row.batch_offset is not None else row.offset,
            row.controller_epoch or 0,
            record.time_ms,
            record.principal,
            record.request_id,
            event,
            **fields,
        )
        self.h.events.append(e)
        return e

    def _record(
        self, row: ReplayRow, record: metadata_pb2.MetadataRecord, batch: metadata_pb2.MetadataBatch
    ) -> None:
        kind = record.WhichOneof("record")
        before = self.trail
        handler = getattr(self, f"_on_{kind}", None)
        # Read what the record is about before applying it to the trail, then apply, then describe.
        context = handler(row, record, getattr(record, kind), before, batch, "before") if handler else None
        apply(self.trail, record)
        if handler:
            handler(row, record, getattr(record, kind), self.trail, batch, context)

    def _on_register_broker(self, row, record, r, image, batch, phase):
        if phase == "before":
            return
        self._event(row, record, "broker_registered", broker_id=r.broker_id, broker_epoch=r.broker_epoch,
                    detail=f"endpoint {r.endpoint} rack {r.rack or '-'} incarnation {r.incarnation_id}"
                           f"{' fenced' if r.fenced else ''}")
        self._end(("fenced", r.broker_id), row, record, "re-registered")
        if r.fenced:
            self._begin(
                ("fenced", r.broker_id),
                Interval(
                    "fenced",
                    record.time_ms,
                    row.offset,
                    broker_id=r.broker_id,
                    broker_epoch=r.broker_epoch,
                    start_reason="registered",
                ),
            )

    def _on_broker_registration_change(self, row, record, r, image, batch, phase):
        if phase == "before":
            reg = image.brokers.get(r.broker_id)
            return reg.fenced if reg is not None else None
        was_fenced = phase
        if r.fenced:
            if was_fenced:
                return
            self._event(row, record, "broker_fenced", broker_id=r.broker_id, broker_epoch=r.broker_epoch,
                        reason=r.reason)
            self._begin(
                ("fenced", r.broker_id),
                Interval(
                    "fenced",
                    record.time_ms,
                    row.offset,
                    broker_id=r.broker_id,
                    broker_epoch=r.broker_epoch,
                    start_reason=r.reason,
                ),
            )
        elif was_fenced:
            interval = self._end(("fenced", r.broker_id), row, record, r.reason)
            self._event(row, record, "broker_unfenced", broker_id=r.broker_id, broker_epoch=r.broker_epoch,
                        reason=r.reason, duration_ms=interval.duration_ms if interval else None)

    def _on_unregister_broker(self, row, record, r, image, batch, phase):
        if phase == "before":
            return
        self._end(("fenced", r.broker_id), row, record, "unregistered")
        self._event(row, record, "broker_unregistered", broker_id=r.broker_id, broker_epoch=r.broker_epoch)

    def _on_topic(self, row, record, r, image, batch, phase):
        if phase == "before":
            return
        partitions = sum(
            1
            for x in batch.records
            if x.WhichOneof("record") == "partition" and x.partition.topic_id == r.topic_id
        )
        self._event(row, record, "topic_created", topic=r.name, topic_id=r.topic_id,
                    detail=f"{partitions} partitions")

    def _on_partition(self, row, record, r, image, batch, phase):
        if phase == "before":
            return
        topic = image.topic_by_id(r.topic_id)
        name = topic.name if topic else None
        added = sorted(x.partition.partition_id for x in batch.records
                       if x.WhichOneof("record") == "partition" and x.partition.topic_id == r.topic_id)
        created_here = any(
            x.WhichOneof("record") == "topic" and x.topic.topic_id == r.topic_id for x in batch.records
        )
        if not created_here and r.partition_id == added[0]:
            # Partitions of a topic that already existed: a partition increase, one event per decision.
            self._event(row, record, "partitions_increased", topic=name, topic_id=r.topic_id,
                        detail=f"{added[0]} -> {added[-1] + 1} partitions")
        self._event(
            row,
            record,
            "partition_created",
            topic=name,
            topic_id=r.topic_id,
            partition=r.partition_id,
            leader_after=r.leader,
            leader_epoch=r.leader_epoch,
            isr_after=list(r.isr),
            replicas=list(r.replicas),
        )
        self._health(row, record, name, r.topic_id, r.partition_id, list(r.replicas), list(r.isr), r.leader,
                     "created")

    def _on_partition_change(self, row, record, r, image, batch, phase):
        if phase == "before":
            return image.partition(r.topic_id, r.partition_id)
        old = phase
        new = image.partition(r.topic_id, r.partition_id)
        topic = image.topic_by_id(r.topic_id)
        name = topic.name if topic else None
        isr_before, isr_after = list(old.isr), list(new.isr)
        change = None
        if set(isr_after) < set(isr_before):
            change = "shrink"
        elif set(isr_after) > set(isr_before):
            change = "expand"
        elif set(isr_after) != set(isr_before):
            change = "replace"
        event = "leader_change" if old.leader != new.leader else f"isr_{change or 'unchanged'}"
        self._event(
            row,
            record,
            event,
            topic=name,
            topic_id=r.topic_id,
            partition=r.partition_id,
            leader_before=old.leader,
            leader_after=new.leader,
            leader_epoch=new.leader_epoch,
            isr_before=isr_before,
            isr_after=isr_after,
            replicas=list(new.replicas),
            isr_change=change,
            cause=enum_name(metadata_pb2.PartitionChangeCause, r.cause),
            reason=r.reason,
        )
        self._health(row, record, name, r.topic_id, r.partition_id, list(new.replicas), isr_after, new.leader,
                     r.reason or enum_name(metadata_pb2.PartitionChangeCause, r.cause))

    def _on_remove_topic(self, row, record, r, image, batch, phase):
        if phase == "before":
            topic = image.topic_by_id(r.topic_id)
            return (topic.name, len(topic.partitions)) if topic else (None, 0)
        name, count = phase
        self._event(
            row, record, "topic_deleted", topic=name, topic_id=r.topic_id, detail=f"{count} partitions"
        )
        for key in [k for k in self.open if k[0] != "fenced" and k[1] == r.topic_id]:
            self._end(key, row, record, "topic deleted")

    def _on_config(self, row, record, r, image, batch, phase):
        if r.resource_type == metadata_pb2.CONFIG_RESOURCE_TOPIC:
            resource_type = "topic"
            topic = image.topics.get(r.resource_name)
            configs = topic.configs if topic else {}
        else:
            resource_type = "broker"
            configs = image.broker_configs.get(r.resource_name, {})
        if phase == "before":
            return configs.get(r.key)
        after = r.value if r.HasField("value") else None
        self._event(row, record, "config_set" if after is not None else "config_removed",
                    topic=r.resource_name if resource_type == "topic" else None, resource_type=resource_type,
                    resource=r.resource_name, key=r.key, value_before=phase, value_after=after)

    def _on_client_quota(self, row, record, r, image, batch, phase):
        if phase == "before":
            entities, entity = (
                (image.user_client_quotas, (r.entity_name, r.client_id))
                if r.HasField("client_id")
                else (image.client_quotas, (r.entity_type, r.entity_name))
            )
            value = entities.get(entity, {}).get(r.key)
            return repr(value) if value is not None else None
        after = repr(r.value) if r.HasField("value") else None
        self._event(
            row,
            record,
            "quota_set" if after is not None else "quota_removed",
            resource_type=r.entity_type,
            resource=r.entity_name,
            key=r.key,
            value_before=phase,
            value_after=after,
        )

    def _on_producer_ids(self, row, record, r, image, batch, phase):
        if phase == "before":
            return
        self._event(row, record, "producer_ids_allocated", broker_id=r.broker_id, broker_epoch=r.broker_epoch,
                    detail=f"next producer id {r.next_producer_id}")

    def _on_access_control_entry(self, row, record, r, image, batch, phase):
        if phase != "before":
            self._acl_event(row, record, "acl_added", r.entry)

    def _on_remove_access_control_entry(self, row, record, r, image, batch, phase):
        if phase != "before":
            self._acl_event(row, record, "acl_removed", r.entry)

    def _acl_event(self, row, record, event: str, e: metadata_pb2.AccessControlEntry) -> None:
        """An ACL change: the resource, `key` the grantee and host, `value_after` (added) or `value_before`
        (removed) what it allows or denies; `principal` is who made the change."""
        what = (
            f"{permission_name(e.permission)} {operation_name(e.operation)} ({pattern_name(e.pattern_type)})"
        )
        added = event == "acl_added"
        self._event(
            row,
            record,
            event,
            topic=e.resource_name if e.resource_type == metadata_pb2.ACL_RESOURCE_TOPIC else None,
            resource_type=resource_type_name(e.resource_type).lower(),
            resource=e.resource_name,
            key=f"{e.principal}@{e.host}",
            value_before=None if added else what,
            value_after=what if added else None,
            detail=f"{what} for {e.principal} from {e.host} on {resource_type_name(e.resource_type)} "
            f"{e.resource_name!r}",
        )

    def _on_remote_log_segment(self, row: ReplayRow, record: metadata_pb2.MetadataRecord,
                               r: metadata_pb2.RemoteLogSegmentRecord, image: MetadataImage,
                               batch: metadata_pb2.MetadataBatch, phase: object) -> None:
        """A remote segment recorded (tiered storage): uploaded by broker `broker_id` as leader in
        `leader_epoch`."""
        if phase == "before":
            return
        topic = image.topic_by_id(r.topic_id)
        self._event(row, record, "remote_segment_uploaded", topic=topic.name if topic else None,
                    topic_id=r.topic_id, partition=r.partition_id, broker_id=r.broker_id,
                    leader_epoch=r.leader_epoch, base_offset=r.base_offset, end_offset=r.end_offset,
                    size_bytes=r.size_bytes,
                    detail=f"offsets {r.base_offset}..{r.end_offset - 1}, {r.size_bytes} bytes "
                           f"(+{r.meta_bytes} bytes .meta)")

    def _on_remote_log_start(self, row: ReplayRow, record: metadata_pb2.MetadataRecord,
                             r: metadata_pb2.RemoteLogStartRecord, image: MetadataImage,
                             batch: metadata_pb2.MetadataBatch, phase: object) -> list[RemoteSegment] | None:
        """The remote log's start moved (remote retention): the segments wholly below it are dropped from
        the image, their objects deleted."""
        if phase == "before":
            log = image.remote_log(r.topic_id, r.partition_id)
            return [] if log is None else [s for s in log.segments if s.end_offset <= r.log_start_offset]
        dropped = cast(list[RemoteSegment], phase)
        topic = image.topic_by_id(r.topic_id)
        self._event(row, record, "remote_log_start_moved", topic=topic.name if topic else None,
                    topic_id=r.topic_id, partition=r.partition_id, log_start_offset=r.log_start_offset,
                    reason=r.reason, size_bytes=sum(s.size_bytes for s in dropped),
                    detail=f"{len(dropped)} remote segments dropped"
                           + (f" (offsets {dropped[0].base_offset}..{dropped[-1].end_offset - 1})"
                              if dropped else ""))
        return None

    def _on_subject_version(self, row: ReplayRow, record: metadata_pb2.MetadataRecord,
                            r: metadata_pb2.SubjectVersionRecord, image: MetadataImage,
                            batch: metadata_pb2.MetadataBatch, phase: object) -> SchemaVersion | None:
        """A version registered, soft-deleted, or registered again after a soft delete."""
        if phase == "before":
            return image.subjects.get(r.subject, {}).get(r.version)
        before = cast(SchemaVersion | None, phase)
        stored = image.schemas.get(SchemaId(r.schema_id))
        kind = stored.schema_type if stored is not None else None
        if r.deleted:
            event, detail = "schema_soft_deleted", f"version {r.version} of {r.subject} soft-deleted"
        elif before is not None and before.deleted:
            event, detail = "schema_restored", f"version {r.version} of {r.subject} registered again"
        else:
            new_id = any(x.WhichOneof("record") == "schema" and x.schema.id == r.schema_id
                         for x in batch.records)
            event = "schema_registered"
            detail = (f"version {r.version} of {r.subject}: "
                      f"{'a new' if new_id else 'the already registered'} {kind} schema, id {r.schema_id}")
        self._event(row, record, event, subject=r.subject, version=r.version, schema_id=r.schema_id,
                    schema_type=kind, detail=detail)
        return None

    def _on_remove_subject_version(self, row: ReplayRow, record: metadata_pb2.MetadataRecord,
                                   r: metadata_pb2.RemoveSubjectVersionRecord, image: MetadataImage,
                                   batch: metadata_pb2.MetadataBatch, phase: object) -> int | None:
        """A soft-deleted version deleted for good (its schema keeps its id, never given again)."""
        if phase == "before":
            state = image.subjects.get(r.subject, {}).get(r.version)
            return state.schema_id if state is not None else None
        schema_id = cast(int | None, phase)
        stored = image.schemas.get(SchemaId(schema_id)) if schema_id is not None else None
        self._event(row, record, "schema_hard_deleted", subject=r.subject, version=r.version,
                    schema_id=schema_id, schema_type=stored.schema_type if stored is not None else None,
                    detail=f"version {r.version} of {r.subject} deleted for good")
        return None

    def _on_registry_config(self, row: ReplayRow, record: metadata_pb2.MetadataRecord,
                            r: metadata_pb2.RegistryConfigRecord, image: MetadataImage,
                            batch: metadata_pb2.MetadataBatch, phase: object) -> str | None:
        """A compatibility level set or removed (`subject` null: the registry's)."""
        if phase == "before":
            config = image.registry_configs.get(r.subject)
            return _config_text(config.compatibility, config.normalize) if config is not None else None
        after = _config_text(r.compatibility, r.normalize) if r.compatibility else None
        self._registry_setting(row, record, r.subject, "compatibility", cast(str | None, phase), after,
                               "registry_config")
        return None

    def _on_registry_mode(self, row: ReplayRow, record: metadata_pb2.MetadataRecord,
                          r: metadata_pb2.RegistryModeRecord, image: MetadataImage,
                          batch: metadata_pb2.MetadataBatch, phase: object) -> str | None:
        """A mode (READWRITE, READONLY, IMPORT) set or removed (`subject` null: the registry's)."""
        if phase == "before":
            mode = image.registry_modes.get(r.subject)
            return str(mode) if mode is not None else None
        self._registry_setting(row, record, r.subject, "mode", cast(str | None, phase), r.mode or None,
                               "registry_mode")
        return None

    def _registry_setting(self, row: ReplayRow, record: metadata_pb2.MetadataRecord, subject: str, key: str,
                          before: str | None, after: str | None, event: str) -> None:
        scope = f"subject {subject}" if subject != GLOBAL_SUBJECT else "the registry"
        self._event(row, record, f"{event}_{'set' if after is not None else 'removed'}",
                    subject=subject if subject != GLOBAL_SUBJECT else None,
                    resource_type="subject" if subject != GLOBAL_SUBJECT else "registry", resource=subject,
                    key=key, value_before=before, value_after=after,
                    detail=f"{key} of {scope}: {before or 'none of its own'} -> {after or 'none of its own'}")

    def _on_no_op(self, row, record, r, image, batch, phase):
        if phase == "before":
            return
        self._event(row, record, "controller_activated", detail=f"controller epoch {batch.controller_epoch}")

    # -- intervals ---------------------------------------------------------------------------------

    def _begin(self, key: tuple, interval: Interval) -> None:
        if key not in self.open:
            self.open[key] = interval

    def _end(
        self, key: tuple, row: ReplayRow, record: metadata_pb2.MetadataRecord, reason: str
    ) -> Interval | None:
        interval = self.open.pop(key, None)
        if interval is None:
            return None
        interval.end_ms = record.time_ms
        interval.end_offset = row.offset
        interval.end_reason = reason
        self.h.intervals.append(interval)
        return interval

    def _health(self, row, record, topic, topic_id, partition, replicas, isr, leader, reason) -> None:
        states = {"under_replicated": len(set(isr)) < len(set(replicas)), "offline": leader == NO_LEADER}
        for kind, now_in in states.items():
            key = (kind, topic_id, partition)
            if now_in:
                self._begin(key, Interval(kind, record.time_ms, row.offset, topic=topic, topic_id=topic_id,
                                          partition=partition, start_reason=reason))
            else:
                self._end(key, row, record, reason)

    def _health_at(self, offset, time_ms, topic, topic_id, partition, replicas, isr, leader, reason) -> None:
        """Open the intervals a partition is already in (at a snapshot: nothing to close yet)."""
        states = {"under_replicated": len(set(isr)) < len(set(replicas)), "offline": leader == NO_LEADER}
        for kind, now_in in states.items():
            if now_in:
                self._begin(
                    (kind, topic_id, partition),
                    Interval(
                        kind,
                        time_ms,
                        offset,
                        topic=topic,
                        topic_id=topic_id,
                        partition=partition,
                        start_reason=reason,
                    ),
                )


def _config_text(level: str, normalize: bool) -> str:
    """A registry config as the audit shows it: the level, and `normalize` when it is on."""
    return f"{level}{' normalize' if normalize else ''}"
