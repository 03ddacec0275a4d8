"""ProducerStateTable: the idempotence rules, the five-batch window, epochs, wrap-around, and replay."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kanal.broker.producer_state import (
    APPEND,
    BATCHES_PER_PRODUCER_MAX,
    SEQUENCE_MAX,
    Duplicate,
    ProducerActivity,
    ProducerBatch,
    ProducerStateTable,
    Reject,
    add_sequence,
    producer_batches_in,
)
from kanal.v1.batch import NewRecord, build_batch, frame_entry, scan_batch, with_broker_suffix
from kanal.v1.error import ErrorCode, KanalError

PID = 1000


class Producer:
    """Drives a table the way a leader does: validate, then 'append' at the next offset and record."""

    def __init__(self, table: ProducerStateTable | None = None) -> None:
        self.table = table or ProducerStateTable()
        self.next_offset = 0
        self.stored: list[ProducerBatch] = []

    def send(self, pid: int, epoch: int, seq: int, count: int = 1, ts: int = 0):
        verdict = self.table.validate(pid, epoch, seq, count - 1)
        if verdict == APPEND:
            batch = ProducerBatch(pid, epoch, seq, self.next_offset, self.next_offset + count - 1, ts)
            self.table.record(batch)
            self.stored.append(batch)
            self.next_offset += count
        return verdict


def test_first_batch_of_a_new_producer_is_appended_and_remembered():
    p = Producer()
    assert p.send(PID, 0, 0, count=3) == APPEND
    entry = p.table.entry(PID)
    assert entry is not None and entry.producer_epoch == 0
    assert [(b.first_sequence, b.last_sequence, b.base_offset, b.last_offset) for b in entry.batches] == [
        (0, 2, 0, 2)
    ]
    assert p.table.next_offset == 3


def test_in_order_batches_append_and_a_retry_is_a_duplicate_with_the_original_offsets():
    p = Producer()
    assert p.send(PID, 0, 0, count=2) == APPEND  # offsets 0-1, seq 0-1
    assert p.send(PID, 0, 2, count=3) == APPEND  # offsets 2-4, seq 2-4
    assert p.send(PID, 0, 0, count=2) == Duplicate(0, 1)
    assert p.send(PID, 0, 2, count=3) == Duplicate(2, 4)
    assert p.next_offset == 5  # nothing was stored twice


def test_duplicate_detection_covers_exactly_the_last_five_batches():
    p = Producer()
    for i in range(BATCHES_PER_PRODUCER_MAX + 1):
        assert p.send(PID, 0, i) == APPEND
    # batch 0 fell out of the window: its retry is no longer recognised, and it is out of order
    v = p.send(PID, 0, 0)
    assert isinstance(v, Reject) and v.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    for i in range(1, BATCHES_PER_PRODUCER_MAX + 1):
        assert p.send(PID, 0, i) == Duplicate(i, i)


def test_a_gap_or_an_overlap_is_out_of_order_and_stores_nothing():
    p = Producer()
    p.send(PID, 0, 0, count=5)  # seq 0-4
    for seq, count in [(6, 1), (3, 2), (0, 3), (4, 1)]:
        v = p.send(PID, 0, seq, count)
        assert isinstance(v, Reject) and v.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, (seq, count)
    assert p.next_offset == 5
    assert p.send(PID, 0, 5) == APPEND


def test_older_epoch_is_fenced_and_newer_epoch_must_start_at_zero():
    p = Producer()
    p.send(PID, 3, 0, count=2)
    v = p.send(PID, 2, 2)
    assert isinstance(v, Reject) and v.error == ErrorCode.INVALID_PRODUCER_EPOCH
    v = p.send(PID, 4, 2)
    assert isinstance(v, Reject) and v.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.send(PID, 4, 0) == APPEND
    entry = p.table.entry(PID)
    assert entry.producer_epoch == 4 and len(entry.batches) == 1  # the new epoch starts a fresh window
    # the old epoch is now fenced, even for a batch that was a duplicate under it
    v = p.send(PID, 3, 0, count=2)
    assert isinstance(v, Reject) and v.error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_duplicate_needs_the_same_epoch():
    p = Producer()
    p.send(PID, 0, 0)
    p.send(PID, 1, 0)
    # seq 0 under epoch 1 is a duplicate; under epoch 0 it is a zombie
    assert p.send(PID, 1, 0) == Duplicate(1, 1)
    assert isinstance(p.send(PID, 0, 0), Reject)


def test_unknown_producer_with_nonzero_sequence_is_unknown_producer_id():
    table = ProducerStateTable()
    v = table.validate(PID, 0, 7, 0)
    assert isinstance(v, Reject) and v.error == ErrorCode.UNKNOWN_PRODUCER_ID
    with pytest.raises(KanalError) as exc:
        raise v.to_error()
    assert exc.value.code == ErrorCode.UNKNOWN_PRODUCER_ID
    assert table.validate(PID, 5, 0, 0) == APPEND  # any epoch may start a new producer at sequence 0


def test_non_idempotent_batches_are_never_checked_but_advance_the_table():
    p = Producer()
    assert p.send(0, 0, 0) == APPEND
    assert p.send(0, 0, 0) == APPEND
    assert len(p.table) == 0
    assert p.table.next_offset == 2


@pytest.mark.parametrize("args", [(-1, 0, 0, 0), (PID, -1, 0, 0), (PID, 0, -1, 0), (PID, 0, 2**31, 0),
                                  (PID, 0, 0, -1)])
def test_out_of_range_fields_are_invalid_records(args):
    v = ProducerStateTable().validate(*args)
    assert isinstance(v, Reject) and v.error == ErrorCode.INVALID_RECORD


def test_sequence_wraps_from_max_to_zero():
    assert add_sequence(SEQUENCE_MAX, 1) == 0
    assert add_sequence(SEQUENCE_MAX - 1, 3) == 1
    p = Producer()
    # a producer whose last stored batch is sequence MAX-2 (replay accepts it as the log says)
    p.table.record(ProducerBatch(PID, 0, SEQUENCE_MAX - 2, 0, 0, 0))
    p.next_offset = 1
    assert p.send(PID, 0, SEQUENCE_MAX - 1, count=3) == APPEND  # seq MAX-1, MAX, 0
    last = p.table.entry(PID).batches[-1]
    assert (last.first_sequence, last.last_sequence) == (SEQUENCE_MAX - 1, 0)
    assert p.send(PID, 0, SEQUENCE_MAX - 1, count=3) == Duplicate(last.base_offset, last.last_offset)
    v = p.send(PID, 0, 0)  # sequence 0 was used by the wrapping batch
    assert isinstance(v, Reject) and v.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.send(PID, 0, 1) == APPEND


def test_record_rejects_batches_out_of_log_order():
    table = ProducerStateTable()
    table.record(ProducerBatch(PID, 0, 0, 10, 12, 0))
    with pytest.raises(ValueError):
        table.record(ProducerBatch(PID, 0, 3, 12, 12, 0))


def test_replay_never_rejects_and_follows_the_log():
    # A follower replays what its leader stored; the table must follow even an epoch it would fence.
    table = ProducerStateTable.rebuild([
        ProducerBatch(PID, 2, 0, 0, 0, 0),
        ProducerBatch(PID, 1, 0, 1, 1, 0),
    ])
    assert table.entry(PID).producer_epoch == 1


def test_idle_producers_are_forgotten_by_the_brokers_clock_not_their_batch_timestamps():
    """Expiry counts from when this replica last stored a batch of the producer: one that stamps its
    batches with last year's time is not forgotten while it keeps producing."""
    p = Producer()
    activity = ProducerActivity()
    p.send(PID, 0, 0, ts=1)  # an old timestamp, stored at broker time 1,000
    activity.seen(PID, 1_000)
    p.send(PID + 1, 0, 0, ts=5_000)
    activity.seen(PID + 1, 5_000)
    assert activity.expired(p.table.producer_ids(), 10_999, 10_000) == []
    expired = activity.expired(p.table.producer_ids(), 11_000, 10_000)
    assert expired == [PID]
    p.table.forget(expired)
    v = p.table.validate(PID, 0, 1, 0)
    assert isinstance(v, Reject) and v.error == ErrorCode.UNKNOWN_PRODUCER_ID
    assert p.send(PID, 1, 0) == APPEND  # a new epoch from sequence 0 starts it afresh
    assert p.table.entry(PID + 1) is not None


def test_producers_not_seen_since_a_reload_count_as_seen_at_the_first_check():
    """After a restart or a replay the table holds producers the activity has no time for: they get the
    full expiry period from then, and producers the table dropped are dropped from the activity too."""
    p = Producer()
    p.send(PID, 0, 0)
    p.send(PID + 1, 0, 0)
    activity = ProducerActivity()
    activity.seen(PID + 2, 0)  # a producer the table no longer holds (truncated away)
    assert activity.expired(p.table.producer_ids(), 50_000, 10_000) == []
    assert len(activity) == 2
    assert activity.expired(p.table.producer_ids(), 59_999, 10_000) == []
    assert activity.expired(p.table.producer_ids(), 60_000, 10_000) == [PID, PID + 1]
    with pytest.raises(ValueError):
        activity.expired([], 0, -1)


def test_header_helpers_read_the_producer_fields_of_real_batches():
    batch = build_batch(
        [NewRecord(b"a"), NewRecord(b"b")], producer_id=PID, producer_epoch=2, base_sequence=0
    )
    table = ProducerStateTable()
    assert table.validate_header(scan_batch(batch)) == APPEND
    table.record(ProducerBatch.from_header(scan_batch(batch), base_offset=40))
    assert table.validate_header(scan_batch(batch)) == Duplicate(40, 41)
    stored = with_broker_suffix(batch, 40, 7)
    entries = frame_entry(stored) + frame_entry(with_broker_suffix(build_batch([NewRecord(b"c")]), 42, 7))
    replayed = list(producer_batches_in(entries))
    assert replayed == [ProducerBatch(PID, 2, 0, 40, 41, 0), ProducerBatch(0, 0, 0, 42, 42, 0)]


# ---- property: whatever a producer population sends, replaying the stored batches rebuilds the table ----

SENDS = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=4),  # producer id
        st.integers(min_value=0, max_value=3),  # epoch
        st.integers(min_value=0, max_value=12),  # base sequence
        st.integers(min_value=1, max_value=3),  # records
        st.booleans(),  # near the wrap: shift sequences to just below 2^31
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(SENDS)
def test_rebuild_equals_incremental_and_the_model_agrees(sends):
    p = Producer()
    # model: per producer, (epoch, list of (first_seq, last_seq, base, last)) of everything stored
    model: dict[int, tuple[int, list[tuple[int, int, int, int]]]] = {}
    for pid, epoch, seq, count, near_wrap in sends:
        if near_wrap:
            seq = (SEQUENCE_MAX - 6 + seq) % (SEQUENCE_MAX + 1)
        offset_before = p.next_offset
        verdict = p.send(pid, epoch, seq, count, ts=offset_before)
        last_seq = (seq + count - 1) % (SEQUENCE_MAX + 1)
        known = model.get(pid)
        if known is None:
            expected = APPEND if seq == 0 else ErrorCode.UNKNOWN_PRODUCER_ID
        elif epoch < known[0]:
            expected = ErrorCode.INVALID_PRODUCER_EPOCH
        elif epoch > known[0]:
            expected = APPEND if seq == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        else:
            window = known[1][-BATCHES_PER_PRODUCER_MAX:]
            dup = [b for b in window if b[0] == seq and b[1] == last_seq]
            if dup:
                expected = Duplicate(dup[0][2], dup[0][3])
            elif seq == (known[1][-1][1] + 1) % (SEQUENCE_MAX + 1):
                expected = APPEND
            else:
                expected = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        if isinstance(expected, int):
            assert isinstance(verdict, Reject) and verdict.error == expected
        else:
            assert verdict == expected
        if verdict == APPEND:
            batches = [] if known is None or known[0] != epoch else known[1]
            model[pid] = (epoch, batches + [(seq, last_seq, offset_before, offset_before + count - 1)])
    rebuilt = ProducerStateTable.rebuild(p.stored)
    assert rebuilt == p.table
    for pid, (epoch, batches) in model.items():
        entry = p.table.entry(pid)
        assert entry.producer_epoch == epoch
        assert [(b.first_sequence, b.last_sequence, b.base_offset, b.last_offset) for b in entry.batches] == \
            batches[-BATCHES_PER_PRODUCER_MAX:]
    # replaying from any cut point on top of the prefix gives the same table (snapshot + tail replay)
    if p.stored:
        cut = len(p.stored) // 2
        prefix = ProducerStateTable.rebuild(p.stored[:cut])
        assert ProducerStateTable.rebuild(p.stored[cut:], start=prefix) == p.table
