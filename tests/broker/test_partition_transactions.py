"""A partition's transactions (issue 22): LSO, read_committed Fetch with aborted transactions,
ListOffsets under read_committed, markers only through allow_control, recovery of the index after a
clean and an unclean restart, compaction that removes aborted data and, in a later pass, the markers
of transactions with no data left, and maintenance under compact,delete. A real
Partition over a real log in a temp dir, one replica (so the high-water mark follows each append)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Counter

from kanal.broker.partition import Assignment, Partition
from kanal.broker.producer_snapshot import list_snapshots, read_snapshot
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.transaction_index import TxnBatch, removable_markers, txn_batches_in
from kanal.clients.consumer import decode_fetched, decode_record_list_python
from kanal.metadata.cleanup_policy import COMPACT, COMPACT_DELETE
from kanal.v1 import broker_pb2
from kanal.v1.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NewRecord,
    build_batch,
    build_control_batch,
    decode_records,
    iter_entries,
    parse_batch,
)
from kanal.v1.error import ErrorCode, KanalError


class FakeManager:
    """The replica manager's part a one-replica leader uses: its counters."""

    def __init__(self) -> None:
        r = CollectorRegistry()
        self.metrics = SimpleNamespace(**{name: Counter(name, name, registry=r) for name in (
            "messages_in", "bytes_in", "isr_shrinks", "isr_expands")})

    def send_alter_partition(self, part, proposal, *, resend: bool = False) -> None:
        raise AssertionError("a one-replica partition proposes no ISR change")


def open_leader(directory, config: LogConfig | None = None) -> Partition:
    part = Partition("t", 0, directory, config or LogConfig(), 0, 1, FakeManager())
    part.become_leader(Assignment("id", (0,), (0,), 0, 1, 1), set(), 10_000)
    return part


@pytest.fixture
def leader(tmp_path):
    part = open_leader(tmp_path / "t-0")
    yield part
    part.close()


def send(part: Partition, raw: bytes, *, allow_control: bool = False) -> int:
    out = broker_pb2.ProduceResponse.PartitionResult()
    part.append_as_leader([raw], 1, 1, out, allow_control=allow_control)
    return out.base_offset


def txn(part: Partition, producer: int, values: list[bytes], *, epoch: int = 0, sequence: int = 0,
        key: bytes | None = None) -> int:
    return send(
        part,
        build_batch(
            [NewRecord(v, key, 1) for v in values],
            producer_id=producer,
            producer_epoch=epoch,
            base_sequence=sequence,
            attributes=ATTR_TRANSACTIONAL,
        ),
    )


def marker(
    part: Partition, producer: int, control_type: int, *, epoch: int = 0, coordinator_epoch: int = 0
) -> int:
    return send(
        part,
        build_control_batch(
            control_type,
            producer_id=producer,
            producer_epoch=epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=1,
        ),
        allow_control=True,
    )


def fetch(part: Partition, offset: int = 0, *, committed: bool = True):
    out = broker_pb2.FetchResponse.PartitionData()
    preq = broker_pb2.FetchRequest.PartitionRequest(partition=0, fetch_offset=offset, current_leader_epoch=-1)
    part.read_for_consumer(preq, 1 << 20, out, read_committed=committed)
    aborted = [(a.producer_id, a.first_offset) for a in out.aborted_transactions]
    records, _, _ = decode_fetched(("t", 0), out.records, offset, decode_record_list_python, aborted)
    return out, [r.value for r in records]


def test_list_offsets_special_timestamps_on_a_partition_that_is_not_tiered(leader):
    """Kafka's -3 (the record with the largest timestamp, below the visible end), -4 (earliest local: the
    log start here) and -5 (latest tiered: -1, nothing is remote); anything below -5 is refused."""
    send(leader, build_batch([NewRecord(b"a", None, 5_000), NewRecord(b"b", None, 9_000)]))  # 0-1
    send(leader, build_batch([NewRecord(b"c", None, 7_000)]))                                # 2
    assert leader.list_offset(-3) == (1, 9_000)
    txn(leader, 7, [b"open"])  # 3, in an open transaction, timestamp 1 (txn's records)
    send(leader, build_batch([NewRecord(b"d", None, 20_000)]))                               # 4
    assert leader.list_offset(-3) == (4, 20_000)
    assert leader.list_offset(-3, read_committed=True) == (-1, -1), "above the last stable offset (3)"
    assert leader.list_offset(-4) == leader.list_offset(-2) == (0, -1)
    assert leader.list_offset(-5) == (-1, -1)
    with pytest.raises(KanalError) as refused:
        leader.list_offset(-6)
    assert refused.value.code == ErrorCode.INVALID_REQUEST


def test_read_committed_stops_at_the_open_transaction_and_hides_aborted_records(leader):
    send(leader, build_batch([NewRecord(b"plain", None, 1)]))           # 0
    txn(leader, 7, [b"a1", b"a2"])                                      # 1-2, will abort
    txn(leader, 8, [b"c1"])                                             # 3, will commit
    out, values = fetch(leader)
    assert out.last_stable_offset == 1 and values == [b"plain"]
    assert leader.list_offset(-1, read_committed=True) == (1, -1)
    assert leader.list_offset(-1) == (4, -1), "read_uncommitted latest stays the high-water mark"
    _, uncommitted = fetch(leader, committed=False)
    assert uncommitted == [b"plain", b"a1", b"a2", b"c1"]
    marker(leader, 7, CONTROL_ABORT)                                    # 4
    out, values = fetch(leader)
    assert out.last_stable_offset == 3 and values == [b"plain"]
    assert [(a.producer_id, a.first_offset) for a in out.aborted_transactions] == [(7, 1)]
    marker(leader, 8, CONTROL_COMMIT)                                   # 5
    out, values = fetch(leader)
    assert out.last_stable_offset == 6 and values == [b"plain", b"c1"]
    _, uncommitted = fetch(leader, committed=False)
    assert b"a1" in uncommitted and len(uncommitted) == 4, "markers are never returned"


def test_client_produce_of_a_marker_is_refused_and_stores_nothing(leader):
    raw = build_control_batch(CONTROL_COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                              timestamp_ms=1)
    with pytest.raises(KanalError) as info:
        send(leader, raw)
    assert info.value.code == ErrorCode.INVALID_RECORD
    assert leader.log.log_end_offset == 0


def test_a_marker_at_a_newer_epoch_fences_the_older_epoch_on_the_partition(leader):
    txn(leader, 7, [b"x"], epoch=0)
    marker(leader, 7, CONTROL_ABORT, epoch=1)  # the coordinator aborted the fenced producer's transaction
    with pytest.raises(KanalError) as info:
        txn(leader, 7, [b"zombie"], epoch=0, sequence=1)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    txn(leader, 7, [b"new"], epoch=1, sequence=0)
    marker(leader, 7, CONTROL_COMMIT, epoch=1)
    txn(leader, 7, [b"next"], epoch=1, sequence=1)  # sequences go on across transactions
    marker(leader, 7, CONTROL_COMMIT, epoch=1)
    assert fetch(leader)[1] == [b"new", b"next"]


@pytest.mark.parametrize("restart", ["none", "clean", "unclean"])
def test_a_marker_from_an_older_coordinator_epoch_is_fenced_and_writes_nothing(tmp_path, restart):
    """The partition keeps the highest coordinator epoch per producer id that wrote a marker (in the
    producer-state snapshot of a clean close, rebuilt from the log after an unclean one): a deposed
    coordinator's late marker is TRANSACTION_COORDINATOR_FENCED and stores nothing."""
    part = open_leader(tmp_path / "t-0")
    txn(part, 7, [b"a"])
    marker(part, 7, CONTROL_COMMIT, coordinator_epoch=3)
    txn(part, 7, [b"b"], sequence=1)  # open again, so an ABORT from the old coordinator would matter
    if restart == "clean":
        part.close()
    elif restart == "unclean":
        part.log.close_unclean()
    if restart != "none":
        part = open_leader(tmp_path / "t-0")
    try:
        assert part.producers.entry(7).coordinator_epoch == 3
        end = part.log.log_end_offset
        with pytest.raises(KanalError) as info:
            marker(part, 7, CONTROL_ABORT, coordinator_epoch=2)
        assert info.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        assert part.log.log_end_offset == end and part.transactions.ongoing, "nothing written, still open"
        marker(part, 7, CONTROL_COMMIT, coordinator_epoch=3)  # the same coordinator again: accepted
        marker(part, 8, CONTROL_ABORT, coordinator_epoch=0)  # another producer id has its own epoch
        part.high_watermark = part.log.log_end_offset
        assert fetch(part)[1] == [b"a", b"b"]
    finally:
        part.close()


def test_a_marker_only_producer_keeps_its_coordinator_epoch_in_the_snapshot(tmp_path):
    """A producer the partition knows only from a marker (its transaction there held the consumer
    offsets, say) has no batches; its snapshot entry still carries the coordinator epoch."""
    part = open_leader(tmp_path / "t-0")
    marker(part, 9, CONTROL_ABORT, epoch=2, coordinator_epoch=5)
    part.close()
    (_, path), = list_snapshots(tmp_path / "t-0")
    assert read_snapshot(path).entry(9).coordinator_epoch == 5, "the snapshot holds it (no replay needed)"
    part = open_leader(tmp_path / "t-0")
    try:
        entry = part.producers.entry(9)
        assert (entry.producer_epoch, entry.coordinator_epoch, len(entry.batches)) == (2, 5, 0)
        with pytest.raises(KanalError) as info:
            marker(part, 9, CONTROL_ABORT, epoch=2, coordinator_epoch=4)
        assert info.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    finally:
        part.close()


@pytest.mark.parametrize("clean", [True, False])
def test_the_index_survives_a_restart(tmp_path, clean):
    part = open_leader(tmp_path / "t-0")
    txn(part, 7, [b"a"])
    marker(part, 7, CONTROL_ABORT)
    txn(part, 8, [b"open"])
    expected = (part.transactions.ongoing, part.transactions.aborted)
    if clean:
        part.close()
        assert (tmp_path / "t-0" / "transactions.checkpoint").exists()
    else:
        part.log.close_unclean()
    part = open_leader(tmp_path / "t-0")
    try:
        assert (part.transactions.ongoing, part.transactions.aborted) == expected
        part.high_watermark = part.log.log_end_offset
        assert part.last_stable_offset == 2
        marker(part, 8, CONTROL_COMMIT)
        assert fetch(part)[1] == [b"open"]
    finally:
        part.close()


def test_compaction_removes_aborted_data_keeps_markers_and_open_data_supersedes_nothing(tmp_path):
    config = LogConfig(cleanup_policy=COMPACT)
    part = open_leader(tmp_path / "t-0", config)
    try:
        send(part, build_batch([NewRecord(b"v1", b"k", 1)]))    # 0 committed (plain)
        txn(part, 7, [b"aborted"], key=b"k")                     # 1
        marker(part, 7, CONTROL_ABORT)                           # 2
        txn(part, 8, [b"open"], key=b"k")                        # 3, still open
        part.log.roll()
        send(part, build_batch([NewRecord(b"tail", b"other", 1)]))
        stats = part.log.compact(10**12, transactions=part.transactions)
        assert stats.records_removed == 1, "only the aborted record goes"
        _, uncommitted = fetch(part, committed=False)
        assert uncommitted == [b"v1", b"open"], "v1 stays while the newer value's transaction is open"
        assert [(a.producer_id, a.first_offset) for a in part.transactions.aborted] == [(7, 1)]
    finally:
        part.close()


@pytest.mark.parametrize("clean", [True, False])
def test_compaction_removes_a_marker_in_a_later_pass_once_its_data_is_gone_and_retention_passed(
    tmp_path, clean
):
    config = LogConfig(cleanup_policy=COMPACT, delete_retention_ms=1_000)
    part = open_leader(tmp_path / "t-0", config)
    try:
        send(part, build_batch([NewRecord(b"v1", b"k", 1)]))  # 0 plain
        txn(part, 7, [b"aborted"], key=b"k")                   # 1
        marker(part, 7, CONTROL_ABORT)                         # 2, stamped 1 ms
        txn(part, 8, [b"c1"], key=b"x")                        # 3, superseded by 5 once committed
        marker(part, 8, CONTROL_COMMIT)                        # 4
        txn(part, 8, [b"c2"], key=b"x", sequence=1)            # 5
        marker(part, 8, CONTROL_COMMIT)                        # 6: 8's last batch, stays
        txn(part, 7, [b"later"], key=b"y", sequence=1)         # 7
        marker(part, 7, CONTROL_COMMIT)                        # 8: 7's last batch, stays
        part.log.roll()
        send(part, build_batch([NewRecord(b"tail", b"z", 1)]))
        first = part.log.compact(10_000, transactions=part.transactions)
        assert (first.records_removed, first.markers_removed) == (2, 0), "markers outlive their data's pass"
        early = part.log.compact(1_000, transactions=part.transactions)
        assert early.markers_removed == 0, "not before delete.retention.ms has passed since the marker"
        second = part.log.compact(10_000, transactions=part.transactions)
        assert second.markers_removed == 2
        assert part.transactions.aborted == [], "the index forgets what the removed ABORT marker closed"
        stored = [
            b.base_offset for b in txn_batches_in(part.log.read(0, 1 << 20).data)
        ]  # the cleaned segment
        assert stored == [0, 5, 6, 7, 8]
        expected = [b"v1", b"c2", b"later", b"tail"]
        assert part.last_stable_offset == part.high_watermark == 10
        assert fetch(part)[1] + fetch(part, 9)[1] == expected  # a fetch stops at a segment's end
        if clean:
            part.close()
        else:
            part.log.close_unclean()
        part = open_leader(tmp_path / "t-0", config)
        part.high_watermark = part.log.log_end_offset
        assert part.last_stable_offset == 10, "the rebuilt index closes every transaction"
        assert part.transactions.aborted == [] and part.transactions.ongoing == {}
        assert fetch(part)[1] + fetch(part, 9)[1] == expected
    finally:
        part.close()


def test_removable_markers_rule():
    mark = ATTR_TRANSACTIONAL | ATTR_CONTROL
    batches = [TxnBatch(7, 1, 1, mark, CONTROL_ABORT, 10),       # its data is gone
               TxnBatch(8, 2, 2, ATTR_TRANSACTIONAL),
               TxnBatch(8, 3, 3, mark, CONTROL_COMMIT, 10),      # its data (2) is still there
               TxnBatch(7, 4, 4),                                # a later idempotent batch of 7
               TxnBatch(9, 5, 5, mark, CONTROL_COMMIT, 10),      # 9's last batch: keeps its epoch
               TxnBatch(9, 6, 6, mark, CONTROL_COMMIT, 10)]
    assert removable_markers(batches, 10) == {1, 5}
    assert removable_markers(batches, 9) == set(), "younger than the retention"


def stored_values(part: Partition) -> list[bytes]:
    """The values of every data record from the log start to the log end, whatever their transactions."""
    out, offset = [], part.log.log_start_offset
    while offset < part.log.log_end_offset:
        for entry in iter_entries(part.log.read(offset, 1 << 20).data):
            batch = parse_batch(entry.batch)
            if not batch.attributes & ATTR_CONTROL:
                out += [r.value for r in decode_records(batch)]
            offset = entry.suffix.last_offset + 1
    return out


def test_compact_delete_maintenance_runs_retention_then_compaction_of_what_remains(tmp_path):
    """cleanup.policy=compact,delete: one maintenance pass deletes the expired segment (its aborted
    transaction leaves the index with it) and, when compaction is due, compacts the segments left."""
    config = LogConfig(cleanup_policy=COMPACT_DELETE, retention_ms=10_000, delete_retention_ms=1_000)
    part = open_leader(tmp_path / "t-0", config)
    try:
        txn(part, 7, [b"aborted"], key=b"k")                     # 0, stamped 1 ms
        marker(part, 7, CONTROL_ABORT)                           # 1
        send(part, build_batch([NewRecord(b"gone", b"once", 1_000)]))  # 2: its key's only record
        part.log.roll()
        for offset, (value, key) in enumerate([(b"a1", b"a"), (b"a2", b"a"), (b"b1", b"b")], start=3):
            send(part, build_batch([NewRecord(value, key, 17_000 + offset * 1_000)]))  # 3-5, 20-22 s
        part.log.roll()
        send(part, build_batch([NewRecord(b"c1", b"c", 24_000)]))  # 6, the active segment
        assert [(a.producer_id, a.first_offset) for a in part.transactions.aborted] == [(7, 0)]

        now_ms = 25_000  # retention keeps records from 15 s on: the first segment (newest at 1 s) goes
        part.maintenance(now_ms, compact_due=False, producer_id_expiration_ms=10**12)
        assert part.log.log_start_offset == 3
        assert part.transactions.aborted == [], "the index drops what retention deleted"
        assert stored_values(part) == [b"a1", b"a2", b"b1", b"c1"], "no compaction until it is due"

        part.maintenance(now_ms, compact_due=True, producer_id_expiration_ms=10**12)
        assert part.log.log_start_offset == 3
        assert stored_values(part) == [b"a2", b"b1", b"c1"]
        assert fetch(part, 3)[1] == [b"a2", b"b1"], "read_committed sees the same (to the segment's end)"
    finally:
        part.close()
