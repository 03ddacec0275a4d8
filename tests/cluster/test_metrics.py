"""Every metric the Grafana dashboard (deploy/grafana/kanal.json) draws is exported by a live node of the
kind it belongs to: controller and Raft names by a controller, the other kanal_* names by a broker, the
process and Python runtime names by both. The cluster first serves produces (acks=all), fetches and a
consumer group, so that the labelled series (per RPC, per group state) exist."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.server.metrics_endpoint import MetricsFlagError, MetricsListen, metrics_listen

from .conftest import create_topic, wait_until

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "kanal.json"
# A series name in a PromQL expression: the names kanal exports start with one of these.
_NAME = re.compile(r"\b((?:kanal|process|python)_[a-z0-9_]+)")
# What prometheus_client appends to a family's name in its samples.
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def dashboard_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs, "the dashboard has no queries"
    return {m for e in exprs for m in _NAME.findall(e)}


def scrape(endpoint: str) -> tuple[set[str], set[str]]:
    """(family names, sample names) the endpoint exports."""
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    families = list(text_string_to_metric_families(text))
    return {f.name for f in families}, {s.name for f in families for s in f.samples}


def exported(name: str, families: set[str], samples: set[str]) -> bool:
    """A dashboard name (a sample name like x_bucket, or a family name) among what a node exports."""
    if name in samples:
        return True
    base = next((name.removesuffix(s) for s in _SUFFIXES if name.endswith(s)), name)
    return base in families


def kind_of(name: str) -> tuple[str, ...]:
    if name.startswith(("kanal_controller_", "kanal_raft_")):
        return ("controller",)
    if name.startswith("kanal_"):
        return ("broker",)
    return ("controller", "broker")


def exercise(cluster, topic: str) -> None:
    """Produces with acks=all, fetches and a group that joins, syncs and commits."""
    create_topic(cluster, topic, partitions=2, replication_factor=3)
    with Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", linger_ms=2)) as producer:
        futures = [producer.produce(topic, f"v{i}", key=f"k{i}") for i in range(40)]
        producer.flush()
        for f in futures:
            f.result(30)
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, group_id="metrics-group",
                                       auto_offset_reset="earliest", session_timeout_ms=3000,
                                       heartbeat_interval_ms=300))
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < 40 and time.monotonic() < deadline:
            got += len(consumer.poll(0.2))
        assert got == 40, f"read {got} of 40"
        consumer.commit()
    finally:
        consumer.close()


@pytest.mark.cluster
def test_every_metric_the_dashboard_uses_is_exported_by_a_live_broker_and_controller(cluster):
    names = dashboard_names()
    assert any(n.startswith("kanal_controller_") for n in names) and any(
        n.startswith("kanal_network_") for n in names)
    exercise(cluster, "metrics-dashboard")
    endpoints = {"controller": [n.extra["metrics"] for n in cluster.controllers],
                 "broker": [n.extra["metrics"] for n in cluster.brokers]}

    def missing() -> dict[str, list[str]]:
        # Per kind, the names no node of that kind exports (groups live on one coordinator, the voter
        # lag on the Raft leader only: one node of the kind is enough).
        scraped = {kind: [scrape(e) for e in eps] for kind, eps in endpoints.items()}
        out: dict[str, list[str]] = {}
        for name in sorted(names):
            for kind in kind_of(name):
                if not any(exported(name, f, s) for f, s in scraped[kind]):
                    out.setdefault(kind, []).append(name)
        return out

    # The group state gauges are refreshed by the coordinator's ticker: wait for it (and report what
    # is still missing at the deadline).
    last: dict[str, list[str]] = {}

    def none_missing() -> bool:
        nonlocal last
        last = missing()
        return not last

    try:
        wait_until(none_missing, 30, "every dashboard metric on a live node")
    except AssertionError:
        raise AssertionError(f"the dashboard uses metrics no live node exports: {last}") from None


@pytest.mark.cluster
def test_both_kinds_of_node_export_the_process_and_python_collectors(cluster):
    for node in [*cluster.controllers, *cluster.brokers]:
        families, _ = scrape(node.extra["metrics"])
        assert {"process_resident_memory_bytes", "process_cpu_seconds", "python_gc_collections",
                "python_info"} <= families, (node, sorted(families))


def test_the_metrics_flag_defaults_moves_and_switches_off():
    assert metrics_listen("", "127.0.0.1:9092", 9404) == MetricsListen("127.0.0.1", 9404)
    assert metrics_listen("", "0.0.0.0:9091", 9405) == MetricsListen("0.0.0.0", 9405)
    assert metrics_listen("", "[::1]:9091", 9405) == MetricsListen("[::1]", 9405)
    assert metrics_listen("10.0.0.1:9999", "127.0.0.1:9092", 9404) == MetricsListen("10.0.0.1", 9999)
    assert metrics_listen("off", "127.0.0.1:9092", 9404) is None
    assert metrics_listen("OFF", "127.0.0.1:9092", 9404) is None
    for bad in ("9404", "host:", ":9404", "host:0", "host:70000", "a b:1", "host:x"):
        with pytest.raises(MetricsFlagError, match="--metrics"):
            metrics_listen(bad, "127.0.0.1:9092", 9404)
