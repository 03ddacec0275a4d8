"""The Controller gRPC service of a real quorum: bad input is refused with a clear error and changes
nothing; standbys forward admin writes and name the active controller to brokers; reads, health and
reflection work on every controller."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kanal.metadata import MetadataImage, apply_batch, image_from_snapshot
from kanal.metadata.log_codec import iter_batches
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

from .conftest import wait_until

pytestmark = pytest.mark.cluster


def _topic(name, partitions=1, rf=1, configs=()):
    return admin_pb2.CreatableTopic(
        name=name,
        partitions=partitions,
        replication_factor=rf,
        configs=[admin_pb2.ConfigEntry(key=k, value=v) for k, v in configs],
    )


@pytest.fixture(scope="module")
def env(live_quorum):
    q, brokers = live_quorum
    active = q.wait_active()
    stub = q.stub(active)
    reply = stub.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[_topic("existing", 4, 3)]), timeout=10)
    assert reply.results[0].error == 0
    return q, brokers, active, stub


def _unchanged_after(q, active, call):
    """Run `call`; the metadata log must gain nothing but NoOp records. A controller whose loop thread
    was starved for more than an election timeout (a loaded 2-core CI machine) steps down and takes
    over again with a NoOp, and that may land while `call` runs: it is no change to the metadata."""
    before = q.end_offset(active)
    result = call()
    added = [
        record.WhichOneof("record")
        for batch in q.fetch_from(active, before)
        for record in batch.metadata_batch().records
    ]
    assert set(added) <= {"no_op"}, added
    return result


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (_topic("existing"), ErrorCode.TOPIC_ALREADY_EXISTS),
        (_topic("zero", partitions=0), ErrorCode.INVALID_PARTITIONS),
        (_topic("negative", partitions=-3), ErrorCode.INVALID_PARTITIONS),
        (_topic("too-many", partitions=10_001), ErrorCode.INVALID_PARTITIONS),
        (_topic("rf", rf=4), ErrorCode.INVALID_REPLICATION_FACTOR),  # 3 live brokers
        (_topic("rf0", rf=0), ErrorCode.INVALID_REPLICATION_FACTOR),
        (_topic("bad/name"), ErrorCode.INVALID_TOPIC),
        (_topic("__cluster_metadata"), ErrorCode.INVALID_TOPIC),
        (_topic("cfg", configs=[("no.such.key", "1")]), ErrorCode.INVALID_CONFIG),
        (_topic("cfg2", configs=[("retention.ms", "soon")]), ErrorCode.INVALID_CONFIG),
    ],
)
def test_bad_create_topics_are_refused_and_change_nothing(env, topic, code):
    q, _, active, stub = env
    reply = _unchanged_after(
        q, active, lambda: stub.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[topic]), timeout=10)
    )
    assert reply.results[0].error == code
    assert reply.results[0].error_message


def test_bad_alter_configs_and_create_partitions_change_nothing(env):
    q, _, active, stub = env
    resource = admin_pb2.ConfigResource(type=metadata_pb2.CONFIG_RESOURCE_TOPIC, name="existing")
    for op in (
        admin_pb2.AlterConfigOp(key="no.such.key", value="1"),
        admin_pb2.AlterConfigOp(key="cleanup.policy", value="sometimes"),
    ):
        reply = _unchanged_after(
            q,
            active,
            lambda op=op: stub.AlterConfigs(
                admin_pb2.AlterConfigsRequest(
                    changes=[admin_pb2.AlterConfigsRequest.Change(resource=resource, ops=[op])]
                ),
                timeout=10,
            ),
        )
        assert reply.results[0].error == ErrorCode.INVALID_CONFIG
    shrink = _unchanged_after(
        q,
        active,
        lambda: stub.CreatePartitions(
            admin_pb2.CreatePartitionsRequest(
                targets=[admin_pb2.CreatePartitionsRequest.Target(name="existing", count=2)]
            ),
            timeout=10,
        ),
    )
    assert shrink.results[0].error == ErrorCode.INVALID_PARTITIONS


def test_stale_broker_epochs_are_refused(env):
    q, brokers, active, stub = env
    stale = brokers.epochs[2] + 1_000_000  # not broker 2's registration (nor any other broker's)
    heartbeat = _unchanged_after(
        q,
        active,
        lambda: stub.BrokerHeartbeat(
            controller_pb2.BrokerHeartbeatRequest(broker_id=2, broker_epoch=stale, metadata_offset=1 << 40),
            timeout=10,
        ),
    )
    assert heartbeat.error == ErrorCode.STALE_BROKER_EPOCH and heartbeat.error_message
    image_topic = _topic_state(q, active, "existing")
    topic_id, partition = image_topic
    item = controller_pb2.AlterPartitionRequest.Item(
        topic_id=topic_id,
        partition_id=0,
        leader_epoch=partition.leader_epoch,
        partition_epoch=partition.partition_epoch,
        new_isr=[partition.leader],
    )
    stale_broker = _unchanged_after(
        q,
        active,
        lambda: stub.AlterPartition(
            controller_pb2.AlterPartitionRequest(
                broker_id=partition.leader,
                broker_epoch=brokers.epochs[partition.leader] + 1_000_000,
                items=[item],
            ),
            timeout=10,
        ),
    )
    assert stale_broker.error == ErrorCode.STALE_BROKER_EPOCH
    old_version = controller_pb2.AlterPartitionRequest.Item()
    old_version.CopyFrom(item)
    old_version.partition_epoch = partition.partition_epoch + 5
    stale_partition = _unchanged_after(
        q,
        active,
        lambda: stub.AlterPartition(
            controller_pb2.AlterPartitionRequest(
                broker_id=partition.leader, broker_epoch=brokers.epochs[partition.leader], items=[old_version]
            ),
            timeout=10,
        ),
    )
    assert stale_partition.error == 0
    assert stale_partition.items[0].error == ErrorCode.INVALID_UPDATE_VERSION


def _topic_state(q, i, name):
    """(topic id, partition 0) as the metadata log of controller i says."""
    image = MetadataImage()
    for batch in q.fetch_all(i):
        apply_batch(image, batch.metadata_batch(), batch.base_offset)
    topic = image.topics[name]
    return topic.topic_id, topic.partitions[0]


def test_whole_call_errors_carry_the_kanal_error_code(env, kanal_error_code):
    q, _, active, stub = env
    with pytest.raises(grpc.RpcError) as info:
        stub.FetchMetadata(controller_pb2.FetchMetadataRequest(offset=0, max_bytes=-1), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert kanal_error_code(info.value) == ErrorCode.INVALID_REQUEST
    # A request whose batch would be too large for one Raft entry is refused as a whole.
    huge = admin_pb2.CreateTopicsRequest(topics=[_topic(f"huge-{n}", partitions=10_000) for n in range(6)])
    with pytest.raises(grpc.RpcError) as info:
        _unchanged_after(q, active, lambda: stub.CreateTopics(huge, timeout=60))
    assert kanal_error_code(info.value) == ErrorCode.INVALID_REQUEST
    assert "split it" in info.value.details()


def test_fetch_metadata_below_the_log_start_is_offset_out_of_range(env):
    q, _, active, stub = env
    before = q.end_offset(active)
    reply = stub.FetchMetadata(controller_pb2.FetchMetadataRequest(offset=-1), timeout=5)
    assert reply.error == ErrorCode.OFFSET_OUT_OF_RANGE and reply.error_message
    # The committed end then: the quorum may append meanwhile (sessions, controller registrations).
    assert before <= reply.end_offset <= q.end_offset(active)


def test_fetch_metadata_long_polls_until_a_write(env, wait):
    q, _, active, stub = env
    standby = next(i for i in q.ids if i != active)
    # A controller's directory-id registration, written a moment after its start, would otherwise be the
    # first batch the poll sees when this test runs soon after the quorum started.
    wait(q.registrations_done, 30, "the controllers' registrations committed")
    end = q.end_offset(active)
    pending = q.stub(standby).FetchMetadata.future(
        controller_pb2.FetchMetadataRequest(offset=end, max_wait_ms=20_000), timeout=30
    )
    stub.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[_topic("wakes-the-poll")]), timeout=10)
    reply = pending.result()
    batches = list(iter_batches(reply.entries))
    assert batches and batches[0].base_offset == end
    names = [
        r.topic.name for b in batches for r in b.metadata_batch().records if r.WhichOneof("record") == "topic"
    ]
    assert "wakes-the-poll" in names


def test_standby_forwards_admin_writes_and_names_the_active_controller_to_brokers(env):
    q, brokers, active, _ = env
    standby = next(i for i in q.ids if i != active)
    reply = q.stub(standby).CreateTopics(
        admin_pb2.CreateTopicsRequest(topics=[_topic("via-standby", 2, 2)]), timeout=10
    )
    assert reply.results[0].error == 0 and reply.results[0].topic_id
    heartbeat = q.stub(standby).BrokerHeartbeat(
        controller_pb2.BrokerHeartbeatRequest(broker_id=1, broker_epoch=brokers.epochs[1]), timeout=10
    )
    assert heartbeat.error == ErrorCode.NOT_CONTROLLER
    assert heartbeat.active_controller.controller_id == active
    assert heartbeat.active_controller.endpoint == q.endpoint(active)
    with pytest.raises(grpc.RpcError) as info:
        q.stub(standby).DeleteTopics(
            admin_pb2.DeleteTopicsRequest(names=["via-standby"]),
            timeout=10,
            metadata=(("kanal-forwarded", "1"),),
        )
    trailing = dict(info.value.trailing_metadata())
    assert trailing["kanal-error-code"] == str(ErrorCode.NOT_CONTROLLER)
    assert trailing["kanal-active-controller"] == q.endpoint(active)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    register = q.stub(standby).RegisterBroker(
        controller_pb2.RegisterBrokerRequest(broker_id=9, incarnation_id="x", endpoint="127.0.0.1:1"),
        timeout=10,
    )
    assert register.error == ErrorCode.NOT_CONTROLLER and register.active_controller.controller_id == active


def test_a_late_attempt_of_a_create_is_refused_after_the_topic_was_deleted(env):
    """A broker keeps one request id across controllers; an attempt that arrives after the call was carried
    out elsewhere (a cut link healing delivers it late) and after the topic's deletion must not bring the
    topic back: DUPLICATE_REQUEST, and the metadata log gains nothing."""
    q, _, active, stub = env
    standby = next(i for i in q.ids if i != active)
    create = admin_pb2.CreateTopicsRequest(topics=[_topic("created-once", 2, 2)], request_id="call-late-1")
    assert stub.CreateTopics(create, timeout=10).results[0].error == ErrorCode.NONE
    deleted = stub.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["created-once"]), timeout=10)
    assert deleted.results[0].error == ErrorCode.NONE
    for late in (stub, q.stub(standby)):  # on the active controller, and forwarded by a standby
        with pytest.raises(grpc.RpcError) as info:
            _unchanged_after(q, active, lambda late=late: late.CreateTopics(create, timeout=10))
        assert dict(info.value.trailing_metadata())["kanal-error-code"] == str(ErrorCode.DUPLICATE_REQUEST)
        assert "carried out already" in info.value.details()
    assert "created-once" not in _topic_names(stub)
    # Another call (another id) creates it again, as a new topic.
    again = admin_pb2.CreateTopicsRequest(topics=[_topic("created-once", 1, 1)], request_id="call-late-2")
    assert stub.CreateTopics(again, timeout=10).results[0].error == ErrorCode.NONE


def _topic_names(stub) -> set[str]:
    image = image_from_snapshot(stub.DescribeMetadataImage(controller_pb2.DescribeMetadataImageRequest(),
                                                           timeout=10).snapshot)
    return set(image.topics)


def test_reads_health_and_reflection_on_every_controller(env):
    q, _, active, _ = env
    cluster_ids = set()
    for i in q.ids:
        stub = q.stub(i)
        cluster = stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=5)
        # The random id the first active controller recorded (kanal.metadata.cluster_identity).
        cluster_ids.add(cluster.cluster_id)
        assert len(cluster.cluster_id) == 32 and cluster_ids == {cluster.cluster_id}  # the same everywhere
        assert [b.broker_id for b in cluster.brokers] == [1, 2, 3]
        assert cluster.quorum.leader_id == active
        assert {v.controller_id for v in cluster.quorum.voters} == {1, 2, 3}
        configs = stub.DescribeConfigs(
            admin_pb2.DescribeConfigsRequest(
                resources=[admin_pb2.ConfigResource(type=metadata_pb2.CONFIG_RESOURCE_TOPIC, name="existing")]
            ),
            timeout=5,
        )
        assert configs.results[0].error == 0 and configs.results[0].entries
        channel = grpc.insecure_channel(q.endpoint(i))
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="kanal.v1.Controller"), timeout=5
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        responses = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        services = {s.name for r in responses for s in r.list_services_response.service}
        assert "kanal.v1.Controller" in services
        channel.close()
    quorum = q.stub(active).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=5)
    assert quorum.commit_index > 0
    assert all(v.match_index >= 0 and v.lag >= 0 and v.reachable for v in quorum.voters)


def test_producer_id_blocks_and_isr_changes_from_brokers(env):
    q, brokers, active, stub = env
    first = stub.AllocateProducerIds(
        controller_pb2.AllocateProducerIdsRequest(broker_id=1, broker_epoch=brokers.epochs[1]), timeout=10
    )
    second = stub.AllocateProducerIds(
        controller_pb2.AllocateProducerIdsRequest(broker_id=2, broker_epoch=brokers.epochs[2]), timeout=10
    )
    assert first.error == second.error == 0
    assert second.first_producer_id == first.first_producer_id + first.block_size
    topic_id, partition = _topic_state(q, active, "existing")
    shrunk = [partition.leader]
    reply = stub.AlterPartition(
        controller_pb2.AlterPartitionRequest(
            broker_id=partition.leader,
            broker_epoch=brokers.epochs[partition.leader],
            items=[
                controller_pb2.AlterPartitionRequest.Item(
                    topic_id=topic_id,
                    partition_id=0,
                    leader_epoch=partition.leader_epoch,
                    partition_epoch=partition.partition_epoch,
                    new_isr=shrunk,
                )
            ],
        ),
        timeout=10,
    )
    assert reply.error == 0 and reply.items[0].error == 0
    assert list(reply.items[0].isr) == shrunk
    assert reply.items[0].partition_epoch == partition.partition_epoch + 1
    assert list(_topic_state(q, active, "existing")[1].isr) == shrunk


def test_every_controller_describes_the_image_its_log_replays_to(env):
    q, _, _active, stub = env
    stub.CreateTopics(
        admin_pb2.CreateTopicsRequest(topics=[_topic("imaged", 2, 2, [("retention.ms", "1000")])]), timeout=10
    )
    for i in q.ids:
        controller = q.stub(i)

        def caught_up(controller=controller):
            # Followers apply a moment after the active controller: wait for the write to land there.
            snapshot = controller.DescribeMetadataImage(controller_pb2.DescribeMetadataImageRequest(),
                                                        timeout=5).snapshot
            return snapshot if any(r.WhichOneof("record") == "topic" and r.topic.name == "imaged"
                                   for r in snapshot.records) else None

        snapshot = wait_until(caught_up, 10, f"controller {i} to apply the write")
        replayed = MetadataImage()
        offset = 0
        while offset < snapshot.next_offset:
            reply = controller.FetchMetadata(
                controller_pb2.FetchMetadataRequest(offset=offset, max_bytes=1 << 20), timeout=5
            )
            for batch in iter_batches(reply.entries):
                if batch.base_offset >= snapshot.next_offset:
                    break
                apply_batch(replayed, batch.metadata_batch(), batch.base_offset)
            offset = replayed.next_offset
        assert image_from_snapshot(snapshot) == replayed
        assert "imaged" in replayed.topics
