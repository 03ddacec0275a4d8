"""Issue 18, findings 5 and 6 on a real cluster (3 controllers, 3 brokers as processes): a broker back on
an empty disk is never elected; one broker id, one live process; a controller on an empty disk does not
vote. Every test leaves the module's cluster with all its nodes running."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import Node, free_ports
from kanal.v1 import broker_pb2, controller_pb2, controller_pb2_grpc

from .conftest import broker_node, check_history, create_topic, partition_info, wait_until
from .history import read_topic

pytestmark = pytest.mark.cluster

KANAL = [sys.executable, "-m", "kanal.deploy.cli"]


def describe(cluster, topic: str) -> dict:
    """`kanal topics describe TOPIC --output json`: the partition list of the one topic."""
    result = subprocess.run([*KANAL, "topics", "describe", topic, "--bootstrap", running_bootstrap(cluster),
                             "--output", "json"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]["partitions"][0]


def running_bootstrap(cluster) -> str:
    return ",".join(n.endpoint for n in cluster.brokers if n.running)


def controller_image(cluster):
    """The committed image (snapshot form) of the first controller that answers."""
    for node in cluster.controllers:
        if not node.running:
            continue
        with grpc.insecure_channel(node.endpoint) as channel:
            try:
                return controller_pb2_grpc.ControllerStub(channel).DescribeMetadataImage(
                    controller_pb2.DescribeMetadataImageRequest(), timeout=5).snapshot
            except grpc.RpcError:
                continue
    raise AssertionError("no controller answered")


def registered_epoch(cluster, broker_id: int) -> int | None:
    md = ClusterMetadata(running_bootstrap(cluster))
    try:
        reply = md.any_stub().Metadata(broker_pb2.MetadataRequest(topics=[]), timeout=5)
    finally:
        md.close()
    return next((b.broker_epoch for b in reply.brokers if b.broker_id == broker_id), None)


# -- (c) a controller restarted on an empty data directory --------------------------------------------


def test_controller_on_an_empty_disk_exits_and_does_not_vote(cluster):
    # Every controller has recorded its directory id by now (RegisterController after start).
    wait_until(lambda: len({r.controller_registration.controller_id for r in controller_image(cluster).records
                            if r.WhichOneof("record") == "controller_registration"}) == 3,
               30, "the three controllers' directory ids recorded")
    victim = cluster.controllers[-1]
    data_dir = Path(victim.args[victim.args.index("--data-dir") + 1])
    own_disk = data_dir.with_name(data_dir.name + "-own-disk")
    victim.stop()
    data_dir.rename(own_disk)  # its disk is pulled; an empty one takes its place
    victim.start(cluster._env)
    victim.process.wait(90)
    assert victim.process.returncode == 1
    out = cluster.tail(victim, 200)
    lines = [line for line in out.splitlines() if line.startswith("kanal controller: error:")]
    assert lines and "must not vote" in lines[-1] and "quorum recorded" in lines[-1], out
    # The quorum kept working without it: a topic can still be created and gets leaders.
    create_topic(cluster, "after-empty-controller", partitions=1, replication_factor=3)
    # Its own disk comes back: it starts, votes and catches up.
    shutil.rmtree(data_dir)
    own_disk.rename(data_dir)
    cluster.start_node(victim, timeout_s=90)


# -- (b) two processes with one broker id -----------------------------------------------------------------


def test_two_processes_with_one_broker_id_do_not_take_turns(cluster, tmp_path):
    original = cluster.brokers[1]
    epoch = wait_until(lambda: registered_epoch(cluster, original.node_id), 30, "broker 1 registered")
    grpc_port, metrics_port = free_ports(2)
    args = list(original.args)
    args[args.index("--listen") + 1] = f"127.0.0.1:{grpc_port}"
    args[args.index("--metrics") + 1] = f"127.0.0.1:{metrics_port}"
    args[args.index("--data-dir") + 1] = str(tmp_path / "intruder")
    intruder = Node("broker", original.node_id, f"127.0.0.1:{grpc_port}", args, tmp_path / "intruder.log")
    intruder.start(cluster._env)
    try:
        # Refused while broker 1 lives (DUPLICATE_BROKER_REGISTRATION); after two session timeouts it
        # gives up with one line and a non-zero status.
        intruder.process.wait(60)
        out = intruder.log_path.read_text(errors="replace")
        assert intruder.process.returncode != 0
        assert "held by another live process" in out, out[-2000:]
        assert registered_epoch(cluster, original.node_id) == epoch, "the first process kept the id"
        assert original.running
    finally:
        intruder.stop()

    # The first process hangs past its session: a second one takes the id (the old session is over);
    # when the first wakes up it is superseded and stops instead of registering again.
    original.pause()
    try:
        wait_until(lambda: registered_epoch(cluster, original.node_id) is None, 30, "broker 1 fenced")
        intruder.start(cluster._env)
        wait_until(lambda: (registered_epoch(cluster, original.node_id) or -1) > epoch, 60,
                   "the second process registered")
        second_epoch = registered_epoch(cluster, original.node_id)
    finally:
        original.resume()
    original.process.wait(30)
    assert original.process.returncode != 0
    assert "was registered by another process" in cluster.tail(original, 200)
    assert registered_epoch(cluster, original.node_id) == second_epoch
    intruder.stop()
    cluster.start_node(original, timeout_s=90)


# -- (a) the last in-sync replica comes back on an empty disk ---------------------------------------------


def test_last_isr_member_on_a_wiped_disk_is_not_elected_and_the_data_survives(cluster):
    topic = "wiped-disk"
    create_topic(cluster, topic, partitions=1, replication_factor=3, min_insync_replicas="1")
    acked: dict[tuple[int, int], bytes] = {}
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", linger_ms=2,
                                       request_timeout_ms=5000, delivery_timeout_ms=60_000))
    try:
        for i in range(300):
            value = b"w-%05d" % i

            def done(error, meta, value=value):
                assert error is None, error
                acked[(meta.partition, meta.offset)] = value

            producer.produce(topic, value, on_delivery=done)
        producer.flush(60)
    finally:
        producer.close()
    assert len(acked) == 300
    last = broker_node(cluster, partition_info(cluster, topic, 0).leader)
    others = [n for n in cluster.brokers if n is not last]
    for node in others:
        node.stop()
    wait_until(lambda: list(partition_info(cluster, topic, 0).isr) == [last.node_id], 30,
               f"the ISR shrunk to broker {last.node_id}")
    last.stop()
    shutil.rmtree(last.args[last.args.index("--data-dir") + 1])  # the disk is replaced by an empty one
    cluster.start_node(last, timeout_s=90)
    described = wait_until(lambda: (d := describe(cluster, topic)).get("offline_reason") and d, 30,
                           "an offline reason")
    assert described["leader"] == -1 and described["isr"] == [last.node_id]
    assert "another data directory" in described["offline_reason"]

    # The other replicas return: still offline (no clean leader), and nobody truncated their logs.
    for node in others:
        cluster.start_node(node, timeout_s=90)
    assert describe(cluster, topic)["leader"] == -1
    # The operator accepts an unclean election: a replica that kept its log leads, not the empty one.
    subprocess.run(
        [
            *KANAL,
            "topics",
            "alter",
            topic,
            "--bootstrap",
            cluster.bootstrap,
            "--config",
            "unclean.leader.election.enable=true",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    # A list, so that broker 0 as the leader is truthy for wait_until.
    [leader] = wait_until(lambda: (p := partition_info(cluster, topic, 0)).leader >= 0 and [p.leader], 30,
                          "a leader")
    assert leader != last.node_id
    check_history(acked, read_topic(cluster, topic, 1))
    # The wiped broker rejoins as a follower and catches up from the real leader.
    wait_until(
        lambda: last.node_id in partition_info(cluster, topic, 0).isr, 60, "the wiped broker back in sync"
    )
