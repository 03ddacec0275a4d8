"""The transactional producer's side of transactions (issue 22): its state, and its calls to the
transaction coordinator and to the group coordinator. The Producer owns one `TransactionManager` when
`ProducerConfig.transactional_id` is set.

States: UNINITIALIZED → (init_transactions) READY → (begin_transaction) IN_TRANSACTION →
(commit_transaction / abort_transaction) READY; any state → FATAL.

Errors, as Kafka's producer splits them:
- `TransactionFatalError` (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED): another producer took over the id, or this one may not use it.
  The producer can do nothing transactional any more: close it.
- `TransactionAbortableError`: a record of the transaction failed, or a call failed for good (an unknown
  topic, TRANSACTION_ABORTED after a timeout...). The transaction cannot commit: call abort_transaction,
  then begin another. After such an abort the producer re-initialises its id (a bumped epoch), so its
  sequences start again at 0 everywhere and no hole a failed batch left blocks the next transaction.
- Retriable answers (CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
  COORDINATOR_LOAD_IN_PROGRESS, a broker that is down or did not answer in time) are retried until
  max_block_ms (clients/error_boundary.py `retrying`), then raised as abortable with the last code; any
  other refusal, in a reply or of the whole call (kanal's error trailer), is raised at once.

Partitions join the transaction when the sender first sends to them (`add_partitions`, called by the
sender before the batch leaves), as Kafka's sender does, so every produce path (the C one included) is
covered. A group's offsets partition joins in the same AddPartitionsToTxn (its `group_ids`), not in an
AddOffsetsToTxn of its own: `send_offsets` adds it with the partitions whose records are still buffered,
and the sender's first add of a transaction names the groups the previous one committed offsets for. So a
consume-transform-produce loop's commit is one add, then Produce and TxnOffsetCommit side by side, then
EndTxn: a coordinator round trip fewer than Kafka's sequence. Two calls never add the same thing at once:
a call waits for a concurrent add of what it needs (`_join`), so no batch leaves before its partition
joined.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Iterable

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.error_boundary import call, retrying
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

FATAL_CODES = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
# Failures after which the coordinator is looked up again: it moved, or its broker is down or silent.
_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.BROKER_NOT_AVAILABLE,
                                ErrorCode.REQUEST_TIMED_OUT})


class TransactionFatalError(KanalError):
    """The producer can no longer take part in transactions (fenced, or not authorized): close it."""


class TransactionAbortableError(KanalError):
    """The current transaction cannot commit: abort it, then begin another."""


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    FATAL = "fatal"


class TransactionManager:
    def __init__(
        self,
        metadata: ClusterMetadata,
        transactional_id: str,
        timeout_ms: int,
        *,
        request_timeout_ms: int,
        max_block_ms: int,
        retry_backoff_ms: int,
    ) -> None:
        self.transactional_id = transactional_id
        self._metadata = metadata
        self._timeout_ms = timeout_ms
        self._request_timeout_s = request_timeout_ms / 1000
        self._max_block_s = max_block_ms / 1000
        self._backoff_s = max(retry_backoff_ms, 10) / 1000
        self._lock = threading.Lock()
        self.state = TxnState.UNINITIALIZED
        self.producer_id = 0
        self.producer_epoch = 0
        self._coordinator: str | None = None
        # Group id -> its coordinator's endpoint, for TxnOffsetCommit (Kafka's producer keeps it too):
        # looked up again only after a failure that says it moved.
        self._group_coordinators: dict[str, str] = {}
        # Members of the open transaction, and the adds in flight (partitions; groups' offsets partitions).
        self._joining = threading.Condition()
        self._added: set[tuple[str, int]] = set()
        self._added_groups: set[str] = set()
        self._adding: set[tuple[str, int]] = set()
        self._adding_groups: set[str] = set()
        self._groups_used: set[str] = set()  # groups send_offsets named in this transaction
        self._groups_before: set[str] = set()  # ... and in the previous one: joined with its first add
        self._started = False  # something was added at the coordinator: the transaction exists there
        self._failure: KanalError | None = None  # the first failure of the current transaction
        self._fatal: KanalError | None = None
        # Seconds spent in each coordinator call, retries and backoffs included (Kafka's txn-*-time-ns-total
        # producer metrics): where a transaction's time goes (benchmarks/txn_bench.py prints them).
        self.call_seconds_total: dict[str, float] = {}
        self.call_retries_total: dict[str, int] = {}

    def __repr__(self) -> str:
        return (f"<TransactionManager {self.transactional_id!r} {self.state.value} pid={self.producer_id} "
                f"epoch={self.producer_epoch} partitions={len(self._added)}>")

    # ---- state ----

    def require(self, *states: TxnState) -> None:
        if self._fatal is not None:
            raise TransactionFatalError(self._fatal.code, f"the producer is fenced or not authorized: "
                                                          f"{self._fatal.message}")
        if self.state not in states:
            raise KanalError(
                ErrorCode.INVALID_TXN_STATE,
                f"not allowed in state {self.state.value} (needs {', '.join(s.value for s in states)})",
            )

    def in_transaction(self) -> bool:
        return self.state == TxnState.IN_TRANSACTION and self._fatal is None

    def record_failed(self, error: KanalError) -> None:
        """A batch of the transaction failed for good: the transaction can only abort."""
        with self._lock:
            if self._failure is None:
                self._failure = error
        if error.code in FATAL_CODES:
            self._fatal = self._fatal or error

    @property
    def failed(self) -> bool:
        return self._failure is not None

    # ---- calls ----

    def init(self, *, reinit: bool = False) -> tuple[int, int]:
        """InitProducerId with the transactional id (fencing every older producer of it); returns the id
        and epoch. Retried while the coordinator is completing an earlier transaction of the id."""
        request = broker_pb2.InitProducerIdRequest(transactional_id=self.transactional_id,
                                                   transaction_timeout_ms=self._timeout_ms)
        if reinit:
            request.producer_id, request.producer_epoch = self.producer_id, self.producer_epoch
        reply = self._call("InitProducerId", request)
        self.producer_id, self.producer_epoch = reply.producer_id, reply.producer_epoch
        self.state = TxnState.READY
        return self.producer_id, self.producer_epoch

    def begin(self) -> None:
        self.require(TxnState.READY)
        self._added.clear()
        self._added_groups.clear()
        self._groups_before, self._groups_used = self._groups_used, set()
        self._started = False
        self._failure = None
        self.state = TxnState.IN_TRANSACTION

    def add_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Add partitions not yet in the transaction (the sender calls this before sending to them)."""
        self._join(set(partitions), set())

    def join_group(self, group_id: str, buffered: Iterable[tuple[str, int]] = ()) -> None:
        """The group's offsets partition joins the transaction (before its TxnOffsetCommit), and with it
        `buffered`: the partitions whose records are not sent yet, so that the sender finds them added."""
        self.require(TxnState.IN_TRANSACTION)
        self._groups_used.add(group_id)
        self._join(set(buffered), {group_id})

    def send_offsets(self, offsets: dict[tuple[str, int], int], group_id: str) -> None:
        """TxnOffsetCommit of `offsets` for `group_id` in this transaction (its group joined first)."""
        self.join_group(group_id)
        request = broker_pb2.TxnOffsetCommitRequest(producer=self._producer(), group_id=group_id)
        by_topic: dict[str, broker_pb2.OffsetCommitRequest.Topic] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            if topic not in by_topic:
                by_topic[topic] = request.topics.add(topic=topic)
            by_topic[topic].partitions.add(partition=partition, offset=offset, leader_epoch=-1)
        reply = self._call("TxnOffsetCommit", request, group_id=group_id)
        failed = [r for r in reply.results if r.error != ErrorCode.NONE]
        if failed:
            raise TransactionAbortableError(
                failed[0].error,
                f"offsets of {failed[0].topic}-{failed[0].partition}: {failed[0].error_message}",
            )

    def _join(self, partitions: set[tuple[str, int]], groups: set[str]) -> None:
        """Make `partitions` and the offsets partitions of `groups` members of the transaction: one
        AddPartitionsToTxn for what is not added yet (with the previous transaction's groups, unasked),
        after waiting for any concurrent add of what this call needs."""
        with self._joining:
            def free() -> bool:
                return not (partitions & self._adding or groups & self._adding_groups)

            if not self._joining.wait_for(free, self._max_block_s):
                raise TransactionAbortableError(ErrorCode.REQUEST_TIMED_OUT,
                                                "a concurrent AddPartitionsToTxn did not end in time")
            new = partitions - self._added
            needed = groups - self._added_groups
            if not new and not needed:
                return
            asked = needed | (self._groups_before - self._added_groups - self._adding_groups)
            self._adding |= new
            self._adding_groups |= asked
        joined: set[str] = set()
        try:
            joined = self._add_call(new, asked)
        finally:
            with self._joining:
                self._adding -= new
                self._adding_groups -= asked
                self._added_groups |= joined
                self._joining.notify_all()
        for group_id in needed - joined:  # a broker that predates group_ids, or READ refused: Kafka's call
            self._call("AddOffsetsToTxn",
                       broker_pb2.AddOffsetsToTxnRequest(producer=self._producer(), group_id=group_id))
            self._started = True
            with self._joining:
                self._added_groups.add(group_id)

    def _add_call(self, partitions: set[tuple[str, int]], groups: set[str]) -> set[str]:
        """AddPartitionsToTxn: the partitions join (or the call raises), and the groups it names joined."""
        request = broker_pb2.AddPartitionsToTxnRequest(producer=self._producer(), group_ids=sorted(groups))
        topics: dict[str, broker_pb2.TopicPartitions] = {}
        for topic, p in sorted(partitions):
            if topic not in topics:
                topics[topic] = request.topics.add(topic=topic)
            topics[topic].partitions.append(p)
        reply = self._call("AddPartitionsToTxn", request)
        self._started = True
        failed = [r for r in reply.results if r.error != ErrorCode.NONE]
        if failed:
            first = failed[0]
            raise TransactionAbortableError(first.error, f"{first.topic}-{first.partition} cannot join the "
                                                         f"transaction: {first.error_message}")
        with self._joining:
            self._added |= partitions
        return set(reply.group_ids) & groups

    def end(self, commit: bool) -> None:
        """EndTxn; the transaction is over for this producer once it returns. A transaction that added
        nothing at the coordinator ends without a call, as in Kafka."""
        if self._started:
            self._call("EndTxn", broker_pb2.EndTxnRequest(producer=self._producer(), commit=commit))
        self._started = False
        self._added.clear()
        self._added_groups.clear()
        self._failure = None
        self.state = TxnState.READY

    # ---- plumbing ----

    def _producer(self) -> broker_pb2.TxnProducer:
        return broker_pb2.TxnProducer(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                      producer_epoch=self.producer_epoch)

    def _find(self, key: str, key_type: int) -> str:
        reply = self._metadata.find_coordinator(key, key_type, self._request_timeout_s)
        if reply.error != ErrorCode.NONE:
            raise KanalError(reply.error, reply.error_message or "FindCoordinator failed")
        return reply.endpoint

    def _txn_coordinator(self) -> str:
        if self._coordinator is None:
            self._coordinator = self._find(self.transactional_id, broker_pb2.COORDINATOR_TRANSACTION)
        return self._coordinator

    def _group_coordinator(self, group_id: str) -> str:
        endpoint = self._group_coordinators.get(group_id)
        if endpoint is None:
            endpoint = self._group_coordinators[group_id] = self._find(group_id, broker_pb2.COORDINATOR_GROUP)
        return endpoint

    def _forget_coordinator(self, group_id: str | None) -> None:
        if group_id is None:
            self._coordinator = None
        else:
            self._group_coordinators.pop(group_id, None)

    def _call(self, method: str, request, group_id: str | None = None):
        """One coordinator call with Kafka's retries (to the group's coordinator when `group_id` is given,
        else the transaction coordinator); the reply when its `error` is NONE."""
        started = time.monotonic()
        try:
            return self._call_until(method, request, group_id)
        finally:
            self.call_seconds_total[method] = (
                self.call_seconds_total.get(method, 0.0) + time.monotonic() - started
            )

    def _call_until(self, method: str, request, group_id: str | None):
        def find() -> str:
            return self._txn_coordinator() if group_id is None else self._group_coordinator(group_id)

        def attempt(_remaining_s: float):
            endpoint = find()
            reply = call(getattr(self._metadata.stub(endpoint), method), request,
                         timeout_s=self._request_timeout_s, what=f"{method} at {endpoint}")
            if reply.error != ErrorCode.NONE:
                raise KanalError(reply.error, f"{method}: {reply.error_message}")
            return reply

        def on_retry(error: KanalError) -> None:
            if error.code in _COORDINATOR_MOVED:
                self._forget_coordinator(group_id)
            self.call_retries_total[method] = self.call_retries_total.get(method, 0) + 1

        try:
            return retrying(attempt, timeout_s=self._max_block_s, backoff_s=self._backoff_s,
                            on_retry=on_retry)
        except KanalError as error:
            if error.code in FATAL_CODES:
                self._fatal = KanalError(error.code, error.message)
                self.state = TxnState.FATAL
                raise TransactionFatalError(error.code, error.message) from None
            if error.code in _COORDINATOR_MOVED:
                self._forget_coordinator(group_id)
            raise TransactionAbortableError(error.code, error.message) from None
