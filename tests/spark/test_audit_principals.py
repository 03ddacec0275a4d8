"""`kanal audit` names who did what on a secured cluster: mTLS and passwords, the authorizer on, a user
who may create only her own topics. The audit of the controller's files shows her as the creator of her
topic and `User:admin` as the one who made her and granted her the ACLs."""

from __future__ import annotations

import time

import pytest

from kanal.clients.admin import Admin
from kanal.deploy.certificates import NODE_MAPPING_RULES, make_dev_tls
from kanal.deploy.local_cluster import LocalCluster
from kanal.spark.audit import run_audit
from kanal.v1 import metadata_pb2
from kanal.v1.channel_security import ClientSecurity
from kanal.v1.error import ErrorCode, KanalError

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

SUPER_USERS = "User:broker-0;User:controller-0;User:admin"


@pytest.fixture(scope="module")
def secured_history(tmp_path_factory):
    """One controller, one broker, secured; admin makes alice and lets her create `alice-*` topics."""
    tls = make_dev_tls(tmp_path_factory.mktemp("pki"), broker_ids=[0], controller_ids=[0], client_name="admin")
    cluster = LocalCluster(tmp_path_factory.mktemp("audited"), controllers=1, brokers=1, tls=tls,
                           security_flags=["--tls-client-auth", "required", "--authentication", "mtls,password",
                                           "--principal-mapping-rules", NODE_MAPPING_RULES,
                                           "--authorizer", "on", "--super-users", SUPER_USERS])
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
    finally:
        cluster.stop()
    return cluster


def _created(admin: Admin, name: str) -> bool:
    try:
        admin.create_topic(name, 1, 1)
    except KanalError as exc:
        if exc.code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise
        return False
    return True


def test_the_audit_names_the_authenticated_principals(secured_history, spark, tmp_path):
    audit = run_audit(spark, secured_history.data_dir, tmp_path / "audit")
    lifecycle = [(r["event"], r["topic"], r["principal"]) for r in audit.tables["topic_lifecycle"].collect()
                 if r["topic"] == "alice-orders"]
    assert lifecycle == [("topic_created", "alice-orders", "User:alice")]
    acl_changes = [(r["event"], r["principal"]) for r in audit.tables["acl_changes"].collect()]
    assert acl_changes == [("acl_added", "User:admin"), ("acl_added", "User:admin")]
