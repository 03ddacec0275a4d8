"""GroupCoordinator: the shell around the pure `Group` state machines of the groups this broker
coordinates — the groups whose __consumer_offsets partition it leads.

Ownership and loading run on the coordinator runtime (coordinator_runtime.py), as the transaction
coordinator's do. The coordinator of group `g` is the leader of __consumer_offsets partition
`mmh3(g) % partitions` (kanal.v1.partitioning, the producers' key formula). When this broker becomes
leader of such a partition (at some leader epoch) the runtime loads it — every record from the log start
to the log end, through `group_records.replay_entries` — on its loader thread; until then calls for its
groups get COORDINATOR_LOAD_IN_PROGRESS. When it stops leading, the groups are dropped and pending calls
get NOT_COORDINATOR; the new leader reloads them. The topic itself is created through the controller on
the first FindCoordinator that needs it (50 partitions by default, compacted).

Loading never stalls in silence. A record the loader cannot use (group_records lists the rules) is skipped
with a WARNING naming the partition, its offset and why, and counted in
kanal_group_coordinator_bad_records_total; the rest of the partition loads. A load that fails with a
KanalError (the partition is not hosted yet; the log's framing is damaged, at ERROR with its traceback) is
counted in kanal_group_coordinator_load_failures_total by ErrorCode name and retried after the runtime's
backoff; its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile. Any other failure is a bug: counted
as 'unexpected', and the process stops.

Writes. Group metadata (after each rebalance) and committed offsets are written to the partition with
acks=all through the replica manager, so an acknowledged commit is on every ISR member and survives the
coordinator's death. A commit is answered only after its record is below the high-water mark; the
in-memory offsets change only then (decide → records → apply).

Locks. `_lock` (the runtime's lock) guards the in-memory groups and is never held across I/O. A write
lock per partition orders the writes of that partition with their apply (taken before `_lock`, never
after), so the log and memory agree on which commit came last.

Threads. gRPC threads call in; JoinGroup and a follower's SyncGroup park on their `_Call` until the
state machine answers. The runtime's ticker thread picks up leadership changes, retries failed loads and
runs this coordinator's timers: session and join deadlines (every tick), the lag gauge (every
_LAG_REFRESH_MS), offsets retention; its loader thread loads partitions. An unexpected exception in
either stops the process (kanal.server.fatal), as one in the metadata follower does: a coordinator whose
ticker died would keep answering with sessions that never expire.

Time. Sessions, deadlines, commit timestamps and retention read one injected clock (`clock.now_ms()`, the
process clock by default; never the wall clock, so a clock step cannot expire every session at once).

Beside it: group_lag.py measures the lag (high-water marks against committed offsets) and exports the
group gauges; peer_brokers.py holds the channels to the other brokers.
"""

from __future__ import annotations

import functools
import logging
import struct
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from google.protobuf.message import DecodeError

from kanal.broker.coordinator_runtime import CoordinatorRuntime, Timer, TimeSource
from kanal.broker.group import DEAD, Effect, Group, GroupLimits, Persist, Reply, check_group_id
from kanal.broker.group_lag import GroupLag
from kanal.broker.group_records import (
    OffsetEntry,
    Record,
    apply_record,
    batch_of,
    decode_record,
    group_record,
    offset_record,
    replay_entries,
    txn_batch_of,
)
from kanal.broker.kafka.group_protocol import KAFKA_CONSUMER, decode_consumer_assignment
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.peer_brokers import PeerBrokers
from kanal.metadata import MetadataImage
from kanal.security.channel_security import ClientSecurity
from kanal.server.clock import PROCESS_CLOCK
from kanal.server.fatal import StopProcess, stop_process
from kanal.v1 import admin_pb2, broker_pb2, broker_pb2_grpc, groups_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import CONSUMER_OFFSETS_TOPIC

if TYPE_CHECKING:
    from kanal.broker.controller_client import ControllerClient
    from kanal.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

_TICK_MS = 50
_LAG_REFRESH_MS = 5_000
_CALL_MARGIN_S = 5.0  # a parked call waits this much beyond the longest the state machine can take
_WRITE_LOCK_STRIPES = 64


class _Call:
    """A parked JoinGroup or SyncGroup: the token the state machine hands back in a Reply. Completed once,
    from whichever thread runs the effect that answers it; the gRPC service awaits it on its event loop
    (add_done_callback) and holds no thread meanwhile, a blocking caller waits on the event."""

    __slots__ = ("_callbacks", "_done", "_lock", "response")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[object], None]] = []
        self.response: object = None

    def complete(self, response: object) -> None:
        with self._lock:
            self.response = response
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(response)

    def add_done_callback(self, callback: Callable[[object], None]) -> None:
        """`callback(response)` once completed (at once when it already is)."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self.response)

    def wait(self, timeout_s: float) -> Any:
        self._done.wait(timeout_s)
        return self.response


class _OffsetsLoad:
    """One load of __consumer_offsets-p (coordinator_runtime.PartitionLoad): the groups and the pending
    transactional offsets replayed so far, installed into the coordinator once the whole log is read."""

    def __init__(self, coordinator: GroupCoordinator, p: int, now_ms: int) -> None:
        self._coordinator = coordinator
        self._p = p
        self._now_ms = now_ms
        self._groups: dict[str, Group] = {}
        self._pending: dict[int, list[Record]] = {}
        self._records = 0
        self._skipped = 0

    def replay(self, data: bytes) -> int:
        replayed = replay_entries(
            self._groups, data, self._coordinator._new_group, self._now_ms, self._pending
        )
        for bad in replayed.skipped:
            log.warning(
                "%s-%d: skipped what the coordinator cannot use at %s", CONSUMER_OFFSETS_TOPIC, self._p, bad
            )
            self._coordinator._metrics.group_bad_records.inc()
        self._records += replayed.applied
        self._skipped += len(replayed.skipped)
        return replayed.next_offset

    def install(self) -> None:
        coordinator = self._coordinator
        coordinator._groups.update(self._groups)
        for producer_id, held in self._pending.items():
            coordinator._txn_offsets[(self._p, producer_id)] = held

    def summary(self) -> str:
        return f"{len(self._groups)} groups from {self._records} records ({self._skipped} skipped)"


class GroupCoordinator:
    def __init__(self, *, broker_id: int, replicas: ReplicaManager, image: Callable[[], MetadataImage],
                 controllers: ControllerClient,
                 metrics: BrokerMetrics, limits: GroupLimits, offsets_partitions: int,
                 offsets_replication_factor: int, write_timeout_ms: int,
                 offsets_retention_check_interval_ms: int = 600_000,
                 security: ClientSecurity | None = None, clock: TimeSource = PROCESS_CLOCK,
                 stop_process: StopProcess = stop_process) -> None:
        self.broker_id = broker_id
        self._image = image
        self._controllers = controllers
        self._metrics = metrics
        self.limits = limits
        self._offsets_partitions = offsets_partitions
        self._offsets_rf = offsets_replication_factor
        self._clock = clock
        self._runtime = CoordinatorRuntime(
            name="group coordinator", topic=CONSUMER_OFFSETS_TOPIC, broker_id=broker_id, replicas=replicas,
            image=image, shard=self, create_topic=self._create_offsets_topic,
            write_timeout_ms=write_timeout_ms, tick_interval_ms=_TICK_MS, clock=clock,
            stop_process=stop_process,
            on_load_failure=lambda cause: metrics.group_load_failures.labels(cause).inc(),
            timers=[Timer("session and join deadlines", 0, self._expire_deadlines),
                    Timer("the lag gauges", _LAG_REFRESH_MS, lambda _now_ms: self.refresh_lag_metrics()),
                    Timer("offsets retention", offsets_retention_check_interval_ms, self.expire_offsets)])
        self._lock = self._runtime.lock
        # Striped by partition number: the topic's partition count is whatever the first creator chose.
        self._write_locks = [threading.Lock() for _ in range(_WRITE_LOCK_STRIPES)]
        self._groups: dict[str, Group] = {}
        self._creating = threading.Lock()
        self._peers = PeerBrokers(security)
        self._lag = GroupLag(
            broker_id=broker_id, replicas=replicas, image=image, metrics=metrics, peers=self._peers
        )
        # TxnOffsetCommit records written but not yet committed: (partition, producer id) -> records.
        self._txn_offsets: dict[tuple[int, int], list[Record]] = {}

    def __repr__(self) -> str:
        return f"<GroupCoordinator broker={self.broker_id} groups={len(self._groups)} {self._runtime!r}>"

    # ---- ownership (the runtime's) ----

    def partition_of(self, group_id: str, image: MetadataImage | None = None) -> int:
        return self._runtime.partition_of(group_id, image)

    def offsets_partition_creating(self, group_id: str) -> int:
        """The __consumer_offsets partition of `group_id`, creating the topic on first need."""
        check_group_id(group_id)
        return self._runtime.partition_creating(group_id)

    def _require_owned(self, group_id: str) -> int:
        """The partition of `group_id`, if this broker serves it now (call with `_lock` held)."""
        check_group_id(group_id)
        p = self.partition_of(group_id)
        self._runtime.require_served(p, repr(group_id))
        return p

    def _group(self, group_id: str, *, create: bool) -> Group | None:
        if create:
            return self._joinable_group(group_id)
        return self._groups.get(group_id)

    def _joinable_group(self, group_id: str) -> Group:
        """The group a JoinGroup joins: the live one, or a new one in place of none or a Dead one."""
        group = self._groups.get(group_id)
        if group is None or group.state == DEAD:
            group = self._groups[group_id] = Group(group_id, self.limits)
        return group

    def reconcile(self, image: MetadataImage | None = None) -> None:
        """Load the partitions this broker now leads, drop the ones it no longer leads (the runtime's
        `reconcile`: with each new image the replica manager applied; the ticker retries failed loads)."""
        self._runtime.reconcile(image)

    def unload(self, p: int, image: MetadataImage) -> Callable[[], None] | None:
        """The runtime resigns __consumer_offsets-p (lock held): its groups are closed, their parked calls
        answered NOT_COORDINATOR once the lock is released."""
        for key in [k for k in self._txn_offsets if k[0] == p]:
            del self._txn_offsets[key]
        effects = []
        for gid in self._runtime.keys_in(p, self._groups, image):
            effects += self._groups.pop(gid).close(
                ErrorCode.NOT_COORDINATOR, "the coordinator moved: find it again"
            )
        return functools.partial(self._execute, -1, effects) if effects else None

    def begin_load(self, p: int, epoch: int, now_ms: int) -> _OffsetsLoad:
        return _OffsetsLoad(self, p, now_ms)

    def _new_group(self, group_id: str) -> Group:
        return Group(group_id, self.limits)

    # ---- FindCoordinator ----

    def find_coordinator(self, req: broker_pb2.FindCoordinatorRequest) -> broker_pb2.FindCoordinatorResponse:
        check_group_id(req.key)
        return self._runtime.find_coordinator(req.key)

    def _create_offsets_topic(self, image: MetadataImage) -> None:
        self.create_internal_topic(image, CONSUMER_OFFSETS_TOPIC, self._offsets_partitions, self._offsets_rf)

    def create_internal_topic(self, image: MetadataImage, name: str, partitions: int, rf: int) -> None:
        """Create a compacted internal topic through the controller (__consumer_offsets, and the
        transaction coordinator's __transaction_state); COORDINATOR_NOT_AVAILABLE while fewer than `rf`
        brokers are live: Kafka's rule, never create it with fewer replicas than configured, or a cluster
        whose first group came early keeps RF 1 for its offsets for ever."""
        live = len(image.live_brokers())
        if live < rf:
            raise KanalError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{name} needs {rf} live brokers (its replication factor); {live} are live")
        self._create_internal_topic(name, partitions, rf)

    def _create_internal_topic(self, name: str, partitions: int, rf: int) -> None:
        if not self._creating.acquire(blocking=False):
            return  # another call is creating it
        try:
            request = admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
                name=name, partitions=partitions, replication_factor=rf,
                configs=[admin_pb2.ConfigEntry(key="cleanup.policy", value="compact")])])
            result = self._controllers.call("CreateTopics", request).results[0]
            if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.warning("creating %s failed: %s", name, result.error_message)
            else:
                log.info("created %s: %d partitions, replication factor %d", name, partitions, rf)
        finally:
            self._creating.release()

    # ---- membership ----

    def join(self, req: broker_pb2.JoinGroupRequest, client_host: str) -> broker_pb2.JoinGroupResponse:
        call, wait_s = self.start_join(req, client_host)
        return call.wait(wait_s) or join_timed_out()

    def start_join(self, req: broker_pb2.JoinGroupRequest, client_host: str) -> tuple[_Call, float]:
        """Admit a JoinGroup; returns the parked call and how long it may wait (join_timed_out after)."""
        call = _Call()
        with self._lock:
            p = self._require_owned(req.group_id)
            group = self._joinable_group(req.group_id)
            new_id = f"{req.client_id or 'member'}-{uuid.uuid4()}"
            effects = group.join(call, req, client_host, self._clock.now_ms(), new_id)
        self._execute(p, effects)
        return call, req.rebalance_timeout_ms / 1000 + _CALL_MARGIN_S

    def sync(self, req: broker_pb2.SyncGroupRequest) -> broker_pb2.SyncGroupResponse:
        call, wait_s = self.start_sync(req)
        return call.wait(wait_s) or sync_timed_out()

    def start_sync(self, req: broker_pb2.SyncGroupRequest) -> tuple[_Call, float]:
        """Admit a SyncGroup; returns the parked call and how long it may wait (sync_timed_out after)."""
        call = _Call()
        with self._lock:
            p = self._require_owned(req.group_id)
            group = self._group(req.group_id, create=False)
            if group is None:
                raise KanalError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} has no members")
            effects = group.sync(call, req, self._clock.now_ms())
            # The leader must sync within its session, else it expires and the group rebalances.
            wait_s = max((m.session_timeout_ms + m.rebalance_timeout_ms for m in group.members.values()),
                         default=0) / 1000 + _CALL_MARGIN_S
        self._execute(p, effects)
        return call, wait_s

    def heartbeat(self, req: broker_pb2.HeartbeatRequest) -> broker_pb2.HeartbeatResponse:
        with self._lock:
            self._require_owned(req.group_id)
            group = self._group(req.group_id, create=False)
            if group is None:
                raise KanalError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} has no members")
            return group.heartbeat(req, self._clock.now_ms())

    def leave(self, req: broker_pb2.LeaveGroupRequest) -> broker_pb2.LeaveGroupResponse:
        with self._lock:
            p = self._require_owned(req.group_id)
            group = self._group(req.group_id, create=False)
            if group is None:
                raise KanalError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} has no members")
            reply, effects = group.leave(req, self._clock.now_ms())
        self._execute(p, effects)
        return reply

    # ---- effects ----

    def _execute(self, p: int, effects: list[Effect]) -> None:
        failed: KanalError | None = None
        for effect in effects:
            if isinstance(effect, Persist):
                try:
                    self._persist(p, effect)
                except KanalError as exc:
                    log.warning(
                        "could not write group %s generation %d: %s", effect.group_id, effect.generation, exc
                    )
                    failed = exc
                    with self._lock:
                        group = self._groups.get(effect.group_id)
                        more = group.persist_failed(effect.generation, self._clock.now_ms()) if group else []
                    self._execute(p, more)
            elif isinstance(effect, Reply):
                response = effect.response
                if (
                    failed is not None
                    and isinstance(response, broker_pb2.SyncGroupResponse)
                    and not response.error
                ):
                    response = broker_pb2.SyncGroupResponse(error=failed.code, error_message=failed.message)
                cast(_Call, effect.call).complete(response)  # the token this shell gave the core

    def _persist(self, p: int, effect: Persist) -> None:
        with self._write_lock(p):
            with self._lock:
                group = self._groups.get(effect.group_id)
                if group is None or group.generation != effect.generation:
                    return  # a newer state of the group supersedes this one; it is written by its own effect
            self._write(p, [group_record(effect.group_id, effect.value)])

    def _write_lock(self, p: int) -> threading.Lock:
        return self._write_locks[p % len(self._write_locks)]

    def _write(self, p: int, records: list[Record], *, batch: bytes | None = None) -> None:
        """Append records to __consumer_offsets-p with acks=all (as `batch` when given: a transactional
        one); raise unless every ISR member has them."""
        self._runtime.write(p, batch if batch is not None else batch_of(records, self._clock.now_ms()))

    # ---- offsets ----

    def txn_commit(self, req: broker_pb2.TxnOffsetCommitRequest) -> broker_pb2.TxnOffsetCommitResponse:
        """TxnOffsetCommit: the offsets go to __consumer_offsets in the producer's transaction and become
        the group's only when its COMMIT marker is stored (`on_txn_marker`). The transaction coordinator
        checked the producer when the partition joined the transaction (AddOffsetsToTxn)."""
        reply = broker_pb2.TxnOffsetCommitResponse()
        producer = req.producer
        if producer.producer_id <= 0 or producer.producer_epoch < 0:
            raise KanalError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "TxnOffsetCommit needs the producer's id")
        now_ms = self._clock.now_ms()
        image = self._image()
        records: list[Record] = []
        with self._lock:
            p = self._require_owned(req.group_id)
        for topic in req.topics:
            known = image.topics.get(topic.topic)
            for pc in topic.partitions:
                item = reply.results.add(topic=topic.topic, partition=pc.partition)
                if known is None or not 0 <= pc.partition < len(known.partitions):
                    item.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    item.error_message = f"unknown topic or partition {topic.topic}-{pc.partition}"
                elif pc.offset < 0:
                    item.error = ErrorCode.INVALID_REQUEST
                    item.error_message = f"offset {pc.offset} is negative"
                else:
                    records.append(
                        offset_record(
                            req.group_id,
                            topic.topic,
                            pc.partition,
                            groups_pb2.OffsetCommitValue(
                                offset=pc.offset,
                                leader_epoch=pc.leader_epoch,
                                metadata=pc.metadata,
                                commit_timestamp_ms=now_ms,
                                generation_id=-1,
                                topic_id=known.topic_id,
                            ),
                        )
                    )
        if not records:
            return reply
        with self._write_lock(p):
            batch = txn_batch_of(records, now_ms, producer.producer_id, producer.producer_epoch)
            self._write(p, records, batch=batch)
            with self._lock:
                if self._runtime.serves(p):
                    self._txn_offsets.setdefault((p, producer.producer_id), []).extend(records)
        return reply

    def on_txn_marker(self, p: int, producer_id: int, commit: bool) -> None:
        """A marker of `producer_id` is stored (replicated) in __consumer_offsets-p: its transactional
        offsets become the groups' (commit) or are dropped (abort)."""
        now_ms = self._clock.now_ms()
        with self._write_lock(p), self._lock:
            held = self._txn_offsets.pop((p, producer_id), [])
            if commit and self._runtime.serves(p):
                for record in held:
                    apply_record(self._groups, record, self._new_group, now_ms)

    def commit(self, req: broker_pb2.OffsetCommitRequest) -> broker_pb2.OffsetCommitResponse:
        reply = broker_pb2.OffsetCommitResponse()
        now_ms = self._clock.now_ms()
        image = self._image()
        records: list[Record] = []
        with self._lock:
            p = self._require_owned(req.group_id)
        with self._write_lock(p):
            with self._lock:
                p = self._require_owned(req.group_id)
                group = self._group(req.group_id, create=False)
                if group is not None:
                    group.check_commit(req.generation_id, req.member_id, req.group_instance_id, now_ms)
                elif req.generation_id >= 0 or req.member_id:
                    raise KanalError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} has no members")
            for topic in req.topics:
                out = reply.topics.add(topic=topic.topic)
                known = image.topics.get(topic.topic)
                for pc in topic.partitions:
                    item = out.partitions.add(partition=pc.partition)
                    if known is None or not 0 <= pc.partition < len(known.partitions):
                        item.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        item.error_message = f"unknown topic or partition {topic.topic}-{pc.partition}"
                    elif pc.offset < 0:
                        item.error = ErrorCode.INVALID_REQUEST
                        item.error_message = f"offset {pc.offset} is negative"
                    else:
                        records.append(offset_record(req.group_id, topic.topic, pc.partition,
                                                     groups_pb2.OffsetCommitValue(
                                                         offset=pc.offset, leader_epoch=pc.leader_epoch,
                                                         metadata=pc.metadata, commit_timestamp_ms=now_ms,
                                                         generation_id=req.generation_id,
                                                         member_id=req.member_id, topic_id=known.topic_id)))
            if not records:
                return reply
            self._write(p, records)
            with self._lock:
                if self._runtime.serves(p):
                    for record in records:
                        apply_record(self._groups, record, self._new_group, now_ms)
        return reply

    def fetch_offsets(self, req: broker_pb2.OffsetFetchRequest) -> broker_pb2.OffsetFetchResponse:
        reply = broker_pb2.OffsetFetchResponse()
        topic_id_of = _topic_ids(self._image())
        with self._lock:
            offsets_p = self._require_owned(req.group_id)
            group = self._groups.get(req.group_id)
            offsets = group.current_offsets(topic_id_of) if group is not None else {}
            unstable = self._pending_txn_partitions(offsets_p, req.group_id) if req.require_stable else set()
        if req.topics:
            wanted = [(t.topic, p) for t in req.topics for p in t.partitions]
        else:
            wanted = sorted(offsets)
        for tp in wanted:
            if tp in unstable:
                reply.offsets.add(topic=tp[0], partition=tp[1], offset=-1, leader_epoch=-1,
                                  error=ErrorCode.UNSTABLE_OFFSET_COMMIT)
                continue
            value = offsets.get(tp)
            reply.offsets.add(topic=tp[0], partition=tp[1], offset=value.offset if value else -1,
                              leader_epoch=value.leader_epoch if value else -1,
                              metadata=value.metadata if value else "")
        return reply

    def _pending_txn_partitions(self, p: int, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions with transactional offsets awaiting their marker (lock held)."""
        pending = set()
        for (held_p, _producer_id), records in self._txn_offsets.items():
            if held_p != p:
                continue
            for record in records:
                entry = decode_record(record)
                if isinstance(entry, OffsetEntry) and entry.group_id == group_id:
                    pending.add((entry.topic, entry.partition))
        return pending

    # ---- admin ----

    def describe(self, req: broker_pb2.DescribeGroupsRequest) -> broker_pb2.DescribeGroupsResponse:
        reply = broker_pb2.DescribeGroupsResponse()
        topic_id_of = _topic_ids(self._image())
        for group_id in req.group_ids:
            out = reply.groups.add(group_id=group_id)
            try:
                with self._lock:
                    self._require_owned(group_id)
                    group = self._groups.get(group_id)
                    if group is None:
                        raise KanalError(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group_id!r}")
                    out.state = group.state
                    out.protocol_type = group.protocol_type
                    out.protocol_name = group.protocol_name
                    out.generation_id = group.generation
                    for m in group.members.values():
                        member = out.members.add(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                                 client_id=m.client_id, client_host=m.client_host)
                        if m.assignment:
                            member.raw_assignment = m.assignment
                            decoded = _decoded_assignment(group.protocol_type, m.assignment)
                            if decoded is not None:
                                member.assignment.CopyFrom(decoded)
                    committed = {tp: v.offset for tp, v in group.current_offsets(topic_id_of).items()}
            except KanalError as exc:
                out.error = exc.code
                continue
            assigned = {
                (t.topic, p) for m in out.members for t in m.assignment.partitions for p in t.partitions
            }
            tps = sorted(set(committed) | assigned)
            ends = self._lag.high_watermarks(tps)
            for tp in tps:
                end = ends.get(tp, -1)
                offset = committed.get(tp, -1)
                out.offsets.add(topic=tp[0], partition=tp[1], committed_offset=offset, log_end_offset=end,
                                lag=max(0, end - max(offset, 0)) if end >= 0 else -1)
        return reply

    def list_groups(self) -> broker_pb2.ListGroupsResponse:
        reply = broker_pb2.ListGroupsResponse()
        with self._lock:
            for group in sorted(self._groups.values(), key=lambda g: g.group_id):
                reply.groups.add(
                    group_id=group.group_id, protocol_type=group.protocol_type, state=group.state
                )
        return reply

    def delete_groups(self, req: broker_pb2.DeleteGroupsRequest) -> broker_pb2.DeleteGroupsResponse:
        reply = broker_pb2.DeleteGroupsResponse()
        for group_id in req.group_ids:
            out = reply.results.add(group_id=group_id)
            try:
                self._delete_group(group_id)
            except KanalError as exc:
                out.error = exc.code
        return reply

    def _delete_group(self, group_id: str) -> None:
        with self._lock:
            p = self._require_owned(group_id)
        with self._write_lock(p):
            with self._lock:
                self._require_owned(group_id)
                group = self._groups.get(group_id)
                if group is None:
                    raise KanalError(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group_id!r}")
                if not group.is_empty():
                    raise KanalError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has members")
                records = [offset_record(group_id, t, part, None) for t, part in sorted(group.offsets)]
                records.append(group_record(group_id, None))
            self._write(p, records)
            with self._lock:
                group = self._groups.pop(group_id, None)
                if group is not None:
                    group.close(ErrorCode.GROUP_ID_NOT_FOUND, "the group was deleted")

    # ---- offsets retention ----

    def expire_offsets(self, now_ms: int) -> int:
        """Delete the offsets `Group.expired_offsets` names (decide), as tombstones written with acks=all
        (records), then from memory (apply). A group left Empty with no offsets gets a tombstone for its
        metadata too, and is gone, as after DeleteGroups. Returns how many offsets were deleted."""
        image = self._image()
        if self._runtime.partition_count(image) is None:
            return 0
        with self._lock:
            candidates = [(self.partition_of(g.group_id, image), g.group_id) for g in self._groups.values()
                          if g.offsets and g.state != DEAD]
        deleted = 0
        for p, group_id in sorted(candidates):
            with self._write_lock(p):
                with self._lock:  # decided again under the write lock: a commit may have come in between
                    group = self._groups.get(group_id)
                    if not self._runtime.serves(p) or group is None or group.state == DEAD:
                        continue
                    expired = group.expired_offsets(now_ms, _topic_ids(image))
                    if not expired:
                        continue
                    records = [offset_record(group_id, t, part, None) for t, part in sorted(expired)]
                    gone = group.is_empty() and len(expired) == len(group.offsets)
                try:
                    self._write(p, [*records, group_record(group_id, None)] if gone else records)
                except KanalError as exc:
                    log.warning("could not delete expired offsets of group %s: %s", group_id, exc)
                    continue
                with self._lock:
                    if self._runtime.serves(p):
                        for record in records:
                            apply_record(self._groups, record, self._new_group, now_ms)
                        group = self._groups.get(group_id)
                        # A member that joined while the tombstones were written keeps the group: its
                        # rebalance writes the group's metadata again, after the tombstone.
                        if gone and group is not None and group.is_empty():
                            apply_record(self._groups, group_record(group_id, None), self._new_group, now_ms)
                deleted += len(expired)
                log.info(
                    "group %s: deleted %d expired offsets%s", group_id, len(expired), " and the group" * gone
                )
        return deleted

    # ---- lag and peers (group_lag.py, peer_brokers.py) ----

    def peer(self, endpoint: str) -> broker_pb2_grpc.BrokerStub:
        """A stub for another broker (channels kept until close; TLS when the listeners have it)."""
        return self._peers.stub(endpoint)

    def refresh_lag_metrics(self) -> None:
        """Export committed-offset lag per group and partition for the groups coordinated here."""
        topic_id_of = _topic_ids(self._image())
        with self._lock:
            committed = {(g.group_id, tp): v.offset for g in self._groups.values()
                         for tp, v in g.current_offsets(topic_id_of).items()}
            states: dict[str, int] = {}
            for g in self._groups.values():
                states[g.state] = states.get(g.state, 0) + 1
            generations = {g.group_id: g.generation for g in self._groups.values()}
        self._lag.export(committed, states, generations)

    # ---- the ticker (the runtime's) ----

    def _expire_deadlines(self, now_ms: int) -> None:
        """A timer: expire silent members and complete the joins whose deadline passed."""
        with self._lock:
            due = [(g, self.partition_of(g.group_id)) for g in self._groups.values()
                   if (d := g.next_deadline_ms()) is not None and d <= now_ms]
            work = [(p, g.tick(now_ms)) for g, p in due]
        for p, effects in work:
            self._execute(p, effects)

    def tick(self) -> None:
        """One round of the ticker (tests call it with a fake clock instead of running the thread)."""
        self._runtime.tick()

    def run(self, stop: threading.Event) -> None:
        """The ticker thread. An unexpected exception stops the process (see the module docstring)."""
        self._runtime.run(stop)

    def close(self) -> None:
        self._runtime.close()
        self._peers.close()


def join_timed_out() -> broker_pb2.JoinGroupResponse:
    return broker_pb2.JoinGroupResponse(error=ErrorCode.REBALANCE_IN_PROGRESS,
                                        error_message="join did not complete in time: rejoin")


def sync_timed_out() -> broker_pb2.SyncGroupResponse:
    return broker_pb2.SyncGroupResponse(error=ErrorCode.REBALANCE_IN_PROGRESS,
                                        error_message="sync did not complete in time: rejoin")


def _topic_ids(image: MetadataImage | None) -> Callable[[str], str | None]:
    """name -> the topic's current id (None: no such topic), for the offsets' topic-id rule (group.py)."""
    topics = image.topics if image is not None else {}

    def topic_id_of(name: str) -> str | None:
        topic = topics.get(name)
        return topic.topic_id if topic is not None else None

    return topic_id_of


def _decoded_assignment(protocol_type: str, data: bytes) -> broker_pb2.ConsumerAssignment | None:
    """A member's assignment as `kanal groups describe` shows it: by the group's protocol type (kanal's
    consumers encode theirs in protobuf, Kafka's consumers in Kafka's ConsumerProtocol); None for another
    protocol type, or bytes that are not what the type says (a group's leader may send anything)."""
    try:
        if protocol_type == "consumer":
            assignment: broker_pb2.ConsumerAssignment = broker_pb2.ConsumerAssignment.FromString(data)
            return assignment
        if protocol_type == KAFKA_CONSUMER:
            return decode_consumer_assignment(data)
    except (DecodeError, ValueError, struct.error, UnicodeDecodeError):
        return None
    return None
