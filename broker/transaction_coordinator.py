"""TransactionCoordinator: the shell around the pure transaction state machine (transaction.py) for the
transactional ids whose __transaction_state partition this broker leads (issue 22).

Ownership and loading, as the group coordinator's: id `t` belongs to partition
`mmh3(t) % partitions` of __transaction_state (kanal.v1.partitioning); when this broker becomes its
leader (at a leader epoch) the loader thread replays the partition (key = id, value =
TransactionStateValue, last value wins) and from then on serves its ids; until then calls get
COORDINATOR_LOAD_IN_PROGRESS, elsewhere NOT_COORDINATOR. A loaded state in PREPARE_COMMIT or
PREPARE_ABORT is finished: its markers are written again and its COMPLETE state recorded. The topic is
created through the controller on the first FindCoordinator for a transactional id that needs it
(compacted; never with fewer replicas than configured).

Write before effect. Each call decides with the pure core under the id's lock, writes the new state to
the partition with acks=all, and only then stores it in memory, answers, and (for an end) hands the
markers to the marker pool. So every state anyone acted on is on every ISR member, and the coordinator
that reloads the partition acts on it again. A failed write changes nothing in memory.

Markers. EndTxn is answered once PREPARE_COMMIT / PREPARE_ABORT is durable; a job in the marker pool
then sends one `WriteTxnMarkers` to each broker leading partitions of the transaction, all brokers at
once (itself without a round trip), retrying the partitions not yet done after a short pause while this
broker still coordinates the id, then records COMPLETE_COMMIT / COMPLETE_ABORT. A partition that answers
TRANSACTION_COORDINATOR_FENCED holds a newer coordinator's marker: the job stops. Every job has a
deadline (_MARKER_JOB_S) and every WriteTxnMarkers call a timeout within it: a partition without a
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

Time. The ticker passes the wall clock to `decide_timeout` for every ongoing transaction: one open for
its timeout is aborted (epoch bumped: its producer is fenced).

Locks: `_lock` guards the maps and is never held across I/O; a striped lock per id orders decide →
write → apply for that id (taken before `_lock`).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

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
from kanal.v1 import broker_pb2, transactions_pb2
from kanal.v1.batch import CONTROL_COMMIT, NewRecord, build_batch, decode_records, iter_entries, parse_batch
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.partitioning import partition_for_key
from kanal.v1.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from collections.abc import Callable

    from kanal.broker.group_coordinator import GroupCoordinator

log = logging.getLogger(__name__)

_TICK_S = 0.1
_LOCK_STRIPES = 64
_LOAD_READ_BYTES_MAX = 4 << 20
_MARKER_CALL_TIMEOUT_S = 10.0
_MARKER_CALL_TIMEOUT_S_MIN = 0.5  # a call made just before the job's deadline still gets this long
_MARKER_RETRY_PAUSE_S = 0.1  # between rounds of a marker job, while a partition has no reachable leader
_MARKER_WORKERS = 4
# How long a call of the id's next transaction (AddPartitions, AddOffsets, InitProducerId) waits for the
# previous transaction's markers before answering CONCURRENT_TRANSACTIONS (which the producer retries).
# Below the producer's request timeout, so a partition without a leader never makes that call time out.
_COMPLETION_WAIT_S = 2.0
# How long one marker job tries before it ends; the ticker starts the id's next job while it is owed.
_MARKER_JOB_S = 30.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    def __init__(self, *, broker_id: int, replicas, image: Callable[[], MetadataImage],
                 groups: GroupCoordinator, new_producer_id: Callable[[], int], partitions: int,
                 replication_factor: int, write_timeout_ms: int, timeout_ms_max: int) -> None:
        self.broker_id = broker_id
        self._replicas = replicas
        self._image = image
        self._groups = groups
        self._new_producer_id = new_producer_id
        self._partitions = partitions
        self._rf = replication_factor
        self._write_timeout_ms = write_timeout_ms
        self._timeout_ms_max = timeout_ms_max
        self._lock = threading.Lock()
        self._id_locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self._owned: dict[int, int] = {}    # partition -> leader epoch, loaded and served
        self._loading: dict[int, int] = {}  # partition -> leader epoch being loaded
        self._txns: dict[str, TxnMetadata] = {}
        self._marker_jobs: set[str] = set()  # ids with a marker job queued or running
        # PREPARE_* states whose markers are all stored (COMPLETE_* not yet written): the id's next
        # transaction may open over them (decide_add_partitions, markers_written).
        self._markers_done: dict[str, TxnMetadata] = {}
        self._changed = threading.Condition(self._lock)  # notified when a state or _markers_done changes
        self._closed = threading.Event()
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="txn-loader")
        self._markers = ThreadPoolExecutor(max_workers=_MARKER_WORKERS, thread_name_prefix="txn-markers")
        self._reconciled_image = MetadataImage()

    def __repr__(self) -> str:
        return (f"<TransactionCoordinator broker={self.broker_id} partitions={sorted(self._owned)} "
                f"ids={len(self._txns)} marker_jobs={len(self._marker_jobs)}>")

    # ---- ownership ----

    def partition_of(self, transactional_id: str, image: MetadataImage | None = None) -> int:
        topic = (image or self._image()).topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            raise KanalError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC} does not exist yet"
            )
        return partition_for_key(transactional_id.encode(), len(topic.partitions))

    def _require_owned(self, transactional_id: str) -> int:
        check_transactional_id(transactional_id)
        p = self.partition_of(transactional_id)
        with self._lock:
            if p in self._owned:
                return p
            if p in self._loading:
                raise KanalError(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading {TRANSACTION_STATE_TOPIC}-{p}"
                )
        raise KanalError(ErrorCode.NOT_COORDINATOR,
                         f"broker {self.broker_id} does not coordinate transactional id {transactional_id!r}")

    def _still_owned(self, p: int, epoch: int) -> bool:
        with self._lock:
            return self._owned.get(p) == epoch and not self._closed.is_set()

    def reconcile(self, image: MetadataImage | None = None) -> None:
        """Load the __transaction_state partitions this broker now leads, drop the others."""
        if image is not None:
            self._reconciled_image = image
        image = self._reconciled_image
        topic = image.topics.get(TRANSACTION_STATE_TOPIC)
        led: dict[int, int] = {p.partition_id: p.leader_epoch for p in (topic.partitions if topic else ())
                               if p.leader == self.broker_id}
        starts = []
        with self._lock:
            if self._closed.is_set():
                return
            for p, epoch in [*self._owned.items(), *self._loading.items()]:
                if led.get(p) != epoch:
                    self._owned.pop(p, None)
                    self._loading.pop(p, None)
                    count = len(topic.partitions) if topic else None
                    for tid in [
                        t for t in self._txns if count is None or partition_for_key(t.encode(), count) == p
                    ]:
                        del self._txns[tid]
                    log.info("no longer coordinating %s-%d", TRANSACTION_STATE_TOPIC, p)
            for p, epoch in led.items():
                if self._owned.get(p) != epoch and self._loading.get(p) != epoch:
                    self._loading[p] = epoch
                    starts.append((p, epoch))
        for p, epoch in starts:
            try:
                self._loader.submit(self._load_logged, p, epoch)
            except RuntimeError:
                return  # closing

    def _load_logged(self, p: int, epoch: int) -> None:
        try:
            self._load(p, epoch)
        except KanalError as exc:
            log.warning("could not load %s-%d: %s; retried on the next tick", TRANSACTION_STATE_TOPIC, p, exc)
            with self._lock:
                if self._loading.get(p) == epoch:
                    del self._loading[p]  # the ticker's reconcile starts it again
        except Exception as exc:
            log.error("loading %s-%d failed", TRANSACTION_STATE_TOPIC, p, exc_info=exc)
            with self._lock:
                if self._loading.get(p) == epoch:
                    del self._loading[p]

    def _load(self, p: int, epoch: int) -> None:
        part = self._replicas.partition(TRANSACTION_STATE_TOPIC, p)
        loaded: dict[str, TxnMetadata] = {}
        with part.lock:
            offset = part.log.log_start_offset
        while True:
            with part.lock:
                if part.log.log_end_offset <= offset:
                    break
                data = part.log.read(offset, _LOAD_READ_BYTES_MAX).data
            if not data:
                break
            for entry in iter_entries(data, verify_crc=True):
                offset = entry.suffix.last_offset + 1
                for record in decode_records(parse_batch(entry.batch, verify_crc=False)):
                    tid = record.key.decode()
                    if record.HasField("value"):
                        value = transactions_pb2.TransactionStateValue.FromString(record.value)
                        loaded[tid] = TxnMetadata.from_value(tid, value)
                    else:
                        loaded.pop(tid, None)
        with self._lock:
            if self._loading.get(p) != epoch:
                return
            del self._loading[p]
            self._owned[p] = epoch
            self._txns.update(loaded)
        unfinished = [t for t in loaded.values() if pending_markers(t) is not None]
        log.info(
            "coordinating %s-%d at epoch %d: %d transactional ids, %d to finish",
            TRANSACTION_STATE_TOPIC,
            p,
            epoch,
            len(loaded),
            len(unfinished),
        )
        for txn in unfinished:
            self._start_markers(txn.transactional_id)

    # ---- FindCoordinator ----

    def find_coordinator(self, transactional_id: str) -> broker_pb2.FindCoordinatorResponse:
        check_transactional_id(transactional_id)
        image = self._image()
        if TRANSACTION_STATE_TOPIC not in image.topics:
            self._groups.create_internal_topic(image, TRANSACTION_STATE_TOPIC, self._partitions, self._rf)
            raise KanalError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {TRANSACTION_STATE_TOPIC}; retry"
            )
        p = self.partition_of(transactional_id, image)
        leader = image.topics[TRANSACTION_STATE_TOPIC].partitions[p].leader
        broker = image.brokers.get(leader)
        if leader < 0 or broker is None:
            raise KanalError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC}-{p} has no leader"
            )
        return broker_pb2.FindCoordinatorResponse(node_id=leader, endpoint=broker.endpoint)

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
            if p in self._owned:
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
                txn, tid, req.transaction_timeout_ms, _now_ms(), new_producer_id=fresh
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
        self._wait_for_completion(producer.transactional_id)
        decision, _ = self._run(producer.transactional_id, lambda txn, written: decide_add_partitions(
            txn, producer.producer_id, producer.producer_epoch, wanted, _now_ms(), markers_written=written))
        if not decision.ok:
            del reply.results[:]
            reply.error, reply.error_message = decision.error, decision.message
        return reply

    def add_offsets(self, req: broker_pb2.AddOffsetsToTxnRequest) -> broker_pb2.AddOffsetsToTxnResponse:
        producer = req.producer
        offsets_partition = (CONSUMER_OFFSETS_TOPIC, self._groups.partition_of(req.group_id))
        self._require_owned(producer.transactional_id)
        self._wait_for_completion(producer.transactional_id)
        decision, _ = self._run(producer.transactional_id, lambda txn, written: decide_add_partitions(
            txn, producer.producer_id, producer.producer_epoch, [offsets_partition], _now_ms(),
            markers_written=written))
        return broker_pb2.AddOffsetsToTxnResponse(error=decision.error, error_message=decision.message)

    def end_txn(self, req: broker_pb2.EndTxnRequest) -> broker_pb2.EndTxnResponse:
        producer = req.producer
        decision, _ = self._run(producer.transactional_id, lambda txn, _written: decide_end_txn(
            txn, producer.producer_id, producer.producer_epoch, req.commit, _now_ms()))
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
        batch = build_batch([NewRecord(txn.to_value().SerializeToString(), txn.transactional_id.encode(),
                                       _now_ms())])
        request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=self._write_timeout_ms)
        request.topics.add(topic=TRANSACTION_STATE_TOPIC).partitions.add(partition=p, batches=[batch])
        result = self._replicas.produce(request, internal=True).topics[0].partitions[0]
        if result.error == ErrorCode.NONE:
            return
        if result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise KanalError(ErrorCode.NOT_COORDINATOR, "this broker stopped leading the id's partition")
        raise KanalError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"writing {TRANSACTION_STATE_TOPIC}-{p} failed: {result.error_message}")

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
            self._markers.submit(self._finish_logged, transactional_id, _MARKER_JOB_S)
        except RuntimeError:
            with self._lock:
                self._marker_jobs.discard(transactional_id)

    def _finish_logged(self, transactional_id: str, wait_s: float) -> None:
        try:
            if not self._finish(transactional_id, time.monotonic() + wait_s):
                # Still owed: the ticker starts the id's next marker job once this one's slot is free.
                log.info("markers of %r not all written within %.1f s; handed on", transactional_id, wait_s)
        except KanalError as exc:
            log.warning("markers of %r not finished: %s; the ticker retries", transactional_id, exc)
        except Exception as exc:
            log.error("marker job of %r failed", transactional_id, exc_info=exc)
        finally:
            with self._lock:
                self._marker_jobs.discard(transactional_id)

    def _finish(self, transactional_id: str, deadline: float) -> bool:
        """Write the markers of the id's PREPARE state into every partition, then record COMPLETE; False
        when the deadline passed first (a partition without a reachable leader): the job is handed on."""
        p = self._require_owned(transactional_id)
        with self._lock:
            txn = self._txns.get(transactional_id)
            epoch = self._owned.get(p, -1)
        markers = pending_markers(txn) if txn is not None else None
        if txn is None or markers is None:
            return True
        remaining = set(markers.partitions)
        while remaining:
            if not self._still_owned(p, epoch):
                return True  # the next coordinator finishes it
            if time.monotonic() > deadline:
                return False
            done, fenced = self._write_markers(markers, remaining, epoch,
                                               max(deadline - time.monotonic(), _MARKER_CALL_TIMEOUT_S_MIN))
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
            decision = decide_markers_written(txn, _now_ms())
            if decision.new_state is not None:
                self._write(p, decision.new_state)
                self._apply(p, transactional_id, decision.new_state)
        log.info("%s: %s markers written to %d partitions", transactional_id,
                 "COMMIT" if txn.state == TxnState.PREPARE_COMMIT else "ABORT", len(markers.partitions))
        return True

    def _write_markers(self, markers: Markers, partitions: set[tuple[str, int]], coordinator_epoch: int,
                       timeout_s: float) -> tuple[set[tuple[str, int]], bool]:
        """One round: one WriteTxnMarkers to the current leader of each partition's broker, all brokers at
        once (each call bounded by `timeout_s`, at most _MARKER_CALL_TIMEOUT_S); returns the partitions
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
        calls: dict[BrokerId, Any] = {}
        for leader, request in requests.items():
            if leader != self.broker_id:
                try:
                    calls[leader] = self._groups.peer(image.brokers[leader].endpoint).WriteTxnMarkers.future(
                        request, timeout=min(timeout_s, _MARKER_CALL_TIMEOUT_S))
                except Exception as exc:  # noqa: BLE001 - that leader is retried next round
                    log.info("WriteTxnMarkers to broker %d failed: %s", leader, exc)
        replies: list[broker_pb2.WriteTxnMarkersResponse] = []
        here = requests.get(BrokerId(self.broker_id))
        if here is not None:
            try:
                replies.append(self.write_markers_here(here))
            except Exception as exc:  # noqa: BLE001 - a write failure: retried next round
                log.info("WriteTxnMarkers here failed: %s", exc)
        for leader, call in calls.items():
            try:
                replies.append(call.result())
            except Exception as exc:  # noqa: BLE001 - a gRPC failure: that leader is retried next round
                log.info("WriteTxnMarkers to broker %d failed: %s", leader, exc)
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

    # ---- the ticker ----

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(_TICK_S) and not self._closed.is_set():
            try:
                self.tick(_now_ms())
            except KanalError as exc:
                log.warning("transaction coordinator tick: %s", exc)

    def tick(self, now_ms: int) -> None:
        """Reconcile, abort the transactions past their timeout, restart marker jobs that stopped."""
        self.reconcile()
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
                    log.warning("could not abort %r: %s", txn, exc)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._changed.notify_all()
            self._owned.clear()
            self._loading.clear()
            self._txns.clear()
        self._loader.shutdown(wait=False, cancel_futures=True)
        self._markers.shutdown(wait=False, cancel_futures=True)

