"""kanal's image as the production manifests run it, in containers (ContainerCluster): each test checks a
produce/consume history — every acknowledged record read back at its offset, no duplicates (idempotent
producer), order per key — through crashes, a hung-free controlled stop and a restart from a volume."""

from __future__ import annotations

import json
import threading
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.v1 import admin_pb2, controller_pb2_grpc

from ..cluster.conftest import check_history, create_topic, partition_info, wait_until
from ..cluster.history import produce_history, read_topic

pytestmark = pytest.mark.containers
KEYS = 20


def producer_for(cluster) -> Producer:
    return Producer(
        ProducerConfig(
            bootstrap=cluster.bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            batch_size_bytes=8 * 1024,
            retry_backoff_ms=50,
            request_timeout_ms=5000,
            delivery_timeout_ms=90_000,
        )
    )


def produce(producer: Producer, topic: str, start: int, count: int, acked: dict, errors: list) -> None:
    produce_history(producer, topic, count, start, acked, errors, keys=KEYS)


def check(cluster, topic: str, partitions: int, acked: dict, count: int) -> None:
    assert len(acked) == count, f"{count - len(acked)} records never acknowledged"
    read = read_topic(cluster, topic, partitions)
    check_history(acked, read)
    last: dict[int, int] = {}
    for _, _, value in read:  # one key, one partition: its records come back in produce order
        i = int(value[2:])
        assert i > last.get(i % KEYS, -1), f"key {i % KEYS}: {i} read after {last[i % KEYS]}"
        last[i % KEYS] = i


def broker(cluster, broker_id: int):
    return next(n for n in cluster.brokers if n.node_id == broker_id)


def active_controller(cluster):
    for node in cluster.controllers:
        if not node.running:
            continue
        with grpc.insecure_channel(node.endpoint) as channel:
            try:
                leader = controller_pb2_grpc.ControllerStub(channel).DescribeQuorum(
                    admin_pb2.DescribeQuorumRequest(), timeout=2).leader_id
            except grpc.RpcError:
                continue
        found = next((c for c in cluster.controllers if c.node_id == leader), None)
        if found is not None and found.running:
            return found
    return None


def test_produce_and_consume_through_the_containers(containers):
    create_topic(containers, "c-basic", partitions=3, replication_factor=3, min_insync_replicas="2")
    acked: dict = {}
    errors: list = []
    with producer_for(containers) as producer:
        produce(producer, "c-basic", 0, 3000, acked, errors)
        producer.flush(60)
    assert not errors, errors[:3]
    check(containers, "c-basic", 3, acked, 3000)


def test_every_node_serves_prometheus_metrics(containers):
    def scrape(node) -> str:
        with urllib.request.urlopen(f"http://{node.metrics}/metrics", timeout=5) as reply:
            return reply.read().decode()

    def active_count(node) -> float:
        for family in text_string_to_metric_families(scrape(node)):
            if family.name == "kanal_controller_active_controller_count":
                return family.samples[0].value
        raise AssertionError(f"{node.name} serves no kanal_controller_active_controller_count")

    # Exactly one active controller, as the quorum's scrapes say (Kafka's ActiveControllerCount, summed).
    wait_until(lambda: sum(active_count(c) for c in containers.controllers) == 1, 30, "one active controller")
    for node in containers.brokers:
        assert "kanal_broker_fenced 0.0" in scrape(node)


def test_each_broker_registered_with_the_rack_its_rack_file_names(containers):
    with grpc.insecure_channel(containers.controllers[0].endpoint) as channel:
        described = controller_pb2_grpc.ControllerStub(channel).DescribeCluster(
            admin_pb2.DescribeClusterRequest(), timeout=10
        )
    assert {b.broker_id: b.rack for b in described.brokers} == {n.node_id: n.rack for n in containers.brokers}
    assert all(n.rack for n in containers.brokers)


def test_sigkill_of_a_leader_broker_container_loses_nothing_acknowledged(containers):
    topic = "c-kill-broker"
    create_topic(containers, topic, partitions=2, replication_factor=3, min_insync_replicas="2")
    victim = broker(containers, partition_info(containers, topic, 0).leader)
    acked: dict = {}
    errors: list = []
    with producer_for(containers) as producer:
        for chunk in range(8):
            produce(producer, topic, chunk * 500, 500, acked, errors)
            if chunk == 3:
                victim.kill()  # this chunk's batches are in flight to it
            else:
                producer.flush(90)
        producer.flush(90)
    assert not errors, f"the producer gave up on records: {errors[:3]}"
    assert partition_info(containers, topic, 0).leader != victim.node_id
    containers.restart(victim)
    check(containers, topic, 2, acked, 4000)


def test_sigkill_of_the_active_controller_container_loses_nothing_acknowledged(containers):
    topic = "c-kill-controller"
    create_topic(containers, topic, partitions=2, replication_factor=3, min_insync_replicas="2")
    victim = wait_until(lambda: active_controller(containers), 30, "an active controller")
    acked: dict = {}
    errors: list = []
    with producer_for(containers) as producer:
        for chunk in range(6):
            produce(producer, topic, chunk * 500, 500, acked, errors)
            if chunk == 2:
                victim.kill()
            producer.flush(90)
        successor = wait_until(lambda: active_controller(containers), 60, "a new active controller")
        assert successor is not victim
        # The brokers keep their sessions with the new active controller: nothing is fenced, so a broker
        # kill now still fails over.
        produce(producer, topic, 3000, 500, acked, errors)
        producer.flush(90)
    assert not errors, f"the producer gave up on records: {errors[:3]}"
    containers.restart(victim)  # rejoins the quorum from its volume
    wait_until(lambda: active_controller(containers) is not None, 60, "a quorum with the restarted voter")
    check(containers, topic, 2, acked, 3500)


def test_docker_stop_of_the_active_controller_hands_leadership_over(containers):
    topic = "c-stop-controller"
    create_topic(containers, topic, partitions=2, replication_factor=3, min_insync_replicas="2")
    victim = wait_until(lambda: active_controller(containers), 30, "an active controller")
    acked: dict = {}
    errors: list = []
    with producer_for(containers) as producer:
        for chunk in range(6):
            produce(producer, topic, chunk * 500, 500, acked, errors)
            if chunk == 2:
                assert victim.stop(timeout_s=30) == 0, victim.logs()[-2000:]
            producer.flush(90)
    lines = [json.loads(line) for line in victim.logs().splitlines() if line.startswith("{")]
    handed = [line["message"] for line in lines if line["message"].startswith("handed Raft leadership over")]
    assert handed, "the active controller exited without handing Raft leadership over"
    successor = wait_until(lambda: active_controller(containers), 60, "a new active controller")
    assert successor is not victim and f"controller {successor.node_id} leads" in handed[-1]
    assert not errors, f"the producer gave up on records: {errors[:3]}"
    containers.restart(victim)
    wait_until(lambda: active_controller(containers) is not None, 60, "a quorum with the restarted voter")
    check(containers, topic, 2, acked, 3000)


def test_docker_stop_of_a_leader_broker_moves_leadership_before_it_exits(containers):
    topic = "c-stop-broker"
    create_topic(containers, topic, partitions=2, replication_factor=3, min_insync_replicas="2")
    victim = broker(containers, partition_info(containers, topic, 0).leader)
    acked: dict = {}
    errors: list = []
    exit_code: list[int] = []
    stopper = threading.Thread(target=lambda: exit_code.append(victim.stop(timeout_s=30)))
    with producer_for(containers) as producer:
        for chunk in range(8):
            produce(producer, topic, chunk * 500, 500, acked, errors)
            if chunk == 3:
                stopper.start()  # SIGTERM while this chunk is in flight
            producer.flush(90)
        stopper.join(60)
    assert exit_code == [0], f"docker stop ended with {exit_code}:\n{victim.logs()[-2000:]}"
    lines = [json.loads(line) for line in victim.logs().splitlines() if line.startswith("{")]
    assert any(line["message"].startswith("controlled shutdown done") for line in lines), \
        "the broker exited without the controller moving its leaderships away"
    # Retriable errors (NOT_LEADER_OR_FOLLOWER while leadership moves) are retried inside the producer;
    # none may reach the application.
    assert not errors, f"the producer gave up on records: {errors[:3]}"
    assert partition_info(containers, topic, 0).leader != victim.node_id
    containers.restart(victim)
    check(containers, topic, 2, acked, 4000)


def test_a_restarted_broker_container_serves_its_data_from_its_volume(containers):
    # Replication factor 1: the only copy of each partition is on one broker's volume.
    topic = "c-volume"
    create_topic(containers, topic, partitions=3, replication_factor=1)
    victim = broker(containers, partition_info(containers, topic, 0).leader)
    acked: dict = {}
    errors: list = []
    with producer_for(containers) as producer:
        produce(producer, topic, 0, 600, acked, errors)
        producer.flush(60)
    assert not errors, errors[:3]
    victim.kill()
    containers.restart(victim)
    assert partition_info(containers, topic, 0).leader == victim.node_id
    check(containers, topic, 3, acked, 600)


def test_a_paused_follower_container_leaves_the_isr_and_catches_up_when_unpaused(containers):
    topic = "c-pause"
    create_topic(containers, topic, partitions=1, replication_factor=3, min_insync_replicas="2")
    info = partition_info(containers, topic, 0)
    victim = broker(containers, next(r for r in info.replicas if r != info.leader))
    acked: dict = {}
    errors: list = []
    with producer_for(containers) as producer:
        produce(producer, topic, 0, 500, acked, errors)
        producer.flush(60)
        victim.pause()  # a hung node: its process is frozen, its connections stay open
        try:
            produce(producer, topic, 500, 1000, acked, errors)  # acks=all waits until the ISR drops it
            producer.flush(90)
            # The leader shrank the ISR before these acks=all records were acknowledged; the broker answering
            # the metadata request learns it from the metadata log, a moment later.
            wait_until(lambda: victim.node_id not in partition_info(containers, topic, 0).isr, 30,
                       "the paused follower out of the ISR in the metadata")
        finally:
            victim.unpause()
        wait_until(lambda: victim.node_id in partition_info(containers, topic, 0).isr, 60,
                   "the unpaused follower back in the ISR")
    assert not errors, errors[:3]
    check(containers, topic, 1, acked, 1500)
