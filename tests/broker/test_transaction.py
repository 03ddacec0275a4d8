"""The transaction coordinator's pure state machine (broker/transaction.py): every transition, the
refusals that change nothing, fencing, timeouts and the markers a reload owes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kanal.broker.transaction import (
    PRODUCER_EPOCH_MAX,
    TRANSACTIONAL_ID_LENGTH_MAX,
    Decision,
    TxnMetadata,
    TxnState,
    check_timeout,
    check_transactional_id,
    decide_add_partitions,
    decide_end_txn,
    decide_init_producer_id,
    decide_markers_written,
    decide_timeout,
    pending_markers,
)
from kanal.v1.batch import CONTROL_ABORT, CONTROL_COMMIT
from kanal.v1.error import ErrorCode, KanalError

P1, P2, OFFSETS = ("out", 0), ("out", 1), ("__consumer_offsets", 7)


def init(txn=None, now_ms=0, pid=100) -> TxnMetadata:
    decision = decide_init_producer_id(txn, "t", 60_000, now_ms, new_producer_id=pid)
    assert decision.ok and decision.new_state is not None
    return decision.new_state


def ongoing(now_ms=10) -> TxnMetadata:
    txn = decide_add_partitions(init(), 100, 0, [P1, P2], now_ms).new_state
    assert txn is not None
    return txn


def test_a_new_id_starts_empty_at_epoch_0_and_each_init_bumps_the_epoch():
    txn = init()
    assert (txn.producer_id, txn.producer_epoch, txn.state) == (100, 0, TxnState.EMPTY)
    again = init(txn, pid=999)
    assert (again.producer_id, again.producer_epoch) == (100, 1), "same producer id, epoch bumped"


def test_commit_path_and_its_markers():
    txn = ongoing()
    assert txn.state == TxnState.ONGOING and txn.partitions == (P1, P2) and txn.start_ms == 10
    txn = decide_add_partitions(txn, 100, 0, [P2, OFFSETS], 11).new_state
    assert txn.partitions == (P1, P2, OFFSETS) and txn.start_ms == 10
    end = decide_end_txn(txn, 100, 0, True, 12)
    assert end.ok and end.new_state.state == TxnState.PREPARE_COMMIT
    assert end.markers.control_type == CONTROL_COMMIT and end.markers.partitions == (P1, P2, OFFSETS)
    assert end.markers.producer_epoch == 0
    done = decide_markers_written(end.new_state, 13).new_state
    assert done.state == TxnState.COMPLETE_COMMIT and done.partitions == ()
    assert decide_end_txn(done, 100, 0, True, 14) == Decision(), "a retried commit is answered NONE"
    nxt = decide_add_partitions(done, 100, 0, [P1], 15).new_state
    assert nxt.state == TxnState.ONGOING and nxt.start_ms == 15 and nxt.partitions == (P1,)


def test_adding_partitions_already_there_writes_nothing():
    assert decide_add_partitions(ongoing(), 100, 0, [P1], 20) == Decision()


@pytest.mark.parametrize(
    "make, call, code",
    [
        (init, lambda t: decide_end_txn(t, 100, 0, True, 5), ErrorCode.INVALID_TXN_STATE),  # no transaction
        (ongoing, lambda t: decide_end_txn(t, 100, 1, True, 5), ErrorCode.PRODUCER_FENCED),
        (ongoing, lambda t: decide_end_txn(t, 7, 0, True, 5), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        (ongoing, lambda t: decide_add_partitions(t, 100, 3, [P1], 5), ErrorCode.PRODUCER_FENCED),
        (
            lambda: decide_end_txn(ongoing(), 100, 0, False, 5).new_state,
            lambda t: decide_end_txn(t, 100, 0, True, 6),
            ErrorCode.INVALID_TXN_STATE,
        ),  # abort decided
        (
            lambda: decide_end_txn(ongoing(), 100, 0, True, 5).new_state,
            lambda t: decide_end_txn(t, 100, 0, True, 6),
            ErrorCode.CONCURRENT_TRANSACTIONS,
        ),
        (
            lambda: decide_end_txn(ongoing(), 100, 0, True, 5).new_state,
            lambda t: decide_add_partitions(t, 100, 0, [P1], 6),
            ErrorCode.CONCURRENT_TRANSACTIONS,
        ),
        (
            lambda: decide_end_txn(ongoing(), 100, 0, True, 5).new_state,
            lambda t: decide_init_producer_id(t, "t", 1000, 6, new_producer_id=5),
            ErrorCode.CONCURRENT_TRANSACTIONS,
        ),
    ],
)
def test_out_of_order_calls_get_kafkas_errors_and_change_nothing(make, call, code):
    txn = make()
    decision = call(txn)
    assert decision.error == code and decision.new_state is None and decision.markers is None


def test_end_without_any_state_is_invalid_producer_id_mapping():
    assert decide_end_txn(None, 1, 0, True, 0).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_init_over_an_open_transaction_fences_and_aborts_it():
    txn = ongoing()
    decision = decide_init_producer_id(txn, "t", 60_000, 50, new_producer_id=999)
    assert decision.error == ErrorCode.CONCURRENT_TRANSACTIONS, (
        "the new producer retries until the abort is done"
    )
    aborted = decision.new_state
    assert aborted.state == TxnState.PREPARE_ABORT and aborted.producer_epoch == 1
    assert decision.markers.control_type == CONTROL_ABORT and decision.markers.producer_epoch == 1
    assert decide_end_txn(aborted, 100, 0, True, 51).error == ErrorCode.PRODUCER_FENCED, (
        "the zombie cannot commit"
    )
    done = decide_markers_written(aborted, 52).new_state
    fresh = init(done, now_ms=53)
    assert (fresh.producer_epoch, fresh.state) == (2, TxnState.EMPTY)


def test_timeout_aborts_with_a_bumped_epoch_only_when_due():
    txn = ongoing(now_ms=1_000)
    assert decide_timeout(txn, 1_000 + 59_999) == Decision()
    decision = decide_timeout(txn, 1_000 + 60_000)
    assert decision.new_state.state == TxnState.PREPARE_ABORT and decision.new_state.producer_epoch == 1
    assert decision.markers.partitions == (P1, P2)
    assert decide_timeout(init(), 10**12) == Decision(), "nothing open: nothing to abort"


def test_a_reloaded_prepare_state_owes_its_markers():
    prepared = decide_end_txn(ongoing(), 100, 0, True, 5).new_state
    assert pending_markers(prepared).control_type == CONTROL_COMMIT
    assert pending_markers(ongoing()) is None


def test_an_exhausted_epoch_gets_a_new_producer_id():
    txn = TxnMetadata("t", 100, PRODUCER_EPOCH_MAX - 1, 1000)
    fresh = init(txn, pid=101)
    assert (fresh.producer_id, fresh.producer_epoch) == (101, 0)


def test_bad_ids_and_timeouts():
    for bad in ("", "x" * (TRANSACTIONAL_ID_LENGTH_MAX + 1)):
        with pytest.raises(KanalError) as info:
            check_transactional_id(bad)
        assert info.value.code == ErrorCode.INVALID_REQUEST
    check_transactional_id("x" * TRANSACTIONAL_ID_LENGTH_MAX)
    for bad in (0, -1, 900_001):
        with pytest.raises(KanalError) as info:
            check_timeout(bad)
        assert info.value.code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_the_next_transaction_opens_over_a_prepare_state_once_its_markers_are_written():
    """One ONGOING record replaces COMPLETE + ONGOING: only when the shell says every marker is stored."""
    prepared = decide_end_txn(ongoing(), 100, 0, True, 12).new_state
    waiting = decide_add_partitions(prepared, 100, 0, [P2], 13)
    assert waiting.error == ErrorCode.CONCURRENT_TRANSACTIONS and waiting.new_state is None
    opened = decide_add_partitions(prepared, 100, 0, [P2], 14, markers_written=True)
    assert opened.ok and opened.markers is None
    assert (opened.new_state.state, opened.new_state.partitions, opened.new_state.start_ms) == (
        TxnState.ONGOING, (P2,), 14), "the previous transaction's partitions are gone, the timer restarts"
    assert pending_markers(opened.new_state) is None, "a reload of it owes nothing"
    fenced = decide_add_partitions(prepared, 100, 1, [P2], 14, markers_written=True)
    assert fenced.error == ErrorCode.PRODUCER_FENCED and fenced.new_state is None


def test_the_state_round_trips_through_its_record_value():
    txn = decide_add_partitions(init(), 100, 0, [P1, OFFSETS], 10).new_state
    assert TxnMetadata.from_value("t", txn.to_value()) == txn


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["init", "add", "add_written", "commit", "abort", "written", "tick"]),
            st.integers(0, 2),
        ),
        max_size=30,
    )
)
def test_random_call_sequences_keep_the_invariants(calls):
    """Whatever the order: refusals change nothing; the epoch never goes back; markers are only decided
    with a PREPARE state and name its partitions; COMPLETE/EMPTY states hold no partitions."""
    txn = init()
    now = 0
    for name, epoch_offset in calls:
        now += 10_000
        epoch = txn.producer_epoch - epoch_offset
        if name == "init":
            decision = decide_init_producer_id(txn, "t", 60_000, now, new_producer_id=200)
        elif name in ("add", "add_written"):
            # add_written: the shell saw every marker of the PREPARE state stored (no effect otherwise)
            decision = decide_add_partitions(txn, txn.producer_id, epoch, [P1], now,
                                             markers_written=name == "add_written")
        elif name in ("commit", "abort"):
            decision = decide_end_txn(txn, txn.producer_id, epoch, name == "commit", now)
        else:
            decision = decide_markers_written(txn, now) if name == "written" else decide_timeout(txn, now)
        if decision.error not in (ErrorCode.NONE, ErrorCode.CONCURRENT_TRANSACTIONS):
            assert decision.new_state is None and decision.markers is None
        if epoch_offset and name in ("add", "add_written", "commit", "abort"):
            assert decision.error == ErrorCode.PRODUCER_FENCED
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) and decision.new_state is not None \
                and decision.new_state.state == TxnState.ONGOING:
            assert name == "add_written", (
                "a PREPARE state is left for a new transaction only after its markers"
            )
        if decision.markers is not None:
            assert decision.new_state.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
            assert decision.markers.partitions == decision.new_state.partitions
        if decision.new_state is not None:
            new = decision.new_state
            assert new.producer_id != txn.producer_id or new.producer_epoch >= txn.producer_epoch
            if new.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                assert new.partitions == ()
            txn = new
