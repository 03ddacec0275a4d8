"""Issue 40, item 1, in containers of the image: the controllers' volumes are replaced by fresh ones while
the brokers are stopped; started on their old volumes, the brokers refuse the new quorum (one line naming
both cluster ids) and every partition directory is kept, file for file."""

from __future__ import annotations

import re
import uuid

import pytest

from kanal.clients.admin import Admin
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig

from ..harness.waiting import wait_until
from .cluster import DATA_MOUNT, ContainerCluster

pytestmark = pytest.mark.containers
TOPIC = "identity"


def test_brokers_refuse_a_fresh_controller_quorum_and_keep_their_partitions(docker_image, tmp_path):
    cluster = ContainerCluster(uuid.uuid4().hex[:8], tmp_path, image=docker_image)
    try:
        cluster.start()
        admin = Admin(cluster.bootstrap)
        admin.create_topic(TOPIC, partitions=5, replication_factor=3)
        producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all"))
        try:
            for i in range(200):
                producer.produce(TOPIC, value=f"v{i}".encode())
            producer.flush(60)
        finally:
            producer.close()
        old_id = admin.describe_cluster().cluster_id
        assert len(old_id) == 32
        for broker in cluster.brokers:
            assert broker.stop() == 0
        before = {b.name: cluster.files(b, f"{DATA_MOUNT}/data") for b in cluster.brokers}
        for files in before.values():
            assert sum(f"{TOPIC}-" in n and n.endswith(".log") for n in files) == 5, files

        for controller in cluster.controllers:  # a fresh controller quorum: new, empty volumes
            controller.stop()
        for controller in cluster.controllers:
            cluster.replace_volume(controller)
        cluster.wait_ready(cluster.controllers)
        for broker in cluster.brokers:
            broker.start_again()
        for broker in cluster.brokers:
            wait_until(lambda b=broker: b.exit_code is not None, 120, f"{broker.name} to refuse")
            assert broker.exit_code != 0
            logs = broker.logs()
            line = next(ln for ln in logs.splitlines() if "INCONSISTENT_CLUSTER_ID" in ln)
            new_ids = set(re.findall(r"names cluster ([0-9a-f]{32})", line))
            assert old_id in line and len(new_ids) == 1 and old_id not in new_ids, line
            assert "deleted while this broker was away" not in logs
        after = {b.name: cluster.files(b, f"{DATA_MOUNT}/data") for b in cluster.brokers}
        assert after == before
    finally:
        cluster.remove()
