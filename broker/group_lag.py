"""Consumer-group lag for the group coordinator (group_coordinator.py): the high-water marks lag is measured
against (read here for the partitions led here, asked of their leaders for the others) and the gauges its
ticker refreshes — lag per group and partition, groups by state, rebalances."""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from kanal.broker.metrics import BrokerMetrics
from kanal.broker.peer_brokers import PeerBrokers
from kanal.metadata import MetadataImage
from kanal.metadata.ids import BrokerId
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

_PEER_CALL_TIMEOUT_S = 2.0


class GroupLag:
    def __init__(
        self,
        *,
        broker_id: int,
        replicas,
        image: Callable[[], MetadataImage],
        metrics: BrokerMetrics,
        peers: PeerBrokers,
    ) -> None:
        self.broker_id = broker_id
        self._replicas = replicas
        self._image = image
        self._metrics = metrics
        self._peers = peers
        self._exported_lag: set[tuple[str, str, str]] = set()
        # Each group's generation at the last export: rebalances are counted from its increments.
        self._seen_generations: dict[str, int] = {}

    def high_watermarks(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """High-water marks of partitions: read here for the ones led here, asked of their leaders for the
        others (one ListOffsets per leader). Partitions whose leader cannot answer are left out."""
        image = self._image()
        out: dict[tuple[str, int], int] = {}
        remote: dict[int, list[tuple[str, int]]] = {}
        for topic, p in tps:
            t = image.topics.get(topic)
            if t is None or not 0 <= p < len(t.partitions):
                continue
            leader = t.partitions[p].leader
            if leader == self.broker_id:
                try:
                    out[(topic, p)] = self._replicas.partition(topic, p).high_watermark
                except KanalError:
                    pass  # deleted or moved meanwhile: unknown
            elif leader >= 0:
                remote.setdefault(leader, []).append((topic, p))
        for leader_id, items in remote.items():
            broker = image.brokers.get(BrokerId(leader_id))
            if broker is None:
                continue
            request = broker_pb2.ListOffsetsRequest()
            for topic, p in items:
                request.topics.add(topic=topic).partitions.add(partition=p, timestamp_ms=-1)
            try:
                answer = self._peers.stub(broker.peer_endpoint).ListOffsets(
                    request, timeout=_PEER_CALL_TIMEOUT_S)
            except grpc.RpcError as exc:
                log.info("high-water marks from broker %d: %s", leader_id, exc.code().name)
                continue
            for t in answer.topics:
                for p in t.partitions:
                    if p.error == ErrorCode.NONE:
                        out[(t.topic, p.partition)] = p.offset
        return out

    def export(self, committed: dict[tuple[str, tuple[str, int]], int], states: dict[str, int],
               generations: dict[str, int]) -> None:
        """Export the lag of each committed offset, keyed (group, (topic, partition)), against its partition's
        high-water mark; the number of groups in each state; and the rebalances since the last export (each
        group's generation increments)."""
        ends = self.high_watermarks(sorted({tp for _, tp in committed}))
        exported = set()
        for (group_id, (topic, p)), offset in committed.items():
            end = ends.get((topic, p))
            if end is None:
                continue
            labels = (group_id, topic, str(p))
            self._metrics.consumer_group_lag.labels(*labels).set(max(0, end - offset))
            exported.add(labels)
        for labels in self._exported_lag - exported:
            self._metrics.consumer_group_lag.remove(*labels)
        self._exported_lag = exported
        for state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable"):
            self._metrics.groups.labels(state).set(states.get(state, 0))
        for group_id, generation in generations.items():
            seen = self._seen_generations.get(group_id)
            if seen is not None and generation > seen:  # a group new here (loaded, created) counts from now
                self._metrics.group_rebalances.inc(generation - seen)
        self._seen_generations = generations
