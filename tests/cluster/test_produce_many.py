"""produce_many() against a real cluster (RF=3, acks=all, idempotence on): every record acknowledged is
stored once at the offset its future reports, keyed records sit on their murmur3 partition, and each
partition holds the records in the order they were given."""

from __future__ import annotations

import mmh3
import pytest

from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.v1.error import ErrorCode, KanalError

from .conftest import check_history, create_topic, wait_until

pytestmark = pytest.mark.cluster

CALLS = 30
RECORDS_PER_CALL = 1000


def test_produce_many_stores_every_record_once_in_order(cluster):
    create_topic(cluster, "many", partitions=3, replication_factor=3)
    # Small batches: each call seals several, which go out while later calls append.
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", batch_size_bytes=16_384))
    given = []
    try:
        results = []
        for call in range(CALLS):
            values = [b"%d-%d" % (call, i) for i in range(RECORDS_PER_CALL)]
            # Keys for two records in three (murmur3 placement), null keys (sticky) for the third.
            keys = [None if i % 3 == 0 else b"k%d" % (i % 5) for i in range(RECORDS_PER_CALL)]
            results.append(producer.produce_many("many", values, keys))
            given += zip(values, keys)
        metas = [m for futures in results for m in futures.result(timeout=120)]
    finally:
        producer.close()
    assert len(metas) == CALLS * RECORDS_PER_CALL
    acked = {(m.partition, m.offset): value for m, (value, _) in zip(metas, given)}
    assert len(acked) == len(metas)  # one offset per record
    for m, (_, key) in zip(metas, given):
        if key is not None:
            assert m.partition == mmh3.hash(key, seed=0, signed=False) % 3
    for partition in range(3):  # records given earlier sit at lower offsets
        offsets = [m.offset for m in metas if m.partition == partition]
        assert offsets == sorted(offsets)

    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                       max_poll_records=10_000))
    read = []
    try:
        consumer.assign([("many", p) for p in range(3)])
        wait_until(lambda: read.extend(consumer.poll(0.5)) or len(read) >= len(metas), timeout_s=60,
                   what="every acknowledged record read back")
    finally:
        consumer.close()
    check_history(acked, [(r.partition, r.offset, r.value) for r in read])
    assert len(read) == len(metas)


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_a_refused_batch_among_several_in_one_call_fails_alone(cluster, idempotent):
    """A call carries several batches of a partition; the broker refuses the third (over the topic's
    max.message.bytes). The two before it are stored, the refused one fails with its own error, and the
    ones after it, not tried, are sent again and stored: every other record lands once, in order. With
    idempotence the refused batch leaves a hole in the partition's sequence numbers, which the producer
    closes (a new epoch for that partition) so the later batches are not refused as out of order."""
    topic = f"many-refused-{'idempotent' if idempotent else 'plain'}"
    create_topic(cluster, topic, partitions=1, replication_factor=3, max_message_bytes="2048")
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all" if idempotent else "1",
                                       enable_idempotence=idempotent, linger_ms=60_000, batch_size_bytes=1000,
                                       partition_batches_per_call_max=4))
    small = [b"%03d" % i + b"s" * 81 for i in range(80)]  # charged 100 bytes each: 10 to a batch
    values = small[:20] + [b"x" * 3000] + small[20:]  # the big record is a batch of its own, the third
    try:
        # One call: every batch is sealed before the sender can drain, so it sends them four at a time.
        futures = producer.produce_many(topic, values, partition=0)
        assert producer.flush(60)
        # ...and the partition goes on taking records afterwards.
        later = producer.produce(topic, small[0], partition=0)
        assert producer.flush(60)
        assert later.result(0).offset == 80
    finally:
        producer.close()
    with pytest.raises(KanalError) as err:
        futures[20].result(0)
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    metas = [f.result(0) for i, f in enumerate(futures) if i != 20]
    assert [m.offset for m in metas] == list(range(80))  # stored once each, in the order given

    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest"))
    read = []
    try:
        consumer.assign([(topic, 0)])
        wait_until(
            lambda: read.extend(consumer.poll(0.5)) or len(read) >= 81, timeout_s=60, what="81 records"
        )
    finally:
        consumer.close()
    assert [(r.offset, r.value) for r in read] == list(enumerate(small + small[:1]))
