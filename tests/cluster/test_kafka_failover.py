"""A Kafka consumer group keeps consuming through a SIGKILL of a partition leader, and no record the
Kafka producer had acknowledged is lost.

librdkafka on both sides (an idempotent acks=all producer, a consumer group with commits), against the
Kafka listeners of a three-broker cluster; the leader of partition 0 is SIGKILLed mid-run and comes back.
The history is checked: every acknowledged record is read, each value is stored once (idempotence), and
each partition's records keep their order."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer

from kanal.clients.cluster_metadata import ClusterMetadata
from tests.cluster.conftest import create_topic, kanal_records, start_cluster
from tests.harness.waiting import wait_until

RECORDS = 3000
TOPIC = "kafka-failover"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory, "kafka-failover", kafka_listeners=True)
    yield c
    c.stop()


def test_a_kafka_group_consumes_through_a_leader_sigkill_without_losing_acknowledged_records(cluster):
    create_topic(cluster, TOPIC, partitions=3, min_insync_replicas="2")
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list = []
    producer = KafkaProducer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "message.timeout.ms": 60_000,
        }
    )
    half_sent = threading.Event()

    def delivered(err, msg):
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            failed.append(err)

    def produce() -> None:
        for i in range(RECORDS):
            while True:
                try:
                    producer.produce(TOPIC, key=b"%d" % (i % 64), value=b"%06d" % i, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            if i % 50 == 0:
                producer.poll(0.005)  # serve delivery reports; paces the load to a trickle
            if i == RECORDS // 3:
                half_sent.set()
        producer.flush(90)

    read: list[tuple[int, int, bytes]] = []
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "kafka-failover-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([TOPIC])
    writer = threading.Thread(target=produce, name="kafka-producer")
    writer.start()
    try:

        def consume_until(done) -> bool:
            for message in consumer.consume(500, 0.2):
                if message.error() is None:
                    read.append((message.partition(), message.offset(), message.value()))
            return done()

        wait_until(lambda: consume_until(half_sent.is_set), 60, "a third of the records to be sent")
        metadata = ClusterMetadata(cluster.bootstrap)
        metadata.refresh([TOPIC])
        leader_id = next(p.leader for p in metadata.partitions(TOPIC) if p.partition == 0)
        victim = next(node for node in cluster.brokers if node.node_id == leader_id)
        victim.kill()  # SIGKILL
        wait_until(
            lambda: consume_until(lambda: len(read) > RECORDS // 2),
            90,
            "the group to keep consuming after the leader's SIGKILL",
        )
        cluster.start_node(victim, timeout_s=90)
        writer.join(120)
        assert not writer.is_alive()
        wait_until(
            lambda: consume_until(lambda: set(acked) <= {v for _, _, v in read}),
            90,
            "every acknowledged record to be read by the group",
        )
    finally:
        consumer.close()
        writer.join(10)
    assert failed == []
    assert len(acked) == RECORDS
    # No acknowledged record lost, none stored twice, order kept within each partition.
    stored = kanal_records(cluster, TOPIC, 3, RECORDS)
    values = [r.value for r in stored]
    assert len(values) == len(set(values)) == RECORDS
    assert {r.value: (r.partition, r.offset) for r in stored} == acked
    by_offset: dict[tuple[int, int], bytes] = {}
    for partition, offset, value in read:
        assert by_offset.setdefault((partition, offset), value) == value  # a redelivery is the same record
    for partition in range(3):
        in_order = [acked[v][1] for v in sorted(v for v in acked if acked[v][0] == partition)]
        assert in_order == sorted(in_order)  # values were produced in order: offsets follow them
