"""The Kafka listener's batch cache (kanal.broker.kafka.batch_cache), checked with a real Kafka client's
codec (kafka-python 3 builds what a producer sends and reads what a consumer fetches).

- A produced batch is served from the cache at its stored offset and leader epoch, with a valid CRC and
  the same records a transcode of the stored batch gives.
- A different batch stored at the same offset (a truncated log written again) is never answered with the
  cached copy; a missed batch is transcoded once and then served from the cache.
- The cache never holds more than its bound, evicts the oldest first, and with bound 0 holds nothing.
"""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kanal.broker.kafka.batch_cache import KafkaBatchCache
from kanal.broker.kafka.record_batch import entries_to_kafka, kafka_to_kanal, kanal_to_kafka
from kanal.v1.batch import frame_entry, read_broker_suffix, with_broker_suffix
from kanal.v1.records_pb2 import COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_ZSTD

BYTES_MAX = 1 << 20
T0 = 1_700_000_000_000
TOPIC, PARTITION = "orders", 3


def produced(values: list[bytes], codec: int = COMPRESSION_LZ4, producer: tuple[int, int, int] = (77, 2, 40)):
    """A Kafka producer's batch (base offset 0, leader epoch -1) and the kanal producer bytes it becomes."""
    builder = DefaultRecordBatchBuilder(2, codec, False, *producer, 1 << 20)
    for offset, value in enumerate(values):
        headers = [("trace", b"t-%d" % offset)]
        assert builder.append(offset, T0 + offset, b"k-%d" % offset, value, headers) is not None
    kafka = bytes(builder.build())
    return kafka, kafka_to_kanal(memoryview(kafka), records_bytes_max=BYTES_MAX)


def consumed(served: bytes) -> list[tuple]:
    """What a Kafka consumer reads from concatenated batches: per record its offset, timestamp, key, value,
    headers and its batch's producer fields and leader epoch; every batch's CRC checked."""
    out = []
    pos = 0
    while pos < len(served):
        size = DefaultRecordBatch(served[pos:]).size_in_bytes
        batch = DefaultRecordBatch(served[pos:pos + size])
        assert batch.validate_crc()
        producer = (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.leader_epoch)
        out += [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers), producer) for r in batch]
        pos += size
    return out


def test_a_produced_batch_is_served_from_the_cache_at_its_stored_offset_and_epoch():
    cache = KafkaBatchCache(1 << 20)
    kafka, kanal = produced([b"v-%d" % i * 20 for i in range(50)])
    cache.put_produced(TOPIC, PARTITION, 1000, [(kanal, kafka)])
    stored = with_broker_suffix(kanal, 1000, 9)

    served = cache.kafka_batch(TOPIC, PARTITION, memoryview(stored))

    assert (cache.hits, cache.misses) == (1, 0)
    assert served[21:] == kafka[21:]  # the producer's bytes from the CRC on: no transcode
    assert consumed(served) == consumed(kanal_to_kafka(stored))
    records = consumed(served)
    assert [r[0] for r in records] == list(range(1000, 1050))
    assert {r[5] for r in records} == {(77, 2, 40, 9)}


def test_a_produce_of_several_batches_caches_each_at_its_own_offset():
    cache = KafkaBatchCache(1 << 20)
    first, second = produced([b"a"] * 3, producer=(5, 0, 0)), produced([b"b"] * 4, producer=(5, 0, 3))
    cache.put_produced(TOPIC, PARTITION, 10, [(first[1], first[0]), (second[1], second[0])])
    entries = b"".join(frame_entry(with_broker_suffix(kanal, base, 1))
                       for base, kanal in ((10, first[1]), (13, second[1])))

    served = entries_to_kafka(entries, cache.transcoder(TOPIC, PARTITION))

    assert (cache.hits, cache.misses) == (2, 0)
    assert served == entries_to_kafka(entries, cache.transcoder(TOPIC, PARTITION))
    assert [r[0] for r in consumed(served)] == list(range(10, 17))
    assert consumed(served) == consumed(entries_to_kafka(entries))


def test_another_batch_stored_at_the_same_offset_is_never_served_the_cached_copy():
    """A follower that truncated and took a new leader's batch at the same offset, or a topic deleted and
    created again: the stored bytes differ, so the cache is not believed."""
    cache = KafkaBatchCache(1 << 20)
    old_kafka, old_kanal = produced([b"old"] * 5)
    cache.put_produced(TOPIC, PARTITION, 0, [(old_kanal, old_kafka)])
    _, new_kanal = produced([b"new"] * 5)  # same producer, sequence and size: only the values differ
    assert len(new_kanal) == len(old_kanal)
    stored = with_broker_suffix(new_kanal, 0, 4)

    served = cache.kafka_batch(TOPIC, PARTITION, memoryview(stored))

    assert (cache.hits, cache.misses) == (0, 1)
    assert {r[3] for r in consumed(served)} == {b"new"}
    assert served == kanal_to_kafka(stored)
    # The transcode replaced the entry: the next fetch of the new batch is a hit with the new records.
    assert cache.kafka_batch(TOPIC, PARTITION, memoryview(stored)) == served
    assert cache.hits == 1
    # Same offset in another partition or topic: a different key.
    cache.kafka_batch(TOPIC, PARTITION + 1, memoryview(stored))
    cache.kafka_batch("other", PARTITION, memoryview(stored))
    assert cache.misses == 3


def test_the_same_batch_under_a_new_leader_epoch_is_served_with_the_new_epoch():
    cache = KafkaBatchCache(1 << 20)
    kafka, kanal = produced([b"x"] * 2, codec=COMPRESSION_ZSTD)
    cache.put_produced(TOPIC, PARTITION, 7, [(kanal, kafka)])
    for epoch in (3, 4):
        served = cache.kafka_batch(TOPIC, PARTITION, memoryview(with_broker_suffix(kanal, 7, epoch)))
        assert {r[5][3] for r in consumed(served)} == {epoch}
    assert cache.hits == 2


def test_a_kanal_clients_batch_is_transcoded_once_then_served_from_the_cache():
    cache = KafkaBatchCache(1 << 20)
    _, kanal = produced([b"from-grpc"] * 8, codec=COMPRESSION_NONE)
    stored = with_broker_suffix(kanal, 500, 2)
    first = cache.kafka_batch(TOPIC, PARTITION, memoryview(stored))
    second = cache.kafka_batch(TOPIC, PARTITION, memoryview(stored))
    assert first == second == kanal_to_kafka(stored)
    assert (cache.hits, cache.misses) == (1, 1)


def test_the_cache_holds_no_more_than_its_bound_and_evicts_the_oldest_first():
    batches = [produced([b"%d" % i * 50] * 20) for i in range(6)]
    size = len(batches[0][0]) + len(batches[0][1])
    cache = KafkaBatchCache(size * 3 + size // 2)
    offset = 0
    for kafka, kanal in batches:
        cache.put_produced(TOPIC, PARTITION, offset, [(kanal, kafka)])
        assert cache.bytes <= cache.bytes_max
        offset += 20
    assert [(TOPIC, PARTITION, i * 20) in cache for i in range(6)] == [False] * 3 + [True] * 3
    for i in (5, 4, 3):
        cache.kafka_batch(TOPIC, PARTITION, memoryview(with_broker_suffix(batches[i][1], i * 20, 1)))
    assert (cache.hits, cache.misses) == (3, 0)
    # A miss is kept too, in place of the oldest entry.
    cache.kafka_batch(TOPIC, PARTITION, memoryview(with_broker_suffix(batches[0][1], 0, 1)))
    assert [(TOPIC, PARTITION, i * 20) in cache for i in range(6)] == [True, False, False, False, True, True]
    assert cache.bytes <= cache.bytes_max


@pytest.mark.parametrize("bytes_max", [0, 64])
def test_a_cache_too_small_for_a_batch_keeps_nothing_and_still_serves_it(bytes_max):
    cache = KafkaBatchCache(bytes_max)
    kafka, kanal = produced([b"y" * 100] * 10)
    cache.put_produced(TOPIC, PARTITION, 0, [(kanal, kafka)])
    stored = with_broker_suffix(kanal, 0, 1)
    assert cache.kafka_batch(TOPIC, PARTITION, memoryview(stored)) == kanal_to_kafka(stored)
    assert (len(cache), cache.bytes, cache.hits) == (0, 0, 0)
    assert read_broker_suffix(stored).base_offset == 0


def test_a_negative_bound_is_refused():
    with pytest.raises(ValueError, match="bytes_max"):
        KafkaBatchCache(-1)
