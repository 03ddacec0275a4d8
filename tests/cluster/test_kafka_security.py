"""The Kafka listener of a secured cluster: TLS always, SASL/SCRAM-SHA-256/512 against the credentials in
the metadata log and SASL/PLAIN (SASL_SSL), ACLs checked as for gRPC calls.

The cluster is laid out as `kanal dev --tls` lays it out: the brokers' client listeners (gRPC and Kafka)
take passwords over TLS without a client certificate, the nodes and User:admin use certificates on a
listener of their own; the authorizer is on, with the nodes and User:admin as super users."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient

from kanal.clients.admin import Admin
from kanal.deploy.certificates import make_dev_tls
from kanal.deploy.local_cluster import LocalCluster
from kanal.security.channel_security import ClientSecurity
from kanal.v1 import metadata_pb2
from tests.cluster.conftest import BROKER_FLAGS, CONTROLLER_FLAGS
from tests.harness import kafka_java
from tests.harness.waiting import wait_until

USER, PASSWORD = "alice", "alice-secret-1"
NOBODY, NOBODY_PASSWORD = "mallory", "mallory-secret-1"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_dev_tls(
        tmp_path_factory.mktemp("pki"), broker_ids=range(3), controller_ids=range(3), client_name="admin"
    )


@pytest.fixture(scope="module")
def cluster(pki, tmp_path_factory):
    supers = ";".join([*(f"User:{name}" for name in pki.nodes), "User:admin"])
    authorizer = ["--authorizer", "on", "--super-users", supers]
    cluster = LocalCluster(
        tmp_path_factory.mktemp("kafka-secured"),
        controllers=3,
        brokers=3,
        tls=pki,
        node_listeners=True,
        kafka_listeners=True,
        controller_flags=CONTROLLER_FLAGS + authorizer,
        broker_flags=BROKER_FLAGS + authorizer,
    )
    cluster.start(timeout_s=120)
    admin_security = ClientSecurity(
        ca_file=str(pki.ca.cert), cert_file=str(pki.client.cert), key_file=str(pki.client.key)
    )
    with Admin(cluster.admin_bootstrap, security=admin_security) as admin:
        admin.create_user(USER, PASSWORD, mechanisms=["SCRAM-SHA-256", "SCRAM-SHA-512"])
        admin.create_user(NOBODY, NOBODY_PASSWORD)
        admin.create_acls(
            [
                metadata_pb2.AccessControlEntry(
                    resource_type=resource,
                    resource_name="kafka-",
                    pattern_type=metadata_pb2.ACL_PATTERN_PREFIXED,
                    principal=f"User:{USER}",
                    host="*",
                    operation=operation,
                    permission=metadata_pb2.ACL_PERMISSION_ALLOW,
                )
                for resource, operation in (
                    (metadata_pb2.ACL_RESOURCE_TOPIC, metadata_pb2.ACL_OPERATION_ALL),
                    (metadata_pb2.ACL_RESOURCE_GROUP, metadata_pb2.ACL_OPERATION_ALL),
                )
            ]
        )
        cluster.admin = admin_security
    yield cluster
    cluster.stop()


def sasl(pki, mechanism: str, user: str = USER, password: str = PASSWORD) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(pki.ca.cert),
    }


def create_topic(cluster, pki, name: str, partitions: int = 2) -> None:
    with Admin(cluster.admin_bootstrap, security=cluster.admin) as admin:
        admin.create_topic(name, partitions=partitions, replication_factor=3)
    listing = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap, **sasl(pki, "SCRAM-SHA-256")})
    wait_until(
        lambda: name in listing.list_topics(timeout=10).topics, 30, f"{name} to be known to the brokers"
    )


def produce_and_consume(cluster, config: dict[str, str], topic: str, count: int = 30) -> list[bytes]:
    producer = KafkaProducer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all", "enable.idempotence": True, **config}
    )
    errors = []
    for i in range(count):
        producer.produce(
            topic,
            key=b"%d" % i,
            value=b"secret-%d" % i,
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0 and errors == []
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": f"kafka-{topic}",
            "auto.offset.reset": "earliest",
            **config,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:

        def enough():
            values.extend(m.value() for m in consumer.consume(500, 0.5) if m.error() is None)
            return len(values) >= count

        wait_until(enough, 40, f"{count} records over SASL_SSL")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_sasl_over_tls_produces_and_consumes_as_the_user(cluster, pki, mechanism):
    topic = f"kafka-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, pki, topic)
    values = produce_and_consume(cluster, sasl(pki, mechanism), topic)
    assert sorted(values) == sorted(b"secret-%d" % i for i in range(30))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_is_refused(cluster, pki, mechanism):
    errors: list[KafkaError] = []
    config = {
        "bootstrap.servers": cluster.kafka_bootstrap,
        **sasl(pki, mechanism, password="not-it"),
        "error_cb": errors.append,
    }
    admin = AdminClient(config)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    wait_until(
        lambda: admin.poll(0.2) is not None and any(e.code() == KafkaError._AUTHENTICATION for e in errors),
        20,
        "librdkafka to report the authentication failure",
    )


def test_no_sasl_on_the_tls_listener_is_refused(cluster, pki):
    errors: list[KafkaError] = []
    admin = AdminClient(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca.cert),
            "error_cb": errors.append,
        }
    )
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)


def test_acls_apply_to_kafka_clients_as_to_grpc_calls(cluster, pki):
    topic = f"kafka-acl-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, pki, topic)
    outcome: list = []
    producer = KafkaProducer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "acks": "all",
            "message.timeout.ms": 10_000,
            **sasl(pki, "SCRAM-SHA-256", NOBODY, NOBODY_PASSWORD),
        }
    )
    producer.produce(topic, value=b"denied", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(20)
    assert [e.code() for e in outcome] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    listed = AdminClient(
        {"bootstrap.servers": cluster.kafka_bootstrap, **sasl(pki, "SCRAM-SHA-256", NOBODY, NOBODY_PASSWORD)}
    ).list_topics(timeout=10)
    assert topic not in listed.topics  # DESCRIBE is refused: the topic is left out, as for gRPC


def test_apache_kafka_java_client_over_sasl_scram_and_tls(cluster, pki):
    topic = f"kafka-java-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, pki, topic, partitions=1)
    config = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca.cert),
    }
    produced = kafka_java.driver(
        "produce", cluster.kafka_bootstrap, topic, "10", "zstd", "idempotent", config=config
    )
    assert produced[-2]["count"] == 10
    consumed = kafka_java.driver(
        "consume", cluster.kafka_bootstrap, topic, f"kafka-{topic}", "10", "30000", config=config
    )
    assert sorted(r["value"] for r in consumed if r["type"] == "record") == sorted(f"v{i}" for i in range(10))
    wrong = {**config, "sasl.jaas.config": config["sasl.jaas.config"].replace(PASSWORD, "nope")}
    with pytest.raises(AssertionError, match="SaslAuthenticationException|AuthenticationException"):
        kafka_java.driver("produce", cluster.kafka_bootstrap, topic, "1", "none", config=wrong, timeout_s=90)
