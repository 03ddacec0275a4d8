"""Kafka's own clients against a kanal cluster's Kafka listeners (`kanal broker --kafka-listen`):
librdkafka (confluent-kafka), kafka-python, kcat, and Apache Kafka's Java client and console tools.

One cluster of three brokers, each with a Kafka listener beside its gRPC one. What is checked is what a
user moving from Kafka relies on: metadata names every broker's Kafka endpoint and the real leaders; every
codec produces through one protocol and reads through the other byte for byte (key, value, headers,
timestamp); a group's committed offsets are one set whichever protocol committed them; a Kafka group
cannot be joined by a kanal consumer (INCONSISTENT_GROUP_PROTOCOL) and `kanal groups describe` reads a
Kafka consumer's assignment; transactions commit and abort for read_committed readers of both protocols."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer as PyKafkaConsumer
from kafka import KafkaProducer as PyKafkaProducer

from kanal.clients.admin import Admin
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.v1.error import ErrorCode, KanalError
from tests.cluster.conftest import create_topic, kanal_records, start_cluster
from tests.harness import kafka_java
from tests.harness.waiting import wait_until

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory, "kafka-clients", kafka_listeners=True)
    yield c
    c.stop()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def rdkafka_consume(
    cluster,
    topic: str,
    group: str,
    expected: int,
    *,
    isolation: str = "read_uncommitted",
    commit: bool = True,
    timeout_s: float = 40,
) -> list:
    """`expected` records of `topic` through librdkafka in consumer group `group`, committed at the end."""
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    records = []
    try:

        def enough():
            for message in consumer.consume(500, 0.5):
                assert message.error() is None or message.error().code() == KafkaError._PARTITION_EOF, (
                    message.error()
                )
                if message.error() is None:
                    records.append(message)
            return len(records) >= expected

        wait_until(enough, timeout_s, f"{expected} records of {topic} through librdkafka")
        if commit:
            consumer.commit(asynchronous=False)
        return records
    finally:
        consumer.close()


def test_metadata_names_every_broker_by_its_kafka_endpoint_and_the_real_leaders(cluster):
    topic = topic_name("md")
    create_topic(cluster, topic, partitions=3)
    kafka_endpoints = {node.node_id: node.extra["kafka"] for node in cluster.brokers}
    listed = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap}).list_topics(timeout=20)
    assert {b.id: f"{b.host}:{b.port}" for b in listed.brokers.values()} == kafka_endpoints
    kanal_view = ClusterMetadata(cluster.bootstrap)
    kanal_view.refresh([topic])
    leaders = {p.partition: p.leader for p in kanal_view.partitions(topic)}
    assert {p.id: p.leader for p in listed.topics[topic].partitions.values()} == leaders
    assert all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in listed.topics[topic].partitions.values())
    # kafka-python asks with another Metadata version; the same answer
    py = PyKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        assert py.partitions_for_topic(topic) == {0, 1, 2}
    finally:
        py.close()


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_produces_each_codec_and_grpc_reads_it_byte_for_byte(cluster, codec):
    topic = topic_name(f"rd-{codec}")
    create_topic(cluster, topic, partitions=2)
    producer = KafkaProducer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    acked: dict[tuple[int, int], tuple] = {}
    sent = []
    base_ms = int(time.time() * 1000) - 60_000
    for i in range(200):
        record = (
            b"k%d" % i if i % 7 else None,
            b"v%d-" % i * (i % 5 + 1) if i % 11 else b"",
            [("h", b"%d" % i), ("nul", None), ("é", b"\x00\xff")],
            base_ms + i,
        )
        sent.append(record)

        def delivered(err, msg, record=record):
            assert err is None, err
            acked[(msg.partition(), msg.offset())] = record

        producer.produce(
            topic,
            key=record[0],
            value=record[1],
            headers=record[2],
            timestamp=record[3],
            on_delivery=delivered,
        )
    assert producer.flush(30) == 0
    assert len(acked) == 200
    read = kanal_records(cluster, topic, 2, 200)
    assert len(read) == 200
    for r in read:
        key, value, headers, ts = acked[(r.partition, r.offset)]
        assert (r.key, r.value, r.timestamp_ms) == (key, value, ts)
        assert [tuple(h) for h in r.headers] == headers
    # and back through Kafka: offsets in order per partition, nothing twice
    back = rdkafka_consume(cluster, topic, topic_name("g"), 200)
    assert sorted((m.partition(), m.offset()) for m in back) == sorted(acked)
    for m in back:
        key, value, headers, ts = acked[(m.partition(), m.offset())]
        assert (m.key(), m.value(), m.timestamp()[1], m.headers()) == (key, value, ts, headers)


@pytest.mark.parametrize("codec", CODECS)
def test_grpc_produces_each_codec_and_kafka_clients_read_it_byte_for_byte(cluster, codec):
    topic = topic_name(f"grpc-{codec}")
    create_topic(cluster, topic, partitions=1)
    base_ms = int(time.time() * 1000)
    sent = [
        (b"k%d" % i, b"value-%d" % i * 3, [("n", b"%d" % i), ("empty", b"")], base_ms + i) for i in range(150)
    ]
    with Producer(ProducerConfig(cluster.bootstrap, acks="all", compression=codec, linger_ms=2)) as producer:
        futures = [
            producer.produce(topic, v, key=k, headers=h, timestamp=ts, partition=0) for k, v, h, ts in sent
        ]
        producer.flush(30)
        offsets = [f.result(10).offset for f in futures]
    assert offsets == list(range(150))
    by_rdkafka = rdkafka_consume(cluster, topic, topic_name("g"), 150)
    assert [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in by_rdkafka] == [
        (i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(sent)
    ]
    py = PyKafkaConsumer(
        topic,
        bootstrap_servers=cluster.kafka_bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    try:
        by_python = [m for _, m in zip(range(150), py)]
    finally:
        py.close()
    assert [(m.offset, m.key, m.value, list(m.headers), m.timestamp) for m in by_python] == [
        (i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(sent)
    ]


@pytest.mark.parametrize("codec", ("gzip", "snappy", "lz4", "zstd", None))
def test_kafka_python_produces_each_codec_idempotently(cluster, codec):
    topic = topic_name(f"py-{codec}")
    create_topic(cluster, topic, partitions=3)
    producer = PyKafkaProducer(
        bootstrap_servers=cluster.kafka_bootstrap,
        acks="all",
        compression_type=codec,
        enable_idempotence=True,
        linger_ms=5,
    )
    try:
        futures = [
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("i", b"%d" % i)])
            for i in range(120)
        ]
        producer.flush(30)
        acked = {(f.get(10).partition, f.get(10).offset): i for i, f in enumerate(futures)}
    finally:
        producer.close()
    assert len(acked) == 120
    read = kanal_records(cluster, topic, 3, 120)
    assert sorted((r.partition, r.offset) for r in read) == sorted(acked)
    for r in read:
        i = acked[(r.partition, r.offset)]
        assert (r.key, r.value, [tuple(h) for h in r.headers]) == (b"k%d" % i, b"v%d" % i, [("i", b"%d" % i)])


def test_offsets_committed_through_either_protocol_are_one_set(cluster):
    topic, group = topic_name("offsets"), topic_name("group")
    create_topic(cluster, topic, partitions=2)
    with Producer(ProducerConfig(cluster.bootstrap, acks="all")) as producer:
        for i in range(40):
            producer.produce(topic, b"v%d" % i, partition=i % 2)
        producer.flush(30)
    rdkafka_consume(cluster, topic, group, 40)  # commits 20 and 20
    with Admin(cluster.bootstrap) as admin:
        assert admin.group_offsets(group) == {(topic, 0): 20, (topic, 1): 20}
    # kafka-python sees them too, and its commit is what the next librdkafka member starts from
    py = PyKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, group_id=group, enable_auto_commit=False)
    try:
        from kafka import TopicPartition as PyTopicPartition
        from kafka.structs import OffsetAndMetadata

        assert py.committed(PyTopicPartition(topic, 0)) == 20
        py.commit({PyTopicPartition(topic, 0): OffsetAndMetadata(15, "", -1)})
    finally:
        py.close()
    with Admin(cluster.bootstrap) as admin:
        assert admin.group_offsets(group)[(topic, 0)] == 15
    check = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group})
    try:
        committed = check.committed(
            [KafkaTopicPartition(topic, 0), KafkaTopicPartition(topic, 1)], timeout=20
        )
        assert [tp.offset for tp in committed] == [15, 20]
    finally:
        check.close()


def test_a_kanal_consumer_cannot_join_a_kafka_group_and_describe_reads_kafka_assignments(cluster):
    topic, group = topic_name("mixed"), topic_name("group")
    create_topic(cluster, topic, partitions=3)
    member = KafkaConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "session.timeout.ms": 6000,
            "auto.offset.reset": "earliest",
        }
    )
    member.subscribe([topic])
    try:
        wait_until(
            lambda: member.poll(0.2) is None and len(member.assignment()) == 3,
            30,
            "the Kafka member to be assigned all three partitions",
        )
        with Admin(cluster.bootstrap) as admin:
            info = admin.describe_group(group)
        assert info.state == "Stable"
        (described,) = info.members
        assert sorted((t.topic, p) for t in described.assignment.partitions for p in t.partitions) == [
            (topic, 0),
            (topic, 1),
            (topic, 2),
        ]
        kanal_member = Consumer(ConsumerConfig(cluster.bootstrap, group_id=group, session_timeout_ms=6000))
        try:
            kanal_member.subscribe([topic])
            with pytest.raises(KanalError) as refused:
                wait_until(lambda: kanal_member.poll(0.2) and False, 20, "a refusal")
            assert refused.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        finally:
            kanal_member.close()
    finally:
        member.close()


def test_transactions_commit_and_abort_for_read_committed_readers_of_both_protocols(cluster):
    topic = topic_name("txn")
    create_topic(cluster, topic, partitions=2)
    producer = KafkaProducer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "transactional.id": topic_name("tid"), "linger.ms": 5}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=b"c%d" % i, value=b"committed-%d" % i)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=b"a%d" % i, value=b"aborted-%d" % i)
    producer.flush(30)
    producer.abort_transaction(30)
    committed = sorted(b"committed-%d" % i for i in range(10))
    by_kafka = rdkafka_consume(cluster, topic, topic_name("g"), 10, isolation="read_committed")
    assert sorted(m.value() for m in by_kafka) == committed
    by_kanal = kanal_records(cluster, topic, 2, 10, isolation="read_committed")
    assert sorted(r.value for r in by_kanal) == committed
    everything = kanal_records(cluster, topic, 2, 20)
    assert len(everything) == 20  # read_uncommitted sees both transactions' records, never the markers


def test_apache_kafka_java_client_produces_consumes_administers_and_transacts(cluster):
    topic = topic_name("java")
    create_topic(cluster, topic, partitions=3)
    bootstrap = cluster.kafka_bootstrap
    for codec in CODECS:
        produced = kafka_java.driver("produce", bootstrap, topic, "20", codec, "idempotent")
        assert produced[-2]["count"] == 20
    consumed = kafka_java.driver("consume", bootstrap, topic, topic_name("jg"), "100", "30000")
    records = [line for line in consumed if line["type"] == "record"]
    assert len(records) == 100
    assert len({(r["partition"], r["offset"]) for r in records}) == 100
    assert all(r["headers"] == {"h": r["key"][1:]} and r["value"] == "v" + r["key"][1:] for r in records)
    # the same records through gRPC
    assert len(kanal_records(cluster, topic, 3, 100)) == 100
    lines = kafka_java.driver("admin", bootstrap)
    admin = {line["type"]: line for line in lines}
    assert admin["describe_cluster"]["nodes"] and len(admin["describe_cluster"]["nodes"]) == 3
    assert admin["list_topics"]["contains_created"] and admin["delete_topics"]["gone_from_list"]
    (topic_configs,) = [
        line for line in lines if line["type"] == "describe_configs" and line["resource"] == "topic"
    ]
    assert topic_configs["dynamic"] == {"retention.ms": "3600000", "cleanup.policy": "delete"}
    txn_topic = topic_name("javatxn")
    create_topic(cluster, txn_topic, partitions=1)
    kafka_java.driver("txn", bootstrap, txn_topic, topic_name("tid"))
    committed = kafka_java.driver(
        "consume", bootstrap, txn_topic, topic_name("jg"), "3", "20000", "read_committed"
    )
    assert [r["value"] for r in committed if r["type"] == "record"] == ["cv0", "cv1", "cv2"]


def test_apache_kafka_console_tools(cluster):
    bootstrap = cluster.kafka_bootstrap
    topic, group = topic_name("console"), topic_name("cg")
    kafka_java.tool(
        kafka_java.TOPICS,
        "--bootstrap-server",
        bootstrap,
        "--create",
        "--topic",
        topic,
        "--partitions",
        "2",
        "--replication-factor",
        "3",
    )
    assert topic in kafka_java.tool(kafka_java.TOPICS, "--bootstrap-server", bootstrap, "--list").split()
    described = kafka_java.tool(
        kafka_java.TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", topic
    )
    assert "PartitionCount: 2" in described and "ReplicationFactor: 3" in described
    lines = "".join(f"key{i}:value{i}\n" for i in range(10))
    kafka_java.tool(
        kafka_java.CONSOLE_PRODUCER,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--reader-property",
        "parse.key=true",
        "--reader-property",
        "key.separator=:",
        stdin=lines,
    )
    out = kafka_java.tool(
        kafka_java.CONSOLE_CONSUMER,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "10",
        "--group",
        group,
        "--formatter-property",
        "print.key=true",
        "--timeout-ms",
        "30000",
    )
    assert sorted(out.split("\n")[:10]) == sorted(f"key{i}\tvalue{i}" for i in range(10))
    groups = kafka_java.tool(
        kafka_java.CONSUMER_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group
    )
    rows = [line.split() for line in groups.splitlines() if line.startswith(group)]
    assert sorted((r[1], r[2], r[3], r[4]) for r in rows) == sorted(
        (topic, str(p), str(n), str(n)) for p, n in _partition_counts(cluster, topic).items()
    )
    assert group in kafka_java.tool(kafka_java.CONSUMER_GROUPS, "--bootstrap-server", bootstrap, "--list")


def _partition_counts(cluster, topic: str) -> dict[int, int]:
    records = kanal_records(cluster, topic, 2, 10)
    counts = {0: 0, 1: 0}
    for r in records:
        counts[r.partition] += 1
    return counts


def test_kcat_lists_produces_and_consumes(cluster):
    assert shutil.which("kcat"), "kcat is missing: `deploy/bootstrap.sh test` installs Debian's package"
    topic = topic_name("kcat")
    create_topic(cluster, topic, partitions=1)
    listing = subprocess.run(
        ["kcat", "-b", cluster.kafka_bootstrap, "-L", "-t", topic],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "3 brokers:" in listing and f'topic "{topic}" with 1 partitions' in listing
    for codec in CODECS:
        subprocess.run(
            [
                "kcat",
                "-b",
                cluster.kafka_bootstrap,
                "-P",
                "-t",
                topic,
                "-z",
                codec,
                "-K",
                ":",
                "-X",
                "enable.idempotence=true",
            ],
            input="".join(f"{codec}{i}:v{i}\n" for i in range(5)),
            text=True,
            timeout=60,
            check=True,
        )
    out = subprocess.run(
        ["kcat", "-b", cluster.kafka_bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%k=%s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.split() == [f"{codec}{i}=v{i}" for codec in CODECS for i in range(5)]
    assert len(kanal_records(cluster, topic, 1, 25)) == 25


def test_kafka_python_and_kcat_consume_in_groups_with_commits(cluster):
    topic = topic_name("groups")
    create_topic(cluster, topic, partitions=2)
    with Producer(ProducerConfig(cluster.bootstrap, acks="all")) as producer:
        for i in range(30):
            producer.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=i % 2)
        producer.flush(30)
    py_group, kcat_group = topic_name("py"), topic_name("kcat")
    py = PyKafkaConsumer(topic, bootstrap_servers=cluster.kafka_bootstrap, group_id=py_group,
                         auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15_000)
    try:
        read = [m for _, m in zip(range(30), py)]
        py.commit()
    finally:
        py.close()
    assert sorted(m.value for m in read) == sorted(b"v%d" % i for i in range(30))
    assert shutil.which("kcat"), "kcat is missing: `deploy/bootstrap.sh test` installs Debian's package"
    # kcat's balanced consumer (-G) in its own group, auto-committing; -e stops it at the end
    out = subprocess.run(["kcat", "-b", cluster.kafka_bootstrap, "-G", kcat_group, "-o", "beginning", "-e",
                          "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", "-f", "%s\\n",
                          topic], capture_output=True, text=True, timeout=90, check=True).stdout
    assert sorted(out.split()) == sorted(f"v{i}" for i in range(30))
    with Admin(cluster.bootstrap) as admin:
        assert admin.group_offsets(py_group) == {(topic, 0): 15, (topic, 1): 15}
        wait_until(lambda: admin.group_offsets(kcat_group) == {(topic, 0): 15, (topic, 1): 15}, 20,
                   "kcat's group to have committed its positions")


def test_quotas_throttle_kafka_clients_with_throttle_time_in_their_responses(cluster):
    topic, client_id = topic_name("quota"), topic_name("throttled")
    create_topic(cluster, topic, partitions=1)
    with Admin(cluster.bootstrap) as admin:
        admin.alter_client_quota("client-id", client_id, {"producer_byte_rate": 20_000.0})
    throttled: list[int] = []
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap, "client.id": client_id,
                              "acks": "all", "linger.ms": 5,
                              "throttle_cb": lambda event: throttled.append(event.throttle_time)})
    try:
        def throttled_yet() -> bool:
            for _ in range(50):
                producer.produce(topic, b"x" * 1000)
            producer.poll(0.1)
            return any(ms > 0 for ms in throttled)

        wait_until(throttled_yet, 60, "the producer's responses to carry a throttle time")
    finally:
        producer.flush(60)
        with Admin(cluster.bootstrap) as admin:
            admin.alter_client_quota("client-id", client_id, {"producer_byte_rate": None})
