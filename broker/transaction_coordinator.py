"""TransactionCoordinator: the shell around the pure transaction state machine (transaction.py) for the
transactional ids whose __transaction_state partition this broker leads (issue 22).

Ownership and loading run on the coordinator runtime (coordinator_runtime.py), as the group
coordinator's do: id `t` belongs to partition `mmh3(t) % partitions` of __transaction_state
(kanal.v1.partitioning); when this broker becomes its leader (at a leader epoch) the runtime's loader
thread replays the partition (key = id, value = TransactionStateValue, last value wins) and from then on
serves its ids; until then calls get COORDINATOR_LOAD_IN_PROGRESS, elsewhere NOT_COORDINATOR. A record
that does not decode fails the load as a damaged log (CORRUPT_MESSAGE: at ERROR, retried), never skipped:
a lost PREPARE state would leave its markers unwritten. A loaded state in PREPARE_COMMIT or PREPARE_ABORT
is finished: its markers are written again and its COMPLETE state recorded. The topic is created through
the controller on the first FindCoordinator for a transactional id that needs it (compacted; never with
fewer replicas than configured).

Write before effect. Each call decides with the pure core under the id's lock, writes the new state to
the partition with acks=all, and only then stores it in memory, answers, and (for an end) hands the
markers to the marker pool. So every state anyone acted on is on every ISR member, and the coordinator
that reloads the partition acts on it again. A failed write changes nothing in memory.

Markers. EndTxn is answered once PREPARE_COMMIT / PREPARE_ABORT is durable; a job in the marker pool
then sends one `WriteTxnMarkers` to each broker leading partitions of the transaction, all brokers at
once (itself without a round trip), retrying the partitions not yet done after a short pause while this
broker still coordinates the id, then records COMPLETE_COMMIT / COMPLETE_ABORT. A partition that answers
TRANSACTION_COORDINATOR_FENCED holds a newer coordinator's marker: the job stops. Every job has a
deadline (_MARKER_JOB_MS) and every WriteTxnMarkers call a timeout within it: a partition without a
reachable leader never holds a call or a worker; the ticker starts the next job while the PREPARE state
still owes markers.

The next transaction. A call of the id's next transaction (AddPartitionsToTxn, AddOffsetsToTxn,
InitProducerId) arriving while the previous one is PREPARE_* waits for its markers (queued, at most
_COMPLETION_WAIT_S, then CONCURRENT_TRANSACTIONS, which the producer retries). Once they are all stored,
AddPartitions / AddOffsets open the next transaction with one ONGOING record that also stands for the
COMPLETE one (transaction.py); the marker job then finds the state moved on and writes nothing more.
Markers into __consumer_offsets also make the transaction's TxnOffsetCommit offsets visible (commit) or
drop them (abort): the group coordinator does that when the marker is stored
(replica_manager.write_txn_markers).

Time. One injected clock (`clock.now_ms()`, the process clock by default, as the group coordinator's)
gives every decision its `now_ms`, and the runtime's ticker runs the timeout timer with it: an ongoing
transaction open for its timeout is aborted (epoch bumped: its producer is fenced). Marker-job deadlines
read the same clock.

Failures, the runtime's rule: a KanalError in the ticker or a marker job is logged at WARNING with its
cause and tried again on the next round (a leader that cannot be reached is one more round of the job);
anything else is a bug and stops the process, so the broker never serves on without transaction timeouts.

Locks: `_lock` (the runtime's lock) guards the maps and is never held across I/O; a striped lock per id
orders decide → write → apply for that id (taken before `_lock`).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from kanal.broker.coordinator_runtime import CoordinatorRuntime, Timer, TimeSource
from kanal.broker.transaction import (
    Decision,
    Markers,
    TxnMetadata,
    TxnState,
    check_timeout,
    check_transactional_id,
    decide_add_partitions,
    decide_end_txn,
    decide_init_producer_id,
    decide_markers_written,
    decide_timeout,
    needs_new_producer_id,
    pending_markers,
)
from kanal.metadata import MetadataImage
from kanal.metadata.ids import BrokerId
from kanal.server.clock import PROCESS_CLOCK
from kanal.server.fatal import StopProcess, stop_process
from kanal.v1 import broker_pb2, transactions_pb2
from kanal.v1.batch import CONTROL_COMMIT, NewRecord, build_batch, decode_records, iter_entries, parse_batch
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.partitioning import partition_for_key
from kanal.v1.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from collections.abc import Callable

    from kanal.broker.group_coordinator import GroupCoordinator
    from kanal.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

_TICK_MS = 100
_LOCK_STRIPES = 64
_MARKER_CALL_TIMEOUT_MS = 10_000
_MARKER_CALL_TIMEOUT_MS_MIN = 500  # a call made just before the job's deadline still gets this long
_MARKER_RETRY_PAUSE_S = 0.1  # between rounds of a marker job, while a partition has no reachable leader
_MARKER_WORKERS = 4
# How long a call of the id's next transaction (AddPartitions, AddOffsets, InitProducerId) waits for the
# previous transaction's markers before answering CONCURRENT_TRANSACTIONS (which the producer retries).
# Below the producer's request timeout, so a partition without a leader never makes that call time out.
_COMPLETION_WAIT_S = 2.0
# How long one marker job tries before it ends; the ticker starts the id's next job while it is owed.
_MARKER_JOB_MS = 30_000


class _StateLoad:
    """One load of __transaction_state-p (coordinator_runtime.PartitionLoad): each id's last state."""

    def __init__(self, coordinator: TransactionCoordinator, p: int) -> None:
        self._coordinator = coordinator
        self._p = p
        self._loaded: dict[str, TxnMetadata] = {}

    def replay(self, data: bytes) -> int:
        offset = -1
        for entry in iter_entries(data, verify_crc=True):
            offset = entry.suffix.last_offset + 1
            for record in decode_records(parse_batch(entry.batch, verify_crc=False)):
                try:
                    tid = record.key.decode()
                    if not record.HasField("value"):
                        self._loaded.pop(tid, None)
                        continue
                    value = transactions_pb2.TransactionStateValue.FromString(record.value)
                    self._loaded[tid] = TxnMetadata.from_value(tid, value)
                except (UnicodeDecodeError, DecodeError, ValueError) as exc:  # ValueError: an unknown state
                    raise KanalError(ErrorCode.CORRUPT_MESSAGE,
                                     f"{TRANSACTION_STATE_TOPIC}-{self._p} offset "
                                     f"{entry.suffix.base_offset + record.offset_delta}: a record that does "
                                     f"not decode as a transaction state ({exc!r})") from exc
        return offset

    def install(self) -> Callable[[], None] | None:
        self._coordinator._txns.update(self._loaded)
        return self._finish_unfinished if self._unfinished() else None

    def _finish_unfinished(self) -> None:
        """Once served: the PREPARE states found owe their markers; a marker job finishes each."""
        for txn in self._unfinished():
            self._coordinator._start_markers(txn.transactional_id)

    def _unfinished(self) -> list[TxnMetadata]:
        return [t for t in self._loaded.values() if pending_markers(t) is not None]

    def summary(self) -> str:
        return f"{len(self._loaded)} transactional ids, {len(self._unfinished())} to finish"


class TransactionCoordinator:
    def __init__(self, *, broker_id: int, replicas: ReplicaManager, image: Callable[[], MetadataImage],
                 groups: GroupCoordinator, new_producer_id: Callable[[], int], partitions: int,
                 replication_factor: int, write_timeout_ms: int, timeout_ms_max: int,
                 clock: TimeSource = PROCESS_CLOCK, stop_process: StopProcess = stop_process) -> None:
        self.broker_id = broker_id
        self._replicas = replicas
        self._image = image
        self._groups = groups
        self._new_producer_id = new_producer_id
        self._partitions = partitions
        self._rf = replication_factor
        self._timeout_ms_max = timeout_ms_max
        self._clock = clock
        self._runtime = CoordinatorRuntime(
            name="transaction coordinator", topic=TRANSACTION_STATE_TOPIC, broker_id=broker_id,
            replicas=replicas, image=image, shard=self, create_topic=self._create_state_topic,
            write_timeout_ms=write_timeout_ms, tick_interval_ms=_TICK_MS, clock=clock,
            stop_process=stop_process,
            timers=[Timer("transaction timeouts and marker jobs", 0, self._expire_and_finish)])
        self._lock = self._runtime.lock
        self._id_locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self._txns: dict[str, TxnMetadata] = {}
        self._marker_jobs: set[str] = set()  # ids with a marker job queued or running
        # PREPARE_* states whose markers are all stored (COMPLETE_* not yet written): the id's next
        # transaction may open over them (decide_add_partitions, markers_written).
        self._markers_done: dict[str, TxnMetadata] = {}
        self._changed = threading.Condition(self._lock)  # notified when a state or _markers_done changes
        self._closed = threading.Event()
        self._markers = ThreadPoolExecutor(max_workers=_MARKER_WORKERS, thread_name_prefix="txn-markers")

    def __repr__(self) -> str:
        return (f"<TransactionCoordinator broker={self.broker_id} ids={len(self._txns)} "
                f"marker_jobs={len(self._marker_jobs)} {self._runtime!r}>")

    # ---- ownership (the runtime's) ----

    def partition_of(self, transactional_id: str, image: MetadataImage | None = None) -> int:
        return self._runtime.partition_of(transactional_id, image)

    def _require_owned(self, transactional_id: str) -> int:
        check_transactional_id(transactional_id)
        p = self.partition_of(transactional_id)
        with self._lock:
            self._runtime.require_served(p, f"transactional id {transactional_id!r}")
        return p

    def _still_owned(self, p: int, epoch: int) -> bool:
        with self._lock:
            return self._runtime.served_epoch(p) == epoch and not self._closed.is_set()

    def reconcile(self, image: MetadataImage | None = None) -> None:
        """Load the __transaction_state partitions this broker now leads, drop the others (the runtime's
        `reconcile`)."""
        self._runtime.reconcile(image)

    def unload(self, p: int, image: MetadataImage) -> None:
        """The runtime resigns __transaction_state-p (lock held): its ids' states are dropped."""
        for tid in self._runtime.keys_in(p, self._txns, image):
            del self._txns[tid]

    def begin_load(self, p: int, epoch: int, now_ms: int) -> _StateLoad:
        return _StateLoad(self, p)

    # ---- FindCoordinator ----

    def find_coordinator(self, transactional_id: str) -> broker_pb2.FindCoordinatorResponse:
        check_transactional_id(transactional_id)
        return self._runtime.find_coordinator(transactional_id)

    def _create_state_topic(self, image: MetadataImage) -> None:
        self._groups.create_internal_topic(image, TRANSACTION_STATE_TOPIC, self._partitions, self._rf)

    # ---- the calls ----

    def _id_lock(self, transactional_id: str) -> threading.Lock:
        return self._id_locks[partition_for_key(transactional_id.encode(), _LOCK_STRIPES)]

    def _run(self, transactional_id: str, decide: Callable[[TxnMetadata | None, bool], Decision],
             ) -> tuple[Decision, TxnMetadata | None]:
        """Decide under the id's lock (given the state and whether all of its markers are stored), write
        the new state (acks=all), then apply it and start its markers in the marker pool: the call is
        answered once the state is durable, not once markers are written (EndTxn's contract). Returns the
        decision and the id's state after it."""
        with self._id_lock(transactional_id):
            p = self._require_owned(transactional_id)
            with self._lock:
                txn = self._txns.get(transactional_id)
                markers_written = txn is not None and self._markers_done.get(transactional_id) == txn
            decision = decide(txn, markers_written)
            if decision.new_state is not None:
                self._write(p, decision.new_state)
                self._apply(p, transactional_id, decision.new_state)
                txn = decision.new_state
        if decision.markers is not None:
            self._start_markers(transactional_id)
        return decision, txn

    def _apply(self, p: int, transactional_id: str, txn: TxnMetadata) -> None:
        """The id's state after its write (caller holds the id's lock)."""
        with self._lock:
            if self._runtime.serves(p):
                self._txns[transactional_id] = txn
            self._markers_done.pop(transactional_id, None)
            self._changed.notify_all()

    def _wait_for_completion(self, transactional_id: str, *, markers_suffice: bool = True) -> None:
        """Queue a call of the id's next transaction behind the previous one's markers: wait (bounded by
        _COMPLETION_WAIT_S, never holding the id's lock) until the id is not PREPARE_* or (with
        `markers_suffice`, for the calls that can open the next transaction over it) its markers are all
        stored. The call then decides as usual; still PREPARE_* without its markers, it answers
        CONCURRENT_TRANSACTIONS and the producer retries."""
        def settled() -> bool:
            txn = self._txns.get(transactional_id)
            return (txn is None or pending_markers(txn) is None or self._closed.is_set()
                    or (markers_suffice and self._markers_done.get(transactional_id) == txn))
        with self._changed:
            self._changed.wait_for(settled, _COMPLETION_WAIT_S)

    def init_producer_id(self, req: broker_pb2.InitProducerIdRequest) -> broker_pb2.InitProducerIdResponse:
        tid = req.transactional_id
        check_transactional_id(tid)
        check_timeout(req.transaction_timeout_ms, self._timeout_ms_max)

        def decide(txn: TxnMetadata | None, _markers_written: bool) -> Decision:
            fresh = self._new_producer_id() if txn is None or needs_new_producer_id(txn) else 0
            return decide_init_producer_id(
                txn, tid, req.transaction_timeout_ms, self._clock.now_ms(), new_producer_id=fresh
            )

        self._require_owned(tid)
        self._wait_for_completion(tid, markers_suffice=False)
        decision, txn = self._run(tid, decide)
        if not decision.ok:
            return broker_pb2.InitProducerIdResponse(error=decision.error, error_message=decision.message)
        if txn is None:
            raise KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, "no transaction state after InitProducerId")
        return broker_pb2.InitProducerIdResponse(
            producer_id=txn.producer_id, producer_epoch=txn.producer_epoch
        )

    def add_partitions(
        self, req: broker_pb2.AddPartitionsToTxnRequest
    ) -> broker_pb2.AddPartitionsToTxnResponse:
        producer = req.producer
        image = self._image()
        reply = broker_pb2.AddPartitionsToTxnResponse()
        wanted: list[tuple[str, int]] = []
        unknown = False
        for topic in req.topics:
            known = image.topics.get(topic.topic)
            for p in topic.partitions:
                item = reply.results.add(topic=topic.topic, partition=p)
                if known is None or not 0 <= p < len(known.partitions) or topic.topic in (
                        TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC):
                    item.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    item.error_message = f"{topic.topic}-{p} does not exist (or is internal)"
                    unknown = True
                wanted.append((topic.topic, p))
        if unknown:
            for item in reply.results:
                if item.error == ErrorCode.NONE:
                    item.error = ErrorCode.INVALID_REQUEST
                    item.error_message = "not attempted: another partition of the call does not exist"
            return reply
        if req.group_ids:
            self._require_owned(producer.transactional_id)
        groups = sorted(set(req.group_ids))
        wanted += [(CONSUMER_OFFSETS_TOPIC, self._groups.offsets_partition_creating(g)) for g in groups]
        self._wait_for_completion(producer.transactional_id)
        decision, _ = self._run(producer.transactional_id, lambda txn, written: decide_add_partitions(
            txn, producer.producer_id, producer.producer_epoch, wanted, self._clock.now_ms(),
            markers_written=written))
        if not decision.ok:
            del reply.results[:]
            reply.error, reply.error_message = decision.error, decision.message
        else:
            reply.group_ids.extend(groups)
        return reply

    def add_offsets(self, req: broker_pb2.AddOffsetsToTxnRequest) -> broker_pb2.AddOffsetsToTxnResponse:
        producer = req.producer
        self._require_owned(producer.transactional_id)
        offsets_partition = (CONSUMER_OFFSETS_TOPIC, self._groups.offsets_partition_creating(req.group_id))
        self._wait_for_completion(producer.transactional_id)
        decision, _ = self._run(producer.transactional_id, lambda txn, written: decide_add_partitions(
            txn, producer.producer_id, producer.producer_epoch, [offsets_partition], self._clock.now_ms(),
            markers_written=written))
        return broker_pb2.AddOffsetsToTxnResponse(error=decision.error, error_message=decision.message)

    def end_txn(self, req: broker_pb2.EndTxnRequest) -> broker_pb2.EndTxnResponse:
        producer = req.producer
        decision, _ = self._run(producer.transactional_id, lambda txn, _written: decide_end_txn(
            txn, producer.producer_id, producer.producer_epoch, req.commit, self._clock.now_ms()))
        return broker_pb2.EndTxnResponse(error=decision.error, error_message=decision.message)

    def describe(
        self, req: broker_pb2.DescribeTransactionsRequest
    ) -> broker_pb2.DescribeTransactionsResponse:
        reply = broker_pb2.DescribeTransactionsResponse()
        with self._lock:
            txns = dict(self._txns)
        for tid in req.transactional_ids or sorted(txns):
            item = reply.transactions.add(transactional_id=tid)
            txn = txns.get(tid)
            if txn is None:
                try:
                    self._require_owned(tid)
                    item.error = ErrorCode.INVALID_PRODUCER_ID_MAPPING  # coordinated here, but unknown
                except KanalError as exc:
                    item.error = exc.code
                continue
            item.state.CopyFrom(txn.to_value())
        return reply

    # ---- writes ----

    def _write(self, p: int, txn: TxnMetadata) -> None:
        """The id's new state into __transaction_state-p with acks=all; raise unless the ISR has it."""
        self._runtime.write(p, build_batch([NewRecord(txn.to_value().SerializeToString(),
                                                      txn.transactional_id.encode(), self._clock.now_ms())]))

    # ---- markers ----

    def _claim_marker_job(self, transactional_id: str) -> bool:
        """Take the id's one marker job slot; False when a job runs already (or the coordinator closes)."""
        with self._lock:
            if transactional_id in self._marker_jobs or self._closed.is_set():
                return False
            self._marker_jobs.add(transactional_id)
            return True

    def _start_markers(self, transactional_id: str) -> None:
        if not self._claim_marker_job(transactional_id):
            return
        try:
            self._markers.submit(self._marker_job, transactional_id)
        except RuntimeError:
            with self._lock:
                self._marker_jobs.discard(transactional_id)

    def _marker_job(self, transactional_id: str) -> None:
        """A job of the marker pool, run at the runtime's boundary: a KanalError is a WARNING (the ticker
        starts the id's next job), anything else stops the process."""
        try:
            self._runtime.guarded(f"the marker job of {transactional_id!r}", self._finish_or_hand_on,
                                  transactional_id)
        finally:
            with self._lock:
                self._marker_jobs.discard(transactional_id)

    def _finish_or_hand_on(self, transactional_id: str) -> None:
        if not self._finish(transactional_id, self._clock.now_ms() + _MARKER_JOB_MS):
            # Still owed: the ticker starts the id's next marker job once this one's slot is free.
            log.info(
                "markers of %r not all written within %d ms; handed on", transactional_id, _MARKER_JOB_MS
            )

    def _finish(self, transactional_id: str, deadline_ms: int) -> bool:
        """Write the markers of the id's PREPARE state into every partition, then record COMPLETE; False
        when the deadline passed first (a partition without a reachable leader): the job is handed on."""
        p = self._require_owned(transactional_id)
        with self._lock:
            txn = self._txns.get(transactional_id)
            epoch = self._runtime.served_epoch(p)
        markers = pending_markers(txn) if txn is not None else None
        if txn is None or markers is None or epoch is None:
            return True
        remaining = set(markers.partitions)
        while remaining:
            if not self._still_owned(p, epoch):
                return True  # the next coordinator finishes it
            left_ms = deadline_ms - self._clock.now_ms()
            if left_ms < 0:
                return False
            done, fenced = self._write_markers(markers, remaining, epoch,
                                               max(left_ms, _MARKER_CALL_TIMEOUT_MS_MIN) / 1000)
            if fenced:
                log.warning(
                    "%s: a partition holds a marker of a newer coordinator; leaving the markers to it",
                    transactional_id,
                )
                return True
            remaining -= done
            if remaining and self._closed.wait(_MARKER_RETRY_PAUSE_S):
                return True
        with self._changed:
            if self._txns.get(transactional_id) != txn:
                return True
            # The id's next transaction may open now (a call waiting in _wait_for_completion wakes).
            self._markers_done[transactional_id] = txn
            self._changed.notify_all()
        with self._id_lock(transactional_id):
            with self._lock:
                current = self._txns.get(transactional_id)
            if current != txn:
                return True  # the next transaction opened over it: its ONGOING record stands for COMPLETE
            decision = decide_markers_written(txn, self._clock.now_ms())
            if decision.new_state is not None:
                self._write(p, decision.new_state)
                self._apply(p, transactional_id, decision.new_state)
        # DEBUG: one line per transaction would be a write to the log file in every commit's path.
        log.debug("%s: %s markers written to %d partitions", transactional_id,
                 "COMMIT" if txn.state == TxnState.PREPARE_COMMIT else "ABORT", len(markers.partitions))
        return True

    def _write_markers(self, markers: Markers, partitions: set[tuple[str, int]], coordinator_epoch: int,
                       timeout_s: float) -> tuple[set[tuple[str, int]], bool]:
        """One round: one WriteTxnMarkers to the current leader of each partition's broker, all brokers at
        once (each call bounded by `timeout_s`, at most _MARKER_CALL_TIMEOUT_MS); returns the partitions
        done, and whether a partition refused a marker as TRANSACTION_COORDINATOR_FENCED (a newer
        coordinator wrote there: this one must stop)."""
        image = self._image()
        by_leader: dict[BrokerId, list[tuple[str, int]]] = {}
        done: set[tuple[str, int]] = set()
        for topic, p in partitions:
            known = image.topics.get(topic)
            if known is None or p >= len(known.partitions):
                done.add((topic, p))  # deleted: nothing to end there (Kafka drops it too)
                continue
            partition_leader = known.partitions[p].leader
            if partition_leader >= 0 and partition_leader in image.brokers:
                by_leader.setdefault(partition_leader, []).append((topic, p))
        requests: dict[BrokerId, broker_pb2.WriteTxnMarkersRequest] = {}
        for leader, tps in by_leader.items():
            request = requests[leader] = broker_pb2.WriteTxnMarkersRequest(
                producer_id=markers.producer_id, producer_epoch=markers.producer_epoch,
                commit=markers.control_type == CONTROL_COMMIT, coordinator_epoch=coordinator_epoch)
            topics: dict[str, broker_pb2.TopicPartitions] = {}
            for topic, p in tps:
                if topic not in topics:
                    topics[topic] = request.topics.add(topic=topic)
                topics[topic].partitions.append(p)
        # The other brokers' calls go out first and run while this broker writes its own (no round trip).
        # A refusal or an unreachable leader is expected (that leader is tried again next round); anything
        # else is a bug and leaves the job for the runtime's boundary (the process stops).
        calls: dict[BrokerId, Any] = {}
        for leader, request in requests.items():
            if leader != self.broker_id:
                calls[leader] = self._groups.peer(image.brokers[leader].peer_endpoint).WriteTxnMarkers.future(
                    request, timeout=min(timeout_s, _MARKER_CALL_TIMEOUT_MS / 1000))
        replies: list[broker_pb2.WriteTxnMarkersResponse] = []
        here = requests.get(BrokerId(self.broker_id))
        if here is not None:
            try:
                replies.append(self.write_markers_here(here))
            except KanalError as exc:
                log.warning("WriteTxnMarkers here failed: %s; tried again next round", exc)
        for leader, call in calls.items():
            try:
                replies.append(call.result())
            except grpc.RpcError as exc:
                log.info(
                    "WriteTxnMarkers to broker %d failed: %s; tried again next round", leader, exc.code()
                )
        fenced = False
        for reply in replies:
            for result in reply.results:
                if result.error in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    done.add((result.topic, result.partition))
                fenced = fenced or result.error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        return done, fenced

    def write_markers_here(
        self, request: broker_pb2.WriteTxnMarkersRequest
    ) -> broker_pb2.WriteTxnMarkersResponse:
        """WriteTxnMarkers on this broker (the call's handler, and this coordinator for partitions it
        leads itself): the markers with acks=all, then the transaction's offsets in the
        __consumer_offsets partitions made visible or dropped."""
        reply = self._replicas.write_txn_markers(request)
        for result in reply.results:
            if result.topic == CONSUMER_OFFSETS_TOPIC and result.error == ErrorCode.NONE:
                self._groups.on_txn_marker(result.partition, request.producer_id, request.commit)
        return reply

    # ---- the ticker (the runtime's) ----

    def _expire_and_finish(self, now_ms: int) -> None:
        """A timer: abort the transactions past their timeout, restart marker jobs that stopped."""
        with self._lock:
            txns = list(self._txns.values())
        for txn in txns:
            if pending_markers(txn) is not None:
                self._start_markers(txn.transactional_id)
            elif txn.state == TxnState.ONGOING and decide_timeout(txn, now_ms).new_state is not None:
                log.info("%r is past its timeout of %d ms: aborting it", txn, txn.timeout_ms)
                try:
                    self._run(txn.transactional_id, lambda current, _written: decide_timeout(current, now_ms)
                              if current is not None else Decision())
                except KanalError as exc:
                    log.warning("could not abort %r: %s; tried again on the next tick", txn, exc)

    def tick(self) -> None:
        """One round of the ticker (tests call it with a fake clock instead of running the thread)."""
        self._runtime.tick()

    def run(self, stop: threading.Event) -> None:
        """The ticker thread. An unexpected exception stops the process (see the module docstring)."""
        self._runtime.run(stop)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._changed.notify_all()
        self._runtime.close()
        with self._lock:
            self._markers_done.clear()
        self._markers.shutdown(wait=False, cancel_futures=True)
