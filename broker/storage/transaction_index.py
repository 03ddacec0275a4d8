"""TransactionIndex: the transactions of one partition, for read_committed readers (issue 22).

For each producer id with an open transaction on this partition the index keeps the offset of the
transaction's first batch here; for every aborted transaction it keeps (producer id, first offset, last
offset), the last offset being that of its ABORT marker. From those:

- the first unstable offset is the smallest first offset of an open transaction (None when none is
  open): no read_committed consumer may read at or past it, because the transaction that starts there
  may still abort;
- the last stable offset (LSO) is min(high-water mark, first unstable offset): read_committed Fetch
  answers only batches below it and ListOffsets "latest" under read_committed answers it;
- a read_committed Fetch of [fetch_offset, LSO) is answered with the aborted transactions that overlap
  the range (last offset >= fetch_offset and first offset < the range's end), so the consumer can drop
  their records without any other state (Kafka's FetchResponse.aborted_transactions).

Rules, as Kafka keeps them:
- a TRANSACTIONAL data batch of a producer with no open transaction opens one at its base offset; later
  batches of the same producer join it;
- a CONTROL batch (records.proto, TRANSACTIONS) closes the producer's open transaction; an ABORT marker
  adds it to the aborted list (a marker with no open transaction here, for a partition added to a
  transaction that wrote nothing to it, changes nothing);
- non-transactional batches change nothing.

Followers and recovery call `record` for every batch they store, as the leader does: the index is a
function of the log, and `rebuild(batches)` from the log start gives exactly the incremental index.
`truncate_to(offset)` is not incremental (a truncation may reopen a transaction that a removed marker
closed): the shell rebuilds from the log instead. `drop_before(log_start)` forgets aborted transactions
whose marker retention deleted; no later fetch can overlap them.

Pure: no I/O, no clocks, no threads. One owner serialises calls (the partition lock).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kanal.v1.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    BatchHeader,
    control_type_in,
    iter_entries,
    scan_batch,
)
from kanal.v1.error import ErrorCode, KanalError


@dataclass(frozen=True, slots=True)
class TxnBatch:
    """What the index needs of one stored batch: its producer, offsets, attributes, and for a control
    batch its marker type (0 otherwise)."""

    producer_id: int
    base_offset: int
    last_offset: int
    attributes: int = 0
    control_type: int = 0
    max_timestamp_ms: int = 0

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @classmethod
    def from_stored(cls, header: BatchHeader, stored: bytes | memoryview, base_offset: int) -> TxnBatch:
        """From a scanned batch and its bytes (a control batch is parsed for its marker type)."""
        control_type = control_type_in(stored) if header.attributes & ATTR_CONTROL else 0
        return cls(header.producer_id, base_offset, base_offset + header.last_offset_delta, header.attributes,
                   control_type, header.max_timestamp_ms)


def txn_batches_in(entries: bytes | memoryview) -> Iterator[TxnBatch]:
    """The batches of a buffer of log entries (what Log.read returns), for replay: headers only, except
    control batches (one small record each)."""
    for entry in iter_entries(entries, verify_crc=False):
        header = scan_batch(entry.batch)
        yield TxnBatch.from_stored(header, entry.batch, entry.suffix.base_offset)


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """An aborted transaction of `producer_id` on this partition: its records lie in
    [first_offset, last_offset], last_offset being its ABORT marker's offset. Ordered by last_offset."""

    last_offset: int
    producer_id: int
    first_offset: int


@dataclass(slots=True)
class TransactionIndex:
    # producer id -> offset of the first batch of its open transaction here
    ongoing: dict[int, int] = field(default_factory=dict)
    # aborted transactions, in marker (last_offset) order: markers are appended in offset order
    aborted: list[AbortedTxn] = field(default_factory=list)
    # the offset after the last batch recorded
    next_offset: int = 0

    def __repr__(self) -> str:
        return (f"<TransactionIndex next={self.next_offset} ongoing={len(self.ongoing)} "
                f"first_unstable={self.first_unstable_offset} aborted={len(self.aborted)}>")

    @property
    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values()) if self.ongoing else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset
        return high_watermark if first is None else min(high_watermark, first)

    def open_first_offset(self, producer_id: int) -> int | None:
        return self.ongoing.get(producer_id)

    def record(self, batch: TxnBatch) -> AbortedTxn | None:
        """Take one stored batch, in offset order; returns the aborted transaction its ABORT marker
        closed (for the shell to write down), else None."""
        if batch.base_offset < self.next_offset:
            raise KanalError(
                ErrorCode.INVALID_RECORD,
                f"batch at {batch.base_offset} recorded after offset {self.next_offset}: the index "
                "follows the log in order",
            )
        self.next_offset = batch.last_offset + 1
        if not batch.transactional or batch.producer_id <= 0:
            return None
        if not batch.control:
            self.ongoing.setdefault(batch.producer_id, batch.base_offset)
            return None
        first = self.ongoing.pop(batch.producer_id, None)
        if first is None or batch.control_type != CONTROL_ABORT:
            return None
        entry = AbortedTxn(batch.base_offset, batch.producer_id, first)
        self.aborted.append(entry)
        return entry

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with a record in [start, end): last_offset >= start, first_offset < end."""
        i = bisect_left(self.aborted, start, key=lambda a: a.last_offset)
        return [a for a in self.aborted[i:] if a.first_offset < end]

    def drop_before(self, log_start_offset: int) -> int:
        """Forget aborted transactions wholly below the log start; returns how many."""
        i = bisect_left(self.aborted, log_start_offset, key=lambda a: a.last_offset)
        del self.aborted[:i]
        return i

    def forget_markers(self, marker_offsets: Iterable[int]) -> int:
        """Compaction removed these markers (only ever of transactions with no data left, see
        `removable_markers`): forget the aborted transactions they closed, so the index stays what a
        rebuild from the log gives. Returns how many were forgotten."""
        gone = set(marker_offsets)
        before = len(self.aborted)
        self.aborted = [a for a in self.aborted if a.last_offset not in gone]
        return before - len(self.aborted)

    def advance_to(self, offset: int) -> None:
        """The log continues at `offset` with nothing recorded in between (a gap compaction left)."""
        self.next_offset = max(self.next_offset, offset)

    @classmethod
    def rebuild(
        cls, batches: Iterable[TxnBatch], *, start: TransactionIndex | None = None
    ) -> TransactionIndex:
        index = start.copy() if start is not None else cls()
        for batch in batches:
            index.record(batch)
        return index

    def copy(self) -> TransactionIndex:
        return TransactionIndex(dict(self.ongoing), list(self.aborted), self.next_offset)

    def batch_state(self, producer_id: int, base_offset: int) -> str:
        """OPEN, ABORTED or COMMITTED: the fate of the TRANSACTIONAL data batch of `producer_id` at
        `base_offset` (compaction decides by it)."""
        first = self.ongoing.get(producer_id)
        if first is not None and base_offset >= first:
            return OPEN
        i = bisect_left(self.aborted, base_offset, key=lambda a: a.last_offset)
        for a in self.aborted[i:]:
            if a.producer_id == producer_id and a.first_offset <= base_offset:
                return ABORTED
        return COMMITTED


OPEN, ABORTED, COMMITTED = "open", "aborted", "committed"


def removable_markers(batches: Iterable[TxnBatch], marker_horizon_ms: int) -> set[int]:
    """Base offsets of the markers a cleaning pass may remove, from the log's batches that carry a
    producer id as they stand before the pass, in offset order.

    Kafka's rule: a marker is needed while any data batch of its transaction is still in the log (an
    ABORT marker hides the aborted records from a rebuilt index, a COMMIT marker closes the transaction
    so the rebuilt LSO does not stop at its first batch). Once cleaning has removed every one of them, the
    marker goes in a later pass, and only when it is older than delete.retention.ms (its batch's
    max timestamp at or below `marker_horizon_ms`), so a consumer that read the transaction's data before
    it was cleaned still finds the marker. Deciding from the log before the pass makes that "later pass":
    data removed by this pass still counts as present. A marker that is its producer's last batch in the
    log stays, as Kafka keeps an active producer's last batch: it carries the producer's epoch (a marker
    at a bumped epoch fences the older one), which a rebuild of the producer state reads from the log.

    A producer's transaction on this partition is its TRANSACTIONAL data batches since its previous
    marker: markers removed earlier closed transactions with no data, so the grouping is unchanged by
    their absence."""
    batches = list(batches)
    last_of_producer = {b.producer_id: b.base_offset for b in batches if b.producer_id > 0}
    has_data: dict[int, bool] = {}  # producer id -> its current transaction still has a data batch here
    out: set[int] = set()
    for batch in batches:
        if not batch.transactional or batch.producer_id <= 0:
            continue
        if not batch.control:
            has_data[batch.producer_id] = True
        elif (not has_data.pop(batch.producer_id, False) and batch.max_timestamp_ms <= marker_horizon_ms
              and last_of_producer[batch.producer_id] != batch.base_offset):
            out.add(batch.base_offset)
    return out
