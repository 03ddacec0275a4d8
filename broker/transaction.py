"""One transactional id's coordinator state machine (issue 22): pure, time in, decisions out.

    EMPTY ──AddPartitions/AddOffsets──▶ ONGOING ──EndTxn(commit)──▶ PREPARE_COMMIT ──markers──▶ COMPLETE_COMMIT
      ▲                                  │  │                                                       │
      │                                  │  └─EndTxn(abort) / timeout / fencing Init─▶ PREPARE_ABORT ──markers──▶ COMPLETE_ABORT
      └──────────────InitProducerId (epoch + 1) from EMPTY / COMPLETE_*◀──────────────────────────────┘
    COMPLETE_* ──AddPartitions──▶ ONGOING (the next transaction)

Every call is `decide_*(state, ..., now_ms) -> Decision`: the new state to write to __transaction_state
(None: nothing changes), the error to answer (NONE: success), and the markers to write once the new
state is durable. The shell (transaction_coordinator.py) writes the state with acks=all and only then
answers and writes markers (write before effect); then it calls `decide_markers_written` to move to
COMPLETE_*. A decision with an error never carries a new state: bad or out-of-order calls change nothing.

Rules, as Kafka's coordinator keeps them:
- producer id and epoch: a call whose producer id is not the id's is INVALID_PRODUCER_ID_MAPPING; an
  older epoch is PRODUCER_FENCED (a zombie), as is a newer one the coordinator never gave out.
- InitProducerId: a new id starts EMPTY at epoch 0 (the shell allocates the producer id); otherwise the
  epoch is bumped (fencing every older producer of the id). An open transaction is aborted first: the
  state moves to PREPARE_ABORT at the bumped epoch and the call is answered CONCURRENT_TRANSACTIONS, so
  the new producer retries until the abort completed. While PREPARE_* the answer is
  CONCURRENT_TRANSACTIONS and nothing changes. An epoch at its maximum is not bumped past it: the shell
  gives a new producer id (`needs_new_producer_id`).
- AddPartitionsToTxn / AddOffsetsToTxn (the __consumer_offsets partition of the group): from EMPTY or
  COMPLETE_* they open a transaction (start_ms = now), in ONGOING they add to it; while PREPARE_* they
  are CONCURRENT_TRANSACTIONS (the previous transaction is still completing) until every marker is
  stored, and then open the next transaction directly (PREPARE_* ──▶ ONGOING, one record for both steps).
- EndTxn: from ONGOING to PREPARE_COMMIT / PREPARE_ABORT with markers for every partition. A retry of a
  decided end (PREPARE_X or COMPLETE_X and the same X) is answered NONE (PREPARE: CONCURRENT_TRANSACTIONS
  while markers are still being written, as Kafka does) and changes nothing; the other outcome, or no
  open transaction (EMPTY), is INVALID_TXN_STATE.
- Timeout: an ONGOING transaction whose start is `timeout_ms` or more ago is aborted, with the epoch
  bumped, so its producer is fenced and can never commit what the coordinator aborted.
- Reload: a new coordinator resumes PREPARE_* states by writing their markers again (`pending_markers`).
"""  # noqa: E501 (the state diagram keeps each transition on one line)

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from kanal.v1 import transactions_pb2
from kanal.v1.batch import CONTROL_ABORT, CONTROL_COMMIT
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import TopicPartition
from kanal.v1.wire_enum import as_enum

# Kafka's transactional.id has no fixed bound; kanal bounds it like a group id so keys stay small.
TRANSACTIONAL_ID_LENGTH_MAX = 255
# Kafka's transaction.max.timeout.ms default: 15 minutes.
TRANSACTION_TIMEOUT_MS_MAX = 900_000
PRODUCER_EPOCH_MAX = 32_767



class TxnState(enum.IntEnum):
    EMPTY = transactions_pb2.TXN_EMPTY
    ONGOING = transactions_pb2.TXN_ONGOING
    PREPARE_COMMIT = transactions_pb2.TXN_PREPARE_COMMIT
    PREPARE_ABORT = transactions_pb2.TXN_PREPARE_ABORT
    COMPLETE_COMMIT = transactions_pb2.TXN_COMPLETE_COMMIT
    COMPLETE_ABORT = transactions_pb2.TXN_COMPLETE_ABORT


_COMPLETE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
_PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """What __transaction_state holds for one transactional id (TransactionStateValue)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: tuple[TopicPartition, ...] = ()
    start_ms: int = 0
    last_update_ms: int = 0

    def __repr__(self) -> str:
        return (f"<Txn {self.transactional_id!r} pid={self.producer_id} epoch={self.producer_epoch} "
                f"{self.state.name} partitions={len(self.partitions)}>")

    def to_value(self) -> transactions_pb2.TransactionStateValue:
        return transactions_pb2.TransactionStateValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state=as_enum(transactions_pb2.TransactionState, int(self.state)),
            start_ms=self.start_ms,
            last_update_ms=self.last_update_ms,
            partitions=[
                transactions_pb2.TransactionPartition(topic=t, partition=p) for t, p in self.partitions
            ],
        )

    @classmethod
    def from_value(cls, transactional_id: str, value: transactions_pb2.TransactionStateValue) -> TxnMetadata:
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms,
                   TxnState(value.state), tuple((p.topic, p.partition) for p in value.partitions),
                   value.start_ms, value.last_update_ms)


@dataclass(frozen=True, slots=True)
class Markers:
    """Markers to write once the state that decided them is durable: `control_type` (COMMIT / ABORT) for
    producer_id at producer_epoch into each partition."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    control_type: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Decision:
    new_state: TxnMetadata | None = None
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    markers: Markers | None = None

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NONE


def _refuse(code: int, message: str) -> Decision:
    return Decision(error=as_enum(ErrorCode, code), message=message)


def check_transactional_id(transactional_id: str) -> None:
    """INVALID_REQUEST for an empty or over-long id (bad input, answered before anything is looked up)."""
    if not transactional_id:
        raise KanalError(ErrorCode.INVALID_REQUEST, "transactional id is empty")
    if len(transactional_id) > TRANSACTIONAL_ID_LENGTH_MAX:
        raise KanalError(
            ErrorCode.INVALID_REQUEST,
            f"transactional id of {len(transactional_id)} characters is "
            f"longer than {TRANSACTIONAL_ID_LENGTH_MAX}",
        )


def check_timeout(timeout_ms: int, timeout_ms_max: int = TRANSACTION_TIMEOUT_MS_MAX) -> None:
    if not 1 <= timeout_ms <= timeout_ms_max:
        raise KanalError(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                         f"transaction timeout {timeout_ms} ms is outside [1, {timeout_ms_max}]")


def _check_producer(txn: TxnMetadata | None, producer_id: int, producer_epoch: int) -> Decision | None:
    if txn is None or txn.producer_id != producer_id:
        return _refuse(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                       f"producer id {producer_id} is not the one of this transactional id")
    if producer_epoch != txn.producer_epoch:
        return _refuse(ErrorCode.PRODUCER_FENCED,
                       f"producer epoch {producer_epoch} is not the current epoch {txn.producer_epoch}")
    return None


def _markers(txn: TxnMetadata) -> Markers:
    control = CONTROL_COMMIT if txn.state == TxnState.PREPARE_COMMIT else CONTROL_ABORT
    return Markers(txn.transactional_id, txn.producer_id, txn.producer_epoch, control, txn.partitions)


def _abort(txn: TxnMetadata, now_ms: int) -> TxnMetadata:
    """PREPARE_ABORT at a bumped epoch: the producer of the open transaction is fenced."""
    return replace(txn, producer_epoch=min(txn.producer_epoch + 1, PRODUCER_EPOCH_MAX),
                   state=TxnState.PREPARE_ABORT, last_update_ms=now_ms)


def decide_init_producer_id(txn: TxnMetadata | None, transactional_id: str, timeout_ms: int, now_ms: int, *,
                            new_producer_id: int) -> Decision:
    """InitProducerId. `new_producer_id` is used when the id is new or its epoch is exhausted (the shell
    allocates one; unused otherwise)."""
    if txn is None:
        return Decision(TxnMetadata(transactional_id, new_producer_id, 0, timeout_ms, last_update_ms=now_ms))
    if txn.state in _PREPARE:
        return _refuse(ErrorCode.CONCURRENT_TRANSACTIONS,
                       f"{transactional_id}: the previous transaction is completing ({txn.state.name})")
    if txn.state == TxnState.ONGOING:
        aborted = _abort(txn, now_ms)
        return Decision(aborted, ErrorCode.CONCURRENT_TRANSACTIONS,
                        f"{transactional_id}: aborting the open transaction of the fenced producer",
                        _markers(aborted))
    if needs_new_producer_id(txn):
        return Decision(TxnMetadata(transactional_id, new_producer_id, 0, timeout_ms, last_update_ms=now_ms))
    return Decision(replace(txn, producer_epoch=txn.producer_epoch + 1, timeout_ms=timeout_ms,
                            state=TxnState.EMPTY, partitions=(), start_ms=0, last_update_ms=now_ms))


def needs_new_producer_id(txn: TxnMetadata) -> bool:
    return txn.producer_epoch >= PRODUCER_EPOCH_MAX - 1


def decide_add_partitions(
    txn: TxnMetadata | None,
    producer_id: int,
    producer_epoch: int,
    partitions: list[TopicPartition],
    now_ms: int,
    *,
    markers_written: bool = False,
) -> Decision:
    """AddPartitionsToTxn (and AddOffsetsToTxn with the group's __consumer_offsets partition). The shell
    has checked that the topics exist (UNKNOWN_TOPIC_OR_PARTITION otherwise).

    `markers_written`: the id is PREPARE_* and every marker of that transaction is stored. The next
    transaction then opens at once: its ONGOING state is the one record written, standing for the
    COMPLETE_* one too (a reloading coordinator that finds ONGOING owes no markers of the previous
    transaction, which is exactly the case), so a producer's back-to-back transactions pay one state
    write between them instead of two."""
    refused = _check_producer(txn, producer_id, producer_epoch)
    if refused is not None:
        return refused
    txn = assert_txn(txn)
    if txn.state in _PREPARE:
        completed = decide_markers_written(txn, now_ms).new_state if markers_written else None
        if completed is None:
            return _refuse(
                ErrorCode.CONCURRENT_TRANSACTIONS,
                f"{txn.transactional_id}: the previous transaction is completing ({txn.state.name})",
            )
        txn = completed
    if txn.state == TxnState.ONGOING:
        added = tuple(tp for tp in dict.fromkeys(partitions) if tp not in txn.partitions)
        if not added:
            return Decision()  # all there already: nothing to write
        return Decision(replace(txn, partitions=txn.partitions + added, last_update_ms=now_ms))
    return Decision(replace(txn, state=TxnState.ONGOING, partitions=tuple(dict.fromkeys(partitions)),
                            start_ms=now_ms, last_update_ms=now_ms))


def decide_end_txn(txn: TxnMetadata | None, producer_id: int, producer_epoch: int, commit: bool,
                   now_ms: int) -> Decision:
    refused = _check_producer(txn, producer_id, producer_epoch)
    if refused is not None:
        return refused
    txn = assert_txn(txn)
    want_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    want_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    if txn.state == TxnState.ONGOING:
        decided = replace(txn, state=want_prepare, last_update_ms=now_ms)
        return Decision(decided, markers=_markers(decided))
    if txn.state == want_complete:
        return Decision()  # a retry of an end that completed
    if txn.state == want_prepare:
        return _refuse(
            ErrorCode.CONCURRENT_TRANSACTIONS, f"{txn.transactional_id}: markers are being written"
        )
    word = "commit" if commit else "abort"
    return _refuse(
        ErrorCode.INVALID_TXN_STATE,
        f"{txn.transactional_id}: cannot {word} in state {txn.state.name} (no open transaction, or "
        "the other outcome was decided)",
    )


def decide_markers_written(txn: TxnMetadata, now_ms: int) -> Decision:
    """Every marker of a PREPARE_* state is written: COMPLETE_*, partitions cleared."""
    if txn.state not in _PREPARE:
        return Decision()
    done = TxnState.COMPLETE_COMMIT if txn.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    return Decision(replace(txn, state=done, partitions=(), start_ms=0, last_update_ms=now_ms))


def decide_timeout(txn: TxnMetadata, now_ms: int) -> Decision:
    """The ticker: abort an ONGOING transaction `timeout_ms` or more after it began (epoch bumped)."""
    if txn.state != TxnState.ONGOING or now_ms - txn.start_ms < txn.timeout_ms:
        return Decision()
    aborted = _abort(txn, now_ms)
    return Decision(aborted, markers=_markers(aborted))


def pending_markers(txn: TxnMetadata) -> Markers | None:
    """After a reload: the markers a PREPARE_* state still owes."""
    return _markers(txn) if txn.state in _PREPARE else None


def assert_txn(txn: TxnMetadata | None) -> TxnMetadata:
    if txn is None:  # _check_producer refuses None first; this keeps the type checker and readers sure
        raise KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, "transaction state missing after the producer check")
    return txn
