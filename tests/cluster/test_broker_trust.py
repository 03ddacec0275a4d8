"""What a client in another language, or a careless or hostile one, can do with raw gRPC calls, and what
the broker must not let it do: parked calls that starve the broker, a Produce that leaves timeout_ms
out, a Fetch that leaves replica_id out or claims to be a follower, writes to internal topics.

Every call here is made with the generated stubs, as a client written from the .proto files would."""

from __future__ import annotations

import time
import urllib.request

import grpc
import pytest

from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.batch import NewRecord, build_batch
from kanal.v1.error import ErrorCode

from .conftest import broker_node, create_topic, partition_info, resume_brokers, wait_until

pytestmark = pytest.mark.cluster


def batch(*values: bytes) -> bytes:
    return build_batch([NewRecord(v, timestamp_ms=int(time.time() * 1000)) for v in values])


def produce_request(
    topic: str, partition: int, batches: list[bytes], acks: int, timeout_ms: int | None = 5000
):
    request = broker_pb2.ProduceRequest(acks=acks)
    if timeout_ms is not None:
        request.timeout_ms = timeout_ms
    request.topics.add(topic=topic).partitions.add(partition=partition, batches=batches)
    return request


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, **fields):
    request = broker_pb2.FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, **fields)
    request.topics.add(topic=topic).partitions.add(
        partition=partition,
        fetch_offset=offset,
        max_bytes=1 << 20,
        current_leader_epoch=-1,
        last_fetched_epoch=-1,
    )
    return request


def metric(node, name: str, labels: str = "") -> float:
    text = urllib.request.urlopen(f"http://{node.extra['metrics']}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + labels + " ") or (not labels and line.startswith(name + "{")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def stub_for(cluster):
    channels = []

    def make(node) -> broker_pb2_grpc.BrokerStub:
        channel = grpc.insecure_channel(node.endpoint)
        channels.append(channel)
        return broker_pb2_grpc.BrokerStub(channel)

    yield make
    for channel in channels:
        channel.close()


def leader_of(cluster, topic: str):
    info = partition_info(cluster, topic, 0)
    return info, broker_node(cluster, info.leader)


def log_end(stub, topic: str) -> int:
    return stub.Fetch(fetch_request(topic, 0, 0), timeout=10).topics[0].partitions[0].log_end_offset


def test_parked_long_polls_and_acks_all_produces_hold_no_thread(cluster, stub_for):
    """48 consumer long polls parked on a leader (more than its 32 request threads) and 40 concurrent
    acks=all produces: Metadata answers at once, every produce is acknowledged, replication goes on and
    no ISR shrinks. Parked calls used to hold a request thread each: Metadata then waited behind them,
    followers' fetches queued, the ISR shrank and the produces failed although their records were
    stored."""
    create_topic(cluster, "parked", partitions=1, replication_factor=3, min_insync_replicas="2")
    info, leader = leader_of(cluster, "parked")
    stub = stub_for(leader)
    shrinks_before = metric(leader, "kanal_broker_isr_shrinks_total")
    polls = [
        stub.Fetch.future(fetch_request("parked", 0, 0, max_wait_ms=25_000), timeout=40) for _ in range(48)
    ]
    try:
        wait_until(lambda: metric(leader, "kanal_fetch_purgatory_size", '{kind="consumer"}') >= 48, 30,
                   "48 consumer long polls parked")
        started = time.monotonic()
        metadata = stub.Metadata(broker_pb2.MetadataRequest(topics=["parked"]), timeout=5)
        assert metadata.topics[0].partitions[0].leader == info.leader
        produces = [
            stub.Produce.future(
                produce_request("parked", 0, [batch(b"v%d" % i)], acks=-1, timeout_ms=10_000), timeout=20
            )
            for i in range(40)
        ]
        results = [f.result().topics[0].partitions[0] for f in produces]
        assert [r.error for r in results] == [ErrorCode.NONE] * 40, [
            r.error_message for r in results if r.error
        ]
        assert sorted(r.base_offset for r in results) == list(range(40))
        # The parked polls were woken by the first commit and answered with data.
        answered = [p.result().topics[0].partitions[0] for p in polls]
        assert all(a.error == ErrorCode.NONE and a.records for a in answered)
        assert time.monotonic() - started < 25, (
            "the long polls were answered at their timeout, not by the data"
        )
        assert metric(leader, "kanal_broker_isr_shrinks_total") == shrinks_before
        assert len(partition_info(cluster, "parked", 0).isr) == 3
    finally:
        for p in polls:
            p.cancel()


def test_produce_timeout_ms_left_out_means_the_broker_default(cluster, stub_for):
    """proto3 leaves 0 for a field a client does not set: acks=all with timeout_ms 0 must wait the broker's
    default and acknowledge, not answer REQUEST_TIMED_OUT after 1 ms for a batch it stored."""
    create_topic(cluster, "timeouts", partitions=1, replication_factor=3)
    _, leader = leader_of(cluster, "timeouts")
    stub = stub_for(leader)
    reply = stub.Produce(
        produce_request("timeouts", 0, [batch(b"a", b"b")], acks=-1, timeout_ms=None), timeout=40
    )
    result = reply.topics[0].partitions[0]
    assert result.error == ErrorCode.NONE, result.error_message
    assert list(result.batch_base_offsets) == [0]
    assert log_end(stub, "timeouts") == 2


def test_negative_produce_timeout_is_invalid_request_and_stores_nothing(cluster, stub_for):
    create_topic(cluster, "negative-timeout", partitions=1, replication_factor=3)
    _, leader = leader_of(cluster, "negative-timeout")
    stub = stub_for(leader)
    with pytest.raises(grpc.RpcError) as err:
        stub.Produce(
            produce_request("negative-timeout", 0, [batch(b"x")], acks=-1, timeout_ms=-1), timeout=10
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.value.trailing_metadata())["kanal-error-code"] == str(ErrorCode.INVALID_REQUEST)
    assert log_end(stub, "negative-timeout") == 0


def test_client_produce_to_an_internal_topic_is_refused(cluster, stub_for):
    """Only kanal writes __consumer_offsets: a forged commit record could move a group's offsets."""
    create_topic(cluster, "make-offsets-exist", partitions=1, replication_factor=3)
    find = broker_pb2.FindCoordinatorRequest(key="internal-topic-group")
    stub = stub_for(cluster.brokers[0])
    coordinator = wait_until(
        lambda: (r := stub.FindCoordinator(find, timeout=10)).error == ErrorCode.NONE and r,
        30,
        "a coordinator (the offsets topic exists)",
    )
    offsets = stub_for(broker_node(cluster, coordinator.node_id))
    def led_by_coordinator():
        try:
            return next((p for p in range(10) if partition_info(cluster, "__consumer_offsets", p).leader
                         == coordinator.node_id), None)
        except KeyError:  # the bootstrap broker has not applied the new topic yet
            return None

    [partition] = wait_until(lambda: (p := led_by_coordinator()) is not None and [p], 30,
                             "an offsets partition the coordinator leads, in the brokers' metadata")
    before = (
        offsets.Fetch(fetch_request("__consumer_offsets", partition, 0), timeout=10).topics[0].partitions[0]
    )
    reply = offsets.Produce(
        produce_request("__consumer_offsets", partition, [batch(b"forged")], acks=1), timeout=10
    )
    result = reply.topics[0].partitions[0]
    assert result.error == ErrorCode.INVALID_TOPIC and "internal" in result.error_message
    after = (
        offsets.Fetch(fetch_request("__consumer_offsets", partition, 0), timeout=10).topics[0].partitions[0]
    )
    assert after.log_end_offset == before.log_end_offset


def test_a_fetch_that_leaves_replica_id_out_is_a_consumers(cluster, stub_for):
    """replica_id 0 is a real broker id (kanal dev numbers brokers from 0). A consumer that leaves the field
    out must read only below the high-water mark and must not move broker 0's progress as a follower."""
    create_topic(cluster, "no-replica-id", partitions=1, replication_factor=3)
    info, leader = leader_of(cluster, "no-replica-id")
    follower = broker_node(cluster, next(b for b in info.replicas if b != info.leader))
    other = broker_node(cluster, next(b for b in info.replicas if b not in (info.leader, follower.node_id)))
    stub = stub_for(leader)
    # The consumer's request as another language would build it: no replica_id, no replica_epoch.
    consumer_fetch = fetch_request("no-replica-id", 0, 0)
    assert b"\x08" not in consumer_fetch.SerializeToString()[:1]  # field 1 (replica_id) is not on the wire
    follower.pause()
    other.pause()
    try:
        # With both followers paused, an acks=1 record is stored on the leader alone: above the HW (for
        # replica_lag_ms_max, 1.5 s here, until the ISR shrinks; the next two calls take milliseconds).
        result = stub.Produce(produce_request("no-replica-id", 0, [batch(b"only-on-leader")], acks=1),
                              timeout=10).topics[0].partitions[0]
        assert result.error == ErrorCode.NONE
        answer = stub.Fetch(consumer_fetch, timeout=10).topics[0].partitions[0]
        assert answer.error == ErrorCode.NONE
        assert answer.log_end_offset == 1 and answer.high_watermark == 0 and not answer.records
    finally:
        resume_brokers(cluster, [follower, other])


def test_a_fetch_claiming_a_replica_id_with_the_wrong_broker_epoch_is_refused(cluster, stub_for):
    """A Fetch that claims to be follower N must carry N's current broker epoch: otherwise anyone could
    report a follower at the leader's log end and have acks=all acknowledge records that only the leader
    holds. Refused whole with STALE_BROKER_EPOCH; the HW does not move."""
    create_topic(cluster, "forged-follower", partitions=1, replication_factor=3, min_insync_replicas="2")
    info, leader = leader_of(cluster, "forged-follower")
    followers = [broker_node(cluster, b) for b in info.replicas if b != info.leader]
    stub = stub_for(leader)
    epochs = {
        b.broker_id: b.broker_epoch for b in stub.Metadata(broker_pb2.MetadataRequest(), timeout=10).brokers
    }
    for node in followers:
        node.pause()
    try:
        acked = stub.Produce.future(
            produce_request("forged-follower", 0, [batch(b"x")], acks=-1, timeout_ms=1000), timeout=20
        )
        forged = [(node.node_id, epoch) for node in followers
                  for epoch in (epochs[node.node_id] + 1, epochs[node.node_id] - 1, 0)] + [(4242, 1)]
        for replica_id, replica_epoch in forged:
            with pytest.raises(grpc.RpcError) as err:
                stub.Fetch(
                    fetch_request(
                        "forged-follower", 0, 1, replica_id=replica_id, replica_epoch=replica_epoch
                    ),
                    timeout=10,
                )
            assert dict(err.value.trailing_metadata())["kanal-error-code"] == str(
                ErrorCode.STALE_BROKER_EPOCH
            )
        # No forged fetch counted as a copy: the acks=all write is not acknowledged while the real
        # followers sleep (it times out, or fails once the ISR shrinks below min.insync.replicas).
        result = acked.result().topics[0].partitions[0]
        assert result.error != ErrorCode.NONE and not result.batch_base_offsets
    finally:
        resume_brokers(cluster, followers)
    wait_until(lambda: stub.Fetch(fetch_request("forged-follower", 0, 0), timeout=10).topics[0].partitions[0]
               .high_watermark == 1, 30, "the real followers to replicate the record")


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_server_reflection_v1_and_v1alpha_on_brokers_and_controllers(cluster, version):
    """Tools discover the services by reflection: current ones speak grpc.reflection.v1, older ones
    v1alpha. Both list the services and return the file that defines kanal.v1.Broker / Controller."""
    from google.protobuf import descriptor_pb2
    from grpc_reflection.v1alpha import reflection_pb2

    method = f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo"
    for node, service in (
        (cluster.brokers[0], "kanal.v1.Broker"),
        (cluster.controllers[0], "kanal.v1.Controller"),
    ):
        with grpc.insecure_channel(node.endpoint) as channel:
            call = channel.stream_stream(
                method,
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )
            listed, described = call(iter([
                reflection_pb2.ServerReflectionRequest(list_services=""),
                reflection_pb2.ServerReflectionRequest(file_containing_symbol=service),
            ]), timeout=10)
        names = {s.name for s in listed.list_services_response.service}
        assert {service, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                "grpc.reflection.v1alpha.ServerReflection"} <= names
        files = [descriptor_pb2.FileDescriptorProto.FromString(b)
                 for b in described.file_descriptor_response.file_descriptor_proto]
        assert any(s.name == service.rsplit(".", 1)[1] for f in files for s in f.service)


def test_metadata_names_the_real_cluster_id_and_active_controller(tmp_path):
    """Metadata used to answer cluster_id "kanal" and controller_id -1 whatever the cluster was."""
    from kanal.deploy.local_cluster import LocalCluster
    from kanal.v1 import admin_pb2

    from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS

    with LocalCluster(tmp_path, controllers=1, brokers=1, broker_flags=BROKER_FLAGS,
                      controller_flags=[*CONTROLLER_FLAGS, "--cluster-id", "orders-eu-7"]) as cluster:
        cluster.start(timeout_s=90)
        with grpc.insecure_channel(cluster.brokers[0].endpoint) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            quorum = stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=10).quorum
            reply = wait_until(lambda: (r := stub.Metadata(broker_pb2.MetadataRequest(), timeout=10))
                               .controller_id >= 0 and r, 30, "the broker to hear from the active controller")
        assert reply.cluster_id == "orders-eu-7"
        assert reply.controller_id == quorum.leader_id == cluster.controllers[0].node_id
