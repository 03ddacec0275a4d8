"""ACLs on a real cluster whose brokers run `--authorizer on` with no super users. Without authentication
every client is User:ANONYMOUS, so the tests grant and deny ANONYMOUS: with no ACL it can do nothing,
each grant enables exactly its operation, a deny beats an allow, prefixed patterns match as Kafka's, and
Metadata shows only describable topics. A raw Fetch that claims a replica id without that broker's
principal gets CLUSTER_AUTHORIZATION_FAILED and changes no ISR.

The controllers run without the authorizer: with it on, broker calls need each broker's own principal, which
only authentication (TLS) gives. So the test's admin writes (topics, ACLs) go to the controllers directly, and
the brokers are what is checked; the controllers' own checks are tests/raft/test_controller_acls.py.
"""

from __future__ import annotations

import time

import grpc
import pytest

from kanal.deploy.local_cluster import LocalCluster
from kanal.metadata.log_codec import iter_batches
from kanal.security.call_identity import PRINCIPAL_METADATA_KEY
from kanal.v1 import admin_pb2, broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc, metadata_pb2
from kanal.v1.batch import NewRecord, build_batch
from kanal.v1.error import ErrorCode

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, wait_until

pytestmark = pytest.mark.cluster
M = metadata_pb2
ANONYMOUS = "User:ANONYMOUS"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    cluster = LocalCluster(
        tmp_path_factory.mktemp("acls"),
        controllers=3,
        brokers=2,
        controller_flags=CONTROLLER_FLAGS,
        broker_flags=[*BROKER_FLAGS, "--authorizer", "on"],
    )
    cluster.start(timeout_s=90)
    channels = [grpc.insecure_channel(n.endpoint) for n in (*cluster.brokers, *cluster.controllers)]
    brokers = [broker_pb2_grpc.BrokerStub(c) for c in channels[:len(cluster.brokers)]]
    controller = controller_pb2_grpc.ControllerStub(channels[len(cluster.brokers)])
    try:
        yield cluster, brokers, controller
    finally:
        for channel in channels:
            channel.close()
        cluster.stop()


def create_topic(controller, brokers, name: str, rf: int = 1) -> None:
    reply = controller.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
        name=name, partitions=1, replication_factor=rf)]), timeout=30)
    assert reply.results[0].error == ErrorCode.NONE, reply.results[0].error_message
    caught_up(controller, brokers)


def caught_up(controller, brokers) -> None:
    """Wait until every broker acts on the metadata the controllers have committed so far (the brokers
    hide undescribable topics, so a topic's arrival cannot be watched for by name)."""
    end = controller.DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=10).metadata_end_offset
    wait_until(lambda: all(b.Metadata(broker_pb2.MetadataRequest(), timeout=10).metadata_offset >= end
                           for b in brokers), 30, f"the brokers at metadata offset {end}")


def _named(broker, name: str) -> broker_pb2.TopicMetadata:
    return broker.Metadata(broker_pb2.MetadataRequest(topics=[name]), timeout=10).topics[0]


def acl(name: str, op: int, *, permission=M.ACL_PERMISSION_ALLOW, pattern=M.ACL_PATTERN_LITERAL,
        rtype=M.ACL_RESOURCE_TOPIC, principal=ANONYMOUS) -> M.AccessControlEntry:
    return M.AccessControlEntry(
        resource_type=rtype,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host="*",
        operation=op,
        permission=permission,
    )


def grant(controller, brokers, *entries) -> None:
    # As a broker that enforces ACLs forwards the call, naming its caller: the controllers here do not
    # enforce ACLs, and refuse an ACL call made to them directly (SECURITY_DISABLED).
    reply = controller.CreateAcls(admin_pb2.CreateAclsRequest(creations=entries), timeout=30,
                                  metadata=((PRINCIPAL_METADATA_KEY, ANONYMOUS),))
    assert [r.error for r in reply.results] == [ErrorCode.NONE] * len(entries), reply
    caught_up(controller, brokers)


def produce(broker, topic: str) -> tuple[int, int]:
    """(error, leader) of a one-record acks=1 produce to partition 0."""
    request = broker_pb2.ProduceRequest(acks=1, timeout_ms=5000)
    request.topics.add(topic=topic).partitions.add(
        partition=0, batches=[build_batch([NewRecord(b"v", timestamp_ms=int(time.time() * 1000))])])
    result = broker.Produce(request, timeout=10).topics[0].partitions[0]
    return result.error, result.current_leader


def produce_anywhere(brokers, topic: str) -> int:
    """The error of a produce sent to the partition's leader (whichever broker answers as leader)."""
    errors = [produce(b, topic)[0] for b in brokers]
    return next((e for e in errors if e != ErrorCode.NOT_LEADER_OR_FOLLOWER), errors[0])


def fetch(broker, topic: str, **fields) -> int:
    request = broker_pb2.FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, **fields)
    request.topics.add(topic=topic).partitions.add(partition=0, fetch_offset=0, max_bytes=1 << 20,
                                                   current_leader_epoch=-1, last_fetched_epoch=-1)
    return broker.Fetch(request, timeout=10).topics[0].partitions[0].error


def fetch_anywhere(brokers, topic: str) -> int:
    errors = [fetch(b, topic) for b in brokers]
    return next((e for e in errors if e != ErrorCode.NOT_LEADER_OR_FOLLOWER), errors[0])


def listed_topics(broker) -> set[str]:
    return {t.name for t in broker.Metadata(broker_pb2.MetadataRequest(), timeout=10).topics}


def test_without_acls_anonymous_can_do_nothing(secured):
    _cluster, brokers, controller = secured
    create_topic(controller, brokers, "t-none")
    broker = brokers[0]
    assert produce_anywhere(brokers, "t-none") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert fetch_anywhere(brokers, "t-none") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    offsets = broker_pb2.ListOffsetsRequest()
    offsets.topics.add(topic="t-none").partitions.add(partition=0, timestamp_ms=-1)
    assert (
        broker.ListOffsets(offsets, timeout=10).topics[0].partitions[0].error
        == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )
    assert "t-none" not in listed_topics(broker)
    assert _named(broker, "t-none").error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert (
        _named(broker, "no-such-topic").error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )  # existence not leaked
    created = broker.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
        name="t-sneaky", partitions=1, replication_factor=1)]), timeout=30).results[0]
    assert created.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED and created.error_message
    deleted = broker.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["t-none"]), timeout=30).results[0]
    assert deleted.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    altered = broker.AlterConfigs(admin_pb2.AlterConfigsRequest(changes=[admin_pb2.AlterConfigsRequest.Change(
        resource=admin_pb2.ConfigResource(type=M.CONFIG_RESOURCE_TOPIC, name="t-none"),
        ops=[admin_pb2.AlterConfigOp(key="retention.ms", value="1000")])]), timeout=30).results[0]
    assert altered.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    coordinator = broker.FindCoordinator(broker_pb2.FindCoordinatorRequest(key="g"), timeout=10)
    assert coordinator.error == ErrorCode.GROUP_AUTHORIZATION_FAILED
    for call, request in ((broker.CreateAcls, admin_pb2.CreateAclsRequest(creations=[acl("t-none", 2)])),
                          (broker.DescribeAcls, admin_pb2.DescribeAclsRequest()),
                          (broker.InitProducerId, broker_pb2.InitProducerIdRequest())):
        with pytest.raises(grpc.RpcError) as err:
            call(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert dict(err.value.trailing_metadata())["kanal-error-code"] == str(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
    # Nothing the refused calls asked for happened (the controllers answer without an authorizer).
    described = controller.DescribeConfigs(
        admin_pb2.DescribeConfigsRequest(
            resources=[admin_pb2.ConfigResource(type=M.CONFIG_RESOURCE_TOPIC, name="t-none")]
        ),
        timeout=10,
    ).results[0]
    assert not [e for e in described.entries if e.key == "retention.ms" and not e.is_default]
    names = {t.name for t in controller.DescribeMetadataImage(
        controller_pb2.DescribeMetadataImageRequest(), timeout=10).snapshot.records if t.HasField("topic")
        for t in [t.topic]}
    assert "t-none" in names and "t-sneaky" not in names


def test_each_grant_enables_exactly_its_operation_and_a_deny_wins(secured):
    _cluster, brokers, controller = secured
    create_topic(controller, brokers, "t-write")
    before = controller.FetchMetadata(
        controller_pb2.FetchMetadataRequest(offset=0, max_wait_ms=0), timeout=10
    )
    grant(controller, brokers, acl("t-write", M.ACL_OPERATION_WRITE))
    assert produce_anywhere(brokers, "t-write") == ErrorCode.NONE
    assert fetch_anywhere(brokers, "t-write") == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # WRITE is not READ
    assert "t-write" in listed_topics(brokers[0])  # WRITE implies DESCRIBE
    assert "t-none" not in listed_topics(brokers[0])
    deleted = brokers[0].DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["t-write"]), timeout=30).results[0]
    assert deleted.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    grant(
        controller,
        brokers,
        acl("t-write", M.ACL_OPERATION_WRITE, permission=M.ACL_PERMISSION_DENY, principal="User:*"),
    )
    assert produce_anywhere(brokers, "t-write") == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    # The grants are in the metadata log with the principal that made them (the audit trail).
    records = [r for batch in iter_batches(controller.FetchMetadata(controller_pb2.FetchMetadataRequest(
        offset=before.end_offset, max_bytes=1 << 20, max_wait_ms=0), timeout=10).entries)
        for r in batch.metadata_batch().records if r.HasField("access_control_entry")]
    assert [(r.principal, r.access_control_entry.entry.permission) for r in records] == [
        (ANONYMOUS, M.ACL_PERMISSION_ALLOW), (ANONYMOUS, M.ACL_PERMISSION_DENY)]


def test_prefixed_read_matches_as_kafka(secured):
    _cluster, brokers, controller = secured
    for name in ("pre-a", "prelude", "other"):
        create_topic(controller, brokers, name)
    grant(controller, brokers, acl("pre-", M.ACL_OPERATION_READ, pattern=M.ACL_PATTERN_PREFIXED))
    assert fetch_anywhere(brokers, "pre-a") == ErrorCode.NONE
    assert (
        fetch_anywhere(brokers, "prelude") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )  # "pre-" is not a prefix
    assert fetch_anywhere(brokers, "other") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert produce_anywhere(brokers, "pre-a") == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # READ is not WRITE
    assert {"pre-a"} <= listed_topics(brokers[0]) and not {"prelude", "other"} & listed_topics(brokers[0])


def test_a_replica_claim_without_the_broker_principal_changes_no_isr(secured):
    cluster, brokers, controller = secured
    create_topic(controller, brokers, "claimed", rf=2)
    grant(controller, brokers, acl("claimed", M.ACL_OPERATION_DESCRIBE))

    def partition():
        for broker in brokers:
            topic = _named(broker, "claimed")
            if topic.error == ErrorCode.NONE and topic.partitions:
                return topic.partitions[0]
        return None

    # The follower's own fetches come from ANONYMOUS too (no authentication here), so it leaves the ISR.
    shrunk = wait_until(
        lambda: (p := partition()) is not None and len(p.isr) == 1 and p, 30, "the ISR shrink"
    )
    leader = shrunk.leader
    follower = next(b for b in shrunk.replicas if b != leader)
    epochs = {
        b.broker_id: b.broker_epoch
        for b in brokers[0].Metadata(broker_pb2.MetadataRequest(), timeout=10).brokers
    }
    leader_stub = brokers[[n.node_id for n in cluster.brokers].index(leader)]
    with pytest.raises(grpc.RpcError) as err:
        fetch(leader_stub, "claimed", replica_id=follower, replica_epoch=epochs[follower])
    assert dict(err.value.trailing_metadata())["kanal-error-code"] == str(
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    # A create applied after the claim: had the claim moved the follower, its ISR change would be in the
    # log before (the leader proposes at once) — it is not.
    create_topic(controller, brokers, "after-claim")
    assert list(partition().isr) == [leader]
