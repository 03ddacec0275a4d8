"""Spark on a secured cluster (mTLS and passwords, the authorizer on, a user who may create only her own
topics): the audit of the controller's files names her as the creator of her topic and `User:admin` as
the one who made her and granted her the ACLs; the audit checks the controllers, and the `kanal-log`
source reads through the brokers, over TLS with the given credentials, and not without them."""

from __future__ import annotations

import time

import pytest

from kanal.clients.admin import Admin
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.certificates import NODE_MAPPING_RULES, make_dev_tls
from kanal.deploy.local_cluster import LocalCluster
from kanal.security.channel_security import ClientSecurity
from kanal.spark.audit import run_audit
from kanal.spark.source_options import security_options
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

RECORDS = 200

SUPER_USERS = "User:broker-0;User:controller-0;User:admin"


@pytest.fixture(scope="module")
def secured_history(tmp_path_factory):
    """One controller, one broker, secured; admin makes alice and lets her create `alice-*` topics."""
    tls = make_dev_tls(
        tmp_path_factory.mktemp("pki"), broker_ids=[0], controller_ids=[0], client_name="admin"
    )
    cluster = LocalCluster(
        tmp_path_factory.mktemp("audited"),
        controllers=1,
        brokers=1,
        tls=tls,
        security_flags=[
            "--tls-client-auth",
            "required",
            "--authentication",
            "mtls,password",
            "--principal-mapping-rules",
            NODE_MAPPING_RULES,
            "--authorizer",
            "on",
            "--super-users",
            SUPER_USERS,
        ],
    )
    cluster.start(timeout_s=120)
    try:
        admin_security = ClientSecurity(ca_file=str(tls.ca.cert), cert_file=str(tls.client.cert),
                                        key_file=str(tls.client.key))
        with Admin(cluster.bootstrap, security=admin_security) as admin:
            admin.create_user("alice", "wonderland")
            admin.create_acls([metadata_pb2.AccessControlEntry(
                resource_type=metadata_pb2.ACL_RESOURCE_TOPIC, resource_name="alice-",
                pattern_type=metadata_pb2.ACL_PATTERN_PREFIXED, principal="User:alice", host="*",
                operation=op, permission=metadata_pb2.ACL_PERMISSION_ALLOW)
                for op in (metadata_pb2.ACL_OPERATION_CREATE, metadata_pb2.ACL_OPERATION_DESCRIBE)])
        alice = ClientSecurity(ca_file=str(tls.ca.cert), cert_file=str(tls.client.cert),
                               key_file=str(tls.client.key), user="alice", password="wonderland")
        with Admin(cluster.bootstrap, security=alice) as admin:
            deadline = time.monotonic() + 30  # the grant reaches the broker within its metadata lag
            while not _created(admin, "alice-orders"):
                assert time.monotonic() < deadline, "alice's grant never reached the broker"
                time.sleep(0.05)
        with Producer(ProducerConfig(bootstrap=cluster.bootstrap, security=admin_security)) as producer:
            for i in range(RECORDS):
                producer.produce("alice-orders", b"v%d" % i)
            producer.flush(30)
        yield cluster, admin_security
    finally:
        cluster.stop()


def _created(admin: Admin, name: str) -> bool:
    try:
        admin.create_topic(name, 1, 1)
    except KanalError as exc:
        if exc.code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise
        return False
    return True


def test_the_audit_names_the_authenticated_principals(secured_history, spark, tmp_path):
    cluster, admin_security = secured_history
    controllers = [n.endpoint for n in cluster.controllers]
    audit = run_audit(
        spark, cluster.data_dir, tmp_path / "audit", controllers=controllers, security=admin_security
    )
    lifecycle = [(r["event"], r["topic"], r["principal"]) for r in audit.tables["topic_lifecycle"].collect()
                 if r["topic"] == "alice-orders"]
    assert lifecycle == [("topic_created", "alice-orders", "User:alice")]
    acl_changes = [(r["event"], r["principal"]) for r in audit.tables["acl_changes"].collect()]
    assert acl_changes == [("acl_added", "User:admin"), ("acl_added", "User:admin")]
    # The controller's image was fetched over TLS (as User:admin, a super user) and equals the replay.
    assert [c.error for c in audit.checks] == [None] and audit.image_matches is True


def test_the_log_source_reads_a_secured_cluster_over_tls_and_not_without(secured_history, spark):
    cluster, admin_security = secured_history
    reader = (
        spark.read.format("kanal-log")
        .option("bootstrap", cluster.bootstrap)
        .option("topics", "alice-orders")
        .options(**security_options(admin_security))
    )
    values = sorted(r["value"] for r in reader.load().select("value").collect())
    assert values == sorted(b"v%d" % i for i in range(RECORDS))
    plaintext = (
        spark.read.format("kanal-log").option("bootstrap", cluster.bootstrap).option("topics", "alice-orders")
    )
    with pytest.raises(Exception, match="no bootstrap broker"):
        plaintext.load().count()
