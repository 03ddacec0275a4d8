"""The producer's accumulator: batching, lingering, ordering per partition, back-pressure (no sockets); with
pure-Python batches and with the C extension's (when built)."""

from __future__ import annotations

import pytest

from kanal.clients.producer_batch import NATIVE
from kanal.clients.record_accumulator import RecordAccumulator
from kanal.v1.error import ErrorCode, KanalError


@pytest.fixture(
    params=["python", pytest.param("native", marks=pytest.mark.skipif(not NATIVE, reason="not built"))]
)
def acc(request):
    def make(**kw) -> RecordAccumulator:
        settings = {"batch_size_bytes": 1000, "linger_ms": 5, "buffer_memory_bytes": 10_000,
                    "delivery_timeout_ms": 60_000, "native": request.param == "native"}
        settings.update(kw)
        return RecordAccumulator(**settings)
    return make


def put(a: RecordAccumulator, value: bytes, size: int, partition: int = 0, max_block_s: float = 1.0):
    return a.append("t", partition, value, None, 0, (), size, max_block_s)


def always(_key) -> bool:
    return True


def test_a_batch_waits_for_linger_then_goes(acc):
    a = acc()
    batch, index, sealed = put(a, b"x", 10, 0, 1.0)
    assert (index, sealed) == (0, False)
    out, sleep_s = a.drain(batch.created_s + 0.001, always)
    assert out == [] and 0 < sleep_s <= 0.005
    out, _ = a.drain(batch.created_s + 0.006, always)
    assert out == [batch]


def test_a_full_batch_is_sealed_at_once(acc):
    a = acc(linger_ms=10_000)
    for i in range(10):
        batch, _, sealed = put(a, b"x", 100, 0, 1.0)
    assert sealed
    out, _ = a.drain(batch.created_s, always)
    assert out == [batch] and batch.record_count == 10


def test_records_behind_an_in_flight_batch_gather_into_one_batch(acc):
    # With linger 0, a steady stream must not become one batch (one round trip) per record.
    a = acc(linger_ms=0)
    first, _, _ = put(a, b"a", 10, 0, 1.0)
    out, _ = a.drain(first.created_s, always)
    assert out == [first]
    for _ in range(5):
        put(a, b"b", 10, 0, 1.0)
        assert a.drain(first.created_s + 1, always)[0] == []  # partition busy: nothing goes, nothing seals
    first.complete(0, None)
    a.completed(first)
    out, _ = a.drain(first.created_s + 1, always)
    assert len(out) == 1 and out[0].record_count == 5


def test_a_retried_batch_goes_before_later_ones_of_its_partition(acc):
    a = acc(linger_ms=0)
    first, _, _ = put(a, b"1", 10, 0, 1.0)
    out, _ = a.drain(first.created_s, always)
    put(a, b"2", 10, 0, 1.0)
    a.requeue_all([first], retry_at_s=first.created_s + 0.1)
    assert a.drain(first.created_s + 0.05, always)[0] == []  # backing off; the later batch waits too
    out, _ = a.drain(first.created_s + 0.2, always)
    assert out == [first]


def test_a_call_takes_several_sealed_batches_of_a_partition_in_order(acc):
    a = acc(linger_ms=10_000)
    sealed = []
    for _ in range(50):  # 100 bytes each, 1,000-byte batches: five sealed batches
        batch, _, done = put(a, b"x", 100, 0, 1.0)
        if done:
            sealed.append(batch)
    put(a, b"x", 100, 1, 1.0)
    now = sealed[0].created_s
    out, _ = a.drain(now, always, batches_per_partition_max=3)
    assert out == sealed[:3]  # partition 1's open batch has not lingered
    assert a.drain(now, always, batches_per_partition_max=3)[0] == []  # partition 0 is in flight
    # The first is stored, the other two must be retried: they go back, in order, ahead of the rest.
    sealed[0].complete(0, None)
    a.completed(sealed[0], release=False)
    assert a.drain(now, always, batches_per_partition_max=3)[0] == []  # not free until all are resolved
    a.requeue_all(sealed[1:3], retry_at_s=now + 0.1)
    assert a.drain(now + 0.05, always, batches_per_partition_max=3)[0] == []  # backing off
    out, _ = a.drain(now + 0.2, always, batches_per_partition_max=3)
    assert out == sealed[1:4]
    for b in out:
        b.complete(0, None)
        a.completed(b, release=False)
    a.release(("t", 0))
    out, _ = a.drain(now + 0.2, always, batches_per_partition_max=3)
    assert out == [sealed[4]]


def test_buffer_memory_blocks_then_times_out(acc):
    a = acc(buffer_memory_bytes=1000, batch_size_bytes=1000)
    put(a, b"x", 900, 0, 1.0)
    with pytest.raises(KanalError) as err:
        put(a, b"y", 200, 1, 0.01)
    assert err.value.code == ErrorCode.REQUEST_TIMED_OUT


def test_a_callback_is_registered_before_its_batch_can_be_sent(acc):
    # Registered under the accumulator's lock: a batch acknowledged at once still calls every callback.
    a = acc(linger_ms=0, batch_size_bytes=10)
    seen = []
    batch, index, sealed = a.append(
        "t", 0, b"v", None, 7, (), 10, 1.0, lambda err, meta: seen.append((err, meta))
    )
    assert sealed and index == 0
    out, _ = a.drain(batch.created_s, always)
    assert out == [batch]
    batch.complete(41, None)
    a.completed(batch)
    assert [(err, meta.offset, meta.timestamp_ms) for err, meta in seen] == [(None, 41, 7)]


def test_a_record_with_bad_headers_leaves_no_empty_batch(acc):
    a = acc()
    with pytest.raises(TypeError):
        a.append("t", 0, b"v", None, 0, [("k", "a str, not bytes")], 10, 1.0)
    assert a.unfinished == 0
    assert a.drain(1e9, always)[0] == []


def test_batches_past_their_delivery_deadline_that_never_went_out_are_taken_in_order(acc):
    a = acc(delivery_timeout_ms=1_000, linger_ms=10_000)
    first, _, _ = put(a, b"x", 100, 0, 1.0)
    for _ in range(9):
        put(a, b"x", 100, 0, 1.0)  # the first batch is full: sealed
    second, _, _ = put(a, b"x", 100, 0, 1.0)  # the open batch after it
    other, _, _ = put(a, b"x", 100, 1, 1.0)
    assert a.expired(first.created_s + 0.5) == []
    a.begin_flush()  # partition 1's open batch may go at once
    out, _ = a.drain(first.created_s, lambda key: key == ("t", 1))  # partition 1 goes out: in flight
    assert out == [other]
    assert a.expired(second.created_s + 1.5) == [first, second]  # partition 0's, oldest first
    assert a.expired(second.created_s + 1.5) == []
