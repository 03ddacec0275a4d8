"""Transactions as kanal's Spark readers see them (issue 22): control records, isolation, and counts.

Control records (the COMMIT / ABORT markers a transaction coordinator writes, batches with the CONTROL
attribute bit) are never rows of `kanal-log`, under either isolation level: a Kafka consumer, and so the
Kafka Spark connector, never hands them to the application. `kanal analytics` counts them instead
(the `transactions` table).

`isolationLevel` (the Kafka connector's `kafka.isolation.level`; the default is `read_uncommitted`, the
Kafka consumer's and so the connector's):

- read_uncommitted: every data record up to the committed end (the high-water mark), records of open
  and aborted transactions included;
- read_committed: only up to the last stable offset (LSO: the first offset of the oldest transaction
  still open at the committed end; the committed end when none is open), and no record of an aborted
  transaction.

Through brokers the Fetch asks for READ_COMMITTED: the leader answers up to the LSO with the aborted
transactions overlapping the fetched range, as for any consumer. From files the same facts are worked
out on the driver before the scan: each partition's batches are walked once (headers, plus the one-record
control batches) into the broker's own TransactionIndex (kanal.broker.storage.transaction_index), which
gives the LSO at the committed end and, for each task's offset range, the aborted transactions that
overlap it. That walk reads the partition's files a second time; read_uncommitted costs nothing extra.

Either way a task drops records with Kafka's consumer rule (`AbortedFilter`): a TRANSACTIONAL batch of
a producer is dropped from the first offset of one of its aborted transactions until that producer's
next marker. Whole batches are dropped (a transaction's batches hold only its records), so the C column
walk (log_columns.py) and the Python one are fed the same entries and need no change.

Counts (`partition_counts`): per partition, the records of plain batches, of committed, aborted and open
transactions, and control records, decided from the whole partition's batches by the same index (a data
batch is OPEN while its transaction has no marker at the committed end, ABORTED when an ABORT marker of
its producer closed it, else COMMITTED).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kanal.broker.storage.transaction_index import ABORTED, OPEN, TransactionIndex, TxnBatch
from kanal.spark.range_reader import Clipped, Notice
from kanal.spark.segment_reader import SegmentDamage, StoredEntry
from kanal.v1.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader, scan_batch

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)

Item = Clipped | Notice | StoredEntry | SegmentDamage


def _header(entry: StoredEntry) -> BatchHeader:
    return entry.header if entry.header is not None else scan_batch(entry.batch)


def _entry_of(item: Item) -> StoredEntry | None:
    if isinstance(item, Clipped):
        return item.entry
    return item if isinstance(item, StoredEntry) else None


class AbortedFilter:
    """Kafka's consumer rule over the aborted transactions overlapping a range, given as (producer id,
    first offset): from the batch that reaches a transaction's first offset, its producer's TRANSACTIONAL
    batches are dropped until a marker of that producer. Fed in offset order; `add` may be called again
    as further ranges arrive (one Fetch reply each)."""

    def __init__(self, aborted: Iterable[tuple[int, int]] = ()) -> None:
        self._pending: list[tuple[int, int]] = []  # heap of (first offset, producer id)
        self._aborting: set[int] = set()
        self.add(aborted)

    def add(self, aborted: Iterable[tuple[int, int]]) -> None:
        for producer_id, first_offset in aborted:
            heapq.heappush(self._pending, (first_offset, producer_id))

    def keep(self, header: BatchHeader, base_offset: int) -> bool:
        """Whether the data batch at `base_offset` is shown (a control batch never is)."""
        last = base_offset + header.last_offset_delta
        while self._pending and self._pending[0][0] <= last:
            self._aborting.add(heapq.heappop(self._pending)[1])
        if header.attributes & ATTR_CONTROL:
            self._aborting.discard(header.producer_id)  # its marker ends the producer's transaction here
            return False
        return not (header.attributes & ATTR_TRANSACTIONAL and header.producer_id in self._aborting)


def visible_items(
    items: Iterable[Item], aborted: AbortedFilter | None, lso: int | None = None
) -> Iterator[Item]:
    """The items a scan turns into rows: control batches never; under read_committed (`aborted` given)
    no batch of an aborted transaction and nothing at or past `lso`. Notices pass unchanged."""
    for item in items:
        entry = _entry_of(item)
        if entry is None:
            yield item
            continue
        header = _header(entry)
        if aborted is None:
            if not header.attributes & ATTR_CONTROL:
                yield item
            continue
        if lso is not None and entry.base_offset >= lso:
            continue
        if not aborted.keep(header, entry.base_offset):
            continue
        if lso is not None and entry.last_offset >= lso:  # a batch never straddles it; kept exact anyway
            lo, hi = (item.lo, item.hi) if isinstance(item, Clipped) else (entry.base_offset, lso)
            item = Clipped(entry, lo, min(hi, lso))
        yield item


def committed_part(item: Item) -> tuple[StoredEntry, TxnBatch] | None:
    """An intact entry with offsets below its range's end, as the index records it (None otherwise:
    notices, and batches wholly past the committed end)."""
    entry = _entry_of(item)
    if entry is None or isinstance(item, Clipped) and entry.base_offset >= item.hi:
        return None
    return entry, TxnBatch.from_stored(_header(entry), entry.batch, entry.base_offset)


def partition_index(items: Iterable[Item]) -> TransactionIndex:
    """The transaction index of one partition's entries read in offset order, as the broker's."""
    index = TransactionIndex()
    for item in items:
        part = committed_part(item)
        if part is not None and part[1].base_offset >= index.next_offset:
            index.record(part[1])
    return index


@dataclass(frozen=True, slots=True)
class TxnView:
    """What a task reading [lo, hi) of a partition under read_committed needs: the aborted transactions
    overlapping it, as (producer id, first offset), and the partition's LSO (None: no transaction open)."""

    aborted: tuple[tuple[int, int], ...]
    lso: int | None

    @classmethod
    def of(cls, index: TransactionIndex, lo: int, hi: int) -> TxnView:
        return cls(tuple((a.producer_id, a.first_offset) for a in index.aborted_between(lo, hi)),
                   index.first_unstable_offset)


@dataclass(frozen=True, slots=True)
class TxnCounts:
    """Records of one partition by what they are (module docstring)."""

    plain: int = 0
    committed: int = 0
    aborted: int = 0
    open: int = 0
    control: int = 0


def partition_counts(items: Iterable[Item]) -> TxnCounts:
    """Count one partition's records read in offset order (whole batches below the committed end)."""
    batches: list[tuple[TxnBatch, int]] = []
    for item in items:
        part = committed_part(item)
        if part is not None:
            entry, batch = part
            batches.append((batch, _header(entry).record_count))
    index = TransactionIndex.rebuild(b for b, _ in batches)
    plain = committed = aborted = open_ = control = 0
    for batch, count in batches:
        if batch.control:
            control += count
        elif not batch.transactional or batch.producer_id <= 0:
            plain += count
        else:
            state = index.batch_state(batch.producer_id, batch.base_offset)
            if state == OPEN:
                open_ += count
            elif state == ABORTED:
                aborted += count
            else:
                committed += count
    return TxnCounts(plain, committed, aborted, open_, control)
