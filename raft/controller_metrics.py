"""The controller's Prometheus metrics (port 9405 on the --listen host by default; `kanal controller --metrics
HOST:PORT` moves it, `--metrics off` switches it off), named after Kafka's KRaft controller MBeans so
dashboards translate directly. docs/metrics.md lists them; deploy/grafana/kanal.json draws them.

Every value is read when Prometheus scrapes, from the committed metadata image and pysyncobj's status, never
counted on the side: a scrape of any controller (active or standby) says what that controller has applied.

    kanal_controller_active_controller_count        1 on the active controller, 0 elsewhere
                                                    (kafka.controller ActiveControllerCount: sum over the
                                                    quorum = 1 when healthy)
    kanal_controller_last_applied_record_offset     last metadata log offset applied here (-1: none)
    kanal_controller_last_committed_record_offset   last offset durable in this controller's metadata log
    kanal_controller_metadata_log_end_offset        offset the next durable metadata record gets
    kanal_controller_registered_broker_count        registered brokers, fenced or not
    kanal_controller_fenced_broker_count            registered brokers that are fenced
    kanal_controller_active_broker_count            registered brokers that are not
    kanal_controller_global_topic_count             topics
    kanal_controller_global_partition_count         partitions
    kanal_controller_offline_partitions_count       partitions with no leader
    kanal_controller_under_replicated_partitions_count  led partitions whose ISR is smaller than their
                                                        replicas
    kanal_controller_preferred_replica_imbalance_count  partitions led by another than their first replica
    kanal_raft_current_leader                       controller id of the Raft leader (-1: none known)
    kanal_raft_current_epoch                        Raft term
    kanal_raft_high_watermark                       Raft commit index
    kanal_raft_applied_index                        last Raft index this controller applied
    kanal_raft_has_quorum                           1 while a leader hears from a majority (leader only)
    kanal_raft_voter_lag{voter}                     committed entries a voter has not acknowledged
                                                    (known on the leader only; absent elsewhere)
    kanal_controller_write_latency_seconds          histogram: one write, decided on the active controller
                                                    until applied and durable (Kafka's
                                                    EventQueueProcessingTimeMs, counted to the commit)

And the process and Python runtime collectors (process_*, python_*; kanal.server.metrics_endpoint).

`controller_gauges` is the pure part (image, quorum status, active flag -> values); ControllerCollector the
shell prometheus_client calls on each scrape; `start_metrics_server` serves one registry per process.
The write-latency histogram is the one value observed as it happens (ActiveController's `on_write_s`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kanal.metadata.image import MetadataImage
from kanal.raft.controller_config import Address
from kanal.raft.quorum_status import QuorumStatus
from kanal.server.metrics_endpoint import MetricsListen, node_registry, serve_metrics

_log = logging.getLogger("kanal.raft.metrics")
# From a quorum on one machine's loopback (a millisecond) to a disk or a network struggling (seconds).
WRITE_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass(frozen=True, slots=True)
class ImageCounts:
    """What the metrics need from the committed image, taken under the store's lock."""

    last_applied_offset: int
    fenced_brokers: int
    active_brokers: int
    topics: int
    partitions: int
    offline_partitions: int
    under_replicated_partitions: int
    preferred_imbalance: int


def image_counts(image: MetadataImage) -> ImageCounts:
    fenced = sum(1 for b in image.brokers.values() if b.fenced)
    partitions = offline = under_replicated = imbalance = 0
    for topic in image.topics.values():
        for p in topic.partitions:
            partitions += 1
            offline += p.offline
            under_replicated += (not p.offline) and len(p.isr) < len(p.replicas)
            imbalance += (not p.offline) and p.leader != p.preferred_leader
    return ImageCounts(
        image.next_offset - 1,
        fenced,
        len(image.brokers) - fenced,
        len(image.topics),
        partitions,
        offline,
        under_replicated,
        imbalance,
    )


def controller_gauges(counts: ImageCounts, durable_end_offset: int, quorum: QuorumStatus | None,
                      active: bool) -> list[tuple[str, str, float, dict[str, str]]]:
    """(name, help, value, labels) of every gauge; `quorum` is None while Raft has not started."""
    out: list[tuple[str, str, float, dict[str, str]]] = [
        (
            "kanal_controller_active_controller_count",
            "1 on the active controller, 0 elsewhere",
            int(active),
            {},
        ),
        (
            "kanal_controller_last_applied_record_offset",
            "Last metadata log offset applied here",
            counts.last_applied_offset,
            {},
        ),
        (
            "kanal_controller_last_committed_record_offset",
            "Last metadata log offset durable on this controller",
            durable_end_offset - 1,
            {},
        ),
        (
            "kanal_controller_metadata_log_end_offset",
            "Offset the next durable metadata record gets",
            durable_end_offset,
            {},
        ),
        (
            "kanal_controller_registered_broker_count",
            "Registered brokers, fenced or not",
            counts.fenced_brokers + counts.active_brokers,
            {},
        ),
        (
            "kanal_controller_fenced_broker_count",
            "Registered brokers that are fenced",
            counts.fenced_brokers,
            {},
        ),
        (
            "kanal_controller_active_broker_count",
            "Registered brokers that are not fenced",
            counts.active_brokers,
            {},
        ),
        ("kanal_controller_global_topic_count", "Topics", counts.topics, {}),
        ("kanal_controller_global_partition_count", "Partitions", counts.partitions, {}),
        (
            "kanal_controller_offline_partitions_count",
            "Partitions with no leader",
            counts.offline_partitions,
            {},
        ),
        (
            "kanal_controller_under_replicated_partitions_count",
            "Partitions with a leader whose ISR is smaller than their replica set",
            counts.under_replicated_partitions,
            {},
        ),
        (
            "kanal_controller_preferred_replica_imbalance_count",
            "Partitions led by another replica than their preferred (first) one",
            counts.preferred_imbalance,
            {},
        ),
    ]
    if quorum is not None:
        out += [
            (
                "kanal_raft_current_leader",
                "Controller id of the Raft leader (-1: none known)",
                quorum.leader_id,
                {},
            ),
            ("kanal_raft_current_epoch", "Raft term", quorum.term, {}),
            ("kanal_raft_high_watermark", "Raft commit index", quorum.commit_index, {}),
            ("kanal_raft_applied_index", "Last Raft index this controller applied", quorum.last_applied, {}),
            (
                "kanal_raft_has_quorum",
                "1 while this leader hears from a majority",
                int(quorum.has_quorum),
                {},
            ),
        ]
        out += [("kanal_raft_voter_lag", "Committed Raft entries a voter has not acknowledged (leader only)",
                 quorum.lag(v), {"voter": str(v.controller_id)})
                for v in quorum.voters if quorum.lag(v) >= 0]
    return out


class ControllerCollector(Collector):
    def __init__(self, counts: Callable[[], ImageCounts], durable_end_offset: Callable[[], int],
                 quorum: Callable[[], QuorumStatus | None], active: Callable[[], bool]) -> None:
        self._counts = counts
        self._durable_end_offset = durable_end_offset
        self._quorum = quorum
        self._active = active

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}
        gauges = controller_gauges(self._counts(), self._durable_end_offset(), self._quorum(), self._active())
        for name, help_text, value, labels in gauges:
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, help_text, labels=sorted(labels))
            family.add_metric([labels[k] for k in sorted(labels)], value)
        yield from families.values()


def write_latency_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram("kanal_controller_write_latency_seconds",
                     "One write on the active controller, from its decision until it is applied and durable",
                     buckets=WRITE_LATENCY_BUCKETS_S, registry=registry)


def start_metrics_server(listen: Address, collector: Collector, registry: CollectorRegistry | None = None):
    """Serve `collector` on `registry` (default: a new one with the runtime collectors; one registry per
    process, not prometheus_client's global one) on `listen`; the server, whose shutdown() stops it. OSError
    when the address cannot be bound."""
    registry = registry or node_registry()
    registry.register(collector)
    server = serve_metrics(MetricsListen(listen.host, listen.port), registry)
    _log.info("metrics on http://%s/metrics", listen)
    return server
