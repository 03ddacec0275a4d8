"""One Producer shared by several threads, as Kafka's producer may be: every record is acknowledged and
stored once, at its own offset, and each thread's records of one key keep their order."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig

from .conftest import create_topic, wait_until

pytestmark = pytest.mark.cluster

THREADS = 4
RECORDS_PER_THREAD = 20_000


def test_threads_sharing_a_producer_lose_nothing_and_keep_key_order(cluster):
    create_topic(cluster, "shared-producer", partitions=4, replication_factor=3)
    # Small batches and a short linger: many batches are sealed and sent while the threads append.
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, linger_ms=1, batch_size_bytes=16_384))
    acked: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    errors: list[Exception] = []
    lock = threading.Lock()

    def on_delivery(error, meta, value):
        with lock:
            if error is not None:
                errors.append(error)
            else:
                acked[meta.partition].append((meta.offset, value))

    def produce(thread: int) -> None:
        for i in range(RECORDS_PER_THREAD):
            value = b"%d-%d" % (thread, i)
            # Keys for two records in three (murmur3 placement), null keys (sticky) for the third; some
            # headers, which take the Python path beside the C one.
            producer.produce("shared-producer", value, key=None if i % 3 == 0 else b"k%d" % (i % 7),
                             headers=[("n", b"%d" % i)] if i % 11 == 0 else None,
                             on_delivery=lambda error, meta, v=value: on_delivery(error, meta, v))

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert producer.flush(120)
    finally:
        producer.close()
    assert not errors
    assert sum(map(len, acked.values())) == THREADS * RECORDS_PER_THREAD
    for records in acked.values():
        assert len({offset for offset, _ in records}) == len(records)  # one offset per record

    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                       max_poll_records=10_000))
    read = []
    try:
        consumer.assign([("shared-producer", p) for p in range(4)])
        wait_until(lambda: read.extend(consumer.poll(0.5)) or len(read) >= THREADS * RECORDS_PER_THREAD,
                   timeout_s=60, what="every acknowledged record read back")
    finally:
        consumer.close()
    assert sorted(r.value for r in read) == sorted(v for records in acked.values() for _, v in records)
    last_index: dict[tuple[int, int, bytes], int] = {}
    for r in sorted(read, key=lambda r: (r.partition, r.offset)):
        thread, index = map(int, r.value.split(b"-"))
        if r.key is not None:  # a thread's records of one key: in the order it produced them
            assert last_index.get((r.partition, thread, r.key), -1) < index
            last_index[(r.partition, thread, r.key)] = index


def test_a_producer_finds_partitions_added_once_its_metadata_is_metadata_max_age_ms_old(cluster):
    """No error tells a producer that its topic grew; metadata_max_age_ms (Kafka's metadata.max.age.ms) makes
    it ask again, and the keys it writes then spread over the new partitions as well."""
    topic = "grown-under-a-producer"
    create_topic(cluster, topic, partitions=1)
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, metadata_max_age_ms=200))
    try:
        producer.produce(topic, b"before", key=b"k0").result(timeout=30)
        with Admin(cluster.bootstrap) as admin:
            admin.create_partitions(topic, 4)
        landed: set[int] = set()

        def spread() -> bool:
            futures = [producer.produce(topic, b"after", key=f"k{i}".encode()) for i in range(32)]
            landed.update(f.result(timeout=30).partition for f in futures)
            return len(landed) > 1

        wait_until(spread, timeout_s=30, what="records on a partition added after the producer started")
        assert landed <= {0, 1, 2, 3}
    finally:
        producer.close()
