"""A restarting broker acts on the metadata log only once it has caught up (issue 18, finding 2).

A cluster of one controller and one broker whose metadata fetches ask for 1 byte, so every reply carries
one batch and the broker's catch-up after a restart takes as many replies as the log has batches: a
broker that published each reply would walk through every past image, among them the deletion of a topic
that was later created again under the same name. The broker also refuses every call while it is not
registered and caught up. Every process is stopped by PID at the end of the module.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.message_factory import GetMessageClass

from kanal.clients.admin import Admin
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1 import admin_pb2, broker_pb2, broker_pb2_grpc
from kanal.v1.batch import NewRecord, build_batch
from kanal.v1.error import ErrorCode

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, check_history, wait_until
from .history import end_offsets, read_topic

pytestmark = pytest.mark.cluster

TOPIC = "reborn"
EARLY = "early"


@pytest.fixture(scope="module")
def small_fetch_cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("catch-up"), controllers=1, brokers=1,
                           controller_flags=CONTROLLER_FLAGS,
                           broker_flags=BROKER_FLAGS + ["--metadata-fetch-bytes-max", "1"])
    cluster.start(timeout_s=90)
    yield cluster
    cluster.stop()


def produce_acked(cluster: LocalCluster, topic: str, values: list[bytes]) -> dict[tuple[int, int], bytes]:
    acked: dict[tuple[int, int], bytes] = {}
    errors: list = []
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", linger_ms=1,
                                       retry_backoff_ms=50, request_timeout_ms=10_000,
                                       delivery_timeout_ms=30_000))
    try:
        for value in values:
            def done(error, meta, value=value):
                if error is None:
                    acked[(meta.partition, meta.offset)] = value
                else:
                    errors.append((value, error))
            producer.produce(topic, value, on_delivery=done)
        producer.flush(30)
    finally:
        producer.close()
    assert not errors, errors[:3]
    assert len(acked) == len(values)
    return acked


def test_restart_does_not_replay_an_old_deletion_of_a_recreated_topic(small_fetch_cluster):
    cluster = small_fetch_cluster
    [broker] = cluster.brokers
    with Admin(cluster.bootstrap) as admin:
        old_id = admin.create_topic(TOPIC, 1, 1)
        produce_acked(cluster, TOPIC, [b"old-%d" % i for i in range(5)])
        admin.delete_topic(TOPIC)
        wait_until(lambda: TOPIC not in admin.list_topics(), 30, "the deletion to reach the broker")
        new_id = admin.create_topic(TOPIC, 1, 1)
    assert new_id != old_id
    acked = produce_acked(cluster, TOPIC, [b"new-%d" % i for i in range(10)])
    assert end_offsets(cluster, TOPIC, 1) == {0: 10}

    cluster.restart(broker, timeout_s=90)

    # The current topic's files survived the restart: its high-water mark and every acknowledged record
    # are read back from the only broker that has them. (A broker that published each fetched reply
    # created the partition from the old TopicRecord, deleted its directory at the old RemoveTopicRecord,
    # and came back with an empty log.)
    assert end_offsets(cluster, TOPIC, 1) == {0: 10}
    check_history(acked, read_topic(cluster, TOPIC, 1))
    assert not any("deleted replica" in line for line in _lines_since_last_start(cluster, broker)), \
        "the restarted broker deleted a replica while catching up"


def _lines_since_last_start(cluster: LocalCluster, node) -> list[str]:
    lines = node.log_path.read_text(errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if "registered broker" in line]
    return lines[starts[-1]:] if starts else lines


def _refusal(call) -> str:
    """The kanal error code a refused call carries, by name; fails the test when the call was answered."""
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value
    code = dict(err.value.trailing_metadata() or ()).get("kanal-error-code")
    return ErrorCode.Name(int(code)) if code else err.value.code().name


def test_calls_before_registration_and_catch_up_are_refused_and_store_nothing(small_fetch_cluster):
    """With the controller down, a restarted broker cannot register: every Broker call is refused with
    the retriable BROKER_NOT_AVAILABLE, and a Produce among them stores nothing. The admin client retries
    the refusal until the broker is ready."""
    cluster = small_fetch_cluster
    [controller] = cluster.controllers
    [broker] = cluster.brokers
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(EARLY, 1, 1)
    produce_acked(cluster, EARLY, [b"early-%d" % i for i in range(3)])
    admin = Admin(broker.endpoint, request_timeout_ms=60_000)
    admin.list_topics()  # the admin client now calls this broker first
    broker.stop()
    controller.stop()
    try:
        cluster.start_node(broker, wait=False)
        wait_until(lambda: _health_answers(broker.endpoint), 30, "the broker's gRPC server to answer health")
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            service = broker_pb2.DESCRIPTOR.services_by_name["Broker"]
            refused = {}
            for method in service.methods:
                request_type = GetMessageClass(method.input_type)
                call = getattr(stub, method.name)
                if method.client_streaming:  # ReplicaFetch: one request on the stream, the answers read
                    refused[method.name] = _refusal(
                        lambda c=call, r=request_type: list(c(iter([r()]), timeout=5))
                    )
                else:
                    refused[method.name] = _refusal(lambda c=call, r=request_type: c(r(), timeout=5))
            assert set(refused.values()) == {"BROKER_NOT_AVAILABLE"}, refused
            produce = broker_pb2.ProduceRequest(acks=1, timeout_ms=5000)
            produce.topics.add(topic=EARLY).partitions.add(
                partition=0,
                batches=[build_batch([NewRecord(b"too-early", timestamp_ms=int(time.time() * 1000))])],
            )
            assert _refusal(lambda: stub.Produce(produce, timeout=5)) == "BROKER_NOT_AVAILABLE"
            create = admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
                name="too-early", partitions=1, replication_factor=1)])
            assert _refusal(lambda: stub.CreateTopics(create, timeout=5)) == "BROKER_NOT_AVAILABLE"
        # An admin client whose broker restarted sends its call again once the broker is ready (the
        # refusal is counted before the controller comes back, so the call was refused at least once).
        refused_before = _refused_calls(broker)
        created: list = []
        worker = threading.Thread(target=lambda: created.append(admin.list_topics()))
        worker.start()
        wait_until(lambda: _refused_calls(broker) > refused_before, 30, "the admin call to be refused")
    finally:
        cluster.start_node(controller, timeout_s=90)
    worker.join(90)
    admin.close()
    assert created and EARLY in created[0], "the admin call was not retried until the broker was ready"
    cluster.wait_ready([broker], timeout_s=90)
    with Admin(cluster.bootstrap) as admin:
        assert "too-early" not in admin.list_topics()
    assert end_offsets(cluster, EARLY, 1) == {0: 3}, "the refused Produce stored its record"


def _refused_calls(node) -> float:
    with urllib.request.urlopen(f"http://{node.extra['metrics']}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("kanal_broker_requests_refused_starting_total"))


def _health_answers(endpoint: str) -> bool:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
        except grpc.RpcError:
            return False
    return True
