"""Transactional producers, from the transaction coordinators' own log `__transaction_state` (issue 22).

Why this topic and not the metadata log: the metadata log holds only the producer id blocks the
controllers hand out to brokers; which transactional id holds which producer id and epoch, its timeout,
its transactions and how each ended are decided by the coordinator and written, before they take effect,
to `__transaction_state` (transactions.proto: key = the transactional id, value = a
TransactionStateValue). The audit reads that topic's partition logs from the data directory with
`kanal-log` (read_uncommitted: the coordinator's writes are not transactional) and decodes them here.

The topic is compacted: for an id, the states still in the log are its latest one and those written
since the last cleaning, so counts of commits and aborts are those the log still holds (`states_seen`
says how many states that is); the latest state, producer id and epoch are always there.

Pure: rows in, rows out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from kanal.v1 import transactions_pb2

STATE_NAMES = {v.number: v.name.removeprefix("TXN_") for v in
               transactions_pb2.TransactionState.DESCRIPTOR.values}


@dataclass(frozen=True, slots=True)
class StateRow:
    """One state a coordinator wrote: where, for which id, and the decoded value (None for a tombstone
    or a value that does not decode: `error` says which)."""

    partition: int
    offset: int
    transactional_id: str
    producer_id: int | None
    producer_epoch: int | None
    state: str | None
    timeout_ms: int | None
    partitions: tuple[str, ...]
    start_ms: int | None
    last_update_ms: int | None
    error: str | None = None


def decode_state(partition: int, offset: int, key: bytes | None, value: bytes | None) -> StateRow | None:
    """One `__transaction_state` record as a StateRow (None for a record without a key: not the
    coordinator's)."""
    if key is None:
        return None
    tid = key.decode("utf-8", "replace")
    if value is None:
        return StateRow(partition, offset, tid, None, None, None, None, (), None, None, "tombstone")
    v = transactions_pb2.TransactionStateValue()
    try:
        v.ParseFromString(value)
    except DecodeError as exc:
        return StateRow(
            partition, offset, tid, None, None, None, None, (), None, None, f"undecodable value: {exc}"
        )
    return StateRow(
        partition,
        offset,
        tid,
        v.producer_id,
        v.producer_epoch,
        STATE_NAMES.get(v.state, str(v.state)),
        v.timeout_ms,
        tuple(f"{p.topic}-{p.partition}" for p in v.partitions),
        v.start_ms or None,
        v.last_update_ms,
    )


@dataclass(slots=True)
class ProducerSummary:
    """One transactional id over the states its log holds, in offset order."""

    transactional_id: str
    producer_id: int | None = None
    producer_epoch: int | None = None
    state: str | None = None
    timeout_ms: int | None = None
    partitions: tuple[str, ...] = ()  # of the latest open or completing transaction
    # every producer id it held (a new one comes after epoch exhaustion)
    producer_ids: list[int] = field(default_factory=list)
    epoch_bumps: int = 0
    transactions_started: int = 0
    commits: int = 0
    aborts: int = 0
    first_update_ms: int | None = None
    last_update_ms: int | None = None
    states_seen: int = 0

    def take(self, row: StateRow) -> None:
        self.states_seen += 1
        if row.state is None:
            return
        if row.producer_id is not None and row.producer_id not in self.producer_ids:
            self.producer_ids.append(row.producer_id)
        if (self.producer_epoch is not None and row.producer_id == self.producer_id
                and row.producer_epoch is not None and row.producer_epoch > self.producer_epoch):
            self.epoch_bumps += row.producer_epoch - self.producer_epoch
        if row.state == "ONGOING" and self.state != "ONGOING":
            self.transactions_started += 1
        if row.state == "COMPLETE_COMMIT" and self.state != "COMPLETE_COMMIT":
            self.commits += 1
        if row.state == "COMPLETE_ABORT" and self.state != "COMPLETE_ABORT":
            self.aborts += 1
        if row.partitions:
            self.partitions = row.partitions
        self.producer_id, self.producer_epoch, self.state = row.producer_id, row.producer_epoch, row.state
        self.timeout_ms = row.timeout_ms
        if row.last_update_ms:
            self.first_update_ms = self.first_update_ms or row.last_update_ms
            self.last_update_ms = row.last_update_ms


def summarize(rows: Iterable[StateRow]) -> list[ProducerSummary]:
    """Per transactional id, from its states in (partition, offset) order; an id lives in one partition."""
    out: dict[str, ProducerSummary] = {}
    for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
        out.setdefault(row.transactional_id, ProducerSummary(row.transactional_id)).take(row)
    return [out[t] for t in sorted(out)]
