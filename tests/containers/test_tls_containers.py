"""Issue 40, item 6, in containers of the image: the production overlay's TLS setup exactly as rendered (the
TLS_* settings, certificates laid out as the Secrets mount them: tls.crt, tls.key, ca.crt, owned by the pod's
uid, 0440; client.toml as the ConfigMap mounts it). The quorum forms and the broker registers over mTLS; a
certificate client and a password client produce and consume; plaintext and a TLS client without a
certificate are refused by every node; a wrong password is refused; the rendered exec probes and the preStop
check pass inside the containers. Then deploy/k8s/README.md's "Scaling brokers" steps, run as it runs them
(`kanal ...` inside broker-0's container, over TLS with the pod's client.toml): a second broker is started
(the StatefulSet scaled to 2), `kanal reassign balance|execute|verify` moves a partition onto it; scaled
down again, the plan moves it back, `kanal brokers safe-to-stop` says yes, the broker is stopped and
`kanal brokers unregister`-ed and its volume deleted; every record is still read back."""

from __future__ import annotations

import dataclasses
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer
from kanal.clients.consumer_config import ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.v1.error import ErrorCode, KanalError

from ..harness.waiting import wait_until
from .cluster import BROKERS, CLIENT_CONFIG, CONTROLLERS, ContainerCluster, ContainerNode
from .manifests import find, render

pytestmark = pytest.mark.containers


def refused(endpoint: str, security: ClientSecurity | None) -> str | None:
    """The gRPC status name when a health check is refused, None when it is answered."""
    with open_channel(endpoint, (), security) as channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
        except grpc.RpcError as error:
            return error.code().name
    return None


def bootstrap_for(cluster: ContainerCluster, security: ClientSecurity) -> str:
    """Certificate clients dial the brokers' listeners for other nodes; password clients the client ones."""
    return cluster.admin_bootstrap if security.cert_file and not security.user else cluster.bootstrap


def produce(cluster: ContainerCluster, topic: str, security: ClientSecurity, count: int) -> None:
    with Producer(ProducerConfig(bootstrap=bootstrap_for(cluster, security), acks="all",
                                 security=security)) as producer:
        for i in range(count):
            producer.produce(topic, b"r%d" % i, key=b"k%d" % i)
        producer.flush(60)


def read(cluster: ContainerCluster, topic: str, security: ClientSecurity, count: int,
         partitions: int = 1) -> list[bytes]:
    """The first `count` records of the topic's partitions, sorted (values are unique)."""
    consumer = Consumer(ConsumerConfig(bootstrap=bootstrap_for(cluster, security),
                                       auto_offset_reset="earliest", security=security))
    try:
        consumer.assign([(topic, p) for p in range(partitions)])
        for p in range(partitions):
            consumer.seek((topic, p), 0)
        got: list[bytes] = []
        wait_until(lambda: got.extend(r.value for r in consumer.poll(0.5)) or len(got) >= count, 60,
                   f"{count} records read back")
        return sorted(got)
    finally:
        consumer.close()


def produce_and_read(cluster: ContainerCluster, topic: str, security: ClientSecurity, count: int) -> list:
    produce(cluster, topic, security, count)
    return read(cluster, topic, security, count)


def in_pod(node: ContainerNode, command: list[str]) -> tuple[int, str]:
    """A rendered exec command run in the node's container, its ports moved as the fixture moved them."""
    port = node.endpoint.rsplit(":", 1)[1]
    nodes_port = (node.node_endpoint or node.endpoint).rsplit(":", 1)[1]
    argv = [a.replace(":9092", f":{port}").replace(":9091", f":{port}").replace(":9093", f":{nodes_port}")
            for a in command]
    result = node._docker.exec_run(argv)
    return result.exit_code, result.output.decode(errors="replace")


def test_the_production_tls_setup_runs_in_containers_and_refuses_plaintext(docker_image, tmp_path):
    cluster = ContainerCluster(uuid.uuid4().hex[:8], tmp_path, image=docker_image, brokers=2, tls=True)
    try:
        # Ready only if the controllers elected over mTLS and the broker registered over it. Broker 1 is a
        # pod the StatefulSet makes when it is scaled up, below.
        cluster.start(nodes=[*cluster.controllers, cluster.brokers[0]])
        cert_client = cluster.security
        assert cert_client is not None
        # A certificate client dials the brokers' listener for other nodes (9093 in a pod).
        admin = Admin(cluster.admin_bootstrap, security=cert_client)
        admin.create_topic("secured", partitions=1, replication_factor=1)
        assert produce_and_read(cluster, "secured", cert_client, 20) == sorted(b"r%d" % i for i in range(20))

        # A password client (a SCRAM user) on the client listener, with no certificate at all.
        admin.create_user("alice", "alice-secret")
        password_client = ClientSecurity(ca_file=cert_client.ca_file, user="alice", password="alice-secret")
        wait_until(lambda: admin.describe_users(["alice"]), 30, "alice's credentials")
        admin.create_topic("by-password", partitions=1, replication_factor=1)
        assert len(produce_and_read(cluster, "by-password", password_client, 5)) == 5
        wrong = dataclasses.replace(password_client, password="not-it")
        with pytest.raises(KanalError) as error:
            Admin(cluster.bootstrap, security=wrong, request_timeout_ms=5000).list_topics()
        assert error.value.code == ErrorCode.AUTHENTICATION_FAILED
        # The client listener asks for no certificate: one alone authenticates nobody there.
        with pytest.raises(KanalError) as error:
            Admin(cluster.bootstrap, security=cert_client, request_timeout_ms=5000).list_topics()
        assert error.value.code == ErrorCode.AUTHENTICATION_FAILED

        # Plaintext is refused by every listener; TLS without a client certificate by every listener that
        # nodes dial (the controllers', the brokers' listener for other nodes).
        no_certificate = ClientSecurity(ca_file=cert_client.ca_file)
        broker = cluster.brokers[0]
        for name, endpoint in [*((n.name, n.endpoint) for n in cluster.controllers),
                               (f"{broker.name} (nodes)", broker.node_endpoint)]:
            assert refused(endpoint, None) == "UNAVAILABLE", name
            assert refused(endpoint, no_certificate) == "UNAVAILABLE", name
            assert refused(endpoint, cert_client) is None, name
        assert refused(broker.endpoint, None) == "UNAVAILABLE"
        for node in [*cluster.controllers, broker]:
            assert "without TLS" not in node.logs()

        # The rendered exec probes (and the brokers' preStop check) pass inside the containers.
        docs = render("production")
        for sts, nodes in ((CONTROLLERS, cluster.controllers), (BROKERS, cluster.brokers)):
            container = find(docs, "StatefulSet", sts)["spec"]["template"]["spec"]["containers"][0]
            for node in nodes[:1]:
                for probe in ("readinessProbe", "livenessProbe"):
                    code, out = in_pod(node, container[probe]["exec"]["command"])
                    assert code == 0, f"{node.name} {probe}: {out}"
        pre_stop = find(docs, "StatefulSet", BROKERS)["spec"]["template"]["spec"]["containers"][0][
            "lifecycle"]["preStop"]["exec"]["command"]
        code, out = in_pod(cluster.brokers[0], pre_stop)
        assert code == 0 and "may stop" in out, out
        scale_brokers(cluster, admin, cert_client)
    finally:
        cluster.remove()


def scale_brokers(cluster: ContainerCluster, admin: Admin, security: ClientSecurity) -> None:
    """README "Scaling brokers": up from one broker to two and down again, with the README's commands."""
    shell, added = cluster.brokers
    admin.create_topic("scaled", partitions=2, replication_factor=1)
    produce(cluster, "scaled", security, 30)
    before = read(cluster, "scaled", security, 30, partitions=2)
    assert before == sorted(b"r%d" % i for i in range(30))

    def kanal(*argv: str) -> tuple[int, str]:
        return in_pod(shell, ["kanal", *argv, "--bootstrap", "localhost:9093",
                              "--command-config", CLIENT_CONFIG])

    def move(brokers: str, plan: str) -> None:
        code, out = kanal("reassign", "balance", "--brokers", brokers, "--topics", "scaled", "--plan", plan)
        assert code == 0 and "moving 1 partition" in out, out
        code, out = kanal("reassign", "execute", "--plan", plan)
        assert code == 0, out
        wait_until(lambda: kanal("reassign", "verify", "--plan", plan)[0] == 0, 60,
                   f"the plan {plan} complete")

    cluster.start(nodes=[added])  # kubectl -n kanal scale statefulset kanal-broker --replicas=2
    move("0,1", "/tmp/up.json")
    assert sorted(r for p in admin.describe_topic("scaled").partitions for r in p.replicas) == [0, 1]

    move("0", "/tmp/down.json")  # before scaling down: every replica off the broker that goes
    code, out = kanal("brokers", "safe-to-stop", "--id", "1")
    assert code == 0, out
    assert added.stop() == 0  # kubectl -n kanal scale statefulset kanal-broker --replicas=1
    code, out = kanal("brokers", "unregister", "--id", "1")
    assert code == 0, out
    cluster.remove_volume(added)  # kubectl -n kanal delete pvc data-kanal-broker-1
    assert [b.broker_id for b in admin.describe_cluster().brokers] == [0]
    assert read(cluster, "scaled", security, 30, partitions=2) == before
