"""A secured cluster: TLS with client certificates on every node, authentication by certificate (mapping
rules) or password (SCRAM credentials in the metadata log), a CRL of revoked certificates.

Refused at the door: plaintext, a client certificate from an unknown CA, a server certificate the client
does not trust, an expired certificate (all three in the TLS handshake: gRPC UNAVAILABLE, which clients
report as BROKER_NOT_AVAILABLE), a revoked certificate, a wrong password and an unknown user (after the
handshake: UNAUTHENTICATED / AUTHENTICATION_FAILED). A listener that authenticates by password only
refuses a call with no credentials. Good credentials produce and consume end to end on an RF=3 acks=all
topic whose followers replicate over TLS; a standby controller forwards an admin write to the active one
over TLS.
"""

from __future__ import annotations

import datetime

import grpc
import pytest

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.certificates import NODE_MAPPING_RULES, make_ca, make_dev_tls
from kanal.deploy.local_cluster import LocalCluster
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.security.scram import new_salt, salted_password
from kanal.v1 import admin_pb2, broker_pb2, broker_pb2_grpc, controller_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, wait_until

RECORDS = 300


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    tls = make_dev_tls(d, broker_ids=range(3), controller_ids=range(3), client_name="admin")
    now = datetime.datetime.now(datetime.UTC)
    expired = tls.ca.issue(d, "expired", "eve", not_before=now - datetime.timedelta(days=10), days=1)
    revoked = tls.ca.issue(d, "revoked", "rita")
    other_ca = make_ca(d / "other", common_name="someone else's CA")
    return {
        "tls": tls,
        "dir": d,
        "crl": tls.ca.crl(d / "crl.pem", [revoked.serial]),
        "expired": expired,
        "revoked": revoked,
        "other_ca": other_ca,
        "stranger": other_ca.issue(d / "other", "stranger", "admin"),
    }


@pytest.fixture(scope="module")
def secured(pki, tmp_path_factory):
    cluster = LocalCluster(
        tmp_path_factory.mktemp("secured"), controllers=3, brokers=3, tls=pki["tls"],
        controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS,
        security_flags=["--tls-client-auth", "required", "--authentication", "mtls,password",
                        "--principal-mapping-rules", NODE_MAPPING_RULES, "--tls-crl-file", str(pki["crl"])])
    cluster.start(timeout_s=90)
    yield cluster
    cluster.stop()


def client(pki, cert=None, *, ca=None, user=None, password=None) -> ClientSecurity:
    cert = pki["tls"].client if cert is None else cert
    return ClientSecurity(
        ca_file=str(ca or pki["tls"].ca.cert),
        cert_file=str(cert.cert),
        key_file=str(cert.key),
        user=user,
        password=password,
    )


def admin_error(cluster, security) -> int:
    with Admin(cluster.bootstrap, request_timeout_ms=1500, security=security) as admin, \
            pytest.raises(KanalError) as err:
        admin.list_topics()
    return err.value.code


def test_handshake_refusals(pki, secured):
    # Plaintext to a TLS listener, a certificate of an unknown CA, a server the client does not trust, an
    # expired certificate: no connection is made at all.
    assert admin_error(secured, None) == ErrorCode.BROKER_NOT_AVAILABLE
    assert admin_error(secured, client(pki, pki["stranger"])) == ErrorCode.BROKER_NOT_AVAILABLE
    assert admin_error(secured, client(pki, ca=pki["other_ca"].cert)) == ErrorCode.BROKER_NOT_AVAILABLE
    assert admin_error(secured, client(pki, pki["expired"])) == ErrorCode.BROKER_NOT_AVAILABLE
    # The same client with the right certificate gets in.
    with Admin(secured.bootstrap, security=client(pki)) as admin:
        admin.list_topics()


def test_revoked_certificates_and_bad_passwords_are_refused_at_the_door(pki, secured):
    with Admin(secured.bootstrap, security=client(pki)) as admin:
        admin.create_user("alice", "wonderland", mechanisms=["SCRAM-SHA-512"])
    refused = {
        "revoked": client(pki, pki["revoked"]),
        "wrong password": client(pki, user="alice", password="looking-glass"),
        "unknown user": client(pki, user="mallory", password="wonderland"),
    }
    for why, security in refused.items():
        assert admin_error(secured, security) == ErrorCode.AUTHENTICATION_FAILED, why
        # Nothing they ask for is done, on brokers or controllers: UNAUTHENTICATED before any handler.
        with Admin(secured.bootstrap, request_timeout_ms=1500, security=security) as admin, \
                pytest.raises(KanalError):
            admin.create_topic(f"by-{why.replace(' ', '-')}", 1, 1)
        with open_channel(secured.brokers[0].endpoint, (), security) as channel, \
                pytest.raises(grpc.RpcError) as err:
            broker_pb2_grpc.BrokerStub(channel).Metadata(broker_pb2.MetadataRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, why
        with open_channel(secured.controllers[0].endpoint, (), security) as channel, \
                pytest.raises(grpc.RpcError) as err:
            controller_pb2_grpc.ControllerStub(channel).DescribeQuorum(
                admin_pb2.DescribeQuorumRequest(), timeout=5
            )
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, why
    with Admin(secured.bootstrap, security=client(pki)) as admin:
        assert not [t for t in admin.list_topics() if t.startswith("by-")]
        assert admin.describe_users() == {"alice": [("SCRAM-SHA-512", 4096)]}


def test_good_credentials_produce_and_consume_while_followers_replicate_over_tls(pki, secured):
    with Admin(secured.bootstrap, security=client(pki)) as admin:
        admin.create_user("bob", "builder")
        admin.create_topic("secured", 2, 3, {"min.insync.replicas": "3"})
    # acks=all with min.insync.replicas 3: every record is acknowledged only once both followers fetched
    # it over their TLS connections to the leader.
    as_bob = client(pki, user="bob", password="builder")
    acked = {}
    with Producer(ProducerConfig(bootstrap=secured.bootstrap, acks="all", security=as_bob)) as producer:
        futures = [producer.produce("secured", b"v%d" % i, key=b"k%d" % (i % 7)) for i in range(RECORDS)]
        producer.flush(60)
        for i, future in enumerate(futures):
            meta = future.result(0)
            acked[(meta.partition, meta.offset)] = b"v%d" % i
    consumer = Consumer(
        ConsumerConfig(bootstrap=secured.bootstrap, auto_offset_reset="earliest", security=as_bob)
    )
    try:
        consumer.assign([("secured", 0), ("secured", 1)])
        read = {}

        def all_read():
            for record in consumer.poll(0.5):
                read[(record.partition, record.offset)] = record.value
            return len(read) >= RECORDS

        wait_until(all_read, 60, "every acknowledged record read back")
    finally:
        consumer.close()
    assert read == acked
    with Admin(secured.bootstrap, security=client(pki)) as admin:
        assert all(len(p.isr) == 3 for p in admin.describe_topic("secured").partitions)


def test_a_standby_controller_forwards_over_tls(pki, secured):
    security = client(pki)

    def quorum_with_leader():
        with open_channel(secured.controllers[0].endpoint, (), security) as channel:
            reply = controller_pb2_grpc.ControllerStub(channel).DescribeQuorum(
                admin_pb2.DescribeQuorumRequest(), timeout=5)
        return reply if reply.leader_id >= 0 else None

    leader = wait_until(quorum_with_leader, 30, "an active controller").leader_id
    standby = next(n for n in secured.controllers if n.node_id != leader)
    with open_channel(standby.endpoint, (), security) as channel:
        reply = controller_pb2_grpc.ControllerStub(channel).AlterUserScramCredentials(
            admin_pb2.AlterUserScramCredentialsRequest(upsertions=[_upsertion("carol", "c-password")]),
            timeout=30,
        )
    assert [(r.user, r.error) for r in reply.results] == [("carol", ErrorCode.NONE)]
    with Admin(secured.bootstrap, security=client(pki)) as admin:
        wait_until(lambda: "carol" in admin.describe_users(), 30, "carol's credential on the brokers")
    # ... and carol can log in with it (through a broker, which checks it against its own image).
    with Admin(secured.bootstrap, security=client(pki, user="carol", password="c-password")) as admin:
        admin.list_topics()


def _upsertion(name: str, password: str) -> admin_pb2.ScramCredentialUpsertion:
    salt = new_salt()
    return admin_pb2.ScramCredentialUpsertion(
        name=name,
        mechanism="SCRAM-SHA-256",
        iterations=4096,
        salt=salt,
        salted_password=salted_password("sha256", password, salt, 4096),
    )


def test_a_password_listener_refuses_calls_without_credentials(pki, tmp_path_factory):
    """One controller (mTLS: the broker reaches it as User:broker-0 by its certificate) and one broker whose
    listener takes passwords only, without client certificates."""
    tls = make_dev_tls(tmp_path_factory.mktemp("pki-password"), broker_ids=[0], controller_ids=[0])
    cluster = LocalCluster(
        tmp_path_factory.mktemp("password"), controllers=1, brokers=1, tls=tls, security_flags=[],
        controller_flags=[*CONTROLLER_FLAGS, "--tls-client-auth", "required", "--authentication", "mtls",
                          "--principal-mapping-rules", NODE_MAPPING_RULES],
        broker_flags=[*BROKER_FLAGS, "--authentication", "password"])
    try:
        cluster.start(timeout_s=90)
    except BaseException:
        cluster.stop()
        raise
    try:
        as_node = ClientSecurity(
            ca_file=str(tls.ca.cert), cert_file=str(tls.client.cert), key_file=str(tls.client.key)
        )
        with open_channel(cluster.controllers[0].endpoint, (), as_node) as channel:
            reply = controller_pb2_grpc.ControllerStub(channel).AlterUserScramCredentials(
                admin_pb2.AlterUserScramCredentialsRequest(upsertions=[_upsertion("dave", "d-pass")]),
                timeout=30,
            )
        assert reply.results[0].error == ErrorCode.NONE
        ca = str(tls.ca.cert)
        assert admin_error(cluster, ClientSecurity(ca_file=ca)) == ErrorCode.AUTHENTICATION_FAILED  # nothing
        assert admin_error(cluster, ClientSecurity(ca_file=ca, user="dave", password="x")) == \
            ErrorCode.AUTHENTICATION_FAILED
        as_dave = ClientSecurity(ca_file=ca, user="dave", password="d-pass")
        with Admin(cluster.bootstrap, security=as_dave) as admin:
            wait_until(lambda: admin.list_topics() is not None, 30, "dave admitted")
            admin.create_topic("by-dave", 1, 1)
        with Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", security=as_dave)) as producer:
            meta = producer.produce("by-dave", b"hello").result(30)
        consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                           security=as_dave))
        try:
            consumer.assign([("by-dave", meta.partition)])
            got = wait_until(lambda: consumer.poll(0.5), 30, "dave's record")
        finally:
            consumer.close()
        assert [r.value for r in got] == [b"hello"]
    finally:
        cluster.stop()
