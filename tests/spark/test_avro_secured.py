"""kanal-log's Avro decoding on a secured cluster: the registry over TLS with HTTP basic auth against the
metadata log's SCRAM users, a user allowed only her own subjects. Spark reads the values through the
brokers with `schemaRegistry` and her credentials (and not with a wrong password), and from the files with
the schemas of the metadata log; the audit names her as the one who registered them."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kanal.clients.admin import Admin
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.certificates import make_dev_tls
from kanal.deploy.local_cluster import LocalCluster
from kanal.security.channel_security import ClientSecurity
from kanal.spark.audit import run_audit
from kanal.spark.source_options import security_options
from kanal.v1 import metadata_pb2

from ..cluster.conftest import BROKER_FLAGS, CONTROLLER_FLAGS

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

USER, PASSWORD = "alice", "alice-secret-1"
TOPIC = "team-orders"
SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]}
RECORDS = 30


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """One controller, one broker; alice may read and write subjects `team-*`; the admin (a certificate)
    makes her, the topic and the records, whose values alice's serializer registers and frames."""
    pki = make_dev_tls(tmp_path_factory.mktemp("avro-pki"), broker_ids=range(1), controller_ids=range(1),
                       client_name="admin")
    supers = ";".join([*(f"User:{name}" for name in pki.nodes), "User:admin"])
    authorizer = ["--authorizer", "on", "--super-users", supers]
    cluster = LocalCluster(tmp_path_factory.mktemp("avro-secured"), controllers=1, brokers=1, tls=pki,
                           node_listeners=True, schema_registry_listeners=True,
                           controller_flags=CONTROLLER_FLAGS + authorizer,
                           broker_flags=BROKER_FLAGS + authorizer)
    cluster.start(timeout_s=120)
    try:
        admin_security = ClientSecurity(ca_file=str(pki.ca.cert), cert_file=str(pki.client.cert),
                                        key_file=str(pki.client.key))
        with Admin(cluster.admin_bootstrap, security=admin_security) as admin:
            admin.create_user(USER, PASSWORD)
            admin.create_acls([metadata_pb2.AccessControlEntry(
                resource_type=metadata_pb2.ACL_RESOURCE_SUBJECT, resource_name="team-",
                pattern_type=metadata_pb2.ACL_PATTERN_PREFIXED, principal=f"User:{USER}", host="*",
                operation=operation, permission=metadata_pb2.ACL_PERMISSION_ALLOW)
                for operation in (metadata_pb2.ACL_OPERATION_READ, metadata_pb2.ACL_OPERATION_WRITE)])
            admin.create_topic(TOPIC, 1, 1)
        registry = SchemaRegistryClient({"url": cluster.schema_registry_urls,
                                         "ssl.ca.location": str(pki.ca.cert),
                                         "basic.auth.user.info": f"{USER}:{PASSWORD}"})
        serialize = AvroSerializer(registry, json.dumps(SCHEMA))
        context = SerializationContext(TOPIC, MessageField.VALUE)
        data = [{"id": i, "note": None if i % 3 else f"n{i}"} for i in range(RECORDS)]
        with Producer(ProducerConfig(bootstrap=cluster.admin_bootstrap, security=admin_security,
                                     acks="all")) as producer:
            for datum in data:
                producer.produce(TOPIC, serialize(datum, context))
            producer.flush(60)
        schema_id = registry.get_latest_version(f"{TOPIC}-value").schema_id
        yield cluster, admin_security, str(pki.ca.cert), data, schema_id
    finally:
        cluster.stop()


def through_brokers(spark, cluster, admin_security, ca: str, password: str):
    return (spark.read.format("kanal-log").option("bootstrap", cluster.admin_bootstrap)
            .options(**security_options(admin_security)).option("topics", TOPIC).option("valueFormat", "avro")
            .option("schemaRegistry", cluster.schema_registry_urls).option("schemaRegistry.user", USER)
            .option("schemaRegistry.password", password).option("schemaRegistry.tls.ca.file", ca).load())


def test_values_read_through_the_brokers_with_the_registrys_credentials(secured, spark):
    cluster, admin_security, ca, data, schema_id = secured
    df = through_brokers(spark, cluster, admin_security, ca, PASSWORD)
    rows = df.orderBy("offset").select("value", "value_schema_id", "value_error").collect()
    assert [r["value"].asDict() for r in rows] == data
    assert {(r["value_schema_id"], r["value_error"]) for r in rows} == {(schema_id, None)}
    with pytest.raises(Exception, match="HTTP 401"):
        through_brokers(spark, cluster, admin_security, ca, "not-the-password")


def test_from_files_the_schemas_come_from_the_metadata_log(secured, spark):
    cluster, _admin_security, _ca, data, _schema_id = secured
    df = (spark.read.format("kanal-log").option("topics", TOPIC).option("valueFormat", "avro")
          .load(str(cluster.data_dir)))
    assert [r["value"].asDict() for r in df.orderBy("offset").select("value").collect()] == data


def test_the_audit_names_who_registered_the_schema(secured, spark, tmp_path):
    cluster, _admin_security, _ca, _data, schema_id = secured
    audit = run_audit(spark, cluster.data_dir, tmp_path / "audit")
    changes = [(r["event"], r["subject"], r["version"], r["schema_id"], r["principal"])
               for r in audit.tables["schema_changes"].collect()]
    assert changes == [("schema_registered", f"{TOPIC}-value", 1, schema_id, f"User:{USER}")]
