"""The controller's Prometheus metrics (`kanal controller --metrics HOST:PORT`), named after Kafka's KRaft
controller MBeans so dashboards translate directly.

Every value is read when Prometheus scrapes, from the committed metadata image and pysyncobj's status, never
counted on the side: a scrape of any controller (active or standby) says what that controller has applied.

    kanal_controller_active_controller_count        1 on the active controller, 0 elsewhere
                                                    (kafka.controller ActiveControllerCount: sum over the
                                                    quorum = 1 when healthy)
    kanal_controller_last_applied_record_offset     last metadata log offset applied here (-1: none)
    kanal_controller_last_committed_record_offset   last offset durable in this controller's metadata log
    kanal_controller_fenced_broker_count            registered brokers that are fenced
    kanal_controller_active_broker_count            registered brokers that are not
    kanal_controller_global_topic_count             topics
    kanal_controller_global_partition_count         partitions
    kanal_controller_offline_partitions_count       partitions with no leader
    kanal_controller_preferred_replica_imbalance_count  partitions led by another than their first replica
    kanal_raft_current_leader                       controller id of the Raft leader (-1: none known)
    kanal_raft_current_epoch                        Raft term
    kanal_raft_high_watermark                       Raft commit index
    kanal_raft_has_quorum                           1 while a leader hears from a majority (leader only)
    kanal_raft_voter_lag{voter}                     committed entries a voter has not acknowledged
                                                    (known on the leader only; absent elsewhere)

`controller_gauges` is the pure part (image, quorum status, active flag -> values); ControllerCollector the
shell prometheus_client calls on each scrape; `start_metrics_server` serves one registry per process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kanal.metadata.image import MetadataImage
from kanal.raft.controller_config import Address
from kanal.raft.quorum_status import QuorumStatus

_log = logging.getLogger("kanal.raft.metrics")


@dataclass(frozen=True, slots=True)
class ImageCounts:
    """What the metrics need from the committed image, taken under the store's lock."""

    last_applied_offset: int
    fenced_brokers: int
    active_brokers: int
    topics: int
    partitions: int
    offline_partitions: int
    preferred_imbalance: int


def image_counts(image: MetadataImage) -> ImageCounts:
    fenced = sum(1 for b in image.brokers.values() if b.fenced)
    partitions = offline = imbalance = 0
    for topic in image.topics.values():
        for p in topic.partitions:
            partitions += 1
            offline += p.offline
            imbalance += (not p.offline) and p.leader != p.preferred_leader
    return ImageCounts(image.next_offset - 1, fenced, len(image.brokers) - fenced, len(image.topics), partitions,
                       offline, imbalance)


def controller_gauges(counts: ImageCounts, durable_end_offset: int, quorum: QuorumStatus | None,
                      active: bool) -> list[tuple[str, str, float, dict[str, str]]]:
    """(name, help, value, labels) of every gauge; `quorum` is None while Raft has not started."""
    out: list[tuple[str, str, float, dict[str, str]]] = [
        ("kanal_controller_active_controller_count", "1 on the active controller, 0 elsewhere", int(active), {}),
        ("kanal_controller_last_applied_record_offset", "Last metadata log offset applied here",
         counts.last_applied_offset, {}),
        ("kanal_controller_last_committed_record_offset", "Last metadata log offset durable on this controller",
         durable_end_offset - 1, {}),
        ("kanal_controller_fenced_broker_count", "Registered brokers that are fenced", counts.fenced_brokers, {}),
        ("kanal_controller_active_broker_count", "Registered brokers that are not fenced", counts.active_brokers, {}),
        ("kanal_controller_global_topic_count", "Topics", counts.topics, {}),
        ("kanal_controller_global_partition_count", "Partitions", counts.partitions, {}),
        ("kanal_controller_offline_partitions_count", "Partitions with no leader", counts.offline_partitions, {}),
        ("kanal_controller_preferred_replica_imbalance_count",
         "Partitions led by another replica than their preferred (first) one", counts.preferred_imbalance, {}),
    ]
    if quorum is not None:
        out += [
            ("kanal_raft_current_leader", "Controller id of the Raft leader (-1: none known)", quorum.leader_id, {}),
            ("kanal_raft_current_epoch", "Raft term", quorum.term, {}),
            ("kanal_raft_high_watermark", "Raft commit index", quorum.commit_index, {}),
            ("kanal_raft_has_quorum", "1 while this leader hears from a majority", int(quorum.has_quorum), {}),
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


def start_metrics_server(listen: Address, collector: Collector):
    """Serve `collector` alone (one registry per process, not prometheus_client's global one) on `listen`;
    the server, whose shutdown() stops it. OSError when the address cannot be bound."""
    registry = CollectorRegistry()
    registry.register(collector)
    server, _thread = start_http_server(listen.port, addr=listen.host.strip("[]"), registry=registry)
    _log.info("metrics on http://%s/metrics", listen)
    return server
