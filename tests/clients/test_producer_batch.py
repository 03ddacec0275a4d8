"""ProducerBatch encodes records as they arrive: the bytes must be exactly kanal.v1's RecordList encoding,
with the pure-Python RecordList and with the C one (when the extension is built)."""

from __future__ import annotations

import random

import pytest

from kanal.clients.producer_batch import NATIVE, ProducerBatch, RecordList, native
from kanal.v1 import records_pb2
from kanal.v1.batch import NewRecord, encode_record_list
from kanal.v1.error import KanalError


@pytest.fixture(
    params=["python", pytest.param("native", marks=pytest.mark.skipif(not NATIVE, reason="not built"))]
)
def new_batch(request):
    def make() -> ProducerBatch:
        return ProducerBatch(
            "t", 0, 0.0, 1.0, native.RecordList() if request.param == "native" else RecordList()
        )

    return make


def encoded(new_batch, records: list[NewRecord]) -> bytes:
    batch = new_batch()
    for i, r in enumerate(records):
        assert batch.append(r.value, r.key, r.timestamp_ms, r.headers) == i
    assert batch.record_count == len(records)
    assert batch.first_timestamp_ms == records[0].timestamp_ms
    assert batch.max_timestamp_ms == max(r.timestamp_ms for r in records)
    assert batch.timestamps == [r.timestamp_ms for r in records]
    return batch.record_list()


@pytest.mark.parametrize("records", [
    [NewRecord(b"v", None, 1000)],
    [NewRecord(b"", b"", 5), NewRecord(None, b"k", 5), NewRecord(None, None, 5)],  # empty vs absent
    [NewRecord(b"x" * 20_000, b"k" * 200, 7), NewRecord(b"y" * 16_383, None, 7)],  # long varints
    [NewRecord(b"a", None, 10_000), NewRecord(b"b", None, 9_000), NewRecord(b"c", None, 10_000 + (1 << 40))],
    [NewRecord(b"h", None, 3, [("", b"only-value"), ("only-key", None), ("both", b"")])],
    [NewRecord(b"v%d" % i, None, 1_700_000_000_000 + i // 7) for i in range(20_000)],  # deltas past 16383
])
def test_bytes_match_the_reference_encoder(new_batch, records):
    assert encoded(new_batch, records) == encode_record_list(records, records[0].timestamp_ms)


def test_random_records_match_the_reference_encoder_and_parse_back(new_batch):
    rng = random.Random(5)
    records = []
    for _ in range(500):
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 100, 200, 17_000]))
        key = None if rng.random() < 0.5 else rng.randbytes(rng.randrange(0, 40))
        headers = [(rng.choice(["", "h", "trace-id"]), rng.choice([None, b"", rng.randbytes(5)]))
                   for _ in range(rng.choice([0, 0, 1, 3]))]
        records.append(NewRecord(value, key, rng.randrange(-10**6, 10**13), headers))
    data = encoded(new_batch, records)
    assert data == encode_record_list(records, records[0].timestamp_ms)
    parsed = records_pb2.RecordList.FromString(data).records
    assert [(r.offset_delta, r.value if r.HasField("value") else None) for r in parsed] == \
        [(i, rec.value) for i, rec in enumerate(records)]


def test_an_encoded_batch_takes_no_more_records(new_batch):
    batch = new_batch()
    batch.append(b"v", None, 1, ())
    batch.record_list()
    with pytest.raises(KanalError):
        batch.append(b"w", None, 1, ())
    with pytest.raises(KanalError):
        batch.record_list()


def test_a_bad_header_changes_nothing(new_batch):
    batch = new_batch()
    batch.append(b"v", None, 1, ())
    with pytest.raises(TypeError):
        batch.append(b"w", None, 2, [("k", "a str, not bytes")])
    assert batch.record_count == 1 and batch.timestamps == [1] and batch.max_timestamp_ms == 1
    assert batch.record_list() == encode_record_list([NewRecord(b"v", None, 1)], 1)
