"""Follower fetching on a live cluster (KIP-392): three brokers in racks a, b and c with the rack-aware
replica selector; consumers name their rack and read from the in-sync replica there. Every check is on
the history (what was acknowledged, what was read) and on the brokers' own metrics of who served what."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import pytest

from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from tests.harness import kafka_java

from .conftest import (
    BROKER_FLAGS,
    CONTROLLER_FLAGS,
    check_history,
    create_topic,
    librdkafka_read_from_zero,
    partition_info,
    resume_brokers,
    wait_until,
)
from .history import produce_history

pytestmark = pytest.mark.cluster

RACKS = ("a", "b", "c")


@pytest.fixture(scope="module")
def racked(tmp_path_factory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("racks"), controllers=3, brokers=3,
                     controller_flags=CONTROLLER_FLAGS,
                     broker_flags=[*BROKER_FLAGS, "--replica-selector", "rack-aware"], racks=RACKS,
                     kafka_listeners=True)
    c.start(timeout_s=90)
    yield c
    c.stop()


def served(cluster: LocalCluster) -> dict[int, dict[str, float]]:
    """Per broker: consumer bytes it returned, as a follower, and to consumers of its own rack."""
    out = {}
    for node in cluster.brokers:
        with urllib.request.urlopen(f"http://{node.extra['metrics']}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        values = {line.split(" ")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("kanal_broker_")}
        out[node.node_id] = {
            "all": values["kanal_broker_topic_bytes_out_total"],
            "follower": values["kanal_broker_topic_bytes_out_as_follower_total"],
            "same_rack": values["kanal_broker_topic_bytes_out_same_rack_total"],
        }
    return out


def delta(before: dict, after: dict, broker: int, kind: str) -> float:
    return after[broker][kind] - before[broker][kind]


def produce(cluster: LocalCluster, topic: str, count: int, start: int, acked: dict) -> None:
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", enable_idempotence=True,
                                       linger_ms=2, request_timeout_ms=5000, delivery_timeout_ms=60_000))
    errors: list = []
    try:
        produce_history(producer, topic, count, start, acked, errors)
        assert producer.flush(60), "records still unacknowledged after 60 s"
    finally:
        producer.close()
    assert not errors, errors[:3]


def consumer_in(cluster: LocalCluster, rack: str, topic: str, **config) -> Consumer:
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                       client_rack=rack, fetch_max_wait_ms=200, **config))
    consumer.assign([(topic, 0)])
    return consumer


def read_until(consumer: Consumer, read: list, end: int, timeout_s: float = 60) -> None:
    """Poll until the position reaches `end` (records land in `read` as (partition, offset, value))."""
    deadline = time.monotonic() + timeout_s
    while not read or read[-1][1] < end - 1:
        assert time.monotonic() < deadline, f"read up to {read[-1][1] if read else None} of {end}"
        read.extend((r.partition, r.offset, r.value) for r in consumer.poll(0.5))


def a_follower(cluster: LocalCluster, topic: str) -> int:
    info = partition_info(cluster, topic, 0)
    wait_until(lambda: len(partition_info(cluster, topic, 0).isr) == 3, 30, "a full ISR")
    return next(b for b in info.replicas if b != info.leader)


def test_a_consumer_reads_from_the_in_sync_replica_in_its_rack(racked) -> None:
    create_topic(racked, "ff-read", partitions=1, replication_factor=3)
    follower = a_follower(racked, "ff-read")
    acked: dict = {}
    produce(racked, "ff-read", 3000, 0, acked)
    before = served(racked)
    consumer = consumer_in(racked, RACKS[follower], "ff-read")
    read: list = []
    try:
        read_until(consumer, read, 3000)
    finally:
        consumer.close()
    after = served(racked)
    check_history(acked, read)
    assert len(read) == 3000, "a record past what was acknowledged was read"
    total = sum(delta(before, after, b, "all") for b in after)
    from_follower = delta(before, after, follower, "follower")
    assert from_follower >= 0.9 * total, (
        f"broker {follower} (rack {RACKS[follower]}) served {from_follower} of {total} bytes: {after}")
    assert delta(before, after, follower, "same_rack") == delta(before, after, follower, "all")


def test_a_stopped_read_replica_sends_the_consumer_back_to_the_leader_with_nothing_lost(racked) -> None:
    create_topic(racked, "ff-stop", partitions=1, replication_factor=3)
    follower = a_follower(racked, "ff-stop")
    node = next(n for n in racked.brokers if n.node_id == follower)
    acked: dict = {}
    produce(racked, "ff-stop", 1000, 0, acked)
    before = served(racked)
    consumer = consumer_in(racked, RACKS[follower], "ff-stop", request_timeout_ms=3000)
    read: list = []
    try:
        read_until(consumer, read, 1000)
        assert served(racked)[follower]["follower"] > before[follower]["follower"], "not via the follower"
        node.pause()
        try:
            produce(racked, "ff-stop", 1000, 1000, acked)
            read_until(consumer, read, max(offset for _, offset in acked) + 1, timeout_s=90)
        finally:
            resume_brokers(racked, [node])
    finally:
        consumer.close()
    check_history(acked, read)
    assert len(read) == len(acked) == 2000


def test_read_committed_through_a_follower_stops_at_the_last_stable_offset(racked) -> None:
    create_topic(racked, "ff-txn", partitions=1, replication_factor=3)
    follower = a_follower(racked, "ff-txn")
    producer = Producer(ProducerConfig(bootstrap=racked.bootstrap, transactional_id="ff-txn", linger_ms=2))
    consumer = consumer_in(racked, RACKS[follower], "ff-txn", isolation_level="read_committed")
    before = served(racked)
    read: list = []
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.produce("ff-txn", b"committed-%d" % i)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(10):
            producer.produce("ff-txn", b"open-%d" % i)
        assert producer.flush(30)
        read_until(consumer, read, 10)
        # The open transaction's records are on every replica: only the LSO keeps them from being read.
        assert served(racked)[follower]["follower"] > before[follower]["follower"], "not via the follower"
        deadline = time.monotonic() + 1.0  # the poll window checked for records that must not come
        while time.monotonic() < deadline:
            read.extend((r.partition, r.offset, r.value) for r in consumer.poll(0.1))
        assert [v for _, _, v in read] == [b"committed-%d" % i for i in range(10)]
        producer.commit_transaction()
        deadline = time.monotonic() + 60
        while len(read) < 20:
            assert time.monotonic() < deadline, f"read {len(read)} of 20 committed records"
            read.extend((r.partition, r.offset, r.value) for r in consumer.poll(0.5))
    finally:
        consumer.close()
        producer.close()
    assert [v for _, _, v in read] == [b"committed-%d" % i for i in range(10)] + [b"open-%d" % i
                                                                                  for i in range(10)]


def test_librdkafka_with_client_rack_reads_from_the_follower_in_its_rack(racked) -> None:
    """The Kafka listener answers Fetch v11+'s rack the same way: librdkafka follows the preferred read
    replica it is given (its own KIP-392 support), and reads every record there."""
    create_topic(racked, "ff-kafka", partitions=1, replication_factor=3)
    follower = a_follower(racked, "ff-kafka")
    acked: dict = {}
    produce(racked, "ff-kafka", 2000, 0, acked)
    before = served(racked)
    read = librdkafka_read_from_zero(racked.kafka_bootstrap, "ff-kafka", 2000,
                                     {"group.id": "ff-kafka", "client.rack": RACKS[follower],
                                      "fetch.wait.max.ms": 200})
    after = served(racked)
    check_history(acked, read)
    total = sum(delta(before, after, b, "all") for b in after)
    assert delta(before, after, follower, "follower") >= 0.9 * total, after


def test_the_java_client_with_client_rack_reads_from_the_follower_in_its_rack(racked) -> None:
    """Apache Kafka's own consumer (a group member) follows the leader's preferred read replica too."""
    create_topic(racked, "ff-java", partitions=1, replication_factor=3)
    follower = a_follower(racked, "ff-java")
    acked: dict = {}
    produce(racked, "ff-java", 1000, 0, acked)
    before = served(racked)
    lines = kafka_java.driver("consume", racked.kafka_bootstrap, "ff-java", "ff-java-group", "1000", "60000",
                              config={"client.rack": RACKS[follower], "fetch.max.wait.ms": "200"})
    after = served(racked)
    records = [line for line in lines if line["type"] == "record"]
    check_history(acked, [(r["partition"], r["offset"], r["value"].encode()) for r in records])
    total = sum(delta(before, after, b, "all") for b in after)
    assert delta(before, after, follower, "follower") >= 0.9 * total, after
