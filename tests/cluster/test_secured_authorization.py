"""Authentication and authorization together, as a Kafka operator runs them: every node on mTLS, the
authorizer on at every broker and controller, the nodes and `User:admin` as super users. Real principals
(a certificate, a SCRAM password) meet real ACLs: a user with none can do nothing, a grant enables its
operation, and the metadata log records who made each change."""

from __future__ import annotations

import grpc
import pytest

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.certificates import NODE_MAPPING_RULES, make_dev_tls
from kanal.deploy.chaos.checker import check
from kanal.deploy.chaos.cli import main as chaos_main
from kanal.deploy.chaos.history import read_history
from kanal.deploy.local_cluster import LocalCluster
from kanal.metadata.log_codec import iter_batches
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.v1 import broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, wait_until

SUPER_USERS = ";".join([*(f"User:broker-{i}" for i in range(3)), *(f"User:controller-{i}" for i in range(3)),
                        "User:admin"])


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_dev_tls(tmp_path_factory.mktemp("pki"), broker_ids=range(3), controller_ids=range(3),
                        client_name="admin")


@pytest.fixture(scope="module")
def cluster(pki, tmp_path_factory):
    cluster = LocalCluster(
        tmp_path_factory.mktemp("authorized"), controllers=3, brokers=3, tls=pki,
        controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS,
        security_flags=["--tls-client-auth", "required", "--authentication", "mtls,password",
                        "--principal-mapping-rules", NODE_MAPPING_RULES,
                        "--authorizer", "on", "--super-users", SUPER_USERS])
    cluster.start(timeout_s=120)
    yield cluster
    cluster.stop()


def as_admin(pki) -> ClientSecurity:
    return ClientSecurity(
        ca_file=str(pki.ca.cert), cert_file=str(pki.client.cert), key_file=str(pki.client.key)
    )


def as_user(pki, user: str, password: str) -> ClientSecurity:
    """The listener requires a client certificate; the password then names the principal."""
    return ClientSecurity(
        ca_file=str(pki.ca.cert),
        cert_file=str(pki.client.cert),
        key_file=str(pki.client.key),
        user=user,
        password=password,
    )


def acl(principal: str, operation: int, name: str, pattern: int = metadata_pb2.ACL_PATTERN_LITERAL,
        resource: int = metadata_pb2.ACL_RESOURCE_TOPIC) -> metadata_pb2.AccessControlEntry:
    return metadata_pb2.AccessControlEntry(resource_type=resource, resource_name=name, pattern_type=pattern,
                                           principal=principal, host="*", operation=operation,
                                           permission=metadata_pb2.ACL_PERMISSION_ALLOW)


def metadata_records(cluster, pki) -> list[metadata_pb2.MetadataRecord]:
    """Every record of the metadata log, read from a controller as a super user (CLUSTER_ACTION)."""
    records: list[metadata_pb2.MetadataRecord] = []
    with open_channel(cluster.controllers[0].endpoint, (), as_admin(pki)) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        offset = 0
        while True:
            reply = stub.FetchMetadata(controller_pb2.FetchMetadataRequest(offset=offset, max_bytes=1 << 20),
                                       timeout=10)
            assert reply.error == 0, reply.error_message
            batches = list(iter_batches(reply.entries))
            if not batches:
                return records
            for batch in batches:
                records.extend(batch.metadata_batch().records)
                offset = batch.end_offset


def test_brokers_replicate_and_register_as_super_users(pki, cluster):
    """The controllers' and brokers' authorizers admit the nodes' own calls (registration, heartbeats,
    replica fetches) by their certificates: an RF=3 topic takes acks=all writes that need both followers."""
    with Admin(cluster.bootstrap, security=as_admin(pki)) as admin:
        admin.create_topic("replicated", 1, 3, {"min.insync.replicas": "3"})
    with Producer(
        ProducerConfig(bootstrap=cluster.bootstrap, acks="all", security=as_admin(pki))
    ) as producer:
        futures = [producer.produce("replicated", b"v%d" % i) for i in range(50)]
        producer.flush(60)
        assert [f.result(0).offset for f in futures] == list(range(50))


def test_a_user_without_acls_can_do_nothing_and_a_grant_enables_exactly_its_operation(pki, cluster):
    with Admin(cluster.bootstrap, security=as_admin(pki)) as admin:
        admin.create_user("alice", "wonderland")
    alice = as_user(pki, "alice", "wonderland")
    with Admin(cluster.bootstrap, security=alice) as admin:
        assert admin.list_topics() == []  # Metadata shows her no topic she may not describe
        with pytest.raises(KanalError) as err:
            admin.create_topic("alice-orders", 1, 1)
        assert err.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(KanalError) as err:
            admin.create_acls(
                [
                    acl(
                        "User:alice",
                        metadata_pb2.ACL_OPERATION_ALL,
                        "alice-",
                        metadata_pb2.ACL_PATTERN_PREFIXED,
                    )
                ]
            )
        assert err.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

    with Admin(cluster.bootstrap, security=as_admin(pki)) as admin:
        # CREATE, and DESCRIBE so that she sees the topics she creates (Admin.create_topic waits for their
        # leaders in Metadata, which shows a principal only what it may describe, as Kafka's does).
        admin.create_acls(
            [
                acl("User:alice", op, "alice-", metadata_pb2.ACL_PATTERN_PREFIXED)
                for op in (metadata_pb2.ACL_OPERATION_CREATE, metadata_pb2.ACL_OPERATION_DESCRIBE)
            ]
        )
    with Admin(cluster.bootstrap, security=alice) as admin:
        wait_until(lambda: _creates(admin, "alice-orders"), 30, "alice's CREATE grant reaches the brokers")
        with pytest.raises(KanalError) as err:
            admin.create_topic("bob-orders", 1, 1)  # the grant is for names starting "alice-" only
        assert err.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(KanalError) as err:
            admin.delete_topic("alice-orders")  # CREATE is not DELETE
        assert err.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _creates(admin: Admin, name: str) -> bool:
    try:
        admin.create_topic(name, 1, 1)
    except KanalError as exc:
        if exc.code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise
        return False
    return True


def test_the_metadata_log_records_the_authenticated_principal_of_each_change(pki, cluster):
    with Admin(cluster.bootstrap, security=as_admin(pki)) as admin:
        admin.create_user("carol", "lewis")
        admin.create_acls(
            [
                acl("User:carol", op, "carol-topic")
                for op in (metadata_pb2.ACL_OPERATION_CREATE, metadata_pb2.ACL_OPERATION_DESCRIBE)
            ]
        )
    with Admin(cluster.bootstrap, security=as_user(pki, "carol", "lewis")) as admin:
        wait_until(lambda: _creates(admin, "carol-topic"), 30, "carol's CREATE grant reaches the brokers")
    records = metadata_records(cluster, pki)
    created = [r for r in records if r.HasField("topic") and r.topic.name == "carol-topic"]
    assert [r.principal for r in created] == ["User:carol"]
    granted = [r for r in records if r.HasField("access_control_entry")
               and r.access_control_entry.entry.principal == "User:carol"]
    assert [r.principal for r in granted] == ["User:admin", "User:admin"]
    users = [
        r for r in records if r.HasField("user_scram_credential") and r.user_scram_credential.name == "carol"
    ]
    assert users and {r.principal for r in users} == {"User:admin"}


def test_a_replica_stream_from_a_principal_that_is_not_that_broker_gets_nothing(pki, cluster):
    """ReplicaFetch (the followers' stream) is authorized per request as a replica Fetch: User:admin, a
    super user but not broker-1, may not fetch as replica 1 on it."""
    with Admin(cluster.bootstrap, security=as_admin(pki)) as admin:
        admin.create_topic("stream-guarded", 1, 3)
        leader = admin.describe_topic("stream-guarded").partitions[0].leader
    endpoint = cluster.brokers[leader].endpoint  # LocalCluster's broker i has id i
    request = broker_pb2.FetchRequest(
        replica_id=1,
        max_wait_ms=0,
        topics=[
            broker_pb2.FetchRequest.TopicRequest(
                topic="stream-guarded",
                partitions=[broker_pb2.FetchRequest.PartitionRequest(partition=0, fetch_offset=0)],
            )
        ],
    )
    with open_channel(endpoint, (), as_admin(pki)) as channel:
        stream = broker_pb2_grpc.BrokerStub(channel).ReplicaFetch(iter([request]), timeout=10)
        with pytest.raises(grpc.RpcError) as err:
            list(stream)
    assert dict(err.value.trailing_metadata() or ()).get("kanal-error-code") == str(
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED), err.value


def test_clients_refused_by_the_authorizer_get_the_refusal_at_once_not_retries(pki, cluster):
    """The clients' error boundary on real refusals. dan may DESCRIBE `dan-guarded` (so his clients find
    its leader) and WRITE `dan-own` (so InitProducerId admits his idempotent producer, as Kafka >= 2.8
    does), but may neither WRITE nor READ `dan-guarded`: his record fails with TOPIC_AUTHORIZATION_FAILED
    after one send (not BROKER_NOT_AVAILABLE after the delivery timeout), his poll() raises it after one
    failed fetch. erin, with no ACL at all, is refused InitProducerId: CLUSTER_AUTHORIZATION_FAILED when
    her producer starts."""
    with Admin(cluster.bootstrap, security=as_admin(pki)) as admin:
        admin.create_topic("dan-guarded", 1, 3)
        admin.create_topic("dan-own", 1, 3)
        admin.create_user("dan", "dublin")
        admin.create_user("erin", "enniskillen")
        admin.create_acls([acl("User:dan", metadata_pb2.ACL_OPERATION_DESCRIBE, "dan-guarded"),
                           acl("User:dan", metadata_pb2.ACL_OPERATION_WRITE, "dan-own")])
    dan, erin = as_user(pki, "dan", "dublin"), as_user(pki, "erin", "enniskillen")
    producer = wait_until(lambda: _started_producer(cluster, dan), 30, "dan's grants reach the brokers")
    with producer:
        future = wait_until(lambda: _queued(producer, "dan-guarded"), 30, "dan-guarded described to dan")
        with pytest.raises(KanalError) as err:
            future.result(60)
        metrics = producer.metrics()
    assert err.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, err.value
    assert (metrics["produce_batch_send_count"], metrics["produce_batch_retry_count"]) == (1, 0)

    with Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, security=dan,
                                 auto_offset_reset="earliest")) as consumer:
        wait_until(lambda: _assigned(consumer, ("dan-guarded", 0)), 30, "dan-guarded described to dan")
        error = wait_until(lambda: _poll_error(consumer), 30, "poll() to raise")
        assert error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, error
        assert consumer.metrics()["fetch_error_count"] == 1

    refusal = wait_until(lambda: _started_producer(cluster, erin, refusal=True), 30,
                         "erin known to the brokers")
    assert refusal.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, refusal


def _started_producer(cluster, security: ClientSecurity, *, refusal: bool = False):
    """A producer for `security`, or (refusal=True) the KanalError its start is refused with; None while
    the user or the grants have not reached the broker asked yet."""
    try:
        producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, security=security))
    except KanalError as exc:
        if exc.code == ErrorCode.AUTHENTICATION_FAILED or (
                exc.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not refusal):
            return None
        if refusal:
            return exc
        raise
    if refusal:
        producer.close()
        raise AssertionError(f"{security.user}'s producer started")
    return producer


def _queued(producer: Producer, topic: str):
    try:
        return producer.produce(topic, b"v")
    except KanalError as exc:  # the broker asked does not show the topic to this user yet
        if exc.code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise
        return None


def _assigned(consumer: Consumer, tp: tuple[str, int]) -> bool:
    try:
        consumer.assign([tp])
    except KanalError as exc:
        if exc.code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise
        return False
    return True


def _poll_error(consumer: Consumer) -> KanalError | None:
    try:
        assert consumer.poll(0.5) == []
    except KanalError as exc:
        return exc
    return None


def test_kanal_chaos_runs_its_workloads_and_check_against_a_secured_cluster(pki, cluster, tmp_path):
    """`kanal chaos run --target BOOTSTRAP` with the client commands' TLS flags: its producers, consumer
    group, topic churn, monitor and final read all go over mTLS as User:admin, and the history checks out."""
    tls = pki
    code = chaos_main(
        [
            "run",
            "--target",
            cluster.bootstrap,
            "--faults",
            "",
            "--duration",
            "8s",
            "--seed",
            "3",
            "--history-dir",
            str(tmp_path),
            "--quiet",
            "--tls-ca-file",
            str(tls.ca.cert),
            "--tls-cert-file",
            str(tls.client.cert),
            "--tls-key-file",
            str(tls.client.key),
        ]
    )
    assert code == 0
    report = check(read_history(tmp_path / "seed-3.jsonl"))
    # Every partition written was read to its end, so `ok` covers every acknowledged record.
    assert report.ok and report.acknowledged > 0 and report.final_records > 0 and report.unchecked == []
