"""Tiered storage when remote storage fails (issue 44): an S3 server (moto) reached through a proxy that
refuses or stalls connections on command. Nothing acknowledged is lost: uploads wait, local segments are
kept until uploaded, reads of remote-only offsets fail with a retriable error, and a leader killed in the
middle of an upload leaves nothing recorded that is not stored."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.deploy.chaos.fault_proxy import TcpFaultProxy
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode

from .conftest import (
    BROKER_FLAGS,
    CONTROLLER_FLAGS,
    broker_node,
    check_history,
    create_topic,
    partition_info,
    wait_until,
)
from .test_tiered_storage import TIERED, local_bases, produce, read_from_zero

pytestmark = pytest.mark.cluster


@dataclass
class Faulty:
    cluster: LocalCluster
    proxy: TcpFaultProxy


@pytest.fixture(scope="module")
def faulty(tmp_path_factory, moto_s3) -> Iterator[Faulty]:
    root = tmp_path_factory.mktemp("tiered-faults")
    proxy = TcpFaultProxy("127.0.0.1", moto_s3.port)
    flags = ["--remote-storage", f"s3://{moto_s3.bucket}/{root.name}",
             "--remote-storage-endpoint", proxy.endpoint, "--remote-storage-region", moto_s3.region,
             "--remote-storage-access-key-id", moto_s3.access_key_id,
             "--remote-storage-secret-access-key", moto_s3.secret_access_key,
             "--remote-retry-backoff-ms-max", "500"]
    c = LocalCluster(root / "cluster", controllers=1, brokers=3, controller_flags=CONTROLLER_FLAGS,
                     broker_flags=[*BROKER_FLAGS, *flags])
    try:
        c.start(timeout_s=90)
        yield Faulty(c, proxy)
    finally:
        c.stop()
        proxy.close()


def upload_lag(cluster: LocalCluster, broker: int) -> float:
    node = broker_node(cluster, broker)
    with urllib.request.urlopen(f"http://{node.extra['metrics']}/metrics", timeout=5) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("kanal_remote_log_upload_lag_segments "):
                return float(line.split()[1])
    raise AssertionError("no kanal_remote_log_upload_lag_segments in the broker's metrics")


def fetch_error_at(cluster: LocalCluster, broker: int, topic: str, offset: int) -> int:
    endpoint = broker_node(cluster, broker).endpoint
    md = ClusterMetadata(endpoint)
    try:
        request = broker_pb2.FetchRequest(max_bytes=1 << 20)
        request.topics.add(topic=topic).partitions.add(partition=0, fetch_offset=offset,
                                                       current_leader_epoch=-1)
        return md.stub(endpoint).Fetch(request, timeout=30).topics[0].partitions[0].error
    finally:
        md.close()


def test_remote_storage_down_for_a_while_loses_nothing(faulty) -> None:
    cluster, proxy = faulty.cluster, faulty.proxy
    create_topic(cluster, "down", partitions=1, replication_factor=3, **TIERED)
    acked: dict = {}
    produce(cluster, "down", 4000, 0, acked)  # several segments: more than local retention keeps
    leader = partition_info(cluster, "down", 0).leader
    wait_until(lambda: local_bases(cluster, leader, "down")[0] > 0, 60, "the first uploads and deletions")
    proxy.set_mode("refuse")
    try:
        produce(cluster, "down", 3000, 4000, acked)  # producing does not depend on remote storage
        wait_until(lambda: upload_lag(cluster, leader) >= 3, 60, "uploads to fall behind")
        kept_from = local_bases(cluster, leader, "down")[0]
        # Local retention (32 KiB, two segments) would keep fewer: the ones not uploaded stay.
        assert len(local_bases(cluster, leader, "down")) >= 4
        assert fetch_error_at(cluster, leader, "down", 0) == ErrorCode.STORAGE_ERROR  # retriable
        wait_until(lambda: upload_lag(cluster, leader) >= 3 and local_bases(cluster, leader, "down")[0]
                   == kept_from, 10, "the segments to stay while uploads cannot run")
    finally:
        proxy.set_mode("pass")
    wait_until(lambda: upload_lag(cluster, leader) == 0, 60, "the uploads to catch up")
    wait_until(lambda: local_bases(cluster, leader, "down")[0] > kept_from, 60, "local retention to resume")
    check_history(acked, read_from_zero(cluster, "down", 7000))


def test_a_leader_killed_mid_upload_leaves_nothing_recorded_that_is_not_stored(faulty) -> None:
    cluster, proxy = faulty.cluster, faulty.proxy
    create_topic(cluster, "cut", partitions=1, replication_factor=3, **TIERED)
    acked: dict = {}
    produce(cluster, "cut", 4000, 0, acked)
    old_leader = partition_info(cluster, "cut", 0).leader
    wait_until(lambda: local_bases(cluster, old_leader, "cut")[0] > 0, 60, "the first uploads")
    proxy.set_mode("stall")
    victim = broker_node(cluster, old_leader)
    try:
        produce(cluster, "cut", 1500, 4000, acked)
        wait_until(lambda: proxy.stalled > 0, 60, "an upload to be caught in the middle")
        victim.kill()
    finally:
        proxy.set_mode("pass")
    wait_until(lambda: partition_info(cluster, "cut", 0).leader not in (-1, old_leader), 60, "a new leader")
    produce(cluster, "cut", 500, 5500, acked)
    cluster.restart(victim, timeout_s=90)
    new_leader = partition_info(cluster, "cut", 0).leader
    wait_until(lambda: upload_lag(cluster, new_leader) == 0, 60, "the new leader's uploads to catch up")
    # Every recorded segment is readable: a record naming a missing object would fail this read.
    check_history(acked, read_from_zero(cluster, "cut", 6000))
