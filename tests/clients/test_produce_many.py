"""Producer.produce_many() on both paths: the same batches and bytes as one produce() call per record,
futures made on access, and bad input refused with nothing queued. Stand-in metadata and a long linger
keep every batch in the accumulator (see test_producer_native.py)."""

from __future__ import annotations

import random
import threading
from contextlib import contextmanager

import mmh3
import pytest

from kanal.clients.producer import NATIVE, RecordMetadata
from kanal.v1.error import ErrorCode, KanalError

from .test_producer_native import PATHS, batches_of, make_producer, shut


@contextmanager
def opened(producer):
    """The producer, shut (its buffered records failed) when the block ends."""
    try:
        yield producer
    finally:
        shut(producer)


def placed(producer) -> dict:
    """Every buffered batch as what would be sent: records, timestamps, callbacks' indexes and bytes."""
    out = {}
    for tp, batches in batches_of(producer).items():
        for b in batches:
            producer._encode(b)
        out[tp] = [(b.record_count, b.timestamps, b.size_bytes, [i for i, _ in b.callbacks], b.encoded)
                   for b in batches]
    return out


def snapshot(producer) -> tuple:
    """What is buffered, without encoding it (an encoded batch takes no more records)."""
    return (
        {
            tp: [(b.record_count, b.timestamps, b.size_bytes) for b in bs]
            for tp, bs in batches_of(producer).items()
        },
        producer._accumulator.memory.buffered_bytes,
    )


def some_records(rng: random.Random, n: int) -> tuple[list, list]:
    values = [rng.choice([None, b"", rng.randbytes(rng.choice([1, 90, 300]))]) for _ in range(n)]
    keys = [rng.choice([None, None, b"", b"k%d" % rng.randrange(50)]) for _ in range(n)]
    values[2500], keys[3000] = "a str value", "a str key"  # two calls of the many go to Python whole
    return values, keys


def _ignore(error, meta) -> None:
    return None


def test_produce_many_writes_what_produce_per_record_writes_on_both_paths():
    values, keys = some_records(random.Random(3), 4000)
    seen = {}
    for path in ("python", "native") if NATIVE else ("python",):
        for how in ("many", "per-record"):
            with opened(make_producer(path, batch_size_bytes=5_000, seed=9)) as p:
                if how == "many":
                    for start in range(0, len(values), 700):  # calls that seal batches midway
                        p.produce_many("t", values[start:start + 700], keys[start:start + 700], timestamp=77,
                                       on_delivery=_ignore if start % 1400 else None)
                else:
                    for i, (v, k) in enumerate(zip(values, keys)):
                        p.produce(
                            "t", v, key=k, timestamp=77, on_delivery=_ignore if (i // 700) % 2 else None
                        )
                seen[(path, how)] = (placed(p), dict(p._sticky), p._accumulator.memory.buffered_bytes)
                if path == "native" and how == "many":
                    # All in C but three calls: the first (Python draws the first sticky partition), and
                    # the two with a str.
                    assert p._appender.fast_calls == len(values) - 3 * 700
    reference = seen[("python", "per-record")]
    assert sum(len(v) for v in reference[0].values()) > 20  # batches were sealed on the way
    assert all(v == reference for v in seen.values())


@pytest.mark.parametrize("path", PATHS)
def test_keys_are_placed_by_murmur3_and_an_explicit_partition_takes_all(path):
    with opened(make_producer(path)) as p:
        keys = [b"customer-%d" % i for i in range(300)]
        futures = p.produce_many("t", [b"v"] * 300, keys, timestamp=1)
        for key, future in zip(keys, futures):
            assert future._batch.partition == mmh3.hash(key, seed=0, signed=False) % 4
        futures = p.produce_many("t", [b"w"] * 10, partition=2, timestamp=1)
        assert {f._batch.partition for f in futures} == {2}
        assert len(p.produce_many("t", [])) == 0


@pytest.mark.parametrize("path", PATHS)
def test_the_futures_resolve_in_order(path):
    with opened(make_producer(path, batch_size_bytes=1_000)) as p:
        seen = []
        futures = p.produce_many(
            "t",
            [b"%03d" % i + b"x" * 97 for i in range(20)],
            partition=1,
            timestamp=500,
            on_delivery=lambda error, meta: seen.append(meta.offset if meta else error),
        )
        assert len(futures) == 20 and not futures.done()
        with pytest.raises(KanalError) as err:
            futures.result(timeout=0)
        assert err.value.code == ErrorCode.REQUEST_TIMED_OUT
        batches = batches_of(p)[("t", 1)]
        assert len(batches) == 3  # 116 bytes charged per record: a batch of 1,000 bytes seals at 9
        base = 100
        for b in batches:
            b.complete(base, None)
            base += 1000  # offsets far apart: a future must know its own batch
        assert futures.done()
        metas = futures.result(timeout=1)
        assert [m.timestamp_ms for m in metas] == [500] * 20
        assert metas == [f.result() for f in futures] == [futures[i].result() for i in range(20)]
        assert metas[-1] == futures[-1].result() and [f.result() for f in futures[2:5]] == metas[2:5]
        expected, base = [], 100
        for b in batches:
            expected += [RecordMetadata("t", 1, base + i, 500) for i in range(b.record_count)]
            base += 1000
        assert metas == expected and seen == [m.offset for m in expected]


@pytest.mark.parametrize("path", PATHS)
def test_a_failed_batch_fails_result_with_its_error(path):
    with opened(make_producer(path)) as p:
        futures = p.produce_many("t", [b"a", b"b"], partition=0)
        [batch] = batches_of(p)[("t", 0)]
        batch.complete(-1, KanalError(ErrorCode.NOT_ENOUGH_REPLICAS, "two replicas down"))
        with pytest.raises(KanalError) as err:
            futures.result()
        assert err.value.code == ErrorCode.NOT_ENOUGH_REPLICAS


BAD_CALLS = [
    # (args, kwargs, the error: an ErrorCode or an exception type)
    (("t", [b"a", b"b"], [b"k"]), {}, ValueError),
    (("t", [b"a", 7, b"c"]), {}, TypeError),
    (("t", [b"a", b"b"], [b"k", 3.5]), {}, TypeError),
    (("t", b"abc"), {}, TypeError),  # a bare bytes would be three records of one int each
    (("t", "abc"), {}, TypeError),
    (("t", [b"a", b"x" * 3000]), {}, ErrorCode.MESSAGE_TOO_LARGE),  # record_bytes_max is 2,000 here
    (("t", [b"x" * 1500] * 30), {}, ErrorCode.MESSAGE_TOO_LARGE),  # over buffer_memory_bytes as a whole
    (("nope", [b"a"]), {}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (("t", [b"a"]), {"partition": 4}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (("t", [b"a"]), {"partition": 1.0}, TypeError),
    (("t", [b"a"]), {"timestamp": -1}, ErrorCode.INVALID_REQUEST),
    (("t", [b"a"]), {"on_delivery": "not callable"}, ErrorCode.INVALID_REQUEST),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("args", "kwargs", "error"), BAD_CALLS)
def test_bad_input_is_refused_with_nothing_queued(path, args, kwargs, error):
    with opened(
        make_producer(path, record_bytes_max=2_000, buffer_memory_bytes=40_000, batch_size_bytes=4_000)
    ) as p:
        p.produce_many("t", [b"before"], partition=0)  # an open batch, which must stay as it is
        before = snapshot(p)
        if isinstance(error, int):  # an ErrorCode
            with pytest.raises(KanalError) as err:
                p.produce_many(*args, **kwargs)
            assert err.value.code == error
        else:
            with pytest.raises(error):
                p.produce_many(*args, **kwargs)
        assert snapshot(p) == before
        assert len(p.produce_many("t", [b"after"], partition=0)) == 1  # and the producer goes on


def nearly_full(path: str, max_block_ms: int):
    """A producer with 8,000 of its 10,000 bytes of buffer memory taken (nothing is sent)."""
    p = make_producer(path, buffer_memory_bytes=10_000, batch_size_bytes=10_000, max_block_ms=max_block_ms)
    p.produce_many("t", [b"x" * 84] * 80, partition=0)
    return p


@pytest.mark.parametrize("path", PATHS)
def test_a_full_buffer_blocks_then_times_out_with_nothing_queued(path):
    with opened(nearly_full(path, max_block_ms=50)) as p:
        before = snapshot(p)
        with pytest.raises(KanalError) as err:
            p.produce_many("t", [b"x" * 84] * 30, partition=1)  # 3,000 more: waits 50 ms for room
        assert err.value.code == ErrorCode.REQUEST_TIMED_OUT
        assert snapshot(p) == before


@pytest.mark.parametrize("path", PATHS)
def test_a_full_buffer_blocks_until_batches_complete(path):
    with opened(nearly_full(path, max_block_ms=60_000)) as p:
        out = []
        waiting = threading.Thread(
            target=lambda: out.append(p.produce_many("t", [b"y" * 84] * 30, partition=1))
        )
        waiting.start()
        error = KanalError(ErrorCode.REQUEST_TIMED_OUT, "failed by the test, to free the buffer")
        for batch in p._accumulator.abort_all(error):
            p._finish(batch, -1, error)
        waiting.join(30)
        assert len(out[0]) == 30
        [batch] = batches_of(p)[("t", 1)]
        assert (batch.record_count, p._accumulator.memory.buffered_bytes) == (30, 3000)


@pytest.mark.parametrize("path", PATHS)
def test_a_closed_producer_refuses(path):
    p = make_producer(path)
    shut(p)
    with pytest.raises(KanalError) as err:
        p.produce_many("t", [b"a"])
    assert err.value.code == ErrorCode.INVALID_REQUEST
