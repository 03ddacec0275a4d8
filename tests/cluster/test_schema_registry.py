"""The schema registry kept by the cluster (issue 45), from outside: confluent-kafka's SchemaRegistryClient
against the brokers' REST listeners, and the SchemaRegistry gRPC service at a broker.

Registrations and compatibility (Avro, JSON Schema, Protobuf), soft and hard deletes, configs and modes;
two registrations of one new schema racing at two brokers get one id; ids survive the active controller's
death and a restart of every node, and no id is reused after it; on a secured cluster a wrong password is
401 and a principal without the subject's ACL 403, with an allowed one served."""

from __future__ import annotations

import json
import threading

import grpc
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from kanal.clients.admin import Admin
from kanal.deploy.certificates import make_dev_tls
from kanal.deploy.local_cluster import LocalCluster
from kanal.security.channel_security import ClientSecurity
from kanal.v1 import metadata_pb2, schema_registry_pb2, schema_registry_pb2_grpc
from kanal.v1.error import ErrorCode

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, wait_until

pytestmark = pytest.mark.cluster


def record(*fields: tuple[str, str, object]) -> Schema:
    """An Avro record schema R with (name, type[, default]) fields."""
    out = []
    for name, kind, *default in fields:
        field: dict[str, object] = {"name": name, "type": kind}
        if default:
            field["default"] = default[0]
        out.append(field)
    return Schema(json.dumps({"type": "record", "name": "R", "fields": out}), "AVRO")


V1 = record(("id", "long"))
V2 = record(("id", "long"), ("note", "string", ""))  # a field with a default: BACKWARD compatible
V3 = record(("other", "int"))  # drops id, adds a field without a default: incompatible


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("registry"), controllers=3, brokers=2,
                     controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS,
                     schema_registry_listeners=True)
    c.start(timeout_s=120)
    yield c
    c.stop()


def clients(cluster: LocalCluster) -> list[SchemaRegistryClient]:
    """One client per broker's REST listener (each its own cache)."""
    return [SchemaRegistryClient({"url": url}) for url in cluster.schema_registry_urls.split(",")]


def refused(call, *args) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as caught:
        call(*args)
    return caught.value


def test_register_evolve_and_refuse_an_incompatible_schema_with_confluents_codes(cluster):
    first, second = clients(cluster)
    id1 = first.register_schema("orders-value", V1)
    id2 = first.register_schema("orders-value", V2)
    assert 0 < id1 < id2
    assert first.register_schema("orders-value", V1) == id1  # already there: the same id, no new version
    incompatible = refused(first.register_schema, "orders-value", V3)
    assert (incompatible.http_status_code, incompatible.error_code) == (409, 409)
    # The other broker answers the same, from the cluster's one registry.
    assert second.get_versions("orders-value") == [1, 2]
    latest = second.get_latest_version("orders-value")
    assert (latest.version, latest.schema_id) == (2, id2)
    assert json.loads(second.get_schema(id1).schema_str) == json.loads(V1.schema_str)
    assert second.test_compatibility("orders-value", V3) is False
    assert second.lookup_schema("orders-value", V2).version == 2
    # The same schema under another subject keeps its id.
    assert second.register_schema("archive-value", V1) == id1
    assert sorted(second.get_subjects()) == ["archive-value", "orders-value"]
    missing = refused(second.get_schema, 10_000)
    assert (missing.http_status_code, missing.error_code) == (404, 40403)
    invalid = refused(first.register_schema, "orders-value", Schema('{"type": "record"}', "AVRO"))
    assert (invalid.http_status_code, invalid.error_code) == (422, 42201)


def test_json_schema_and_protobuf_subjects_and_their_compatibility(cluster):
    client = clients(cluster)[0]
    person = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    id1 = client.register_schema("people-value", Schema(json.dumps(person), "JSON"))
    adding_required = {**person, "properties": {**person["properties"], "age": {"type": "integer"}},
                       "required": ["name", "age"]}
    assert client.test_compatibility("people-value", Schema(json.dumps(adding_required), "JSON")) is False
    assert client.get_schema(id1).schema_type == "JSON"
    proto_v1 = 'syntax = "proto3";\nmessage Point {\n  int64 x = 1;\n  int64 y = 2;\n}\n'
    proto_v2 = 'syntax = "proto3";\nmessage Point {\n  int64 x = 1;\n  int64 y = 2;\n  string label = 3;\n}\n'
    proto_bad = 'syntax = "proto3";\nmessage Point {\n  string x = 1;\n}\n'
    client.register_schema("points-value", Schema(proto_v1, "PROTOBUF"))
    client.register_schema("points-value", Schema(proto_v2, "PROTOBUF"))
    assert client.test_compatibility("points-value", Schema(proto_bad, "PROTOBUF")) is False
    assert client.get_versions("points-value") == [1, 2]


def test_deletes_configs_and_modes(cluster):
    client = clients(cluster)[0]
    client.register_schema("gone-value", V1)
    client.register_schema("gone-value", V2)
    hard_first = refused(client.delete_subject, "gone-value", True)
    assert (hard_first.http_status_code, hard_first.error_code) == (404, 40405)
    assert client.delete_version("gone-value", 2) == 2
    assert client.get_versions("gone-value") == [1]
    assert client.delete_subject("gone-value") == [1]
    gone = refused(client.get_versions, "gone-value")
    assert (gone.http_status_code, gone.error_code) == (404, 40401)
    assert client.delete_subject("gone-value", True) == [1, 2]
    client.set_compatibility("strict-value", "FULL")
    assert client.get_compatibility("strict-value") == "FULL"
    client.register_schema("strict-value", V1)
    # V2 adds a defaulted field: FULL compatible; V3 is not even BACKWARD.
    client.register_schema("strict-value", V2)
    assert refused(client.register_schema, "strict-value", V3).http_status_code == 409
    client.update_mode("strict-value", "READONLY")
    read_only = refused(client.register_schema, "strict-value", record(("id", "long"), ("x", "int", 0)))
    assert (read_only.http_status_code, read_only.error_code) == (422, 42205)
    client.delete_mode("strict-value")
    assert client.get_compatibility() == "BACKWARD"


def test_two_registrations_of_one_new_schema_racing_at_two_brokers_get_one_id(cluster):
    first, second = clients(cluster)
    schema = record(("race", "string"))
    ids: list[int] = []
    go = threading.Barrier(2)

    def register(client: SchemaRegistryClient, subject: str) -> None:
        go.wait(10)
        ids.append(client.register_schema(subject, schema))

    pairs = ((first, "race-a"), (second, "race-b"))
    threads = [threading.Thread(target=register, args=pair) for pair in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(ids) == 2 and ids[0] == ids[1], ids


def test_the_grpc_service_answers_as_the_rest_api(cluster):
    client = clients(cluster)[0]
    schema_id = client.register_schema("grpc-value", V1)
    with grpc.insecure_channel(cluster.brokers[1].endpoint) as channel:
        stub = schema_registry_pb2_grpc.SchemaRegistryStub(channel)
        reply = stub.GetVersion(schema_registry_pb2.GetVersionRequest(subject="grpc-value", version=-1),
                                timeout=30)
        assert (reply.error, reply.version.schema.id, reply.version.version) == (ErrorCode.NONE, schema_id, 1)
        missing = stub.GetVersion(schema_registry_pb2.GetVersionRequest(subject="nothing", version=-1),
                                  timeout=30)
        assert missing.error == ErrorCode.SUBJECT_NOT_FOUND


def active_controller(cluster: LocalCluster):
    with Admin(cluster.bootstrap) as admin:
        leader = admin.describe_cluster().quorum.leader_id
    return next(n for n in cluster.controllers if n.node_id == leader)


def test_ids_survive_a_controller_failover_and_a_restart_of_every_node_and_are_never_reused(cluster):
    client = clients(cluster)[1]
    before = {subject: client.get_latest_version(subject).schema_id for subject in client.get_subjects()}
    victim = active_controller(cluster)
    victim.kill()
    try:
        fresh = record(("after_failover", "string"))
        new_id = SchemaRegistryClient({"url": cluster.schema_registry_urls.split(",")[0]}).register_schema(
            "failover-value", fresh)
        assert new_id > max(before.values())
    finally:
        cluster.start_node(victim, 60)
    for node in [*cluster.controllers, *cluster.brokers]:
        cluster.restart(node, timeout_s=90)
    after = SchemaRegistryClient({"url": cluster.schema_registry_urls.split(",")[0]})

    def same() -> bool:
        return all(after.get_latest_version(s).schema_id == i for s, i in before.items())

    wait_until(same, 60, "every subject's latest id after the restarts", tolerate=(SchemaRegistryError,))
    assert after.get_latest_version("failover-value").schema_id == new_id
    newest = after.register_schema("after-restart-value", record(("after_restart", "string")))
    assert newest > new_id


USER, PASSWORD = "alice", "alice-secret-1"
NOBODY, NOBODY_PASSWORD = "mallory", "mallory-secret-1"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    pki = make_dev_tls(tmp_path_factory.mktemp("registry-pki"), broker_ids=range(1), controller_ids=range(1),
                       client_name="admin")
    supers = ";".join([*(f"User:{name}" for name in pki.nodes), "User:admin"])
    authorizer = ["--authorizer", "on", "--super-users", supers]
    c = LocalCluster(tmp_path_factory.mktemp("registry-secured"), controllers=1, brokers=1, tls=pki,
                     node_listeners=True, schema_registry_listeners=True,
                     controller_flags=CONTROLLER_FLAGS + authorizer, broker_flags=BROKER_FLAGS + authorizer)
    c.start(timeout_s=120)
    security = ClientSecurity(ca_file=str(pki.ca.cert), cert_file=str(pki.client.cert),
                              key_file=str(pki.client.key))
    with Admin(c.admin_bootstrap, security=security) as admin:
        admin.create_user(USER, PASSWORD)
        admin.create_user(NOBODY, NOBODY_PASSWORD)
        admin.create_acls([metadata_pb2.AccessControlEntry(
            resource_type=metadata_pb2.ACL_RESOURCE_SUBJECT, resource_name="team-",
            pattern_type=metadata_pb2.ACL_PATTERN_PREFIXED, principal=f"User:{USER}", host="*",
            operation=operation, permission=metadata_pb2.ACL_PERMISSION_ALLOW)
            for operation in (metadata_pb2.ACL_OPERATION_READ, metadata_pb2.ACL_OPERATION_WRITE)])
    c.ca = str(pki.ca.cert)
    c.admin_cert = (str(pki.client.cert), str(pki.client.key))
    yield c
    c.stop()


def secured_client(cluster: LocalCluster, user: str, password: str) -> SchemaRegistryClient:
    assert cluster.schema_registry_urls.startswith("https://")
    return SchemaRegistryClient({"url": cluster.schema_registry_urls, "ssl.ca.location": cluster.ca,
                                 "basic.auth.user.info": f"{user}:{password}"})


def test_a_wrong_password_is_401_a_principal_without_the_acl_403_and_an_allowed_one_is_served(secured):
    allowed = secured_client(secured, USER, PASSWORD)
    schema_id = allowed.register_schema("team-orders-value", V1)
    assert allowed.get_latest_version("team-orders-value").schema_id == schema_id
    wrong = refused(secured_client(secured, USER, "not-the-password").get_subjects)
    assert (wrong.http_status_code, wrong.error_code) == (401, 40101)
    nobody = secured_client(secured, NOBODY, NOBODY_PASSWORD)
    denied = refused(nobody.register_schema, "team-orders-value", V2)
    assert (denied.http_status_code, denied.error_code) == (403, 40301)
    assert refused(nobody.get_latest_version, "team-orders-value").http_status_code == 403
    assert nobody.get_subjects() == []  # the list shows only subjects the caller may read
    other = refused(allowed.register_schema, "payments-value", V1)  # outside alice's prefix
    assert other.http_status_code == 403


def test_a_client_certificate_is_an_mtls_principal(secured):
    """The admin's certificate (User:admin, a super user) without a password: served outside alice's ACLs."""
    cert, key = secured.admin_cert
    admin = SchemaRegistryClient({"url": secured.schema_registry_urls, "ssl.ca.location": secured.ca,
                                  "ssl.certificate.location": cert, "ssl.key.location": key})
    schema_id = admin.register_schema("payments-value", V1)
    assert admin.get_latest_version("payments-value").schema_id == schema_id
    assert "payments-value" in admin.get_subjects()
