"""spark/transactions.py and spark/transaction_state.py without Spark: the read_committed filter over
stored entries (a partition read whole, and cut into items as tasks read it), the counts by outcome, and
the transactional-producer summary of coordinator states."""

from __future__ import annotations

from kanal.spark.range_reader import Clipped
from kanal.spark.segment_reader import StoredEntry
from kanal.spark.transaction_state import decode_state, summarize
from kanal.spark.transactions import (
    AbortedFilter,
    TxnCounts,
    TxnView,
    partition_counts,
    partition_index,
    visible_items,
)
from kanal.v1 import transactions_pb2
from kanal.v1.batch import (
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NewRecord,
    build_batch,
    build_control_batch,
    decode_records,
    frame_entry,
    iter_entries,
    parse_batch,
    scan_batch,
    with_broker_suffix,
)


def _entries(batches: list[tuple[bytes, int]]) -> list[StoredEntry]:
    out, offset = [], 0
    for raw, count in batches:
        stored = with_broker_suffix(raw, offset, 0)
        out.append(StoredEntry(0, offset, offset + count - 1, 0, memoryview(stored), scan_batch(stored)))
        offset += count
    return out


def _data(values: list[str], producer: int = 0) -> tuple[bytes, int]:
    attributes = ATTR_TRANSACTIONAL if producer else 0
    return build_batch([NewRecord(v.encode(), None, 1) for v in values], producer_id=producer or -1,
                       attributes=attributes), len(values)


def _marker(producer: int, control: int) -> tuple[bytes, int]:
    return build_control_batch(control, producer_id=producer, producer_epoch=0, coordinator_epoch=0,
                               timestamp_ms=1), 1


LOG = _entries([_data(["p0"]), _data(["a0", "a1"], 7), _data(["b0"], 8), _marker(7, CONTROL_ABORT),
                _data(["p1"]), _data(["a2"], 7), _marker(8, CONTROL_COMMIT), _marker(7, CONTROL_COMMIT),
                _data(["o0"], 9), _data(["p2"])])
# offsets: p0 0, a0 a1 1-2, b0 3, abort(7) 4, p1 5, a2 6, commit(8) 7, commit(7) 8, o0 9 (open), p2 10


def _values(items) -> list[str]:
    """The record values of the entries that pass (whole batches: the filter never cuts one here)."""
    out = []
    for item in items:
        entry = item.entry if isinstance(item, Clipped) else item
        for e in iter_entries(frame_entry(bytes(entry.batch)), verify_crc=False):
            out += [r.value.decode() for r in decode_records(parse_batch(e.batch, verify_crc=False))]
    return out


def test_read_uncommitted_drops_only_markers():
    assert _values(visible_items(LOG, None)) == ["p0", "a0", "a1", "b0", "p1", "a2", "o0", "p2"]


def test_read_committed_whole_and_cut_into_items_as_tasks_read():
    index = partition_index(LOG)
    assert index.first_unstable_offset == 9
    whole = TxnView.of(index, 0, 11)
    expected = ["p0", "b0", "p1", "a2"]
    assert _values(visible_items(LOG, AbortedFilter(whole.aborted), whole.lso)) == expected
    for cut in range(1, 11):  # two tasks, split at every batch boundary
        first, second = [e for e in LOG if e.base_offset < cut], [e for e in LOG if e.base_offset >= cut]
        got = []
        for part in (first, second):
            if not part:
                continue
            lo, hi = part[0].base_offset, part[-1].last_offset + 1
            view = TxnView.of(index, lo, hi)
            got += _values(visible_items(part, AbortedFilter(view.aborted), view.lso))
        assert got == expected, cut


def test_counts_by_outcome():
    assert partition_counts(LOG) == TxnCounts(plain=3, committed=2, aborted=2, open=1, control=3)


def _state(tid: str, offset: int, pid: int, epoch: int, state: int, parts=()):
    value = transactions_pb2.TransactionStateValue(
        producer_id=pid, producer_epoch=epoch, timeout_ms=1000, state=state, last_update_ms=offset,
        partitions=[transactions_pb2.TransactionPartition(topic=t, partition=p) for t, p in parts])
    return decode_state(0, offset, tid.encode(), value.SerializeToString())


def test_producer_summary_follows_the_states():
    rows = [_state("x", 0, 5, 0, transactions_pb2.TXN_EMPTY),
            _state("x", 1, 5, 0, transactions_pb2.TXN_ONGOING, [("t", 0)]),
            _state("x", 2, 5, 1, transactions_pb2.TXN_PREPARE_ABORT, [("t", 0)]),  # a timeout, epoch bumped
            _state("x", 3, 5, 1, transactions_pb2.TXN_COMPLETE_ABORT),
            _state("x", 4, 5, 2, transactions_pb2.TXN_EMPTY),
            _state("x", 5, 5, 2, transactions_pb2.TXN_ONGOING, [("t", 1)]),
            _state("x", 6, 5, 2, transactions_pb2.TXN_PREPARE_COMMIT, [("t", 1)]),
            _state("x", 7, 5, 2, transactions_pb2.TXN_COMPLETE_COMMIT)]
    rows.append(decode_state(0, 8, b"y", b"\xff\xff"))
    x, y = summarize(rows)
    assert (x.state, x.producer_id, x.producer_epoch, x.epoch_bumps) == ("COMPLETE_COMMIT", 5, 2, 2)
    assert (x.transactions_started, x.commits, x.aborts, x.partitions, x.states_seen) == (
        2,
        1,
        1,
        ("t-1",),
        8,
    )
    assert y.state is None and y.states_seen == 1 and rows[-1].error.startswith("undecodable")
