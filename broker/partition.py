"""Partition: one replica this broker hosts: its log, its role (leader or follower), and what the role needs.

The leader appends producer batches (idempotence checked by ProducerStateTable), tracks followers and
the high-water mark through LeaderState (the pure replication core: HW = min LEO over the ISR, ISR
shrink/expand proposals, acks=all completion), and answers follower fetches, first checking whether the
follower's log diverged (divergence.py). A follower appends what its fetcher copied, with the leader's
offsets, truncates when the leader reports divergence, and takes the HW from the leader's replies. One
behind the leader's local log start restarts there; on a tiered log with the leader epochs, producer state
and open transactions that remote storage describes at that offset (remote_aux_state.py).

This class is the shell around those cores: it owns the lock, the Log, the clocks, and the waiting.
Times: `now_ms` (wall clock) stamps appends and drives retention; `mono_ms` (monotonic) drives the
replication core, which must never see time go backwards.

One lock per partition serialises its log and state. An acks=all produce registers its wait in the
same critical section as its append and is answered through a callback when the replication core
completes it (Kafka's produce purgatory): no thread waits for it.

Long-poll fetches park with a waiter of their own (fetch_call.py), registered here (under the lock, in the
same critical section as their read, so no change between the read and the wait is missed) in one of two sets:
followers wake when the log end moves, consumers when the high-water mark moves. Only the polls that can
answer are woken: one broker-wide condition woke every poll on every append and HW move, and on 2 cores those
spurious wake-ups (each a thread hand-off and a re-read) cost more CPU than the replication. Role changes and
deletion wake both sets, so a poll sees its new error at once. A follower serving consumers (follower
fetching, read_replica.py) wakes their polls when its HW moves, as it learns the leader's from each fetch.

Transactions (issue 22): every stored batch, on the leader, on followers and in replay, also goes to the
TransactionIndex (transaction_index.py), which gives the last stable offset and the aborted transactions
read_committed consumers need. It is rebuilt after a truncation, from the log start or from its
checkpoint (transaction_checkpoint.py, written at clean shutdown), as the producer state is.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from kanal.broker.batch_validation import validate_produced_batch
from kanal.broker.divergence import EpochEndOffset, diverging_epoch, truncation_step
from kanal.broker.leader_state import (
    IsrProposal,
    LeaderState,
    ReplicationConfig,
    ReplicationEffects,
    check_current_leader_epoch,
)
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.producer_snapshot import (
    delete_snapshots_above,
    delete_snapshots_below,
    load_producer_state,
    write_snapshot,
)
from kanal.broker.producer_state import (
    Duplicate,
    ProducerActivity,
    ProducerBatch,
    ProducerStateTable,
    Reject,
    producer_batches_in,
)
from kanal.broker.read_replica import FollowerView
from kanal.broker.remote_aux_state import (
    AuxState,
    AuxStateSpec,
    RemoteAuxStateNeeded,
    RestartKind,
    plan_restart,
    remote_epochs,
)
from kanal.broker.remote_fetch import RemoteReader, RemoteReadNeeded, RemoteReadSpec
from kanal.broker.remote_log_manager import RetentionView, UploadJob
from kanal.broker.replication_throttle import ReplicationThrottle
from kanal.broker.schema_validation import SchemaValidation, check_schema_ids
from kanal.broker.storage.ids import LeaderEpoch, Offset
from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.partition_metadata import DELETE_SUFFIX, remove_directory
from kanal.broker.storage.segment import LogSegment, segment_file_name
from kanal.broker.storage.transaction_checkpoint import read_checkpoint, remove_checkpoint, write_checkpoint
from kanal.broker.storage.transaction_index import TransactionIndex, TxnBatch, txn_batches_in
from kanal.broker.waiter import Waiter
from kanal.metadata.image import RemoteLog
from kanal.server.clock import PROCESS_CLOCK
from kanal.v1 import broker_pb2
from kanal.v1.batch import ATTR_CONTROL, coordinator_epoch_in, iter_entries, scan_batch
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

class PartitionRole(StrEnum):
    """What this broker is for a partition it hosts (None before the first assignment and once deleted)."""

    LEADER = "leader"
    FOLLOWER = "follower"


LEADER, FOLLOWER = PartitionRole.LEADER, PartitionRole.FOLLOWER
_REPLAY_CHUNK_BYTES = 8 << 20
# ListOffsets' special timestamps beyond -1 (latest) and -2 (earliest), with Kafka's numbers and meanings:
# the record with the largest timestamp (KIP-734); the local log's start (on a tiered partition -2 answers
# the remote log's start, this the first offset still on the leader's disk); the last offset remote storage
# holds (KIP-1005; -1 when nothing was uploaded, or the topic is not tiered).
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
_request_ids = itertools.count(1)


def mono_ms() -> int:
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    return PROCESS_CLOCK.now_ms()


class PartitionOwner(Protocol):
    """What a Partition needs of the replica manager that hosts it (ReplicaManager; tests use fakes): the
    broker's counters, and the way an ISR change goes to the controller (off the request path; the answer
    comes back through `on_alter_partition_answer`)."""

    metrics: BrokerMetrics

    def send_alter_partition(
        self, part: Partition, proposal: IsrProposal, *, resend: bool = False
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the metadata image says about this partition."""

    topic_id: str
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


class Partition:
    def __init__(self, topic: str, partition_id: int, directory: Path, config: LogConfig, broker_id: int,
                 min_insync_replicas: int, manager: PartitionOwner, *, topic_id: str = "") -> None:
        self.topic = topic
        # The topic incarnation this replica belongs to (KIP-516), fixed for its life: a topic recreated
        # under the same name gets a new Partition. Empty only in tests that build a Partition by hand.
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.broker_id = broker_id
        self.directory = directory
        self.manager = manager
        self.log = Log.open(directory, config)
        self.lock = threading.RLock()
        self.role: PartitionRole | None = None
        self.assignment: Assignment | None = None
        self.high_watermark = 0
        self.min_insync_replicas = min_insync_replicas
        self.deleted = False
        self._leader: LeaderState | None = None
        self._ineligible: set[int] = set()
        self._last_proposal: IsrProposal | None = None
        # acks=all waits by request id: called once with the ErrorCode when the core completes them.
        self._on_replicated: dict[int, Callable[[int], None]] = {}
        self._log_end_waiters: set[Waiter] = set()  # follower long polls: wake on appends
        self._high_watermark_waiters: set[Waiter] = set()  # consumer long polls: wake on HW moves
        self.producers = self._replay_producer_state()
        self.transactions = self._replay_transactions(use_checkpoint=True)
        self.producer_activity = ProducerActivity()
        # Tiered storage: the partition's remote log as the applied metadata image has it (set by the
        # replica manager on every image), None when none was ever recorded.
        self.remote: RemoteLog | None = None
        # Set by the replica manager while a reassignment is adding this replica and a
        # follower.replication.throttled.rate applies (replication_throttle.py); used by the fetcher only.
        self.replication_throttle: ReplicationThrottle | None = None
        # The topic's schema validation as the applied image has it (schema_validation.py; set by the replica
        # manager on every image); None, the default, checks nothing. Read once per produced batch.
        self.schema_validation: SchemaValidation | None = None

    def __repr__(self) -> str:
        a = self.assignment
        return (f"<Partition {self.topic}-{self.partition_id} {self.role} leader={a.leader if a else -1} "
                f"epoch={a.leader_epoch if a else -1} leo={self.log.log_end_offset} hw={self.high_watermark} "
                f"isr={list(a.isr) if a else []}>")

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition_id}"

    @property
    def leader_epoch(self) -> int:
        return self.assignment.leader_epoch if self.assignment else -1

    def _replay_producer_state(self) -> ProducerStateTable:
        """Idempotence state: the newest snapshot at or below the log end (written at clean shutdown),
        then the batches after it replayed from the log (headers only). Damaged snapshots are skipped
        and deleted; with none, the whole log is replayed."""
        delete_snapshots_above(self.directory, self.log.log_end_offset)
        loaded = load_producer_state(self.directory, self.log.log_start_offset, self.log.log_end_offset)
        for problem in loaded.damaged:
            log.warning("%s: ignoring a damaged producer-state snapshot: %s", self.name, problem)
            if problem.path is not None:
                problem.path.unlink(missing_ok=True)
        table = loaded.table
        offset = loaded.replay_from_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, _REPLAY_CHUNK_BYTES).data
            if not data:
                break
            batches = [b for b in producer_batches_in(data) if b.base_offset >= table.next_offset]
            table = ProducerStateTable.rebuild(batches, start=table)
            offset = Offset(max(offset + 1, table.next_offset))
        if table.next_offset < self.log.log_end_offset:
            table.advance_to(self.log.log_end_offset)  # compaction left a gap at the end
        return table

    def _replay_transactions(self, *, use_checkpoint: bool) -> TransactionIndex:
        """The transaction index: the checkpoint of the last clean shutdown when it is usable, then the
        batches after it; without one, the whole log (transaction_checkpoint.py)."""
        index = None
        if use_checkpoint:
            index, why = read_checkpoint(self.directory, self.log.log_start_offset, self.log.log_end_offset)
            if index is None and why != "no checkpoint":
                log.info("%s: rebuilding the transaction index from the log: %s", self.name, why)
        remove_checkpoint(self.directory)  # from here on the log is ahead of it; rewritten at close
        if index is None:
            index = TransactionIndex(next_offset=self.log.log_start_offset)
        offset = index.next_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, _REPLAY_CHUNK_BYTES).data
            if not data:
                break
            index = TransactionIndex.rebuild(
                (b for b in txn_batches_in(data) if b.base_offset >= index.next_offset), start=index)
            offset = max(offset + 1, index.next_offset)
        index.advance_to(self.log.log_end_offset)
        return index

    def _record_transactional(self, header, stored: bytes | memoryview, base_offset: int) -> None:
        """Give one stored batch to the transaction index (lock held)."""
        if header.attributes or self.transactions.ongoing:
            self.transactions.record(TxnBatch.from_stored(header, stored, base_offset))
        else:
            self.transactions.advance_to(base_offset + header.last_offset_delta + 1)

    @property
    def last_stable_offset(self) -> int:
        return self.transactions.last_stable_offset(self.high_watermark)

    def _snapshot_producer_state(self) -> None:
        """Write the idempotence state at the log end, so the next start replays nothing."""
        end = self.log.log_end_offset
        if self.producers.next_offset < end:
            self.producers.advance_to(end)
        write_snapshot(self.directory, self.producers, end)
        delete_snapshots_below(self.directory, end)

    # ---- role changes (from the metadata image) ----

    def become_leader(self, assignment: Assignment, ineligible: AbstractSet[int], lag_ms_max: int) -> None:
        with self.lock:
            now = mono_ms()
            if (
                self._leader is not None
                and self._leader.active
                and self._leader.leader_epoch <= assignment.leader_epoch
            ):
                effects = self._leader.on_partition_change(
                    replicas=assignment.replicas,
                    isr=assignment.isr,
                    leader=assignment.leader,
                    leader_epoch=assignment.leader_epoch,
                    partition_epoch=assignment.partition_epoch,
                    now_ms=now,
                )
            else:
                self._resign()  # an older leadership's waits end here, never carried into this one
                self._start_past_remote()
                self._leader = LeaderState(
                    topic=self.topic, partition=self.partition_id, leader_id=self.broker_id,
                    replicas=assignment.replicas, isr=assignment.isr, leader_epoch=assignment.leader_epoch,
                    partition_epoch=assignment.partition_epoch, log_end_offset=self.log.log_end_offset,
                    high_watermark=self.high_watermark, now_ms=now,
                    config=ReplicationConfig(replica_lag_ms_max=lag_ms_max))
                effects = ReplicationEffects(high_watermark=self._leader.high_watermark)
            self._leader.set_ineligible_replicas(ineligible, now)
            self._ineligible = set(ineligible)
            self.role = LEADER
            self.assignment = assignment
            self._apply(effects)
            self._wake_all()

    def update_assignment(self, assignment: Assignment, ineligible: AbstractSet[int]) -> None:
        """Same leader (this broker), a newer partition epoch: the ISR or replicas changed."""
        with self.lock:
            self.assignment = assignment
            if self._leader is not None and self._leader.active:
                now = mono_ms()
                self._leader.set_ineligible_replicas(ineligible, now)
                self._ineligible = set(ineligible)
                self._apply(
                    self._leader.on_partition_change(
                        replicas=assignment.replicas,
                        isr=assignment.isr,
                        leader=assignment.leader,
                        leader_epoch=assignment.leader_epoch,
                        partition_epoch=assignment.partition_epoch,
                        now_ms=now,
                    )
                )

    def set_ineligible(self, ineligible: AbstractSet[int]) -> None:
        """Brokers that may not join the ISR now (fenced); lifts a pause after a refused proposal."""
        with self.lock:
            if self._leader is not None and self._leader.active and ineligible != self._ineligible:
                self._leader.set_ineligible_replicas(ineligible, mono_ms())
                self._ineligible = set(ineligible)

    def become_follower(self, assignment: Assignment) -> None:
        with self.lock:
            self._resign()
            self.role = FOLLOWER
            self.assignment = assignment
            self._wake_all()

    def _resign(self) -> None:
        if self._leader is not None and self._leader.active:
            self._apply(self._leader.resign(mono_ms()))
        self._leader = None

    # ---- effects of the replication core ----

    def _apply(self, effects: ReplicationEffects) -> None:
        """Carry out what the core decided (called with the lock held)."""
        if effects.high_watermark is not None and effects.high_watermark > self.high_watermark:
            self.high_watermark = effects.high_watermark
            self._wake(self._high_watermark_waiters)
        for completion in effects.completed:
            callback = self._on_replicated.pop(completion.request_id, None)
            if callback is not None:
                callback(completion.error)
        if effects.isr is not None and self.assignment is not None:
            old = set(self.assignment.isr)
            if len(effects.isr) < len(old):
                self.manager.metrics.isr_shrinks.inc()
            elif len(effects.isr) > len(old):
                self.manager.metrics.isr_expands.inc()
            a = self.assignment
            self.assignment = Assignment(a.topic_id, a.replicas, tuple(effects.isr), a.leader, a.leader_epoch,
                                         self._leader.partition_epoch if self._leader else a.partition_epoch)
        if effects.alter_partition is not None:
            resend = effects.alter_partition is self._last_proposal
            self._last_proposal = effects.alter_partition
            self.manager.send_alter_partition(self, effects.alter_partition, resend=resend)

    def proposal_in_flight(self, proposal) -> bool:
        with self.lock:
            return (
                self._leader is not None
                and self._leader.active
                and self._leader.alter_partition_in_flight is proposal
            )

    def on_alter_partition_answer(self, proposal, *, error: int, isr=(), leader_epoch: int = -1,
                                  partition_epoch: int = -1) -> None:
        with self.lock:
            if self._leader is None or not self._leader.active:
                return
            self._apply(self._leader.on_alter_partition_response(
                proposal, error=error, isr=isr, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                now_ms=mono_ms()))

    # ---- checks ----

    def require_leader(self, epoch: int = -1) -> LeaderState:
        if self.deleted:
            raise KanalError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{self.name} was deleted")
        if self.role != LEADER or self._leader is None:
            raise KanalError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} does not lead {self.name}"
            )
        self._leader.check_leader_epoch(epoch)
        return self._leader

    # ---- produce ----

    def append_as_leader(self, batches: list[bytes], acks: int, now_ms: int,
                         out: broker_pb2.ProduceResponse.PartitionResult, *, timeout_ms: int = 0,
                         on_replicated: Callable[[int], None] | None = None, allow_control: bool = False,
                         validate_producer: bool = True) -> tuple[KanalError | None, int | None]:
        """Append producer batches in order; returns the error of a batch refused after others of the
        request were stored (None when all were), and the id of the acks=all wait registered (None when
        none was). A batch refused first raises, with nothing stored.
        `out` gets each stored batch's base offset: a producer sending several batches of a partition in
        one request learns which of them are stored and retries only the rest (in order, so nothing is
        reordered or stored twice).

        acks=all: the wait for the high-water mark is registered here, in the same critical section as
        the append, with the leadership (LeaderState) that appended: `on_replicated(error)` is called
        exactly once, from whichever thread completes it (an HW move, `expire_produces`, or a
        resignation, which answers NOT_LEADER_OR_FOLLOWER: a later leadership of this broker, after a
        truncation, can never acknowledge offsets this one appended). It may be called before this
        returns and is called with the partition's lock held: it must only hand the result on.
        `allow_control`: the batches may be transaction markers (WriteTxnMarkers only);
        `validate_producer` False: a coordinator's own write, not checked against the producer's sequences.
        A topic with schema validation (`schema_validation`) has each batch's records checked right after
        validate_produced_batch, before anything of it is stored: a refusal is a SchemaRefusal
        (INVALID_RECORD), raised or returned as any other refusal."""
        with self.lock:
            leader = self.require_leader()
            if acks == -1:
                if on_replicated is None:
                    raise ValueError("acks=all needs on_replicated")
                leader.check_acks_all(self.min_insync_replicas)
            required = None
            appended = 0
            refused = None
            for raw in batches:
                try:
                    header = scan_batch(raw)
                    records = validate_produced_batch(raw, header, self.log.config.batch_bytes_max,
                                                      allow_control=allow_control)
                    # Markers are the broker's own; a batch too large to walk (None) Log.append refuses.
                    policy = self.schema_validation
                    if policy is not None and records is not None and not header.attributes & ATTR_CONTROL:
                        check_schema_ids(records, policy)
                    # Markers and the coordinators' own transactional writes (TxnOffsetCommit) stand outside
                    # the producer's sequences: only its own batches are checked.
                    if header.attributes & ATTR_CONTROL:
                        # A marker from a coordinator older than one that already wrote here is refused.
                        verdict = self.producers.validate_marker(
                            header.producer_id, coordinator_epoch_in(raw)
                        )
                        if isinstance(verdict, Reject):
                            raise verdict.to_error()
                    elif header.producer_id and validate_producer:
                        verdict = self.producers.validate_header(header)
                        if isinstance(verdict, Reject):
                            raise verdict.to_error()
                        if isinstance(verdict, Duplicate):
                            # Already stored: answer with the original offsets (acks=all still waits for
                            # them).
                            out.batch_base_offsets.append(verdict.base_offset)
                            required = max(required or 0, verdict.last_offset + 1)
                            continue
                    info = self.log.append(raw, leader_epoch=self.leader_epoch, now_ms=now_ms)
                except KanalError as exc:
                    if not out.batch_base_offsets:
                        raise  # nothing of this request is stored: the whole partition fails
                    refused = exc
                    break
                # Every batch is recorded, idempotent or not, so the table's position is the log end.
                self.producers.record(ProducerBatch.from_header(header, info.base_offset, raw))
                self._record_transactional(header, raw, info.base_offset)
                self.producer_activity.seen(header.producer_id, now_ms)
                out.batch_base_offsets.append(info.base_offset)
                required = max(required or 0, info.last_offset + 1)
                appended += len(raw)
                self.manager.metrics.messages_in.inc(header.record_count)
            self.manager.metrics.bytes_in.inc(appended)
            if appended:
                self._wake(self._log_end_waiters)
                self._apply(leader.on_leader_append(self.log.log_end_offset, mono_ms()))
            out.base_offset = out.batch_base_offsets[0] if out.batch_base_offsets else -1
            out.log_start_offset = self.log.log_start_offset
            if acks == -1 and required is not None and on_replicated is not None:
                request_id = next(_request_ids)
                self._on_replicated[request_id] = on_replicated
                self._apply(leader.add_pending_produce(request_id, required, self.min_insync_replicas,
                                                       max(0, timeout_ms), mono_ms()))
                return refused, request_id
            return refused, None

    def time_out_produce(self, request_id: int) -> None:
        """The shell's timer for one acks=all wait reached its deadline: the core answers every wait whose
        deadline passed with REQUEST_TIMED_OUT, and this one is answered so too if it is still open (the
        core's deadline is in whole milliseconds; and it must never stay open for ever)."""
        with self.lock:
            if self._leader is not None and self._leader.active:
                self._apply(self._leader.expire(mono_ms()))
            callback = self._on_replicated.pop(request_id, None)
        if callback is not None:
            callback(ErrorCode.REQUEST_TIMED_OUT)

    # ---- fetch ----

    def read_for_consumer(self, preq, bytes_max: int, out: broker_pb2.FetchResponse.PartitionData,
                          waiter: Waiter | None = None, *, read_committed: bool = False,
                          from_follower: bool = False,
                          choose_replica: Callable[[list[FollowerView], int], int] | None = None) -> int:
        """Read below the HW (read_committed: below the LSO, with the aborted transactions overlapping the
        batches returned). With `waiter`, it is set when the HW next moves (or the role changes) until
        `remove_waiter`; registered before the read, under the lock, so no move after the read is missed.
        The LSO moves only with the HW or with a marker append, which moves the HW once replicated.

        Follower fetching (KIP-392), for a consumer that named its rack: `from_follower` lets an in-sync
        follower serve the read below its own HW (which never passes the leader's, so it holds only
        committed records); `choose_replica` (read_replica.choose_read_replica with the consumer's rack)
        lets the leader send the consumer elsewhere: `preferred_read_replica` set, no records."""
        with self.lock:
            if waiter is not None:
                self._high_watermark_waiters.add(waiter)
            if from_follower and self.role == FOLLOWER:
                self._require_in_sync_follower(preq.current_leader_epoch)
            else:
                leader = self.require_leader(preq.current_leader_epoch)
                if choose_replica is not None:
                    followers = [FollowerView(b, b in leader.isr, leader.follower(b).log_end_offset)
                                 for b in leader.replicas if b != self.broker_id]
                    chosen = choose_replica(followers, preq.fetch_offset)
                    if chosen != self.broker_id:
                        self._fill_bounds(out)
                        out.preferred_read_replica = chosen
                        return 0
            self._fill_bounds(out)
            limit = out.last_stable_offset if read_committed else self.high_watermark
            if self.remote is not None and preq.fetch_offset < self.log.log_start_offset:
                raise RemoteReadNeeded(self._remote_read(preq.fetch_offset, bytes_max, limit, read_committed))
            data = self.log.read(preq.fetch_offset, bytes_max, offset_limit=limit).data
            if read_committed and data:
                for aborted in self.transactions.aborted_between(preq.fetch_offset, limit):
                    out.aborted_transactions.add(producer_id=aborted.producer_id,
                                                 first_offset=aborted.first_offset)
        out.records = data
        return len(data)

    def read_for_follower(
        self,
        replica_id: int,
        preq,
        bytes_max: int,
        out: broker_pb2.FetchResponse.PartitionData,
        waiter: Waiter | None = None,
        replica_epoch: int = -1,
    ) -> int:
        """Read up to the log end for a follower (recording its fetch offset and the broker epoch it
        fetched at). With `waiter`, it is set when the log end next moves (or the role changes), as in
        read_for_consumer."""
        with self.lock:
            if waiter is not None:
                self._log_end_waiters.add(waiter)
            leader = self.require_leader(preq.current_leader_epoch)
            self._fill_bounds(out)
            divergence = diverging_epoch(self.log.epoch_cache.entries(), self.log.log_end_offset,
                                         preq.last_fetched_epoch, preq.fetch_offset)
            if divergence is not None:
                out.diverging_epoch = divergence.epoch
                out.diverging_end_offset = divergence.end_offset
                return 0
            # A follower's log starts no lower than the leader's local log start (what is only in remote
            # storage is never copied back): answer it that, so a far-behind follower restarts there.
            out.log_start_offset = self.log.log_start_offset
            if preq.fetch_offset < self.log.log_start_offset:
                raise KanalError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"{self.name}: fetch from {preq.fetch_offset} is below the log start "
                                 f"{self.log.log_start_offset}")
            self._apply(leader.on_follower_fetch(replica_id, preq.fetch_offset, mono_ms(), replica_epoch))
            out.high_watermark = self.high_watermark
            data = self.log.read(preq.fetch_offset, bytes_max).data
        out.records = data
        return len(data)

    def _require_in_sync_follower(self, epoch: int) -> None:
        """A follower serves consumers only while the metadata has it in the ISR: one that fell out may be
        far behind, and the consumer should go back to the leader (NOT_LEADER_OR_FOLLOWER)."""
        if self.deleted:
            raise KanalError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{self.name} was deleted")
        a = self.assignment
        if a is None or self.broker_id not in a.isr:
            raise KanalError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.broker_id} is not an in-sync replica of {self.name}")
        check_current_leader_epoch(epoch, a.leader_epoch, self.name)

    def remove_waiter(self, waiter: Waiter) -> None:
        """A long poll that registered `waiter` in a read has ended."""
        with self.lock:
            self._log_end_waiters.discard(waiter)
            self._high_watermark_waiters.discard(waiter)

    def wake_waiters(self) -> None:
        """Wake every long poll on this partition (the metadata changed: they re-check their errors)."""
        with self.lock:
            self._wake_all()

    def _wake_all(self) -> None:
        self._wake(self._log_end_waiters)
        self._wake(self._high_watermark_waiters)

    @staticmethod
    def _wake(waiters: set[Waiter]) -> None:
        for waiter in waiters:
            waiter.set()

    @property
    def log_start_offset(self) -> int:
        """The first offset readable: on a tiered partition the remote log's start (below the local start
        while remote storage holds the oldest part; above it once remote retention dropped segments that
        are still on disk here, until maintenance drops them too), else the local log's."""
        remote = self.remote
        if remote is None:
            return self.log.log_start_offset
        if remote.segments:
            return remote.log_start_offset
        return max(remote.log_start_offset, self.log.log_start_offset)

    def _remote_read(self, offset: int, bytes_max: int, limit: int, read_committed: bool) -> RemoteReadSpec:
        """What a consumer read below the local log start needs from remote storage (lock held): the
        segment holding `offset`, and for read_committed the aborted transactions that may overlap it (the
        remote segments' records from it on, and the local index's)."""
        remote = self.remote
        segments = remote.segments if remote is not None else ()
        i = bisect_right([seg.base_offset for seg in segments], offset) - 1
        if remote is None or i < 0 or offset < remote.log_start_offset or offset >= segments[i].end_offset:
            raise KanalError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"{self.name}: {offset} is below the log start {self.log_start_offset}")
        segment = segments[i]
        aborted: list[tuple[int, int]] = []
        if read_committed:
            aborted = [(a.producer_id, a.first_offset)
                       for seg in segments[i:] for a in seg.aborted_transactions
                       if a.last_offset >= offset and a.first_offset < segment.end_offset]
            aborted += [(a.producer_id, a.first_offset)
                        for a in self.transactions.aborted_between(offset, segment.end_offset)]
        return RemoteReadSpec(self.topic_id, self.partition_id, segment, offset, bytes_max,
                              min(limit, segment.end_offset), aborted)

    def _fill_bounds(self, out) -> None:
        out.high_watermark = self.high_watermark
        out.log_end_offset = self.log.log_end_offset
        out.log_start_offset = self.log_start_offset
        out.leader_epoch = self.leader_epoch
        out.last_stable_offset = self.last_stable_offset

    # ---- follower side ----

    def apply_fetched(self, leader_id: int, p: broker_pb2.FetchResponse.PartitionData) -> int:
        """What our fetcher got from the leader for this partition; returns bytes appended."""
        with self.lock:
            if self.role != FOLLOWER or self.assignment is None or self.assignment.leader != leader_id:
                return 0  # the leadership moved while the fetch was in flight
            if p.error == ErrorCode.OFFSET_OUT_OF_RANGE and self.log.log_end_offset < p.log_start_offset:
                # For a follower the leader answers its *local* log start (read_for_follower).
                if self.log.config.remote_storage_enable:
                    plan = plan_restart(self.remote, p.log_start_offset)
                    if plan.kind is RestartKind.WAIT:
                        log.info("%r is behind leader %d's local log start %d; waiting for the metadata: %s",
                                 self, leader_id, p.log_start_offset, plan.reason)
                        return 0
                    remote = self.remote
                    if plan.kind is RestartKind.REMOTE and plan.segment is not None and remote is not None:
                        raise RemoteAuxStateNeeded(AuxStateSpec(self.topic_id, self.partition_id, leader_id,
                                                                p.log_start_offset, plan.segment, remote))
                log.info(
                    "%r is behind the leader's log start %d: restarting the log there, empty",
                    self,
                    p.log_start_offset,
                )
                self.log.truncate_fully_and_start_at(p.log_start_offset)
                delete_snapshots_above(self.directory, p.log_start_offset - 1)
                self.producers = ProducerStateTable()
                self.producers.advance_to(p.log_start_offset)
                self.transactions = TransactionIndex(next_offset=p.log_start_offset)
                return 0
            if p.error == ErrorCode.UNKNOWN_TOPIC_ID:
                # The leader hosts another incarnation of this name (or does not know ours yet): nothing
                # of it may land in this log. The metadata will replace one of the two replicas.
                log.info("%r: leader %d does not host topic id %s (%s); waiting for the metadata", self,
                         leader_id, self.topic_id, p.error_message)
                return 0
            if p.error:
                return 0
            if p.diverging_epoch >= 0:
                step = truncation_step(
                    self.log.epoch_cache.entries(),
                    self.log.log_end_offset,
                    self.high_watermark,
                    EpochEndOffset(LeaderEpoch(p.diverging_epoch), Offset(p.diverging_end_offset)),
                )
                if step.below_high_watermark:
                    log.error("%r truncates below its high-water mark: %s", self, step.reason)
                log.info(
                    "%r diverged from leader %d: truncating to %d (%s)",
                    self,
                    leader_id,
                    step.truncate_to,
                    step.reason,
                )
                self.log.truncate_to(
                    step.truncate_to, high_watermark=min(self.high_watermark, step.truncate_to)
                )
                self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
                self.producers = self._replay_producer_state()
                self.transactions = self._replay_transactions(use_checkpoint=False)
                return 0
            appended = 0
            if p.records:
                now_ms = wall_ms()
                for info, header in self.log.append_replicated(p.records, now_ms=now_ms):
                    if header.attributes & ATTR_CONTROL:
                        stored = self.log.read(info.base_offset, 1 << 16).data
                        self.producers.record(ProducerBatch.from_header(
                            header, info.base_offset, next(iter_entries(stored, verify_crc=False)).batch))
                        self.transactions.record(next(txn_batches_in(stored)))
                    else:
                        self.producers.record(ProducerBatch.from_header(header, info.base_offset))
                        self._record_transactional(header, b"", info.base_offset)
                    self.producer_activity.seen(header.producer_id, now_ms)
                appended = len(p.records)
            new_hw = min(p.high_watermark, self.log.log_end_offset)
            if new_hw > self.high_watermark:
                self.high_watermark = new_hw
                self._wake(self._high_watermark_waiters)  # consumers reading from this follower
            return appended

    def restart_from_remote(self, leader_id: int, aux: AuxState) -> bool:
        """Restart this follower's log empty at the leader's local log start with the state the remote log
        gives there (remote_aux_state.py): the leader epochs below it, the producer state (also written as
        its snapshot, so a restart before the next clean close finds it) and the open transactions. False,
        changing nothing, when the leadership moved or the log got there meanwhile."""
        with self.lock:
            if (self.deleted or self.role != FOLLOWER or self.assignment is None
                    or self.assignment.leader != leader_id or self.log.log_end_offset >= aux.start):
                return False
            self._restart_at(aux.start, aux.epochs, aux.producers, aux.transactions)
            log.info("%r restarted its log at leader %d's local log start %d from remote storage's state: "
                     "%d leader epoch(s) below it, %d producer(s), %d open transaction(s)", self, leader_id,
                     aux.start, len(aux.epochs), len(aux.producers), len(aux.transactions.ongoing))
            return True

    def _restart_at(self, start: int, epochs: tuple[tuple[int, int], ...] | list[tuple[int, int]],
                    producers: ProducerStateTable, transactions: TransactionIndex) -> None:
        """Empty the log and start it at `start` below which remote storage holds everything (lock held):
        every offset below is committed, so the high-water mark is at least `start`."""
        self.log.truncate_fully_and_start_at(start)
        for epoch, epoch_start in epochs:
            self.log.epoch_cache.assign(epoch, epoch_start)
        self.log.epoch_cache.save()
        delete_snapshots_above(self.directory, start - 1)
        write_snapshot(self.directory, producers, start)
        self.producers = producers
        self.transactions = transactions
        self.high_watermark = max(self.high_watermark, start)

    def set_remote(self, remote: RemoteLog | None) -> None:
        """The partition's remote log from a newly applied image. When the leader epochs below the local log
        start are missing (the checkpoint was lost and Log.open rebuilt the cache from the local segments),
        they are put back from the remote segments': divergence checks and followers need them."""
        with self.lock:
            self.remote = remote
            if remote is None or self.deleted or not remote.segments:
                return
            start = self.log.log_start_offset
            entries = self.log.epoch_cache.entries()
            if start <= remote.segments[0].base_offset or (entries and entries[0][1] < start):
                return
            below = remote_epochs(remote, start)
            if below and self.log.epoch_cache.prepend(below):
                self.log.epoch_cache.save()
                log.info("%r: put back %d leader epoch(s) below the local log start %d from the remote log's "
                         "segments (the checkpoint had none)", self, len(below), start)

    def _start_past_remote(self) -> None:
        """A new leader whose log ends below the remote log's end (an unclean election: it was not in the
        ISR) restarts its log at that end, so offsets remote storage holds are never handed out again
        (lock held). What it had past the old committed part is lost, as an unclean election loses it."""
        remote = self.remote
        if remote is None or self.log.log_end_offset >= remote.end_offset:
            return
        end = remote.end_offset
        log.warning("%r leads with a log ending at %d, below the remote log's end %d (an unclean election): "
                    "restarting the log at %d so remote offsets are never reused", self,
                    self.log.log_end_offset, end, end)
        producers = ProducerStateTable()
        producers.advance_to(end)
        last = remote.segments[-1] if remote.segments else None
        ongoing = {int(t.producer_id): t.first_offset for t in last.open_transactions} if last else {}
        self._restart_at(end, remote_epochs(remote, end), producers, TransactionIndex(ongoing, [], end))

    def fetch_position(self) -> tuple[int, int, int]:
        """(fetch offset, current leader epoch, epoch of our last batch) for the next follower fetch."""
        with self.lock:
            latest = self.log.epoch_cache.latest_epoch
            return self.log.log_end_offset, self.leader_epoch, -1 if latest is None else latest

    # ---- offsets ----

    def list_offset(self, timestamp_ms: int, *, read_committed: bool = False) -> tuple[int, int]:
        with self.lock:
            leader = self.require_leader()
            visible_end = self.last_stable_offset if read_committed else self.high_watermark
            if timestamp_ms == -2:
                return self.log_start_offset, -1
            if timestamp_ms == EARLIEST_LOCAL_TIMESTAMP:
                return self.log.log_start_offset, -1
            if timestamp_ms == LATEST_TIERED_TIMESTAMP:
                return (-1 if self.remote is None else self.remote.end_offset - 1), -1
            if timestamp_ms == -1:
                if not leader.high_watermark_established:
                    raise KanalError(
                        ErrorCode.OFFSET_NOT_AVAILABLE, f"{self.name}: new leader, HW not settled yet"
                    )
                return visible_end, -1
            if timestamp_ms < LATEST_TIERED_TIMESTAMP:
                raise KanalError(ErrorCode.INVALID_REQUEST,
                                 f"timestamp {timestamp_ms} is not one of -5..-1 or >= 0")
            if timestamp_ms == MAX_TIMESTAMP:
                found = self.log.max_timestamp_offset()
            else:
                found = self.log.offset_for_timestamp(timestamp_ms)
            if found is None or found[0] >= visible_end:
                return -1, -1
            return found

    def remote_offset_for_timestamp(self, timestamp_ms: int, reader: RemoteReader, *,
                                    read_committed: bool = False) -> tuple[int, int] | None:
        """ListOffsets by timestamp over the part of a tiered log that only remote storage holds: the
        first remote segment (below the local log start) with a record that late is searched, off the
        partition lock (blocking I/O: the caller runs on the remote reader's pool). None: not there, ask
        the local log (`list_offset`). (-1, -1) when the offset found is not visible yet."""
        with self.lock:
            self.require_leader()
            remote = self.remote
            if remote is None or timestamp_ms < 0:
                return None
            local_start, log_start = self.log.log_start_offset, self.log_start_offset
            candidates = [seg for seg in remote.segments
                          if seg.base_offset < local_start and seg.max_timestamp_ms >= timestamp_ms]
            visible_end = self.last_stable_offset if read_committed else self.high_watermark
        for segment in candidates:
            found = reader.offset_for_timestamp(self.topic_id, self.partition_id, segment, timestamp_ms,
                                                log_start)
            if found is not None:
                return found if found[0] < visible_end else (-1, -1)
        return None

    # ---- maintenance ----

    def maintenance(self, now_ms: int, compact_due: bool, producer_id_expiration_ms: int) -> int:
        """Retention and compaction (each when cleanup.policy has it), ISR shrinks, expired acks=all waits,
        time-based flushes, and forgetting idle producers; returns how many producers this replica still
        keeps."""
        with self.lock:
            if self.deleted:
                return 0
            expired = self.producer_activity.expired(self.producers.producer_ids(), now_ms,
                                                     producer_id_expiration_ms)
            if expired:
                self.producers.forget(expired)
                log.info("%r forgot %d producer(s) idle for %d ms or more", self, len(expired),
                         producer_id_expiration_ms)
            if self._leader is not None and self._leader.active:
                now = mono_ms()
                self._apply(self._leader.maybe_shrink_isr(now))
                self._apply(self._leader.expire(now))
            config = self.log.config
            policy = config.cleanup_policy
            if config.remote_storage_enable:
                # Tiered: local segments go only once remote storage holds them (as the applied metadata
                # says), by local.retention.*; retention.* bounds the whole log, remote part included,
                # and is the leader's remote retention. Without a remote log (the broker has no remote
                # storage, or nothing is uploaded yet) nothing is deleted: the disk fills instead.
                remote = self.remote
                if remote is not None and self.log.log_start_offset < remote.log_start_offset \
                        <= self.log.log_end_offset:
                    # Remote retention moved the log start past the local one: the local start follows
                    # (as Kafka's does), so segments retention dropped are not kept readable here.
                    self.log.advance_log_start(remote.log_start_offset)
                    self.transactions.drop_before(self.log.log_start_offset)
                if remote is not None and self.log.delete_uploaded_segments(
                        now_ms, remote.end_offset, local_retention_ms=config.local_retention_ms,
                        local_retention_bytes=config.local_retention_bytes):
                    self.transactions.drop_before(self.log.log_start_offset)
            # compact,delete runs both, retention first: the cleaner then reads and rewrites only the
            # segments retention keeps, and its key map never holds keys retention is about to drop.
            elif policy.deletes and self.log.delete_old_segments(now_ms):
                self.transactions.drop_before(self.log.log_start_offset)
            if policy.compacts and compact_due and not config.remote_storage_enable:
                self.log.compact(now_ms, transactions=self.transactions)
            started = time.perf_counter()
            if self.log.maybe_flush(now_ms):
                self.manager.metrics.log_flush_latency.observe(time.perf_counter() - started)
            return len(self.producers)

    # ---- tiered storage (remote_log_manager.py) ----

    def remote_upload_candidate(self, recorded_end: int | None = None) -> UploadJob | None:
        """The next segment this leader should upload, pinned (its file opened: the job closes it), or
        None: not leading, not tiered, or nothing closed and wholly below min(HW, LSO) past the remote end.
        `recorded_end`: where the controller recorded the uploader's last segment to end, when this broker
        may not have applied that record yet. See remote_log_manager.py for the rules."""
        with self.lock:
            if (self.deleted or not self.log.config.remote_storage_enable or self.role != LEADER
                    or self._leader is None or not self._leader.active or self.assignment is None):
                return None
            found = self._upload_segment(recorded_end)
            if found is None:
                return None
            segment, start = found
            if segment.next_offset > min(self.high_watermark, self.last_stable_offset):
                return None  # not all committed, or a transaction in it still open
            position = 0
            if start != segment.base_offset:
                location = segment.find(Offset(start))
                if location is None or location.suffix.base_offset != start:
                    log.warning("%r: the remote log ends at %d, inside a batch of %r: not uploading", self,
                                start, segment)
                    return None
                position = location.position
            fd = os.open(self.directory / segment_file_name(segment.base_offset, ".log"), os.O_RDONLY)
            return UploadJob(self.topic, self.assignment.topic_id, self.partition_id, self.leader_epoch,
                             start, segment.next_offset, fd, position, segment.size,
                             self.log.config.index_interval_bytes, self.remote)

    def remote_upload_lag(self) -> tuple[int, int]:
        """(segments, bytes) of closed segments this leader has not got recorded in remote storage yet."""
        with self.lock:
            if not self.log.config.remote_storage_enable or self.role != LEADER:
                return 0, 0
            end = self.remote.end_offset if self.remote is not None else self.log.log_start_offset
            closed = [seg for seg in self.log.segments[:-1] if seg.next_offset > end]
            return len(closed), sum(seg.size for seg in closed)

    def remote_retention_view(self) -> RetentionView | None:
        """What remote retention and the orphan sweep need (remote_log_manager.py), or None: not a tiered
        partition led here. The local bytes counted are the segments from the remote end on (not uploaded)."""
        with self.lock:
            if (self.deleted or not self.log.config.remote_storage_enable or self.role != LEADER
                    or self._leader is None or not self._leader.active or self.assignment is None):
                return None
            end = self.remote.end_offset if self.remote is not None else self.log.log_start_offset
            local = sum(seg.size for seg in self.log.segments if seg.base_offset >= end)
            return RetentionView(self.topic, self.assignment.topic_id, self.partition_id, self.leader_epoch,
                                 self.remote, local, self.log.config)

    def _upload_segment(self, recorded_end: int | None) -> tuple[LogSegment, int] | None:
        """The closed segment holding the remote log's end (the log start when nothing is remote; the
        uploader's `recorded_end` when past the image's), and that offset."""
        start = self.remote.end_offset if self.remote is not None else self.log.log_start_offset
        if recorded_end is not None:
            start = max(start, recorded_end)
        for segment in self.log.segments[:-1]:
            if segment.base_offset <= start < segment.next_offset:
                return segment, start
        return None

    @property
    def pending_produces(self) -> int:
        """acks=all produces waiting here for the high-water mark (the produce purgatory)."""
        with self.lock:
            return self._leader.pending_produces if self._leader is not None else 0

    # ---- removal ----

    def delete(self) -> None:
        with self.lock:
            self._resign()
            self.deleted = True
            self.role = None
            self.log.close()
            # Renamed away first: a crash during the deletion leaves no half-deleted replica directory
            # that a later topic of the same name could mistake for its own.
            remove_directory(self.directory, DELETE_SUFFIX)
            self._wake_all()

    def close(self) -> None:
        with self.lock:
            self._resign()
            if not self.deleted:
                self._snapshot_producer_state()
                self.transactions.advance_to(self.log.log_end_offset)
                write_checkpoint(self.directory, self.transactions)
                self.log.close()
