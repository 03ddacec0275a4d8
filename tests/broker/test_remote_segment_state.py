"""Tiered storage's per-segment state (issue 44): the idempotence and transaction state chained segment by
segment equals a rebuild over the whole log up to each segment's end, and the `.meta` object that carries
it round-trips and refuses damage.

Logs are real: a leader Partition with small segments, fed plain, idempotent and transactional batches and
COMMIT/ABORT markers drawn by Hypothesis."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kanal.broker.partition import Assignment, Partition
from kanal.broker.producer_snapshot import encode_snapshot
from kanal.broker.producer_state import ProducerStateTable, producer_batches_in
from kanal.broker.remote_segment_state import chain_segment
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.remote_segment_meta import RemoteSegmentMeta, decode_meta, encode_meta
from kanal.broker.storage.transaction_index import TransactionIndex, txn_batches_in
from kanal.v1 import broker_pb2
from kanal.v1.batch import (
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NewRecord,
    build_batch,
    build_control_batch,
)
from kanal.v1.error import ErrorCode, KanalError

from .test_partition_waiters import FakeManager

IDEMPOTENT, TRANSACTIONAL = (1, 2), (10, 11)
OPS = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 5)),
    st.tuples(st.just("idempotent"), st.sampled_from(IDEMPOTENT), st.integers(1, 5)),
    st.tuples(st.just("transactional"), st.sampled_from(TRANSACTIONAL), st.integers(1, 5)),
    st.tuples(st.just("end"), st.sampled_from(TRANSACTIONAL), st.booleans()),
)


def fill(part: Partition, ops) -> None:
    sequences: dict[int, int] = {}
    open_txns: set[int] = set()
    for op in ops:
        control = False
        if op[0] == "plain":
            raw = build_batch([NewRecord(b"p" * 120)] * op[1])
        elif op[0] in ("idempotent", "transactional"):
            _, pid, n = op
            raw = build_batch([NewRecord(b"i" * 120)] * n, producer_id=pid,
                              base_sequence=sequences.get(pid, 0),
                              attributes=ATTR_TRANSACTIONAL if op[0] == "transactional" else 0)
            sequences[pid] = sequences.get(pid, 0) + n
            if op[0] == "transactional":
                open_txns.add(pid)
        else:
            _, pid, commit = op
            if pid not in open_txns:
                continue
            raw = build_control_batch(CONTROL_COMMIT if commit else CONTROL_ABORT, producer_id=pid,
                                      producer_epoch=0, coordinator_epoch=0, timestamp_ms=1)
            open_txns.discard(pid)
            control = True
        error, _ = part.append_as_leader([raw], 1, 1_000, broker_pb2.ProduceResponse.PartitionResult(),
                                         allow_control=control)
        assert error is None, error


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=10, max_size=100))
def test_the_chained_state_equals_a_whole_log_rebuild_at_every_segment_end(ops) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = LogConfig(segment_bytes_max=1024, batch_bytes_max=1000)
        part = Partition("t", 0, Path(tmp) / "t-0", config, 0, 1, FakeManager())
        part.become_leader(Assignment("id", (0,), (0,), 0, 1, 1), set(), 10_000)
        try:
            fill(part, ops)
            segments = part.log.segments
            producers, transactions = ProducerStateTable(), TransactionIndex()
            below_end = b""  # every segment's entries so far: the whole log up to `end`
            for segment, following in itertools.pairwise(segments):
                base, end = segment.base_offset, following.base_offset
                entries = segment.read(base, 1 << 30, None)
                state = chain_segment(entries, base, end, producers, transactions)
                below_end += entries
                expected = ProducerStateTable.rebuild(producer_batches_in(below_end))
                expected.advance_to(end)
                assert state.snapshot_bytes() == encode_snapshot(expected, end)
                index = TransactionIndex.rebuild(txn_batches_in(below_end))
                assert state.open_transactions == index.ongoing
                assert list(state.aborted) == [a for a in index.aborted if base <= a.last_offset < end]
                producers, transactions = state.carried()
        finally:
            part.close()


def meta(**changes) -> RemoteSegmentMeta:
    fields = {"topic": "orders", "base_offset": 100, "end_offset": 250, "epochs": ((3, 100), (5, 180)),
              "offset_index": b"\x00" * 16, "time_index": b"\x01" * 24, "producer_snapshot": b"snap",
              "transactions": b"txn"}
    fields.update(changes)
    return RemoteSegmentMeta(**fields)  # type: ignore[arg-type]


def test_the_meta_object_round_trips() -> None:
    original = meta()
    assert decode_meta(encode_meta(original)) == original
    empty = meta(offset_index=b"", time_index=b"", producer_snapshot=b"", transactions=b"", topic="")
    assert decode_meta(encode_meta(empty)) == empty


def test_a_damaged_or_cut_meta_object_is_refused() -> None:
    data = encode_meta(meta())
    for damaged in (data[:-1], data[:10], data + b"\x00", bytes([data[0] ^ 1]) + data[1:],
                    data[:40] + bytes([data[40] ^ 0x80]) + data[41:]):
        with pytest.raises(KanalError) as refused:
            decode_meta(damaged)
        assert refused.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("changes", [
    {"end_offset": 100},  # empty segment
    {"epochs": ()},
    {"epochs": ((3, 120),)},  # the first epoch must start at the base
    {"epochs": ((5, 100), (3, 180))},  # epochs go back
    {"epochs": ((3, 100), (5, 250))},  # an epoch starting at the end
])
def test_meta_fields_that_break_the_rules_are_never_encoded(changes) -> None:
    with pytest.raises(KanalError) as refused:
        encode_meta(meta(**changes))
    assert refused.value.code == ErrorCode.INVALID_REQUEST


def test_a_state_past_the_segment_start_is_refused() -> None:
    producers = ProducerStateTable()
    producers.advance_to(50)
    with pytest.raises(KanalError):
        chain_segment(b"", 10, 20, producers, TransactionIndex())
