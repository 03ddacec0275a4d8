"""Issue 42, item 2: brokers with a listener for the other nodes (--inter-node-listen, certificates
required) and a client listener that takes passwords without a certificate. Replication, transaction
markers and the admin's certificate all go through the node listeners; password clients never need one."""

from __future__ import annotations

import grpc
import pytest

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer
from kanal.clients.consumer_config import ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.certificates import make_dev_tls
from kanal.deploy.local_cluster import LocalCluster
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.v1 import broker_pb2, broker_pb2_grpc

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, check_history, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    tls = make_dev_tls(tmp_path_factory.mktemp("pki-split"), broker_ids=range(3), controller_ids=[0])
    cluster = LocalCluster(tmp_path_factory.mktemp("split"), controllers=1, brokers=3, tls=tls,
                           node_listeners=True, controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS)
    cluster.start(timeout_s=90)
    try:
        ca = str(tls.ca.cert)
        admin_security = ClientSecurity(ca_file=ca, cert_file=str(tls.client.cert),
                                        key_file=str(tls.client.key))
        with Admin(cluster.admin_bootstrap, security=admin_security) as admin:
            admin.create_user("carol", "c-pass")
        yield cluster, admin_security, ClientSecurity(ca_file=ca, user="carol", password="c-pass")
    finally:
        cluster.stop()


def metadata_endpoints(endpoint: str, security: ClientSecurity) -> set[str]:
    with open_channel(endpoint, (), security) as channel:
        reply = broker_pb2_grpc.BrokerStub(channel).Metadata(broker_pb2.MetadataRequest(), timeout=10)
    return {b.endpoint for b in reply.brokers}


def test_each_listener_names_the_brokers_on_that_listener(split):
    cluster, admin_security, carol = split
    clients = {n.endpoint for n in cluster.brokers}
    nodes = {n.extra["inter_node"] for n in cluster.brokers}
    assert clients.isdisjoint(nodes)
    assert metadata_endpoints(cluster.brokers[0].endpoint, carol) == clients
    assert metadata_endpoints(cluster.brokers[0].extra["inter_node"], admin_security) == nodes
    # The node listener lets nobody in without a certificate.
    with pytest.raises(grpc.RpcError) as refused:
        metadata_endpoints(cluster.brokers[0].extra["inter_node"], carol)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_password_clients_replicate_through_the_node_listeners(split):
    cluster, _, carol = split
    with Admin(cluster.bootstrap, security=carol) as admin:
        admin.create_topic("split", 2, 3, configs={"min.insync.replicas": "3"})
    acked: dict[tuple[int, int], bytes] = {}
    config = ProducerConfig(bootstrap=cluster.bootstrap, acks="all", enable_idempotence=True, security=carol)
    with Producer(config) as producer:
        futures = [(producer.produce("split", b"v-%d" % i, key=b"k-%d" % i), b"v-%d" % i)
                   for i in range(40)]
        for future, value in futures:
            meta = future.result(60)  # acks=all with min.insync 3: both followers copied it
            acked[(meta.partition, meta.offset)] = value
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                       security=carol))
    read: list[tuple[int, int, bytes]] = []
    try:
        consumer.assign([("split", 0), ("split", 1)])

        def all_read() -> bool:
            read.extend((r.partition, r.offset, r.value) for r in consumer.poll(0.5))
            return len(read) >= len(acked)

        wait_until(all_read, 60, "every acknowledged record")
    finally:
        consumer.close()
    check_history(acked, sorted(read))


def test_transactions_reach_the_other_brokers(split):
    cluster, _, carol = split
    with Admin(cluster.bootstrap, security=carol) as admin:
        admin.create_topic("split-txn", 3, 3)
    config = ProducerConfig(bootstrap=cluster.bootstrap, acks="all", transactional_id="split-tx",
                            security=carol)
    with Producer(config) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for p in range(3):  # markers go to every partition's leader, most of them another broker
            producer.produce("split-txn", b"in-tx-%d" % p, partition=p)
        producer.commit_transaction()
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                       isolation_level="read_committed", security=carol))
    got: list[bytes] = []
    try:
        consumer.assign([("split-txn", p) for p in range(3)])

        def committed() -> bool:
            got.extend(r.value for r in consumer.poll(0.5))
            return len(got) >= 3

        wait_until(committed, 60, "the committed transaction")
    finally:
        consumer.close()
    assert sorted(got) == [b"in-tx-0", b"in-tx-1", b"in-tx-2"]
