"""Fixtures for tests that run a real cluster: controllers and brokers as processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1 import admin_pb2, broker_pb2
from kanal.v1.error import ErrorCode, KanalError
from tests.harness.waiting import wait_until

# Short timeouts so failures are detected in about a second, not Kafka's production 9-30 s. The session
# timeout must exceed 6 election timeouts (raft/controller_config.py) and 4 broker heartbeat intervals.
CONTROLLER_FLAGS = ["--session-timeout-ms", "2000", "--election-timeout-ms", "300"]
BROKER_FLAGS = [
    "--heartbeat-interval-ms",
    "200",
    "--replica-lag-ms-max",
    "1500",
    "--replica-fetch-wait-ms-max",
    "200",
    "--group-session-timeout-ms-min",
    "200",
    "--group-initial-rebalance-delay-ms",
    "100",
    "--offsets-topic-partitions",
    "10",
]


def start_cluster(tmp_path_factory, name: str, brokers: int = 3,
                  extra_broker_flags: list[str] | None = None, kafka_listeners: bool = False) -> LocalCluster:
    cluster = LocalCluster(
        tmp_path_factory.mktemp(name),
        controllers=3,
        brokers=brokers,
        controller_flags=CONTROLLER_FLAGS,
        broker_flags=BROKER_FLAGS + (extra_broker_flags or []),
        kafka_listeners=kafka_listeners,
    )
    cluster.start(timeout_s=90)
    return cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    """One cluster per test module; tests that kill nodes restart them before they finish."""
    c = start_cluster(tmp_path_factory, "cluster")
    yield c
    c.stop()


def create_topic(cluster: LocalCluster, name: str, partitions: int = 1, replication_factor: int = 3,
                 **configs: str) -> list:
    """Create a topic through a broker and wait until every partition has a leader in the brokers' view."""
    md = ClusterMetadata(cluster.bootstrap)
    per_broker: dict[str, ClusterMetadata] = {}

    def md_for(node) -> ClusterMetadata:
        if node.endpoint not in per_broker:
            per_broker[node.endpoint] = ClusterMetadata(node.endpoint, request_timeout_ms=2000)
        return per_broker[node.endpoint]

    try:
        request = admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
            name=name, partitions=partitions, replication_factor=replication_factor,
            configs=[admin_pb2.ConfigEntry(key=k.replace("_", "."), value=v) for k, v in configs.items()])])
        result = md.any_stub().CreateTopics(request, timeout=30).results[0]
        assert result.error == ErrorCode.NONE, result.error_message

        def known_everywhere():
            # Every running broker must have applied the topic: a leader that has not yet would answer
            # NOT_LEADER_OR_FOLLOWER to the tests' hand-made requests, which do not retry.
            views = []
            for node in cluster.brokers:
                if not node.running:
                    continue
                try:
                    parts = md_for(node).refresh([name]).topics.get(name)
                except KanalError:
                    return None
                if not parts or any(p.leader < 0 for p in parts):
                    return None
                views.append(parts)
            return views[0] if views else None

        return wait_until(known_everywhere, 30, f"leaders for {name} on every broker")
    finally:
        md.close()
        for other in per_broker.values():
            other.close()


def resume_brokers(cluster: LocalCluster, nodes: list, timeout_s: float = 30) -> None:
    """Resume paused brokers (SIGCONT) and wait until the cluster is whole again: every running broker,
    asked itself, lists every running broker as live.

    Asking each broker matters: one that was paused answers from the image it had when it stopped, where
    it is still live and in its ISRs, until it has applied what happened meanwhile. A broker paused past
    its session is fenced, and a test that went on at once would find fewer live brokers than it started
    (a replication factor 3 refused, an ISR that never fills)."""
    for node in nodes:
        node.resume()
    md = ClusterMetadata(cluster.bootstrap, request_timeout_ms=2000)

    def whole() -> bool:
        running = {n.node_id for n in cluster.brokers if n.running}
        for node in cluster.brokers:
            if not node.running:
                continue
            try:
                reply = md.stub(node.endpoint).Metadata(broker_pb2.MetadataRequest(topics=[]), timeout=2)
            except grpc.RpcError:
                return False
            if not running <= {b.broker_id for b in reply.brokers}:
                return False
        return True

    try:
        wait_until(whole, timeout_s, "every running broker to list every running broker as live")
    finally:
        md.close()


def partition_info(cluster: LocalCluster, topic: str, partition: int, at: int | None = None):
    """A partition's leader, replicas and ISR as the bootstrap brokers see them, or as broker `at` does."""
    md = ClusterMetadata(cluster.bootstrap if at is None else broker_node(cluster, at).endpoint)
    try:
        return md.refresh([topic]).topics[topic][partition]
    finally:
        md.close()


def broker_node(cluster: LocalCluster, broker_id: int):
    return next(n for n in cluster.brokers if n.node_id == broker_id)


def check_history(acked: dict[tuple[int, int], bytes], read: list[tuple[int, int, bytes]]) -> None:
    """Jepsen-style checks on a produce/consume history for one topic.

    acked: (partition, offset) -> value for every acknowledged record.
    read: (partition, offset, value) in the order a consumer returned them, per partition from offset 0.
    Checks: no acknowledged record lost (and read at the offset it was acknowledged with), no offset read
    twice, no value read twice (idempotence), offsets strictly increasing within a partition.
    """
    seen_offsets: set[tuple[int, int]] = set()
    seen_values: set[bytes] = set()
    last: dict[int, int] = {}
    by_offset: dict[tuple[int, int], bytes] = {}
    for partition, offset, value in read:
        assert (partition, offset) not in seen_offsets, f"offset {partition}/{offset} read twice"
        assert value not in seen_values, f"value {value!r} stored twice (a duplicate)"
        assert offset > last.get(partition, -1), (
            f"partition {partition}: offset {offset} after {last[partition]}"
        )
        seen_offsets.add((partition, offset))
        seen_values.add(value)
        last[partition] = offset
        by_offset[(partition, offset)] = value
    lost = {k: v for k, v in acked.items() if by_offset.get(k) != v}
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {sorted(lost.items())[:5]}"


def librdkafka_read_from_zero(bootstrap: str, topic: str, count: int, config: dict[str, object],
                              timeout_s: float = 60) -> list[tuple[int, int, bytes]]:
    """`count` records of partition 0 of `topic` from offset 0 through librdkafka's consumer (assigned, no
    group offsets used), as (partition, offset, value) for check_history; any error fails the test."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False, **config})
    read: list[tuple[int, int, bytes]] = []
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])

        def enough() -> bool:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                read.append((message.partition(), message.offset(), message.value()))
            return len(read) >= count

        wait_until(enough, timeout_s, f"librdkafka to read {count} records of {topic} (read {len(read)})")
        return read
    finally:
        consumer.close()


@contextlib.contextmanager
def kanal_dev(env: dict[str, str], out: Path, *args: str) -> Iterator[subprocess.Popen]:
    """`kanal dev ARGS` with `env`, its output in `out`, until ready; stopped with Ctrl-C (killed after 60 s)
    when the block ends."""
    with open(out, "w+") as log:  # the child has its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "kanal.deploy.cli", "dev", *args], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: "ready. bootstrap:" in out.read_text() or proc.poll() is not None, 120,
                   "kanal dev to be ready")
        assert proc.poll() is None, out.read_text()
        yield proc
    finally:
        stop_dev(proc)


def stop_dev(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def kanal_records(cluster, topic: str, partitions: int, expected: int, isolation: str = "read_uncommitted",
                  timeout_s: float = 30) -> list:
    """Every record of `topic` read through kanal's gRPC consumer, until `expected` arrived."""
    consumer = Consumer(ConsumerConfig(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                       isolation_level=isolation))
    try:
        consumer.assign([(topic, p) for p in range(partitions)])
        records: list = []

        def enough():
            records.extend(consumer.poll(0.2))
            return len(records) >= expected

        wait_until(enough, timeout_s, f"{expected} records of {topic} through gRPC")
        records.extend(consumer.poll(0.3))  # anything more would be a bug the callers' counts catch
        return records
    finally:
        consumer.close()
