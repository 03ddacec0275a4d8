"""The controller's Prometheus endpoint (`--metrics`): scraped over HTTP from a real controller process while
brokers register, a topic is created and the brokers' sessions expire; and the pure gauge computation."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kanal.deploy.local_cluster import free_ports
from kanal.metadata.image import BrokerRegistration, MetadataImage, PartitionState, TopicImage
from kanal.raft.controller_metrics import controller_gauges, image_counts
from kanal.v1 import admin_pb2


def scrape(endpoint: str) -> dict[str, float]:
    """Every sample of the endpoint, keyed `name` or `name{label=value}`."""
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return samples


@pytest.mark.cluster
def test_a_controller_process_serves_kafka_like_metrics(quorum_factory, fake_brokers_factory, wait):
    metrics = f"127.0.0.1:{free_ports(1)[0]}"
    # Short sessions so that brokers that stop heartbeating are fenced within the test.
    q = quorum_factory(size=1, extra_args=["--metrics", metrics, "--election-timeout-ms", "200",
                                           "--session-timeout-ms", "2000"])
    active = q.wait_active()
    first = wait(lambda: scrape(metrics), 30, "the metrics endpoint")
    assert first["kanal_controller_active_controller_count"] == 1
    assert first["kanal_raft_current_leader"] == active and first["kanal_raft_has_quorum"] == 1
    assert first["kanal_raft_current_epoch"] >= 1

    brokers = fake_brokers_factory(q)
    brokers.register_live([1, 2])
    reply = q.stub(active).CreateTopics(admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
        name="m", partitions=4, replication_factor=1)]), timeout=10)
    assert reply.results[0].error == 0, reply.results[0].error_message
    live = wait(lambda: (s := scrape(metrics))["kanal_controller_global_partition_count"] == 4 and s, 10,
                "the topic in the metrics")
    assert live["kanal_controller_global_topic_count"] == 1
    assert live["kanal_controller_offline_partitions_count"] == 0
    assert live["kanal_controller_fenced_broker_count"] == 0
    assert (
        live["kanal_controller_last_applied_record_offset"]
        > first["kanal_controller_last_applied_record_offset"]
    )
    assert (
        live["kanal_controller_last_committed_record_offset"]
        <= live["kanal_controller_last_applied_record_offset"]
    )
    assert live["kanal_controller_registered_broker_count"] == 2
    assert live["kanal_controller_under_replicated_partitions_count"] == 0
    assert live["kanal_raft_applied_index"] >= 1
    # The registrations and the create were writes the active controller decided and timed.
    assert live["kanal_controller_write_latency_seconds_count"] >= 3
    assert live[
        "process_resident_memory_bytes"
    ] > 0 and "python_info{implementation=CPython,major=3," in " ".join(live)

    # No more heartbeats: both sessions expire, both brokers are fenced, every partition loses its leader.
    fenced = wait(lambda: (s := scrape(metrics))["kanal_controller_fenced_broker_count"] == 2 and s, 30,
                  "both brokers fenced")
    assert fenced["kanal_controller_active_broker_count"] == 0
    assert fenced["kanal_controller_offline_partitions_count"] == 4
    assert fenced["kanal_raft_high_watermark"] > first["kanal_raft_high_watermark"]


def test_the_gauges_follow_the_image():
    image = MetadataImage()
    for b, fenced in ((1, False), (2, False), (3, True)):
        image.brokers[b] = BrokerRegistration(b, f"i{b}", 10 + b, f"h{b}:9092", "", fenced)
    image.topics["t"] = TopicImage("t", "id-t", [
        PartitionState(0, (1, 2), (1, 2), 1, 0, 0),   # led by its preferred replica
        PartitionState(1, (1, 2), (2,), 2, 1, 1),     # led by another
        PartitionState(2, (3,), (3,), -1, 1, 1),      # offline
    ])
    image.next_offset = 42
    values = {name: value for name, _, value, _ in controller_gauges(image_counts(image), 40, None, False)}
    assert values == {
        "kanal_controller_active_controller_count": 0,
        "kanal_controller_last_applied_record_offset": 41,
        "kanal_controller_last_committed_record_offset": 39,
        "kanal_controller_metadata_log_end_offset": 40,
        "kanal_controller_registered_broker_count": 3,
        "kanal_controller_fenced_broker_count": 1,
        "kanal_controller_active_broker_count": 2,
        "kanal_controller_global_topic_count": 1,
        "kanal_controller_global_partition_count": 3,
        "kanal_controller_offline_partitions_count": 1,
        "kanal_controller_under_replicated_partitions_count": 1,  # partition 1: ISR (2,) of (1, 2)
        "kanal_controller_preferred_replica_imbalance_count": 1,
    }
