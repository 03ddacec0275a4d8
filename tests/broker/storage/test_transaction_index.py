"""TransactionIndex (broker/storage/transaction_index.py) and its checkpoint file: unit cases, and a
Hypothesis model of interleaved transactions with commits, aborts, compaction and recovery, checked
end to end through the consumer's read_committed filter (clients/consumer.py)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kanal.broker.storage.transaction_checkpoint import (
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from kanal.broker.storage.transaction_index import (
    ABORTED,
    COMMITTED,
    OPEN,
    AbortedTxn,
    TransactionIndex,
    TxnBatch,
    removable_markers,
    txn_batches_in,
)
from kanal.clients.consumer import decode_fetched, decode_record_list_python
from kanal.v1.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NewRecord,
    build_batch,
    build_control_batch,
    frame_entry,
    with_broker_suffix,
)
from kanal.v1.error import KanalError

TXN = ATTR_TRANSACTIONAL
MARK = ATTR_TRANSACTIONAL | ATTR_CONTROL


def test_lso_is_the_first_offset_of_the_oldest_open_transaction():
    index = TransactionIndex()
    index.record(TxnBatch(0, 0, 1))                          # plain
    index.record(TxnBatch(7, 2, 3, TXN))                     # 7 opens at 2
    index.record(TxnBatch(8, 4, 4, TXN))                     # 8 opens at 4
    index.record(TxnBatch(7, 5, 5, TXN))                     # 7 goes on
    assert index.last_stable_offset(6) == 2
    assert index.last_stable_offset(1) == 1, "never above the high-water mark"
    assert index.record(TxnBatch(7, 6, 6, MARK, CONTROL_COMMIT)) is None
    assert index.last_stable_offset(7) == 4
    aborted = index.record(TxnBatch(8, 7, 7, MARK, CONTROL_ABORT))
    assert aborted == AbortedTxn(7, 8, 4)
    assert index.last_stable_offset(8) == 8 and index.first_unstable_offset is None
    assert index.aborted_between(0, 8) == [aborted]
    assert index.aborted_between(8, 9) == [], "the marker is the transaction's last offset"
    assert index.aborted_between(0, 4) == [], "nothing of it below its first offset"
    assert index.batch_state(8, 4) == ABORTED and index.batch_state(7, 2) == COMMITTED


def test_a_marker_without_an_open_transaction_changes_nothing_and_order_is_enforced():
    index = TransactionIndex()
    assert index.record(TxnBatch(3, 0, 0, MARK, CONTROL_ABORT)) is None
    assert index.aborted == [] and index.ongoing == {}
    with pytest.raises(KanalError):
        index.record(TxnBatch(3, 0, 0, TXN))
    index.record(TxnBatch(3, 1, 1, TXN))
    assert index.batch_state(3, 1) == OPEN


def test_drop_before_forgets_aborted_transactions_below_the_log_start():
    index = TransactionIndex.rebuild([TxnBatch(1, 0, 0, TXN), TxnBatch(1, 1, 1, MARK, CONTROL_ABORT),
                                      TxnBatch(2, 2, 2, TXN), TxnBatch(2, 3, 3, MARK, CONTROL_ABORT)])
    assert index.drop_before(2) == 1
    assert index.aborted == [AbortedTxn(3, 2, 2)]


def test_checkpoint_round_trip_and_damage(tmp_path):
    index = TransactionIndex.rebuild([TxnBatch(1, 0, 0, TXN), TxnBatch(1, 1, 1, MARK, CONTROL_ABORT),
                                      TxnBatch(2, 2, 4, TXN)])
    assert decode_checkpoint(encode_checkpoint(index)) == index
    write_checkpoint(tmp_path, index)
    assert read_checkpoint(tmp_path, 0, 5) == (index, "")
    loaded, why = read_checkpoint(tmp_path, 0, 4)
    assert loaded is None and "outside the log" in why, "a checkpoint past a truncated log end is not used"
    data = bytearray(encode_checkpoint(index))
    data[20] ^= 1
    (tmp_path / "transactions.checkpoint").write_bytes(bytes(data))
    loaded, why = read_checkpoint(tmp_path, 0, 5)
    assert loaded is None and "CRC" in why


# ---- the model ----

MODEL_RETENTION_MS = 100  # delete.retention.ms in the model

class TransactionsModel(RuleBasedStateMachine):
    """A partition's log as real stored entries; the model knows each record's transaction and fate.

    After every step, for a random fetch offset below the LSO, what the consumer's read_committed filter
    returns from the log with the index's aborted transactions must be exactly the records of plain
    batches and committed transactions in that range, and the LSO must be min(HW, first offset of an open
    transaction). Compaction removes aborted transactions' data and, by the cleaner's marker rule
    (removable_markers), the markers of transactions with no data left that are older than the retention;
    superseding drops committed data batches whole (as compaction does once later values replace all their
    keys). Recovery rebuilds the index from the log, alone or on top of a checkpoint. After every step the
    index kept incrementally and one rebuilt from the log as it stands give the same LSO and the same
    read_committed records: cleaning leaves the index a function of the log."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[tuple[int, bytes]] = []  # (base offset, log entry)
        self.next_offset = 0
        self.high_watermark = 0
        self.index = TransactionIndex()
        self.open: dict[int, list[int]] = {}     # producer -> offsets of its open transaction's records
        self.fate: dict[int, str] = {}           # record offset -> COMMITTED / ABORTED / OPEN
        self.checkpoint: bytes | None = None
        self.value = 0
        self.now_ms = 0
        self.data_of: dict[int, list[int]] = {}  # producer -> base offsets of its open transaction's batches
        self.marker_data: dict[
            int, list[int]
        ] = {}  # marker offset -> base offsets of its transaction's batches
        self.markers_removed = 0

    def _append(self, raw: bytes, records: int) -> int:
        base = self.next_offset
        stored = with_broker_suffix(raw, base, 1)
        self.entries.append((base, frame_entry(stored)))
        self.next_offset += records
        self.index.record(next(txn_batches_in(frame_entry(stored))))
        return base

    def _records(self, n: int) -> list[NewRecord]:
        self.value += n
        return [NewRecord(str(self.value - i).encode(), None, 1) for i in range(n)]

    @rule(n=st.integers(1, 3))
    def plain(self, n):
        base = self._append(build_batch(self._records(n)), n)
        for offset in range(base, base + n):
            self.fate[offset] = COMMITTED

    @rule(producer=st.integers(1, 4), n=st.integers(1, 3))
    def transactional(self, producer, n):
        base = self._append(build_batch(self._records(n), producer_id=producer, attributes=TXN), n)
        self.open.setdefault(producer, []).extend(range(base, base + n))
        self.data_of.setdefault(producer, []).append(base)
        for offset in range(base, base + n):
            self.fate[offset] = OPEN

    @rule(producer=st.integers(1, 4), commit=st.booleans())
    def end(self, producer, commit):
        marker = build_control_batch(CONTROL_COMMIT if commit else CONTROL_ABORT, producer_id=producer,
                                     producer_epoch=0, coordinator_epoch=0, timestamp_ms=self.now_ms)
        at = self._append(marker, 1)
        self.marker_data[at] = self.data_of.pop(producer, [])
        for offset in self.open.pop(producer, []):
            self.fate[offset] = COMMITTED if commit else ABORTED

    @rule(data=st.data())
    def move_high_watermark(self, data):
        self.high_watermark = data.draw(st.integers(self.high_watermark, self.next_offset))

    @rule(ms=st.integers(1, 2 * MODEL_RETENTION_MS))
    def tick(self, ms):
        self.now_ms += ms

    @rule(data=st.data())
    def supersede(self, data):
        """A committed transactional batch whose every key a later value replaced: compaction drops it."""
        committed = [base for base, e in self.entries if self.fate.get(base) == COMMITTED
                     and next(txn_batches_in(e)).transactional and not next(txn_batches_in(e)).control]
        if committed:
            gone = data.draw(st.sampled_from(committed))
            self.entries = [(b, e) for b, e in self.entries if b != gone]

    @rule()
    def compact(self):
        """Drop aborted transactions' data batches and the removable markers, as the cleaner does."""
        present = {base for base, _ in self.entries}
        removable = removable_markers([next(txn_batches_in(e)) for _, e in self.entries],
                                      self.now_ms - MODEL_RETENTION_MS)
        for offset in removable:
            assert not present & set(self.marker_data[offset]), "a marker goes only once its data is gone"
            marker_ts = next(txn_batches_in(dict(self.entries)[offset])).max_timestamp_ms
            assert marker_ts <= self.now_ms - MODEL_RETENTION_MS
        kept = []
        for base, entry in self.entries:
            batch = next(txn_batches_in(entry))
            if batch.transactional and not batch.control and self.fate[base] == ABORTED:
                continue
            if base in removable:
                continue
            kept.append((base, entry))
        self.entries = kept
        self.index.forget_markers(removable)
        self.markers_removed += len(removable)
        # The partition removes its checkpoint when it opens and writes it only at close, so cleaning
        # never runs between a checkpoint and the recovery that reads it; the model keeps to that.
        self.checkpoint = None

    @rule()
    def take_checkpoint(self):
        self.checkpoint = encode_checkpoint(self.index)

    @rule(use_checkpoint=st.booleans())
    def recover(self, use_checkpoint):
        start = None
        if use_checkpoint and self.checkpoint is not None:
            start = decode_checkpoint(self.checkpoint)
        batches = [b for _, e in self.entries for b in txn_batches_in(e)
                   if start is None or b.base_offset >= start.next_offset]
        self.index = TransactionIndex.rebuild(batches, start=start)
        self.index.advance_to(self.next_offset)

    @invariant()
    def lso_is_the_oldest_open_transaction_or_the_high_watermark(self):
        first_open = min((offsets[0] for offsets in self.open.values() if offsets), default=None)
        expected = self.high_watermark if first_open is None else min(self.high_watermark, first_open)
        assert self.index.last_stable_offset(self.high_watermark) == expected

    @invariant()
    def read_committed_shows_exactly_the_committed_records(self):
        self._check_read_committed(self.index)

    @invariant()
    def a_rebuild_from_the_log_gives_the_same_answers(self):
        rebuilt = TransactionIndex.rebuild(b for _, e in self.entries for b in txn_batches_in(e))
        rebuilt.advance_to(self.next_offset)
        assert rebuilt.last_stable_offset(self.high_watermark) == self.index.last_stable_offset(
            self.high_watermark
        )
        self._check_read_committed(rebuilt)

    def _check_read_committed(self, index: TransactionIndex) -> None:
        lso = index.last_stable_offset(self.high_watermark)
        for fetch_offset in sorted({0, lso // 2, max(0, lso - 1)}):
            data = b"".join(e for base, e in self.entries
                            if base + _last_delta(e) >= fetch_offset and base + _last_delta(e) < lso)
            aborted = [(a.producer_id, a.first_offset) for a in index.aborted_between(fetch_offset, lso)]
            records, _, _ = decode_fetched(("t", 0), data, fetch_offset, decode_record_list_python, aborted)
            got = [r.offset for r in records]
            # Fetch returns whole batches below the LSO; of them, the committed records from fetch_offset.
            expected = [o for base, e in self.entries if fetch_offset <= base + _last_delta(e) < lso
                        for o in range(max(base, fetch_offset), base + _last_delta(e) + 1)
                        if self.fate.get(o) == COMMITTED]
            assert got == expected, (fetch_offset, lso, got, expected)


def _last_delta(entry: bytes) -> int:
    batch = next(txn_batches_in(entry))
    return batch.last_offset - batch.base_offset


TransactionsModel.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_transactions_model = TransactionsModel.TestCase


def test_decode_fetched_never_returns_markers_even_read_uncommitted():
    entries = [
        frame_entry(
            with_broker_suffix(build_batch([NewRecord(b"a", None, 1)], producer_id=5, attributes=TXN), 0, 1)
        ),
        frame_entry(
            with_broker_suffix(
                build_control_batch(
                    CONTROL_ABORT, producer_id=5, producer_epoch=0, coordinator_epoch=0, timestamp_ms=1
                ),
                1,
                1,
            )
        ),
    ]
    records, next_offset, _ = decode_fetched(("t", 0), b"".join(entries), 0, decode_record_list_python)
    assert [r.value for r in records] == [b"a"] and next_offset == 2
    records, next_offset, _ = decode_fetched(
        ("t", 0), b"".join(entries), 0, decode_record_list_python, [(5, 0)]
    )
    assert records == [] and next_offset == 2
