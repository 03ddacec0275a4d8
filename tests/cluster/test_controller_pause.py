"""A paused (SIGSTOPped) active controller must not get healthy brokers fenced (issue 17, item 4).

3 controllers, 3 brokers, a topic with 6 partitions at RF=3. A producer writes with acks=all the whole
time and records what was acknowledged; a poller asks every broker for the topic's metadata continually.
The active controller is SIGSTOPped; another takes over; the producer goes on for more than two broker
session timeouts after the takeover. Then: no broker was fenced and no partition lost its leader (the new
active controller's metadata log has no fencing record and no offline partition since the pause, and no
poll saw leader -1 or a missing broker); the old controller, resumed, rejoins as a follower; every
acknowledged record is read back once, in order per partition.

Sessions are 2 s here (tests/cluster/conftest.py), heartbeats 200 ms, election timeout 300 ms.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster, Node
from kanal.metadata.log_codec import iter_batches
from kanal.v1 import admin_pb2, broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc

from .conftest import CONTROLLER_FLAGS, check_history, create_topic, start_cluster, wait_until
from .history import read_topic

pytestmark = pytest.mark.cluster

TOPIC = "pause-controller"
PARTITIONS = 6
SESSION_TIMEOUT_S = int(CONTROLLER_FLAGS[CONTROLLER_FLAGS.index("--session-timeout-ms") + 1]) / 1000
NO_FORWARD = (("kanal-forwarded", "test"),)


@pytest.fixture
def paused_cluster(tmp_path_factory):
    cluster = start_cluster(tmp_path_factory, "pause-controller")
    try:
        yield cluster
    finally:
        for node in cluster.controllers:
            node.resume()  # never leave a stopped process behind (stop() resumes too; this is first)
        cluster.stop()


class Stubs:
    """One channel per endpoint, closed at the end."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.Channel] = {}

    def channel(self, endpoint: str) -> grpc.Channel:
        if endpoint not in self._channels:
            self._channels[endpoint] = grpc.insecure_channel(endpoint)
        return self._channels[endpoint]

    def controller(self, node: Node) -> controller_pb2_grpc.ControllerStub:
        return controller_pb2_grpc.ControllerStub(self.channel(node.endpoint))

    def broker(self, node: Node) -> broker_pb2_grpc.BrokerStub:
        return broker_pb2_grpc.BrokerStub(self.channel(node.endpoint))

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()


def active_controller(cluster: LocalCluster, stubs: Stubs, skip: Node | None = None) -> Node | None:
    """The controller that the others name as Raft leader and that takes a write itself (so it is active,
    not just elected); `skip` is never asked (it is paused) nor accepted."""
    for node in cluster.controllers:
        if node is skip:
            continue
        try:
            leader_id = (
                stubs.controller(node).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=1).leader_id
            )
        except grpc.RpcError:
            continue
        leader = next((c for c in cluster.controllers if c.node_id == leader_id), None)
        if leader is None or leader is skip:
            return None
        try:
            stubs.controller(leader).CreateTopics(admin_pb2.CreateTopicsRequest(
                topics=[admin_pb2.CreatableTopic(name="probe", partitions=1, replication_factor=1)],
                validate_only=True), timeout=1, metadata=NO_FORWARD)
        except grpc.RpcError:
            return None
        return leader
    return None


def metadata_end(stubs: Stubs, node: Node) -> int:
    return (
        stubs.controller(node)
        .DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=2)
        .metadata_end_offset
    )


def records_since(stubs: Stubs, node: Node, start: int) -> list:
    """Every metadata record at or after offset `start` in `node`'s metadata log, read with FetchMetadata."""
    out = []
    offset, end = 0, metadata_end(stubs, node)
    while offset < end:
        reply = stubs.controller(node).FetchMetadata(
            controller_pb2.FetchMetadataRequest(offset=offset, max_bytes=1 << 20), timeout=5)
        assert reply.error == 0, reply.error_message
        for batch in iter_batches(reply.entries):
            records = batch.metadata_batch().records
            out += [r for k, r in enumerate(records) if batch.base_offset + k >= start]
            offset = batch.end_offset
    return out


class ProduceLoop:
    """acks=all producing in a thread until stopped; `acked` maps (partition, offset) to the value."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.producer = Producer(ProducerConfig(
            bootstrap=cluster.bootstrap, acks="all", linger_ms=2, batch_size_bytes=8 * 1024,
            retry_backoff_ms=50, request_timeout_ms=5000, delivery_timeout_ms=60_000))
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list = []
        self.flush_failures = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="produce-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def _done(self, error, meta, value: bytes) -> None:
        with self._lock:
            if error is None:
                self.acked[(meta.partition, meta.offset)] = value
            else:
                self.errors.append((value, error))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            for _ in range(50):
                value = b"v-%07d" % i
                self.producer.produce(TOPIC, value, key=b"k%d" % (i % 24),
                                      on_delivery=lambda e, m, v=value: self._done(e, m, v))
                i += 1
            if not self.producer.flush(60):
                self.flush_failures += 1

    def stop(self) -> None:
        """Stop producing and wait for every record sent to be acknowledged or failed (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(120)
        self.producer.close(60)


class MetadataPoller:
    """Asks every broker for the topic's metadata continually; keeps what was wrong."""

    def __init__(self, cluster: LocalCluster, stubs: Stubs) -> None:
        self.cluster = cluster
        self.stubs = stubs
        self.polls = 0
        self.offline: list[str] = []
        self.missing_brokers: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metadata-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        expected = {b.node_id for b in self.cluster.brokers}
        while not self._stop.wait(0.05):
            for node in self.cluster.brokers:
                try:
                    reply = self.stubs.broker(node).Metadata(
                        broker_pb2.MetadataRequest(topics=[TOPIC]), timeout=2
                    )
                except grpc.RpcError as exc:
                    self.missing_brokers.append(
                        f"broker {node.node_id} did not answer Metadata: {exc.code()}"
                    )
                    continue
                self.polls += 1
                live = {b.broker_id for b in reply.brokers}
                if live != expected:
                    self.missing_brokers.append(f"broker {node.node_id} sees live brokers {sorted(live)}")
                for p in reply.topics[0].partitions:
                    if p.leader < 0:
                        self.offline.append(f"broker {node.node_id} sees partition {p.partition} offline")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def test_paused_active_controller_fences_no_broker_and_loses_no_leader(paused_cluster):
    cluster = paused_cluster
    stubs = Stubs()
    producer: ProduceLoop | None = None
    poller: MetadataPoller | None = None
    old: Node | None = None
    try:
        create_topic(cluster, TOPIC, partitions=PARTITIONS, replication_factor=3, min_insync_replicas="2")
        old = wait_until(lambda: active_controller(cluster, stubs), 30, "an active controller")
        start_offset = metadata_end(stubs, old)
        producer = ProduceLoop(cluster)
        producer.start()
        poller = MetadataPoller(cluster, stubs)
        poller.start()
        wait_until(
            lambda: producer.count() >= 500 and poller.polls >= 10,
            60,
            "records acknowledged before the pause",
        )

        old.pause()
        new = wait_until(lambda: active_controller(cluster, stubs, skip=old), 30, "another active controller")
        took_over = time.monotonic()
        acked_at_takeover = producer.count()
        # Producing goes on past two session timeouts after the takeover: any broker the new controller
        # did not hear from would be fenced by then.
        wait_until(lambda: time.monotonic() - took_over > 2 * SESSION_TIMEOUT_S + 0.5
                   and producer.count() >= acked_at_takeover + 500, 60,
                   "two session timeouts of producing after the takeover", interval_s=0.1)

        records = records_since(stubs, new, start_offset)
        fenced = [
            r
            for r in records
            if r.WhichOneof("record") == "broker_registration_change" and r.broker_registration_change.fenced
        ]
        offline = [r for r in records
                   if r.WhichOneof("record") == "partition_change" and r.partition_change.HasField("leader")
                   and r.partition_change.leader < 0]
        assert not fenced, f"brokers were fenced while the old controller was paused: {fenced}"
        assert not offline, f"partitions went offline: {offline[:3]}"
        assert not poller.offline, poller.offline[:5]
        assert not poller.missing_brokers, poller.missing_brokers[:5]
        with grpc.insecure_channel(new.endpoint) as channel:
            cluster_view = controller_pb2_grpc.ControllerStub(channel).DescribeCluster(
                admin_pb2.DescribeClusterRequest(), timeout=5)
        assert [(b.broker_id, b.fenced) for b in cluster_view.brokers] == [
            (b.node_id, False) for b in cluster.brokers
        ]

        old.resume()

        def rejoined() -> bool:
            quorum = stubs.controller(old).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=1)
            return quorum.leader_id == new.node_id and quorum.metadata_end_offset >= metadata_end(stubs, new)

        wait_until(
            lambda: _quietly(rejoined), 30, "the resumed controller to follow the new one and catch up"
        )
        assert active_controller(cluster, stubs) is new
        poller.stop()
        producer.stop()
        assert not producer.errors, f"the producer gave up on records: {producer.errors[:3]}"
        assert producer.flush_failures == 0
    finally:
        if old is not None:
            old.resume()
        if poller is not None:
            poller.stop()
        if producer is not None:
            producer.stop()
        stubs.close()
    assert producer is not None
    read = read_topic(cluster, TOPIC, PARTITIONS)
    check_history(producer.acked, read)
    last_by_key: dict[bytes, int] = {}
    for _, _, value in read:
        i = int(value[2:])
        assert i > last_by_key.get(i % 24, -1), f"key {i % 24}: {i} read after {last_by_key[i % 24]}"
        last_by_key[i % 24] = i


def _quietly(condition) -> bool:
    try:
        return bool(condition())
    except grpc.RpcError:
        return False
