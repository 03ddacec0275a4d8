"""Operating a live cluster: reassignment while producing (with histories), a controller SIGKILL mid-way,
bad plans, the replication throttle, preferred leaders coming back after a broker restart, decommission
refusals."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

from kanal.clients import cli
from kanal.clients.admin import BROKER, Admin
from kanal.clients.producer import Producer, ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1 import admin_pb2, controller_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, check_history, create_topic, partition_info, wait_until
from .history import produce_history, read_topic

pytestmark = pytest.mark.cluster

BROKERS = 6


@pytest.fixture(scope="module")
def six(tmp_path_factory) -> Iterator[LocalCluster]:
    """3 controllers (automatic leader rebalance every second), 6 brokers."""
    c = LocalCluster(tmp_path_factory.mktemp("ops"), controllers=3, brokers=BROKERS,
                     controller_flags=CONTROLLER_FLAGS + ["--leader-imbalance-check-interval-ms", "1000"],
                     broker_flags=BROKER_FLAGS)
    c.start(timeout_s=120)
    yield c
    c.stop()


def kanal(cluster: LocalCluster, *argv: str) -> int:
    return cli.main([*argv, "--bootstrap", cluster.bootstrap])


def write_plan(tmp_path, name: str, entries: list[dict]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"version": 1, "partitions": entries}))
    return str(path)


def producer_for(cluster: LocalCluster) -> Producer:
    return Producer(
        ProducerConfig(
            bootstrap=cluster.bootstrap,
            acks="all",
            linger_ms=2,
            batch_size_bytes=8 * 1024,
            retry_backoff_ms=50,
            request_timeout_ms=5000,
            delivery_timeout_ms=90_000,
        )
    )


def replica_dir(cluster: LocalCluster, broker: int, topic: str, partition: int = 0):
    return cluster.data_dir / f"broker-{broker}" / f"{topic}-{partition}"


def reassign_while_producing(cluster: LocalCluster, tmp_path, topic: str, target: list[int],
                             during=None) -> None:
    """Produce with acks=all before, during and after moving partition 0 to `target`; check the history,
    the new replica set in sync, and the old replicas' directories gone."""
    old = list(partition_info(cluster, topic, 0).replicas)
    plan = write_plan(tmp_path, topic, [{"topic": topic, "partition": 0, "replicas": target}])
    acked: dict = {}
    errors: list = []
    producer = producer_for(cluster)
    try:
        for chunk in range(8):
            produce_history(producer, topic, 400, chunk * 400, acked, errors)
            if chunk == 2:
                assert kanal(cluster, "reassign", "execute", "--plan", plan) == 0
                if during is not None:
                    during()
            producer.flush(90)
        wait_until(lambda: kanal(cluster, "reassign", "verify", "--plan", plan) == 0, 90, "the reassignment")
        produce_history(producer, topic, 400, 8 * 400, acked, errors)
        producer.flush(90)
    finally:
        producer.close()
    assert not errors, f"the producer gave up on records: {errors[:3]}"
    assert len(acked) == 9 * 400
    info = wait_until(
        lambda: (p := partition_info(cluster, topic, 0)) and sorted(p.isr) == sorted(target) and p,
        60,
        "the new replicas all in sync",
    )
    assert list(info.replicas) == target and info.leader in target
    for broker in set(old) - set(target):
        wait_until(
            lambda b=broker: not replica_dir(cluster, b, topic).exists(), 60, f"broker {broker} deleting"
        )
    check_history(acked, read_topic(cluster, topic, 1))


def test_rf3_moves_to_three_other_brokers_while_producing(six, tmp_path):
    topic = "move-rf3"
    create_topic(six, topic, partitions=1, replication_factor=3, min_insync_replicas="2")
    old = partition_info(six, topic, 0).replicas
    reassign_while_producing(six, tmp_path, topic, [b for b in range(BROKERS) if b not in old])


def test_rf1_grows_to_rf3_while_producing(six, tmp_path):
    topic = "grow-rf1"
    create_topic(six, topic, partitions=1, replication_factor=1)
    (only,) = partition_info(six, topic, 0).replicas
    others = [b for b in range(BROKERS) if b != only]
    reassign_while_producing(six, tmp_path, topic, [others[0], only, others[1]])


def active_controller(cluster: LocalCluster):
    for node in cluster.controllers:
        if not node.running:
            continue
        try:
            with grpc.insecure_channel(node.endpoint) as channel:
                q = controller_pb2_grpc.ControllerStub(channel).DescribeQuorum(
                    admin_pb2.DescribeQuorumRequest(), timeout=2)
        except grpc.RpcError:
            continue
        if q.leader_id >= 0:
            return next(n for n in cluster.controllers if n.node_id == q.leader_id)
    return None


def test_controller_sigkill_mid_reassignment_does_not_leave_it_stuck(six, tmp_path):
    topic = "move-failover"
    create_topic(six, topic, partitions=1, replication_factor=2, min_insync_replicas="1")
    old = partition_info(six, topic, 0).replicas
    target = [b for b in range(BROKERS) if b not in old][:2]
    killed = []

    def kill_active():
        victim = wait_until(lambda: active_controller(six), 30, "an active controller")
        victim.kill()
        killed.append(victim)

    try:
        reassign_while_producing(six, tmp_path, topic, target, during=kill_active)
    finally:
        for node in killed:
            six.start_node(node)


def test_bad_plans_are_refused_and_change_nothing(six, tmp_path, capsys):
    topic = "bad-plans"
    create_topic(six, topic, partitions=1, replication_factor=2)
    before = partition_info(six, topic, 0)
    cases = [
        ([{"topic": topic, "partition": 0, "replicas": [0, 99]}], "unknown broker(s) [99]"),
        ([{"topic": topic, "partition": 0, "replicas": [1, 2, 1]}], "duplicate replica(s) [1]"),
        ([{"topic": topic, "partition": 5, "replicas": [1, 2]}], f"{topic}-5: no such partition"),
        ([{"topic": "no-such-topic", "partition": 0, "replicas": [1]}], "no-such-topic"),
    ]
    for entries, message in cases:
        capsys.readouterr()
        assert kanal(six, "reassign", "execute", "--plan", write_plan(tmp_path, "bad", entries)) == 1
        assert message in capsys.readouterr().err
    with Admin(six.bootstrap) as admin:
        assert admin.list_partition_reassignments() == []
        # The controller refuses the same on its own (a plan checked against an older cluster).
        (result,) = admin.alter_partition_reassignments({(topic, 0): (0, 99)})
        assert (
            result.error == ErrorCode.INVALID_REPLICA_ASSIGNMENT
            and "unknown broker(s) [99]" in result.error_message
        )
    after = partition_info(six, topic, 0)
    assert (after.replicas, after.leader_epoch) == (before.replicas, before.leader_epoch)


def test_leadership_returns_to_preferred_replicas_after_a_broker_restart(six):
    topic = "preferred"
    create_topic(six, topic, partitions=BROKERS, replication_factor=3)
    victim_id = partition_info(six, topic, 0).replicas[0]
    victim = next(n for n in six.brokers if n.node_id == victim_id)

    def leaders():
        return {p: partition_info(six, topic, p) for p in range(BROKERS)}

    led = [p for p, info in leaders().items() if info.replicas[0] == victim_id]
    six.restart(victim)
    # It came back fenced and caught up; the automatic rebalance (every second here) moves its preferred
    # partitions back to it once it is in their ISR again.
    wait_until(lambda: all(info.leader == info.replicas[0] for info in leaders().values()), 90,
               "every partition led by its preferred replica")
    assert led and all(partition_info(six, topic, p).leader == victim_id for p in led)
    assert kanal(six, "leaders", "elect", "--preferred", "--topic", topic) == 0


def test_unregistering_a_broker_with_replicas_is_refused_naming_them(six):
    topic = "decommission"
    create_topic(six, topic, partitions=1, replication_factor=3)
    holder = partition_info(six, topic, 0).replicas[0]
    with Admin(six.bootstrap) as admin, pytest.raises(KanalError) as caught:
        admin.unregister_broker(holder)
    assert caught.value.code == ErrorCode.BROKER_HOLDS_REPLICAS
    assert (
        f"broker {holder} still holds replicas" in caught.value.message
        and f"{topic}-0" in caught.value.message
    )
    assert partition_info(six, topic, 0).leader >= 0


def counter(cluster: LocalCluster, broker: int, name: str) -> float:
    """A counter from broker `broker`'s Prometheus endpoint (its own count, not the test's)."""
    node = next(n for n in cluster.brokers if n.node_id == broker)
    with urllib.request.urlopen(f"http://{node.extra['metrics']}/metrics", timeout=5) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(f"{name}_total "):
                return float(line.split()[1])
    return 0.0


def test_throttle_holds_the_replication_rate(six, tmp_path):
    topic = "throttled"
    rate = 100_000  # bytes/s
    create_topic(six, topic, partitions=1, replication_factor=1)
    (only,) = partition_info(six, topic, 0).replicas
    adding = next(b for b in range(BROKERS) if b != only)
    producer = producer_for(six)
    acked: dict = {}
    errors: list = []
    try:
        for chunk in range(4):  # 2.4 MB: the copy takes about 24 s at the rate
            for i in range(300):
                value = b"%06d" % (chunk * 300 + i) + b"x" * 2000
                producer.produce(
                    topic,
                    value,
                    on_delivery=lambda e, m, v=value: (
                        e is None
                        and acked.setdefault((m.partition, m.offset), v)
                        or (e is not None and errors.append(e))
                    ),
                )
            producer.flush(60)
    finally:
        producer.close()
    assert not errors
    plan = write_plan(tmp_path, topic, [{"topic": topic, "partition": 0, "replicas": [only, adding]}])
    name = "kanal_broker_replication_throttled_bytes_in"
    start_bytes = counter(six, adding, name)
    assert kanal(six, "reassign", "execute", "--plan", plan, "--throttle", str(rate)) == 0
    # The window starts once copying has begun (the broker applied the reassignment) ...
    wait_until(lambda: counter(six, adding, name) > start_bytes, 30, "the throttled copy to start")
    begin_bytes, begin_s = counter(six, adding, name), time.monotonic()
    # ... and spans 10 s of the broker's copying, read from its own counter.
    wait_until(lambda: time.monotonic() - begin_s >= 10, 15, "a 10 s window")
    end_bytes, end_s = counter(six, adding, name), time.monotonic()
    measured = (end_bytes - begin_bytes) / (end_s - begin_s)
    assert 0.8 * rate <= measured <= 1.2 * rate, (
        f"replicated at {measured:.0f} B/s under a {rate} B/s throttle"
    )
    assert kanal(six, "reassign", "verify", "--plan", plan) == 1  # still copying: not complete
    with Admin(six.bootstrap) as admin:  # lift the throttle; verify removes it too once complete
        admin.alter_configs(BROKER, "", delete=["follower.replication.throttled.rate"])
    wait_until(lambda: kanal(six, "reassign", "verify", "--plan", plan) == 0, 90, "the reassignment")
    check_history(acked, read_topic(six, topic, 1))
