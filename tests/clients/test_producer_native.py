"""produce() on both paths — pure Python and the C extension (clients/_producer_fast.c) — must behave the
same and put the same bytes in the same batches. A stand-in metadata (no broker) and a long linger keep
every batch in the accumulator, where the tests read it."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import mmh3
import pytest

from kanal.clients.producer import NATIVE, NATIVE_IMPORT_ERROR, Producer, ProducerConfig, RecordMetadata
from kanal.clients.producer_batch import ProducerBatch, native
from kanal.v1.batch import NewRecord, encode_record_list
from kanal.v1.error import ErrorCode, KanalError

needs_native = pytest.mark.skipif(not NATIVE, reason="the C extension is not built (no compiler at install)")
PATHS = ["python", pytest.param("native", marks=needs_native)]
VECTORS = Path(__file__).parents[2] / "proto" / "kanal" / "v1" / "partitioner_vectors.json"


def test_the_c_hot_path_was_built():
    """The project's setup (deploy/bootstrap.sh) installs a compiler and builds the extension, so the native
    tests below run; they may skip only where that is stated on purpose."""
    assert NATIVE or os.environ.get("KANAL_ALLOW_PURE_PYTHON") == "1", (
        f"the producer's C extension did not load ({NATIVE_IMPORT_ERROR}); run deploy/bootstrap.sh with a C "
        "compiler, or set KANAL_ALLOW_PURE_PYTHON=1 to run the suite on the pure-Python path only")


class StandInMetadata:
    """ClusterMetadata without a cluster: topics with partition counts, and no leaders (nothing is sent)."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics

    def refresh(self, topics=None) -> SimpleNamespace:
        """What ClusterMetadata.refresh returns, as far as the producer reads it: the topics' partitions."""
        return SimpleNamespace(topics={t: list(range(n)) for t, n in self.topics.items()})

    def partitions(self, topic: str, *, refresh_if_missing: bool = True) -> list[int]:
        if topic not in self.topics:
            raise KanalError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} is not known to the cluster"
            )
        return list(range(self.topics[topic]))

    def leader_endpoint(self, topic: str, partition: int) -> None:
        return None

    def close(self) -> None:
        return None


def make_producer(path: str, topics: dict[str, int] | None = None, seed: int = 1, **settings) -> Producer:
    config = {"bootstrap": "stand-in:1", "linger_ms": 60_000, "enable_idempotence": False, "acks": "1",
              "use_native_path": path == "native"}
    config.update(settings)
    producer = Producer(ProducerConfig(**config), rng=random.Random(seed),
                        metadata=StandInMetadata(topics or {"t": 4, "u": 1}))
    assert producer.native == (path == "native")
    assert ("path=native" in repr(producer)) == (path == "native")
    return producer


def shut(producer: Producer) -> None:
    """Fail what is buffered (nothing can be sent without a broker), then close: close() returns at once."""
    error = KanalError(ErrorCode.REQUEST_TIMED_OUT, "the test is over")
    for batch in producer._accumulator.abort_all(error):
        producer._finish(batch, -1, error)
    producer.close(0)


@pytest.fixture(params=PATHS)
def producer(request):
    p = make_producer(request.param)
    yield p
    shut(p)


def batches_of(producer: Producer) -> dict[tuple[str, int], list[ProducerBatch]]:
    """Every batch still in the accumulator, per partition, oldest first."""
    acc = producer._accumulator
    with acc.wakeup:
        keys = sorted(acc._sealed.keys() | acc._open.keys())
        return {k: list(acc._sealed.get(k, ())) + ([acc._open[k]] if k in acc._open else []) for k in keys}


def _ignore(error, meta) -> None:
    return None


def random_calls(rng: random.Random, n: int) -> list[tuple[tuple, dict]]:
    calls = []
    for _ in range(n):
        kwargs: dict = {}
        if rng.random() < 0.5:
            kwargs["key"] = rng.choice([b"", rng.randbytes(rng.randrange(1, 40)), "a-str-key", b"customer-7"])
        if rng.random() < 0.2:
            kwargs["partition"] = rng.randrange(4)
        if rng.random() < 0.1:
            kwargs["headers"] = [
                (rng.choice(["", "h", "trace-id"]), rng.choice([None, b"", rng.randbytes(5)]))
                for _ in range(rng.choice([0, 1, 3]))
            ]
        kwargs["timestamp"] = rng.choice(
            [
                1_700_000_000_000 + rng.randrange(-5000, 5000),
                rng.randrange(0, 1 << 63),
                0,
                1_700_000_000_000,
                True,
            ]
        )
        if rng.random() < 0.2:
            kwargs["on_delivery"] = _ignore  # any callable; compared by index
        value = rng.choice([None, b"", rng.randbytes(rng.choice([1, 100, 200, 17_000])), "a str value",
                            bytearray(b"ba")])
        calls.append((("t", value), kwargs))
    return calls


def test_random_records_give_the_same_batches_and_bytes_on_both_paths():
    calls = random_calls(random.Random(11), 3000)
    seen = {}
    for path in ("python", "native") if NATIVE else ("python",):
        p = make_producer(path, batch_size_bytes=20_000)
        try:
            for args, kwargs in calls:
                p.produce(*args, **kwargs)
            out = {}
            for tp, batches in batches_of(p).items():
                for b in batches:
                    p._encode(b)  # the whole batch's bytes (header, CRC), as it would be sent
                out[tp] = [
                    (
                        b.record_count,
                        b.timestamps,
                        b.first_timestamp_ms,
                        b.max_timestamp_ms,
                        b.size_bytes,
                        [i for i, _ in b.callbacks],
                        b.encoded,
                    )
                    for b in batches
                ]
            seen[path] = (out, dict(p._sticky), p._accumulator.memory.buffered_bytes)
            if path == "native":
                assert p._appender.fast_calls > len(calls) // 3  # the common case really ran in C
        finally:
            shut(p)
    assert sum(len(v) for v in seen["python"][0].values()) > 10  # batches were sealed on the way
    if NATIVE:
        assert seen["native"] == seen["python"]


@pytest.mark.parametrize("path", PATHS)
def test_record_lists_equal_the_reference_encoder(path):
    rng = random.Random(7)
    records = [
        NewRecord(
            None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 100, 20_000])),
            None if rng.random() < 0.5 else rng.randbytes(rng.randrange(0, 300)),
            rng.choice([rng.randrange(0, 1 << 63), 1_700_000_000_000 + rng.randrange(100)]),
            [(rng.choice(["", "k"]), rng.choice([None, b"", b"v"])) for _ in range(rng.choice([0, 0, 2]))],
        )
        for _ in range(20_000)
    ]  # offset deltas past 16383: three-byte varints
    batch = ProducerBatch("t", 0, 0.0, 1.0, native.RecordList() if path == "native" else None)
    for i, r in enumerate(records):
        assert batch.append(r.value, r.key, r.timestamp_ms, r.headers) == i
    assert batch.timestamps == [r.timestamp_ms for r in records]
    assert batch.max_timestamp_ms == max(r.timestamp_ms for r in records)
    assert batch.record_list() == encode_record_list(records, records[0].timestamp_ms)
    with pytest.raises(KanalError) as err:
        batch.append(b"v", None, 1, ())
    assert err.value.code == ErrorCode.UNKNOWN_SERVER_ERROR
    with pytest.raises(KanalError):
        batch.record_list()


@needs_native
def test_murmur3_matches_the_vectors_and_mmh3():
    for vector in json.loads(VECTORS.read_text())["vectors"]:
        assert native.murmur3_32(bytes.fromhex(vector["key_hex"])) == vector["murmur3_x86_32_seed0"]
    rng = random.Random(3)
    for n in list(range(40)) + [1000, 4097]:
        data = rng.randbytes(n)
        assert native.murmur3_32(data) == mmh3.hash(data, seed=0, signed=False)
        assert native.murmur3_32(data, 99) == mmh3.hash(data, seed=99, signed=False)


@pytest.mark.parametrize("path", PATHS)
def test_errors_have_the_same_codes_and_messages(path):
    p = make_producer(
        path, batch_size_bytes=1000, buffer_memory_bytes=1000, max_block_ms=0, record_bytes_max=950
    )
    try:
        p.produce("t", b"x", partition=0)  # an open batch, so later calls reach the C path

        def error_of(*args, **kwargs) -> tuple[int, str]:
            with pytest.raises(KanalError) as err:
                p.produce(*args, **kwargs)
            return err.value.code, str(err.value)

        assert error_of("t", b"x", partition=4) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "UNKNOWN_TOPIC_OR_PARTITION: t has no partition 4",
        )
        assert error_of("t", b"x", partition=-1)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert error_of("nope", b"x")[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert error_of("t", b"x" * 935, partition=0) == (
            ErrorCode.MESSAGE_TOO_LARGE,
            "MESSAGE_TOO_LARGE: record of 951 bytes is over record_bytes_max (950)",
        )
        p.produce("t", b"x" * 900, partition=0)  # 917 of 1000 bytes buffered
        assert error_of("t", b"x" * 100, partition=0) == (
            ErrorCode.REQUEST_TIMED_OUT, "REQUEST_TIMED_OUT: buffer_memory_bytes (1000) stayed full for 0 ms")
        with pytest.raises(TypeError):
            p.produce("t", 5)
        with pytest.raises(TypeError):
            p.produce("t", b"x", bogus=1)
        # Timestamps are ints of ms in [0, 2^63 - 1]; anything else is refused at once, with nothing queued.
        records_before = sum(b.record_count for b in p._accumulator._open.values())
        for bad in (-1, 1 << 63, 1.5, "now"):
            assert error_of("t", b"x", partition=0, timestamp=bad)[0] == ErrorCode.INVALID_REQUEST
        assert error_of("t", b"x", partition=0, on_delivery=5) == (
            ErrorCode.INVALID_REQUEST, "INVALID_REQUEST: on_delivery must be callable, not 5")
        assert sum(b.record_count for b in p._accumulator._open.values()) == records_before
        shut(p)
        assert error_of("t", b"x", partition=0) == (
            ErrorCode.INVALID_REQUEST,
            "INVALID_REQUEST: the producer is closed",
        )
    finally:
        shut(p)


def test_futures_and_callbacks_resolve(producer):
    seen = []
    futures = [producer.produce("t", b"v%d" % i, partition=1, timestamp=100 + i,
                                on_delivery=lambda err, meta: seen.append((err, meta))) for i in range(5)]
    before = time.time_ns() // 1_000_000
    futures.append(producer.produce("t", b"now", partition=1))
    after = time.time_ns() // 1_000_000
    [batch] = batches_of(producer)[("t", 1)]
    assert not futures[0].done()
    with pytest.raises(KanalError) as err:
        futures[0].result(timeout=0)
    assert err.value.code == ErrorCode.REQUEST_TIMED_OUT
    batch.complete(40, None)
    assert all(f.done() for f in futures)
    assert [f.result() for f in futures[:5]] == [RecordMetadata("t", 1, 40 + i, 100 + i) for i in range(5)]
    assert before <= futures[5].result().timestamp_ms <= after
    assert seen == [(None, RecordMetadata("t", 1, 40 + i, 100 + i)) for i in range(5)]


def test_keys_choose_partitions_by_murmur3_and_the_sticky_partition_moves_on(producer):
    for i in range(200):
        key = b"customer-%d" % i
        producer.produce("t", b"v", key=key, timestamp=1)
    producer.produce("t", b"v", key="a-str-key", timestamp=1)
    placed = {tp: [b.record_count for b in bs] for tp, bs in batches_of(producer).items()}
    expected = {}
    for i in range(200):
        part = mmh3.hash(b"customer-%d" % i, seed=0, signed=False) % 4
        expected[("t", part)] = expected.get(("t", part), 0) + 1
    part = mmh3.hash(b"a-str-key", seed=0, signed=False) % 4
    expected[("t", part)] += 1
    assert {tp: sum(c) for tp, c in placed.items()} == expected


def test_the_sticky_partition_changes_when_its_batch_is_sealed():
    sticky = {}
    for path in ("python", "native") if NATIVE else ("python",):
        p = make_producer(path, batch_size_bytes=1000, seed=5)
        try:
            order = []
            for _ in range(100):  # 116 bytes charged each: a batch seals every 9 records
                p.produce("t", b"x" * 100, timestamp=1)
                order.append(p._sticky["t"])
            sticky[path] = order
            assert len({tp for tp in batches_of(p)}) > 1
        finally:
            shut(p)
    assert len(set(sticky["python"])) > 1
    if NATIVE:
        assert sticky["native"] == sticky["python"]


@needs_native
def test_the_native_path_keeps_no_references():
    # Every object produce() touches must be released with the batch: no reference leaks per record.
    value, key, callback = b"v" * 100, b"k" * 10, (lambda err, meta: None)
    topic = "t"
    p = make_producer("native", batch_size_bytes=10_000)
    try:
        p.produce(topic, value, key=key)
        before = [sys.getrefcount(o) for o in (value, key, callback, topic)]
        for i in range(20_000):
            p.produce(topic, value, key=key, timestamp=i)
            p.produce(topic, value, partition=2, on_delivery=callback)
        futures = [p.produce(topic, value) for _ in range(1000)]
        assert p._appender.fast_calls > 40_000
        del futures
        for batch in p._accumulator.abort_all(KanalError(ErrorCode.REQUEST_TIMED_OUT, "test")):
            p._finish(batch, -1, KanalError(ErrorCode.REQUEST_TIMED_OUT, "test"))
        del batch
        after = [sys.getrefcount(o) for o in (value, key, callback, topic)]
        assert after[:2] == before[:2] and after[3] <= before[3] + 2
        assert after[2] == before[2]  # the callbacks went with their batches
    finally:
        shut(p)


@needs_native
def test_a_custom_partitioner_or_the_setting_keeps_the_python_path():
    p = Producer(
        ProducerConfig(bootstrap="x:1", enable_idempotence=False, acks="1"),
        partitioner=lambda t, k, n: 0,
        metadata=StandInMetadata({"t": 2}),
    )
    q = make_producer("python")
    try:
        assert not p.native and not q.native
        assert "path=python" in repr(p)
    finally:
        shut(p)
        shut(q)


@pytest.mark.parametrize("path", PATHS)
def test_bool_timestamps_are_stored_as_ints_and_huge_partition_counts_do_not_crash(path):
    p = make_producer(path)
    try:
        p.produce("t", b"x", partition=0)
        assert p.produce("t", b"y", partition=0, timestamp=True) is not None
        batch = p._accumulator._open[("t", 0)]
        assert batch.timestamps[-1] == 1 and type(batch.timestamps[-1]) is int
        # A partition count beyond int32 (never sent by a broker) goes to Python instead of a 32-bit modulo.
        p._partition_counts["t"] = 1 << 32
        p.produce("t", b"z", key=b"k")
        assert any(tp[1] == mmh3.hash(b"k", seed=0, signed=False) % (1 << 32) for tp in p._accumulator._open)
    finally:
        shut(p)


def test_a_subclass_that_overrides_produce_keeps_the_python_path():
    calls = []

    class Counting(Producer):
        def produce(self, *args, **kwargs):
            calls.append(args)
            return super().produce(*args, **kwargs)

    p = Counting(ProducerConfig(bootstrap="stand-in:1", linger_ms=60_000, enable_idempotence=False, acks="1"),
                 metadata=StandInMetadata({"t": 2}))
    try:
        assert not p.native
        for i in range(5):
            p.produce("t", b"v%d" % i, partition=1)
        assert len(calls) == 5
    finally:
        shut(p)


@pytest.mark.parametrize("path", PATHS)
def test_bad_partitions_and_headers_fail_at_produce_and_the_producer_goes_on(path):
    """A float or str partition, a custom partitioner's bad answer and malformed headers used to be queued
    and fail on the sender thread, which then failed every buffered record and closed the producer."""
    p = make_producer(path)
    q = Producer(
        ProducerConfig(bootstrap="x:1", linger_ms=60_000, enable_idempotence=False, acks="1"),
        partitioner=lambda topic, key, count: 1.5 if key == b"float" else 9,
        metadata=StandInMetadata({"t": 4}),
    )
    try:
        p.produce("t", b"x", partition=0)  # an open batch, so later calls reach the C path
        queued = sum(b.record_count for b in p._accumulator._open.values())
        for bad in (1.5, "1", b"1", [0]):
            with pytest.raises(TypeError, match="partition must be an int or None"):
                p.produce("t", b"x", partition=bad)
        for headers, match in (([("k",)], "a header must be a"), ("ab", "a header must be a"),
                               ([(1, b"v")], "a header key must be a str"),
                               ([("k", 5)], "a header value must be bytes, str or None")):
            with pytest.raises(TypeError, match=match):
                p.produce("t", b"x", partition=0, headers=headers)
        assert sum(b.record_count for b in p._accumulator._open.values()) == queued
        with pytest.raises(TypeError, match="the partitioner's partition must be an int"):
            q.produce("t", b"x", key=b"float")
        with pytest.raises(KanalError) as err:
            q.produce("t", b"x", key=b"k")
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert (
            str(err.value)
            == "UNKNOWN_TOPIC_OR_PARTITION: t has no partition 9 (the partitioner chose it; 4 partitions)"
        )
        assert not q._accumulator._open
        # What is valid still goes in, the bool partition as the int it is, str header values as UTF-8.
        p.produce("t", b"y", partition=True, headers=[("k", "é"), ("n", None)])
        batch = p._accumulator._open[("t", 1)]
        assert batch.record_count == 1 and batch.partition == 1 and type(batch.partition) is int
        assert p._sender.is_alive() and q._sender.is_alive()
    finally:
        shut(p)
        shut(q)
