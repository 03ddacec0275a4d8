"""FetchCall: one Fetch request and its long poll (Kafka's fetch purgatory).

A Fetch reads every partition it names; with fewer than `min_bytes` ready and no error it parks until
one of them changes (its log end for a follower, its high-water mark for a consumer) or `max_wait_ms`
passes. Parking holds no thread: the call registers a *waiter* (waiter.py) on each partition it read, in
the same critical section as the read (so no change after the read is missed), and the partition calls
`waiter.set()` when it changes.

Who is a follower: a Fetch whose `replica_id` is set and not negative (the field has presence, so a
consumer that leaves it out is never taken for broker 0). A follower's `replica_epoch` must be the
current broker epoch of a registered, unfenced broker in this broker's metadata image, or the whole call
is refused with STALE_BROKER_EPOCH before anything is read or recorded: a follower's fetch offset moves
the high-water mark, so a caller that is not that broker must never be counted as its copy.

Topic ids: a TopicRequest that carries `topic_id` (followers always do) gets UNKNOWN_TOPIC_ID for each of
its partitions unless that is the id of the topic this broker hosts under the name
(`ReplicaManager.partition`): a replica of a deleted topic never receives the data of the topic
recreated under its name.

Follower fetching (KIP-392; read_replica.py): a consumer that names its rack (`rack_id`) may be served by
an in-sync follower, below that follower's high-water mark, and the leader may answer it
`preferred_read_replica` by the broker's replica selector. Such an answer ends a long poll at once.

The call reads through `HostedReplicas`, the part of the replica manager (replica_manager.py, which makes
every FetchCall) that it needs: so this module sits below the manager rather than beside it in a cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

from kanal.broker.config import BrokerConfig
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.partition import FOLLOWER, Partition
from kanal.broker.read_replica import FollowerView, choose_read_replica
from kanal.broker.remote_fetch import RemoteReader, RemoteReadNeeded, RemoteReadSpec
from kanal.broker.waiter import Waiter
from kanal.metadata import MetadataImage
from kanal.metadata.ids import BrokerId
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError


class HostedReplicas(Protocol):
    """What a FetchCall reads through: the broker's limits and counters, and its hosted replicas
    (ReplicaManager; the lookup raises KanalError for a replica not hosted here)."""

    config: BrokerConfig
    metrics: BrokerMetrics
    remote_reader: RemoteReader | None

    def partition(self, topic: str, partition_id: int, topic_id: str = "") -> Partition: ...


def follower_id(request: broker_pb2.FetchRequest) -> int | None:
    """The follower's broker id, or None for a consumer's Fetch."""
    if request.HasField("replica_id") and request.replica_id >= 0:
        return request.replica_id
    return None


def check_topic_id(topic: str, requested_topic_id: str, hosted_topic_id: str | None) -> None:
    """UNKNOWN_TOPIC_ID when a fetcher names `requested_topic_id` (empty: no check) and this broker's topic
    of that name has another id (`hosted_topic_id`; None: no such topic). The one rule for both halves:
    the image's topic, and the replica actually hosted (which lags the image while it is replaced)."""
    if requested_topic_id and requested_topic_id != hosted_topic_id:
        hosted = f"its id here is {hosted_topic_id}" if hosted_topic_id is not None else "no such topic here"
        raise KanalError(ErrorCode.UNKNOWN_TOPIC_ID,
                         f"topic {topic!r}: the fetcher means topic id {requested_topic_id}; {hosted}")


def check_follower(image: MetadataImage, replica_id: int, replica_epoch: int) -> None:
    """STALE_BROKER_EPOCH unless `replica_id` is a registered, unfenced broker at `replica_epoch`."""
    broker = image.brokers.get(BrokerId(replica_id))
    if broker is None:
        raise KanalError(ErrorCode.STALE_BROKER_EPOCH, f"replica {replica_id} is not a registered broker")
    if broker.fenced:
        raise KanalError(ErrorCode.STALE_BROKER_EPOCH, f"replica {replica_id} is fenced")
    if broker.broker_epoch != replica_epoch:
        raise KanalError(ErrorCode.STALE_BROKER_EPOCH,
                         f"replica {replica_id} sent broker epoch {replica_epoch}; its current epoch is "
                         f"{broker.broker_epoch}")


class FetchCall:
    def __init__(self, manager: HostedReplicas, request: broker_pb2.FetchRequest, waiter: Waiter | None,
                 image: MetadataImage) -> None:
        config = manager.config
        self.follower = follower_id(request)
        if self.follower is not None:
            check_follower(image, self.follower, request.replica_epoch)
        if request.max_wait_ms < 0 or request.min_bytes < 0 or request.max_bytes < 0:
            raise KanalError(ErrorCode.INVALID_REQUEST, "max_wait_ms, min_bytes and max_bytes must be >= 0")
        self._manager = manager
        self._request = request
        wait_s = min(request.max_wait_ms, config.fetch_wait_ms_max) / 1000
        self.deadline_s = time.monotonic() + wait_s
        self.bytes_max = min(
            request.max_bytes or config.fetch_response_bytes_max, config.fetch_response_bytes_max
        )
        self.min_bytes = max(request.min_bytes, 1)
        self._waiter = waiter if wait_s > 0 else None  # None: answer after one read
        self._registered: dict[int, Partition] = {}
        self.reply = broker_pb2.FetchResponse()
        self.total_bytes = 0
        # Tiered storage: partitions of the last read that only remote storage can answer, answered by
        # `complete_remote` off the event loop before the reply goes.
        self.remote_reads: list[tuple[broker_pb2.FetchResponse.PartitionData, RemoteReadSpec]] = []
        self.follower_bytes = 0  # of total_bytes, read from replicas this broker follows
        # Follower fetching, for a consumer that names its rack: followers may serve it, and the leader
        # may send it to the replica the selector prefers.
        rack = "" if self.follower is not None else request.rack_id
        self._from_follower = bool(rack)
        self._choose_replica: Callable[[list[FollowerView], int], int] | None = None
        if rack and config.replica_selector != "leader":
            racks = {int(b): registration.rack for b, registration in image.brokers.items()}
            self._choose_replica = partial(choose_read_replica, config.replica_selector, rack,
                                           config.broker_id, racks)

    def __repr__(self) -> str:
        kind = f"follower {self.follower}" if self.follower is not None else "consumer"
        return f"<FetchCall {kind} bytes={self.total_bytes} parked_on={len(self._registered)}>"

    @property
    def kind(self) -> str:
        return "follower" if self.follower is not None else "consumer"

    def remaining_s(self) -> float:
        return self.deadline_s - time.monotonic()

    def read(self) -> bool:
        """Read every partition once; True when the reply should go now (enough bytes, an error, no
        waiting wanted, or the deadline passed), False when the call should park until woken."""
        if self._waiter is not None:
            self._waiter.clear()  # before the read: a change after it sets the waiter again
        self.reply, self.total_bytes = self._read_once()
        if (self.total_bytes >= self.min_bytes or self._waiter is None or self.remaining_s() <= 0
                or self.remote_reads):
            return True
        return any(p.error or p.HasField("preferred_read_replica") for t in self.reply.topics
                   for p in t.partitions)

    def complete_remote(self) -> None:
        """Answer the partitions only remote storage holds (blocking I/O: call it off the event loop, e.g.
        on the remote reader's pool)."""
        reader = self._manager.remote_reader
        for out, spec in self.remote_reads:
            if reader is None:  # the topic is tiered but this broker has no remote storage
                out.error = ErrorCode.STORAGE_ERROR
                out.error_message = "this broker has no remote storage (--remote-storage)"
                continue
            self.total_bytes += reader.fill(spec, out)
        self.remote_reads = []

    def close(self) -> broker_pb2.FetchResponse:
        """The call ended (answered or cancelled): unregister its waiter everywhere; the reply."""
        if self._waiter is not None:
            for part in self._registered.values():
                part.remove_waiter(self._waiter)
        self._registered.clear()
        if self.follower is None:
            metrics = self._manager.metrics
            metrics.bytes_out.inc(self.total_bytes)
            if self._request.rack_id and self._request.rack_id == self._manager.config.rack:
                metrics.bytes_out_same_rack.inc(self.total_bytes)
            if self.follower_bytes:
                metrics.bytes_out_as_follower.inc(self.follower_bytes)
            metrics.preferred_read_replica_answers.inc(sum(
                p.HasField("preferred_read_replica") for t in self.reply.topics for p in t.partitions))
        return self.reply

    def _read_once(self) -> tuple[broker_pb2.FetchResponse, int]:
        reply = broker_pb2.FetchResponse()
        total = 0
        self.follower_bytes = 0
        self.remote_reads = []
        manager, waiter = self._manager, self._waiter
        for topic_req in self._request.topics:
            out_topic = reply.topics.add(topic=topic_req.topic)
            for preq in topic_req.partitions:
                out = out_topic.partitions.add(partition=preq.partition, diverging_epoch=-1)
                try:
                    part = manager.partition(topic_req.topic, preq.partition, topic_req.topic_id)
                    if waiter is not None:
                        self._registered[id(part)] = part
                    budget = max(1, min(preq.max_bytes or self.bytes_max, self.bytes_max - total))
                    if self.follower is not None:
                        total += part.read_for_follower(self.follower, preq, budget, out, waiter,
                                                        self._request.replica_epoch)
                    else:
                        as_follower = self._from_follower and part.role == FOLLOWER
                        read = part.read_for_consumer(
                            preq, budget, out, waiter,
                            read_committed=self._request.isolation_level == broker_pb2.READ_COMMITTED,
                            from_follower=self._from_follower, choose_replica=self._choose_replica)
                        total += read
                        if as_follower:
                            self.follower_bytes += read
                except RemoteReadNeeded as remote:
                    self.remote_reads.append((out, remote.spec))
                except KanalError as exc:
                    out.error = exc.code
                    out.error_message = exc.message
        return reply, total
