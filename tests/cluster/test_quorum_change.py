"""Controller quorum changes on a running cluster: a 4th controller added and an original one removed while
brokers take acks=all writes and topics are created; every acknowledged record and topic survives, and the
brokers follow the new voter set (heartbeats reach the active controller among the new voters)."""

from __future__ import annotations

import threading
import time
from typing import Self

import grpc
import pytest

from kanal.clients import cli
from kanal.clients.admin import Admin
from kanal.clients.producer import Producer, ProducerConfig
from kanal.net.channel_options import channel_options
from kanal.v1 import admin_pb2, controller_pb2, controller_pb2_grpc, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

from .conftest import check_history, create_topic, start_cluster, wait_until
from .history import produce_history, read_topic

TOPIC = "quorum-events"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory, "quorum-change")
    yield c
    c.stop()


def stub(endpoint: str) -> controller_pb2_grpc.ControllerStub:
    return controller_pb2_grpc.ControllerStub(grpc.insecure_channel(endpoint, options=channel_options()))


def quorum_of(endpoint: str) -> admin_pb2.DescribeQuorumResponse:
    return stub(endpoint).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=2)


def image_of(endpoint: str) -> metadata_pb2.MetadataSnapshot:
    return (
        stub(endpoint)
        .DescribeMetadataImage(controller_pb2.DescribeMetadataImageRequest(), timeout=10)
        .snapshot
    )


def converged(nodes, expected: list[int]) -> bool:
    for node in nodes:
        try:
            quorum = quorum_of(node.endpoint)
            sets = [
                r.voter_set for r in image_of(node.endpoint).records if r.WhichOneof("record") == "voter_set"
            ]
        except grpc.RpcError:
            return False
        if sorted(v.controller_id for v in quorum.voters) != expected or quorum.leader_id not in expected:
            return False
        if not sets or sorted(v.controller_id for v in sets[-1].voters) != expected:
            return False
    return True


class TopicCreator:
    """Creates topics through the brokers (Admin) on a thread, bounded in count and time; a creation the
    cluster acknowledged is in `acked`."""

    def __init__(self, bootstrap: str) -> None:
        self.admin = Admin(bootstrap)
        self.acked: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="topic-creator")

    def _run(self) -> None:
        deadline = time.monotonic() + 240
        for n in range(2_000):
            if self._stop.is_set() or time.monotonic() > deadline:
                return
            name = f"meta-{n}"
            try:
                self.admin.create_topic(name, partitions=1, replication_factor=1)
                self.acked.append(name)
            except KanalError as exc:  # an election: not acknowledged (it may still exist), go on
                self.errors.append(f"{name}: {exc}")

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)
        self.admin.close()
        assert not self._thread.is_alive(), "the topic creator did not stop"


def test_add_a_fourth_controller_and_remove_an_original_while_producing(cluster):
    create_topic(cluster, TOPIC, partitions=PARTITIONS, replication_factor=3, min_insync_replicas="2")
    producer = Producer(
        ProducerConfig(
            bootstrap=cluster.bootstrap,
            acks="all",
            linger_ms=2,
            batch_size_bytes=8 * 1024,
            retry_backoff_ms=50,
            request_timeout_ms=5000,
            delivery_timeout_ms=120_000,
        )
    )
    acked: dict = {}
    errors: list = []
    admin = Admin(cluster.bootstrap)
    originals = list(cluster.controllers)
    chunk = 300
    try:
        with TopicCreator(cluster.bootstrap) as creator:
            produce_history(producer, TOPIC, chunk, 0, acked, errors)
            # The new controller: started with --peers naming the quorum and itself, then added.
            new = cluster.new_controller()
            cluster.start_node(new, wait=False)
            wait_until(lambda: _answers(new.endpoint), 60, "the new controller answering")
            voters = _retrying(lambda: admin.add_voter(new.node_id, new.extra["raft"], new.endpoint))
            everyone = sorted(n.node_id for n in cluster.controllers)
            assert voters in (None, everyone)
            wait_until(lambda: converged(cluster.controllers, everyone), 60, f"voters {everyone} everywhere")
            produce_history(producer, TOPIC, chunk, chunk, acked, errors)
            producer.flush(120)

            # Remove an original that is not the active controller, then stop it.
            active = quorum_of(new.endpoint).leader_id
            gone = next(n for n in originals if n.node_id != active)
            stay = [n for n in cluster.controllers if n is not gone]
            stay_ids = sorted(n.node_id for n in stay)
            assert _retrying(lambda: admin.remove_voter(gone.node_id)) in (None, stay_ids)
            wait_until(lambda: converged(stay, stay_ids), 60, f"voters {stay_ids} everywhere")
            gone.stop()
            produce_history(producer, TOPIC, chunk, 2 * chunk, acked, errors)
            producer.flush(120)

            # The brokers learned the new voter set from the log; move the active controller (SIGTERM hands
            # leadership over) so their heartbeats must find it among the new voters.
            active_node = next(n for n in stay if n.node_id == quorum_of(new.endpoint).leader_id)
            active_node.stop()
            live = [n for n in stay if n is not active_node]
            wait_until(lambda: _leader_among(live), 60, "a new active controller")
            produce_history(producer, TOPIC, chunk, 3 * chunk, acked, errors)
            producer.flush(120)
            cluster.start_node(active_node)
            wait_until(lambda: converged(stay, stay_ids), 60, f"voters {stay_ids} after the restart")
            wait_until(lambda: len(creator.acked) >= 20, 120, "topic creations through the change")
        # Every broker is registered and unfenced at the end: its heartbeats reach the active controller.
        wait_until(lambda: _brokers_live(admin, len(cluster.brokers)), 60, "every broker unfenced")
        # A broker restarted with its original --controllers (naming the removed controller, not the new
        # one) learns the voter set from the metadata log again.
        broker = cluster.brokers[0]
        cluster.restart(broker)
        wait_until(lambda: _brokers_live(admin, len(cluster.brokers)), 60, "the restarted broker unfenced")
        learned = [
            line for line in broker.log_path.read_text().splitlines() if "controller quorum is now" in line
        ]
        assert len(learned) >= 3 and new.endpoint in learned[-1] and gone.endpoint not in learned[-1], learned
    finally:
        producer.close()
        admin.close()
    assert not errors, f"the producer gave up on records: {errors[:3]}"
    assert len(acked) == 4 * chunk
    check_history(acked, read_topic(cluster, TOPIC, PARTITIONS))
    # No acknowledged metadata write lost: every acknowledged topic is in every voter's image.
    for node in stay:
        def has_all(node=node):
            names = {
                r.topic.name for r in image_of(node.endpoint).records if r.WhichOneof("record") == "topic"
            }
            return set(creator.acked) <= names
        wait_until(has_all, 60, f"controller {node.node_id} holds every acknowledged topic")
    # The CLI reads the new quorum.
    assert cli.main(["quorum", "describe", "--bootstrap", cluster.bootstrap]) == 0


def test_bad_quorum_changes_are_refused_through_the_cli(cluster, capsys):
    before = sorted(v.controller_id for v in quorum_of(cluster.controllers[0].endpoint).voters)
    active = quorum_of(cluster.controllers[0].endpoint).leader_id
    for argv in (["remove", "--id", "9"], ["remove", "--id", str(active)],
                 ["add", "--id", "1", "--raft", "127.0.0.1:1", "--grpc", "127.0.0.1:2"],
                 ["add", "--id", "7", "--raft", "127.0.0.1:1", "--grpc", "127.0.0.1:2"]):
        assert cli.main(["quorum", *argv, "--bootstrap", cluster.bootstrap]) == 1, argv
        assert "INVALID_QUORUM_CHANGE" in capsys.readouterr().err, argv
    for node in cluster.controllers:
        assert sorted(v.controller_id for v in quorum_of(node.endpoint).voters) == before
        assert not [r for r in image_of(node.endpoint).records if r.WhichOneof("record") == "voter_set"]


def _answers(endpoint: str) -> bool:
    try:
        return bool(quorum_of(endpoint).voters)
    except grpc.RpcError:
        return False


def _leader_among(nodes) -> bool:
    ids = {n.node_id for n in nodes}
    try:
        return all(quorum_of(n.endpoint).leader_id in ids for n in nodes)
    except grpc.RpcError:
        return False


def _brokers_live(admin: Admin, count: int) -> bool:
    brokers = admin.describe_cluster().brokers
    return len(brokers) == count and not any(b.fenced for b in brokers)


def _retrying(call):
    """The voters after a quorum change, or None when its outcome is unknown (REQUEST_TIMED_OUT: recorded
    or not, the caller waits for the voter set it wanted). Asked again while no controller is active
    (an election: certainly not recorded)."""

    def attempt():
        try:
            return call()
        except KanalError as exc:
            if exc.code == ErrorCode.REQUEST_TIMED_OUT:
                return "unknown"
            if exc.code in (ErrorCode.CONTROLLER_NOT_AVAILABLE, ErrorCode.NOT_CONTROLLER):
                return None
            raise

    outcome = wait_until(attempt, 60, "a quorum change answered", interval_s=0.2)
    return None if outcome == "unknown" else outcome
