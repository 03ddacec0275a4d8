"""The consumer's decoding on both paths — pure Python (upb) and the C extension
(clients/_consumer_fast.c) — must give the same records and fail on the same input. Random RecordLists
(with unknown fields, repeated fields, extreme deltas), batches through every codec, and damaged bytes
are decoded by both and compared; no broker is involved."""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys

import pytest

from kanal.clients import consumer as consumer_module
from kanal.clients.consumer import (
    NATIVE,
    NATIVE_IMPORT_ERROR,
    Consumer,
    ConsumerConfig,
    ConsumerRecord,
    decode_fetched,
    decode_record_list_python,
    native,
)
from kanal.v1 import records_pb2
from kanal.v1.batch import NewRecord, build_batch, frame_entry, varint, with_broker_suffix
from kanal.v1.error import ErrorCode, KanalError

needs_native = pytest.mark.skipif(not NATIVE, reason="the C extension is not built (no compiler at install)")
U64_MAX = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


def test_the_c_decoder_was_built():
    """The project's setup (deploy/bootstrap.sh) installs a compiler and builds the extension, so the
    comparisons below run; they may skip only where that is stated on purpose."""
    assert NATIVE or os.environ.get("KANAL_ALLOW_PURE_PYTHON") == "1", (
        f"the consumer's C extension did not load ({NATIVE_IMPORT_ERROR}); run deploy/bootstrap.sh with a C "
        "compiler, or set KANAL_ALLOW_PURE_PYTHON=1 to run the suite on the pure-Python path only")


# ---- raw protobuf writing, so tests can put in what protobuf's own encoder never writes ----

def zigzag(n: int) -> int:
    return ((n << 1) ^ (n >> 63)) & U64_MAX


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def delimited(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


RECORD_LIST_FIELDS = {1: 2}  # field number -> its wire type
RECORD_FIELDS = {1: 0, 2: 0, 3: 2, 4: 2, 5: 2}
HEADER_FIELDS = {1: 2, 2: 2}


def unknown_field(rng: random.Random, known: dict[int, int], depth: int = 0) -> bytes:
    """A field a parser must skip: an unknown number, or a known one with another wire type."""
    field = (
        rng.choice([*known, 6, 7, 15, 16, 100, 2047, (1 << 29) - 1])
        if rng.random() < 0.8
        else rng.randrange(1, 1 << 29)
    )
    wire_type = rng.choice([0, 1, 2, 3, 5] if depth < 3 else [0, 1, 2, 5])
    if known.get(field) == wire_type:
        wire_type = 5  # known number, wrong wire type
    if wire_type == 0:
        return tag(field, 0) + varint(rng.getrandbits(rng.choice([7, 32, 64])))
    if wire_type == 1:
        return tag(field, 1) + rng.randbytes(8)
    if wire_type == 5:
        return tag(field, 5) + rng.randbytes(4)
    if wire_type == 2:
        return delimited(field, rng.randbytes(rng.randrange(20)))
    inner = b"".join(unknown_field(rng, {}, depth + 1) for _ in range(rng.randrange(3)))
    return tag(field, 3) + inner + tag(field, 4)


def random_bytes(rng: random.Random) -> bytes | None:
    return rng.choice([None, b"", rng.randbytes(1), rng.randbytes(rng.randrange(300)), rng.randbytes(20_000)
                       if rng.random() < 0.02 else b"x"])


def random_text(rng: random.Random) -> str:
    alphabet = "abcXYZ09-_ \x00\x7féß€😀\u10ffff"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(8)))


def random_header(rng: random.Random, with_unknown: bool) -> bytes:
    parts = []
    key, value = random_text(rng), random_bytes(rng)
    if key or rng.random() < 0.2:
        parts.append(delimited(1, key.encode()))
    if value is not None:
        parts.append(delimited(2, value))
    if rng.random() < 0.1:  # repeated: the last occurrence wins
        parts.append(rng.choice([delimited(1, random_text(rng).encode()), delimited(2, rng.randbytes(3))]))
    if with_unknown:
        parts += [unknown_field(rng, HEADER_FIELDS) for _ in range(rng.randrange(3))]
    rng.shuffle(parts)
    return b"".join(parts)


def random_record(rng: random.Random, with_unknown: bool) -> bytes:
    parts = []
    offset_delta = rng.choice([0, 1, rng.randrange(1 << 14), U64_MAX & 0xFFFFFFFF, rng.getrandbits(64)])
    if offset_delta or rng.random() < 0.1:
        parts.append(tag(1, 0) + varint(offset_delta))  # a varint above 2^32 keeps its low 32 bits
    ts_delta = rng.choice(
        [0, 1, -1, rng.randrange(-(10**6), 10**6), I64_MIN, I64_MAX, rng.randrange(I64_MIN, I64_MAX)]
    )
    if ts_delta or rng.random() < 0.1:
        parts.append(tag(2, 0) + varint(zigzag(ts_delta)))
    for field in (3, 4):
        data = random_bytes(rng)
        if data is not None:
            parts.append(delimited(field, data))
    for _ in range(rng.choice([0, 0, 0, 1, 2, 5])):
        parts.append(delimited(5, random_header(rng, with_unknown)))
    if rng.random() < 0.1:  # repeated scalars: the last occurrence wins
        parts.append(
            rng.choice([tag(1, 0) + varint(rng.randrange(100)), delimited(3, b"again"), delimited(4, b"")])
        )
    if with_unknown:
        parts += [unknown_field(rng, RECORD_FIELDS) for _ in range(rng.randrange(4))]
        rng.shuffle(parts)  # fields may come in any order; headers keep theirs among themselves
    return b"".join(parts)


def random_record_list(rng: random.Random, with_unknown: bool = True) -> bytes:
    parts = [delimited(1, random_record(rng, with_unknown)) for _ in range(rng.randrange(1, 40))]
    if with_unknown and rng.random() < 0.5:
        parts.insert(rng.randrange(len(parts) + 1), unknown_field(rng, RECORD_LIST_FIELDS))
    return b"".join(parts)


# ---- decoding on both paths ----

def fields(records: list[ConsumerRecord]) -> list[tuple]:
    return [(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value, r.headers, r.leader_epoch)
            for r in records]


def decode(decoder, data: bytes, base: int = 1000, first_ts: int = 1_700_000_000_000, min_offset: int = 0):
    """(fields, key + value bytes) or the KanalError; the list must be untouched on an error."""
    out: list[ConsumerRecord] = [ConsumerRecord("earlier", 9, 1, 2, None, None, [], 0)]
    try:
        payload_bytes = decoder(out, data, "orders", 3, 7, base, first_ts, min_offset)
    except KanalError as exc:
        assert len(out) == 1, "a failed decode must leave the list as it was"
        return exc
    assert out[0].topic == "earlier"
    return fields(out[1:]), payload_bytes


def expect_same(data: bytes, **where):
    python = decode(decode_record_list_python, data, **where)
    c = decode(native.decode_into, data, **where)
    if isinstance(python, KanalError) or isinstance(c, KanalError):
        assert isinstance(python, KanalError) and isinstance(c, KanalError), (python, c)
        assert python.code == c.code == ErrorCode.CORRUPT_MESSAGE
        assert c.message.startswith("records do not parse: ")
    else:
        assert python == c
    return python


@needs_native
def test_random_record_lists_decode_the_same_on_both_paths():
    rng = random.Random(20240611)
    for i in range(400):
        data = random_record_list(rng, with_unknown=i % 4 != 0)
        where = rng.choice([{}, {"base": 0, "first_ts": 0}, {"base": U64_MAX - 5, "first_ts": I64_MAX},
                            {"base": rng.getrandbits(64), "first_ts": I64_MIN},
                            {"base": rng.randrange(1 << 40), "first_ts": rng.randrange(I64_MIN, I64_MAX)}])
        result = expect_same(data, **where)
        assert not isinstance(result, KanalError), f"case {i}: {result}"


@needs_native
def test_records_below_min_offset_are_skipped_on_both_paths():
    rng = random.Random(7)
    data = b"".join(delimited(1, tag(1, 0) + varint(d) + delimited(4, rng.randbytes(5))) for d in range(50))
    for min_offset in (-5, 0, 1000, 1001, 1025, 1049, 1050, 10**9, I64_MAX):
        records, payload_bytes = expect_same(data, base=1000, min_offset=min_offset)
        assert [r[2] for r in records] == [o for o in range(1000, 1050) if o >= min_offset]
        assert payload_bytes == 5 * len(records)


def test_what_the_records_hold():
    """Both paths against what was written: None for absent, b"" for empty, headers in order."""
    data = (delimited(1, delimited(4, b"v0"))
            + delimited(1, tag(1, 0) + varint(1) + tag(2, 0) + varint(zigzag(-2_000)) + delimited(3, b"")
                        + delimited(5, delimited(1, "é".encode()) + delimited(2, b"")) + delimited(5, b""))
            + delimited(1, tag(1, 0) + varint(5) + delimited(3, b"k") + tag(4, 0) + varint(1)))
    paths = [decode_record_list_python] + ([native.decode_into] if NATIVE else [])
    for decoder in paths:
        records, payload_bytes = decode(decoder, data, base=10, first_ts=5_000, min_offset=0)
        assert records == [
            ("orders", 3, 10, 5_000, None, b"v0", [], 7),
            ("orders", 3, 11, 3_000, b"", None, [("é", b""), ("", None)], 7),
            ("orders", 3, 15, 5_000, b"k", None, [], 7),  # value with a varint wire type: skipped
        ]
        assert payload_bytes == 3


@needs_native
def test_records_look_the_same_on_both_paths():
    data = delimited(1, delimited(3, b"key") + delimited(4, b"value") + delimited(5, delimited(1, b"h")))
    built = {}
    for name, decoder in (("python", decode_record_list_python), ("native", native.decode_into)):
        out: list[ConsumerRecord] = []
        decoder(out, data, "orders", 3, 7, 42, 1, 0)
        (built[name],) = out
    assert type(built["native"]) is type(built["python"]) is ConsumerRecord
    assert repr(built["native"]) == repr(built["python"]) == "<ConsumerRecord orders-3@42 key=b'key'>"
    built["native"].headers.append(("more", None))  # each record has its own list
    assert built["python"].headers == [("h", None)]


def R(body: bytes) -> bytes:  # short: written many times below
    """A Record around `body`, as the RecordList holds it."""
    return delimited(1, body)


# Hand-written damage, each checked against what upb does (both paths must agree on every one).
DAMAGED = {
    "truncated record": b"\x0a\x05\x08",
    "truncated length": b"\x0a",
    "truncated varint": R(b"\x08\x80"),
    "11-byte varint": R(b"\x10" + b"\xff" * 10 + b"\x01"),
    "10th varint byte continues": R(b"\x08" + b"\x80" * 10 + b"\x00"),
    "field number 0": R(b"\x00\x01"),
    "wire type 6": R(b"\x0e"),
    "wire type 7": R(b"\x0f"),
    "6-byte tag": R(b"\x88\x80\x80\x80\x80\x00\x05"),
    "tag above 2^32": R(b"\x88\x80\x80\x80\x10\x05"),
    "length past the end": R(b"\x1a\x05ab"),
    "6-byte length": R(b"\x1a\x81\x80\x80\x80\x80\x00a"),
    "length above 2^32": R(b"\x1a\x81\x80\x80\x80\x10a"),
    "end group at the top": b"\x34",
    "end group in a record": R(b"\x34"),
    "end group in a header": R(b"\x2a\x01\x0c"),
    "mismatched end group": R(b"\x33\x08\x01\x3c"),
    "unterminated group": R(b"\x33\x08\x01"),
    "field 0 in a group": R(b"\x33\x00\x34"),
    "records field as a mismatched group": b"\x0b\x2c",
    "truncated 64-bit": R(b"\x31\x01\x02\x03"),
    "truncated 32-bit": R(b"\x35\x01\x02"),
    "bad UTF-8 key": R(b"\x2a\x03\x0a\x01\xff"),
    "surrogate in key": R(b"\x2a\x05\x0a\x03\xed\xa0\x80"),
    "overlong UTF-8 key": R(b"\x2a\x04\x0a\x02\xc0\x80"),
    "key above U+10FFFF": R(b"\x2a\x06\x0a\x04\xf4\x90\x80\x80"),
    "bad first occurrence of a key": R(b"\x2a\x06\x0a\x01\xff\x0a\x01a"),
    "groups nested 101 deep at the top": b"\x33" * 101 + b"\x34" * 101,
    "groups nested 100 deep in a record": R(b"\x33" * 100 + b"\x34" * 100),
    "groups nested 99 deep in a header": R(delimited(5, b"\x33" * 99 + b"\x34" * 99)),
    "damage after good records": R(b"\x08\x01") * 20 + R(b"\x0e"),
    "damage in a skipped record": R(b"\x2a\x03\x0a\x01\xff") + R(b"\x08\x05"),
}
ACCEPTED = {
    "groups nested 100 deep at the top": b"\x33" * 100 + b"\x34" * 100,
    "groups nested 99 deep in a record": R(b"\x33" * 99 + b"\x34" * 99),
    "groups nested 98 deep in a header": R(delimited(5, b"\x33" * 98 + b"\x34" * 98)),
    "10-byte varints drop bits past 64": R(b"\x10" + b"\xff" * 9 + b"\x7f" + b"\x08" + b"\x80" * 9 + b"\x02"),
    "5-byte tag": R(b"\x88\x80\x80\x80\x00\x05"),
    "5-byte length": R(b"\x1a\x81\x80\x80\x80\x00a"),
    "largest field number": R(varint(((1 << 29) - 1) << 3) + b"\x00"),
    "records field as a group": b"\x0b\x0c" + R(b""),
    "headers field as a group": R(b"\x2b\x0a\x01a\x2c"),
    "NUL in a key": R(b"\x2a\x03\x0a\x01\x00"),
    "empty": b"",
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_damaged_record_lists_raise_corrupt_message(case):
    decoders = [decode_record_list_python] + ([native.decode_into] if NATIVE else [])
    for decoder in decoders:
        result = decode(
            decoder, DAMAGED[case], min_offset=1001 if case == "damage in a skipped record" else 0
        )
        assert isinstance(result, KanalError) and result.code == ErrorCode.CORRUPT_MESSAGE, (decoder, result)


@needs_native
@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_odd_but_valid_record_lists_decode_the_same(case):
    assert not isinstance(expect_same(ACCEPTED[case]), KanalError)


@needs_native
def test_random_damage_gives_the_same_answer_on_both_paths():
    """Truncations, flipped bytes and random bytes: the same records or CORRUPT_MESSAGE from both, and the
    C path never reads outside its buffer (run under valgrind or ASan to see that, too)."""
    rng = random.Random(99)
    corrupt = 0
    for i in range(3000):
        data = bytearray(random_record_list(rng, with_unknown=rng.random() < 0.5))
        how = i % 4
        if how == 0:
            data = data[: rng.randrange(len(data))]
        elif how == 1:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif how == 2:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        else:
            data = bytearray(rng.randbytes(rng.randrange(64)))
        corrupt += isinstance(expect_same(bytes(data)), KanalError)
    assert 300 < corrupt < 2900  # both outcomes were exercised


@needs_native
@pytest.mark.parametrize("codec", sorted(records_pb2.CompressionCodec.values()))
def test_fetched_batches_decode_the_same_through_every_codec(codec):
    rng = random.Random(codec)
    entries, expected, base = [], [], 0
    for _ in range(5):
        records = [
            NewRecord(
                value=random_bytes(rng),
                key=random_bytes(rng),
                timestamp_ms=1_700_000_000_000 + rng.randrange(-5_000, 5_000),
                headers=[(random_text(rng), random_bytes(rng)) for _ in range(rng.choice([0, 0, 2]))],
            )
            for _ in range(rng.randrange(1, 60))
        ]
        entries.append(frame_entry(with_broker_suffix(build_batch(records, codec=codec), base, 4)))
        expected += [("orders", 3, base + i, r.timestamp_ms, r.key, r.value, list(r.headers), 4)
                     for i, r in enumerate(records)]
        base += len(records) + rng.randrange(3)  # gaps between batches, as compaction leaves
    data = b"".join(entries)
    min_offset = expected[len(expected) // 3][2]
    results = []
    for decoder in (decode_record_list_python, native.decode_into):
        records, next_offset, payload_bytes = decode_fetched(("orders", 3), data, min_offset, decoder)
        results.append((fields(records), next_offset, payload_bytes))
    assert results[0] == results[1]
    records, next_offset, payload_bytes = results[0]
    assert records == [e for e in expected if e[2] >= min_offset]
    assert next_offset == expected[-1][2] + 1
    assert payload_bytes == sum(len(e[4] or b"") + len(e[5] or b"") for e in records)


@needs_native
def test_no_references_leak():
    """Shared objects (topic, partition, epoch) get their references back once the records are gone,
    after successful and failed decodes."""
    topic, partition, epoch = "refcount-topic-" + str(os.getpid()), 12345678, 87654321
    rng = random.Random(3)
    cases = [random_record_list(rng) for _ in range(20)] + list(DAMAGED.values())
    before = [sys.getrefcount(x) for x in (topic, partition, epoch)]
    for data in cases * 3:
        out: list[ConsumerRecord] = []
        try:
            native.decode_into(out, data, topic, partition, epoch, 5, 6, rng.choice([0, 8]))
        except KanalError:
            pass
        del out
    assert [sys.getrefcount(x) for x in (topic, partition, epoch)] == before


@needs_native
def test_c_records_are_outside_the_cyclic_gc():
    """The C path takes its records and their headers lists out of the cyclic GC (they hold only plain
    values), which a consumer's buffered records made walk on every collection; refcounting still frees
    them (test_no_references_leak)."""
    rng = random.Random(11)
    out: list[ConsumerRecord] = []
    for _ in range(20):
        native.decode_into(out, random_record_list(rng), "t", 0, 1, 5, 6, 0)
    assert out and any(r.headers for r in out)
    assert not any(gc.is_tracked(r) or gc.is_tracked(r.headers) for r in out)
    assert gc.is_tracked(ConsumerRecord("t", 0, 0, 0, None, None, [], 0))  # the Python path's records are


@needs_native
def test_bind_record_class_takes_only_plain_slots():
    class WithProperty:
        __slots__ = ("headers", "key", "leader_epoch", "partition", "timestamp_ms", "topic", "value")

        @property
        def offset(self):
            return 0

    class WithNew(ConsumerRecord):
        __slots__ = ()

        def __new__(cls, *args):
            return super().__new__(cls)

    class DictBased(dict):
        __slots__ = (
            "headers",
            "key",
            "leader_epoch",
            "offset",
            "partition",
            "timestamp_ms",
            "topic",
            "value",
        )

    for bad, why in ((WithProperty, "offset is not"), (WithNew, "plain Python"), (DictBased, "plain Python")):
        with pytest.raises(TypeError, match=why):
            native.bind_record_class(bad)
    with pytest.raises(TypeError):
        native.bind_record_class(object())
    # Bound once, at import, to ConsumerRecord: binding it again is a no-op, another class is refused.
    native.bind_record_class(ConsumerRecord)

    class Other:
        __slots__ = (
            "headers",
            "key",
            "leader_epoch",
            "offset",
            "partition",
            "timestamp_ms",
            "topic",
            "value",
        )

    with pytest.raises(TypeError, match="already bound"):
        native.bind_record_class(Other)


class StandInMetadata:
    """ClusterMetadata without a cluster: the consumer is built, nothing is fetched."""

    def __init__(self, *args, **kwargs) -> None:
        return None

    def refresh(self, topics=None) -> None:
        return None

    def close(self) -> None:
        return None


@pytest.mark.parametrize("use_native_path", [True, False])
def test_the_consumer_says_which_path_it_runs(monkeypatch, use_native_path):
    monkeypatch.setattr(consumer_module, "ClusterMetadata", StandInMetadata)
    with Consumer(ConsumerConfig(bootstrap="stand-in:1", use_native_path=use_native_path)) as consumer:
        native_path = NATIVE and use_native_path
        assert consumer.native == native_path
        assert f"path={'native' if native_path else 'python'}" in repr(consumer)
        assert consumer._decode_record_list is (
            native.decode_into if native_path else decode_record_list_python
        )


def test_the_environment_turns_the_c_path_off():
    code = ("from kanal.clients.consumer import NATIVE, NATIVE_IMPORT_ERROR; "
            "assert not NATIVE and 'KANAL_CONSUMER_PURE_PYTHON' in NATIVE_IMPORT_ERROR")
    subprocess.run(
        [sys.executable, "-c", code], check=True, env={**os.environ, "KANAL_CONSUMER_PURE_PYTHON": "1"}
    )
