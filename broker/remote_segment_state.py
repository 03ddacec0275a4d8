"""The idempotence and transaction state at a segment's end, chained from the state at its start (tiered
storage, issue 44): pure, over the segment's stored entries.

Uploading a segment records, beside it, the state a replica would have after replaying the log up to the
segment's end (its `.meta`, broker/storage/remote_segment_meta.py). Replaying the whole log for each upload
would cost what the log costs; instead the state at the end of one segment is the state at the end of the
previous one plus this segment's batches — `state(end) = replay(state(base), segment)` — the same fold
`ProducerStateTable.rebuild` and `TransactionIndex.rebuild` make over a whole log, cut at segment
boundaries. Tests check the chain against a whole-log rebuild.

The transaction state carried forward is only what a later segment needs: the open transactions and the
next offset. The aborted transactions a segment's markers close are returned apart (`aborted`): they
belong to that segment's metadata record, since a read_committed reader of the segment needs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kanal.broker.producer_snapshot import decode_snapshot, encode_snapshot
from kanal.broker.producer_state import ProducerStateTable, producer_batches_in
from kanal.broker.storage.transaction_checkpoint import encode_checkpoint
from kanal.broker.storage.transaction_index import AbortedTxn, TransactionIndex, txn_batches_in
from kanal.v1.error import ErrorCode, KanalError


@dataclass(frozen=True, slots=True)
class SegmentEndState:
    """The state as of a segment's end offset, and what its markers aborted."""

    end_offset: int
    producers: ProducerStateTable
    open_transactions: dict[int, int]  # producer id -> first offset of its transaction still open at the end
    aborted: tuple[AbortedTxn, ...]  # transactions whose ABORT marker is in the segment, in marker order

    def snapshot_bytes(self) -> bytes:
        """The producer state in producer_snapshot.py's format, at the end offset."""
        return encode_snapshot(self.producers, self.end_offset)

    def transactions_bytes(self) -> bytes:
        """The transaction state in transaction_checkpoint.py's format, at the end offset: the open
        transactions and this segment's aborted ones."""
        return encode_checkpoint(TransactionIndex(dict(self.open_transactions), list(self.aborted),
                                                  self.end_offset))

    def carried(self) -> tuple[ProducerStateTable, TransactionIndex]:
        """Copies to chain the next segment from: the table's entries are mutable, so the copy goes
        through the snapshot's bytes (what a restarted uploader would read back from the `.meta`)."""
        _, producers = decode_snapshot(self.snapshot_bytes())
        return producers, TransactionIndex(dict(self.open_transactions), [], self.end_offset)


def chain_segment(entries: bytes | memoryview, base_offset: int, end_offset: int,
                  producers: ProducerStateTable, transactions: TransactionIndex) -> SegmentEndState:
    """The state at `end_offset` of the segment whose stored entries are `entries` ([base_offset,
    end_offset)), from the state at `base_offset`. `producers` is consumed (changed in place).
    INVALID_REQUEST when the starting state is not at `base_offset` or a batch lies outside the segment."""
    if producers.next_offset > base_offset or transactions.next_offset > base_offset:
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"state at {producers.next_offset}/{transactions.next_offset} is past the segment's "
                         f"base {base_offset}")
    if producers.next_offset < base_offset:
        producers.advance_to(base_offset)
    index = TransactionIndex(dict(transactions.ongoing), [], max(transactions.next_offset, base_offset))
    batches = list(producer_batches_in(entries))
    if batches and (batches[0].base_offset < base_offset or batches[-1].last_offset >= end_offset):
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"batches [{batches[0].base_offset}, {batches[-1].last_offset}] are not all "
                         f"inside the segment [{base_offset}, {end_offset})")
    ProducerStateTable.rebuild(batches, start=producers)
    index = TransactionIndex.rebuild(txn_batches_in(entries), start=index)
    producers.advance_to(end_offset)
    index.advance_to(end_offset)
    return SegmentEndState(end_offset, producers, dict(index.ongoing), tuple(index.aborted))
