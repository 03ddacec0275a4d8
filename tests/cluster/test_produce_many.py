"""produce_many() against a real cluster (RF=3, acks=all, idempotence on): every record acknowledged is
stored once at the offset its future reports, keyed records sit on their murmur3 partition, and each
partition holds the records in the order they were given."""

from __future__ import annotations

import mmh3
import pytest

from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig

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
