"""ReplicaManager: the partitions this broker hosts, and the produce / fetch / list-offsets paths over them.

It reconciles its replicas with every new metadata image (create, lead, follow, delete), runs one
follower fetcher per leader it follows, answers Produce (acks 0/1/all), Fetch (consumers below the
high-water mark, followers up to the log end, long polls) and ListOffsets. Per-partition errors go into
the reply; one partition's failure never fails another's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kanal.broker.config import BrokerConfig
from kanal.broker.controller_client import ControllerClient
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.partition import FOLLOWER, LEADER, Assignment, Partition
from kanal.broker.replica_fetcher import ReplicaFetcher
from kanal.broker.storage.log_config import LogConfig
from kanal.metadata import MetadataImage, topic_config_texts
from kanal.metadata.topic_config import effective_topic_configs
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

ACKS_ALL = -1
EARLIEST, LATEST = -2, -1
_PRODUCE_TIMEOUT_MS_MAX = 300_000
_COMPACTION_INTERVAL_MS = 30_000
_ALTER_RESEND_BACKOFF_S = 0.1


class ReplicaManager:
    def __init__(self, config: BrokerConfig, controllers: ControllerClient, metrics: BrokerMetrics,
                 broker_epoch: Callable[[], int]) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self._controllers = controllers
        self.metrics = metrics
        self._metrics = metrics
        self._alter_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="alter-partition")
        self._last_compaction_ms = 0
        self._broker_epoch = broker_epoch
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._lock = threading.Lock()  # guards the dict and the fetcher map, not partition state
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._image = MetadataImage()

    def __repr__(self) -> str:
        return f"<ReplicaManager broker={self.broker_id} partitions={len(self._partitions)}>"

    # ---- lookups ----

    def partition(self, topic: str, partition_id: int) -> Partition:
        part = self._partitions.get((topic, partition_id))
        if part is None:
            if topic in self._image.topics and 0 <= partition_id < len(self._image.topics[topic].partitions):
                raise KanalError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {self.broker_id} hosts no replica of {topic}-{partition_id}")
            raise KanalError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic or partition {topic}-{partition_id}")
        return part

    def leader_hint(self, topic: str, partition_id: int) -> tuple[int, str]:
        image = self._image
        t = image.topics.get(topic)
        if t is None or not 0 <= partition_id < len(t.partitions):
            return -1, ""
        leader = t.partitions[partition_id].leader
        broker = image.brokers.get(leader)
        return leader, broker.endpoint if broker is not None else ""

    def wake_long_polls(self) -> None:
        """Wake every long-poll fetch so it re-reads (after a metadata change: roles, ISR, deletions).
        Appends and HW moves wake only the polls of their own partition (Partition)."""
        for part in list(self._partitions.values()):
            part.wake_waiters()

    # ---- metadata ----

    def on_metadata(self, old: MetadataImage, new: MetadataImage) -> None:
        """Make the hosted replicas match the image: create, lead, follow, update ISR, delete."""
        self._image = new
        wanted: set[tuple[str, int]] = set()
        follow: dict[int, list[Partition]] = {}
        # Fenced brokers must not be proposed into an ISR (the controller would refuse them).
        ineligible = {b for b, reg in new.brokers.items() if reg.fenced}
        for topic, p in new.iter_partitions():
            if self.broker_id not in p.replicas:
                continue
            key = (topic.name, p.partition_id)
            wanted.add(key)
            assignment = Assignment(topic.topic_id, tuple(p.replicas), tuple(p.isr), p.leader, p.leader_epoch,
                                    p.partition_epoch)
            part = self._partitions.get(key)
            log_config, min_isr = self._log_config(new, topic.name)
            if part is None:
                part = Partition(topic.name, p.partition_id, self._directory(topic.name, p.partition_id),
                                 log_config, self.broker_id, min_isr, self)
                with self._lock:
                    self._partitions[key] = part
            else:
                part.log.config = log_config
                part.min_insync_replicas = min_isr
            current = part.assignment
            if p.leader == self.broker_id:
                if part.role != LEADER or current is None or current.leader_epoch != p.leader_epoch:
                    part.become_leader(assignment, ineligible, self.config.replica_lag_ms_max)
                    log.info("leading %r", part)
                elif current != assignment:
                    part.update_assignment(assignment, ineligible)
                else:
                    # Fencing changes arrive without a partition change: a broker that came back must
                    # become eligible for the ISR again, or its partitions stay under-replicated.
                    part.set_ineligible(ineligible)
            else:
                if part.role != FOLLOWER or current is None or current != assignment:
                    part.become_follower(assignment)
                if p.leader >= 0:
                    follow.setdefault(p.leader, []).append(part)
        for key in [k for k in self._partitions if k not in wanted]:
            with self._lock:
                part = self._partitions.pop(key)
            part.delete()
            log.info("deleted replica %s-%d", *key)
        self._update_fetchers(follow, new)
        self._update_gauges(new)
        self.wake_long_polls()

    def _log_config(self, image: MetadataImage, topic: str) -> tuple[LogConfig, int]:
        """The partition log's settings and min.insync.replicas: cluster default < broker < topic."""
        texts = topic_config_texts(image, topic, self.broker_id)
        return LogConfig.from_topic_configs(texts), int(effective_topic_configs(texts)["min.insync.replicas"])

    def _directory(self, topic: str, partition_id: int) -> Path:
        return Path(self.config.data_dir) / f"{topic}-{partition_id}"

    def _update_fetchers(self, follow: dict[int, list[Partition]], image: MetadataImage) -> None:
        with self._lock:
            for leader_id in list(self._fetchers):
                if leader_id not in follow:
                    self._fetchers.pop(leader_id).stop()
            for leader_id, parts in follow.items():
                broker = image.brokers.get(leader_id)
                if broker is None:
                    continue
                fetcher = self._fetchers.get(leader_id)
                if fetcher is not None and fetcher.endpoint != broker.endpoint:
                    self._fetchers.pop(leader_id).stop()
                    fetcher = None
                if fetcher is None:
                    fetcher = ReplicaFetcher(self, leader_id, broker.endpoint, self.config, self._broker_epoch)
                    self._fetchers[leader_id] = fetcher
                    fetcher.start()
                fetcher.set_partitions(parts)

    def _update_gauges(self, image: MetadataImage) -> None:
        led = [p for p in self._partitions.values() if p.role == LEADER]
        self._metrics.partitions.set(len(self._partitions))
        self._metrics.leader_partitions.set(len(led))
        self._metrics.under_replicated_partitions.set(
            sum(1 for p in led if p.assignment and len(p.assignment.isr) < len(p.assignment.replicas)))
        self._metrics.offline_partitions.set(sum(1 for _, p in image.iter_partitions() if p.leader < 0))

    # ---- produce ----

    def produce(self, request: broker_pb2.ProduceRequest) -> broker_pb2.ProduceResponse:
        if request.acks not in (0, 1, ACKS_ALL):
            raise KanalError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1 (all), got {request.acks}")
        timeout_ms = min(max(request.timeout_ms, 0), _PRODUCE_TIMEOUT_MS_MAX)
        reply = broker_pb2.ProduceResponse()
        waits = []
        now_ms = int(time.time() * 1000)
        for topic_data in request.topics:
            out_topic = reply.topics.add(topic=topic_data.topic)
            for data in topic_data.partitions:
                out = out_topic.partitions.add(partition=data.partition)
                try:
                    part = self.partition(topic_data.topic, data.partition)
                    if not data.batches:
                        raise KanalError(ErrorCode.INVALID_REQUEST, "no batches")
                    required, refused = part.append_as_leader(list(data.batches), request.acks, now_ms, out)
                    if refused is not None:  # the batches before it are stored: their offsets stay in `out`
                        self._set_produce_error(out, topic_data.topic, data.partition, refused)
                    if request.acks == ACKS_ALL and required is not None:
                        waits.append((part, required, out))
                except KanalError as exc:
                    self._set_produce_error(out, topic_data.topic, data.partition, exc)
        deadline = time.monotonic() + timeout_ms / 1000
        for part, required, out in waits:
            try:
                part.wait_replicated(required, deadline)
            except KanalError as exc:
                del out.batch_base_offsets[:]  # not acknowledged: the producer retries every batch
                self._set_produce_error(out, part.topic, part.partition_id, exc)
        return reply

    def _set_produce_error(self, out, topic: str, partition_id: int, exc: KanalError) -> None:
        out.error = exc.code
        out.error_message = exc.message
        self._metrics.request_errors.labels("Produce", exc.name).inc()
        if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            out.current_leader, out.current_leader_endpoint = self.leader_hint(topic, partition_id)

    # ---- fetch ----

    def fetch(self, request: broker_pb2.FetchRequest, is_active: Callable[[], bool] = lambda: True,
              on_call_end: Callable[[Callable[[], None]], object] | None = None) -> broker_pb2.FetchResponse:
        """Read every requested partition; with too little data (below min_bytes) and no error, wait for
        one of them to change (its log end for a follower, its HW for a consumer) up to max_wait_ms.
        `on_call_end` (gRPC's `context.add_callback`) lets a cancelled call end its wait at once, freeing
        its request thread (a replica fetcher cancels its poll when it follows a new partition)."""
        is_follower = request.replica_id >= 0
        wait_s = min(max(request.max_wait_ms, 0), self.config.fetch_wait_ms_max) / 1000
        deadline = time.monotonic() + wait_s
        bytes_max = min(request.max_bytes or self.config.fetch_response_bytes_max, self.config.fetch_response_bytes_max)
        # Set by the partitions read when they change; cleared before each read, so a change after the
        # read (registered under the partition's lock) is never missed. None: no waiting at all.
        waiter = threading.Event() if wait_s > 0 else None
        if waiter is not None and on_call_end is not None:
            on_call_end(waiter.set)  # the loop then sees is_active() False and returns
        registered: dict[int, Partition] = {}
        try:
            while True:
                if waiter is not None:
                    waiter.clear()
                reply, total = self._fetch_once(request, is_follower, bytes_max, waiter, registered)
                if total >= max(request.min_bytes, 1) or not is_active():
                    break
                if any(p.error for t in reply.topics for p in t.partitions):
                    break
                remaining = deadline - time.monotonic()
                if waiter is None or remaining <= 0:
                    break
                purgatory = self._metrics.fetch_purgatory.labels("follower" if is_follower else "consumer")
                purgatory.inc()
                try:
                    waiter.wait(remaining)
                finally:
                    purgatory.dec()
        finally:
            for part in registered.values():
                part.remove_waiter(waiter)
        if not is_follower:
            self._metrics.bytes_out.inc(total)
        return reply

    def _fetch_once(self, request: broker_pb2.FetchRequest, is_follower: bool, bytes_max: int,
                    waiter: threading.Event | None, registered: dict[int, Partition]
                    ) -> tuple[broker_pb2.FetchResponse, int]:
        reply = broker_pb2.FetchResponse()
        total = 0
        for topic_req in request.topics:
            out_topic = reply.topics.add(topic=topic_req.topic)
            for preq in topic_req.partitions:
                out = out_topic.partitions.add(partition=preq.partition, diverging_epoch=-1)
                try:
                    part = self.partition(topic_req.topic, preq.partition)
                    if waiter is not None:
                        registered[id(part)] = part
                    budget = max(1, min(preq.max_bytes or bytes_max, bytes_max - total))
                    if is_follower:
                        total += part.read_for_follower(request.replica_id, preq, budget, out, waiter)
                    else:
                        total += part.read_for_consumer(preq, budget, out, waiter)
                except KanalError as exc:
                    out.error = exc.code
                    out.error_message = exc.message
        return reply, total

    # ---- list offsets ----

    def list_offsets(self, request: broker_pb2.ListOffsetsRequest) -> broker_pb2.ListOffsetsResponse:
        reply = broker_pb2.ListOffsetsResponse()
        for topic_query in request.topics:
            out_topic = reply.topics.add(topic=topic_query.topic)
            for q in topic_query.partitions:
                out = out_topic.partitions.add(partition=q.partition, offset=-1, timestamp_ms=-1)
                try:
                    part = self.partition(topic_query.topic, q.partition)
                    out.offset, out.timestamp_ms = part.list_offset(q.timestamp_ms)
                except KanalError as exc:
                    out.error = exc.code
        return reply

    # ---- background ----

    def maintenance(self, now_ms: int) -> None:
        compact_due = now_ms - self._last_compaction_ms >= _COMPACTION_INTERVAL_MS
        if compact_due:
            self._last_compaction_ms = now_ms
        producers = 0
        for part in list(self._partitions.values()):
            try:
                producers += part.maintenance(now_ms, compact_due, self.config.producer_id_expiration_ms)
            except KanalError as exc:
                log.warning("maintenance of %r: %s", part, exc)
        self._metrics.producer_ids.set(producers)

    def send_alter_partition(self, part: Partition, proposal, *, resend: bool = False) -> None:
        """Send an ISR change to the controller off the request path; the answer goes back to the core. A
        resend (the controller did not decide) waits a moment first, so a controller that is down is not
        hammered, and goes only if the proposal is still the one in flight."""
        if not resend:
            log.info("proposing %r", proposal)
        self._alter_pool.submit(self._alter_partition, part, proposal, _ALTER_RESEND_BACKOFF_S if resend else 0.0)

    def _alter_partition(self, part: Partition, proposal, delay_s: float) -> None:
        from kanal.v1 import controller_pb2

        if delay_s:
            time.sleep(delay_s)  # a backoff on a worker thread, not a synchronisation
            if not part.proposal_in_flight(proposal):
                return

        request = controller_pb2.AlterPartitionRequest(broker_id=self.broker_id, broker_epoch=self._broker_epoch())
        topic_id = part.assignment.topic_id if part.assignment else ""
        request.items.add(topic_id=topic_id, partition_id=part.partition_id, leader_epoch=proposal.leader_epoch,
                          partition_epoch=proposal.partition_epoch, new_isr=list(proposal.new_isr))
        try:
            reply = self._controllers.call("AlterPartition", request)
        except KanalError as exc:
            part.on_alter_partition_answer(proposal, error=exc.code)
            return
        if reply.error != ErrorCode.NONE or not reply.items:
            part.on_alter_partition_answer(proposal, error=reply.error or ErrorCode.UNKNOWN_SERVER_ERROR)
            return
        item = reply.items[0]
        part.on_alter_partition_answer(proposal, error=item.error, isr=list(item.isr), leader_epoch=item.leader_epoch,
                                       partition_epoch=item.partition_epoch)

    def close(self) -> None:
        with self._lock:
            fetchers = list(self._fetchers.values())
            self._fetchers.clear()
        for fetcher in fetchers:
            fetcher.stop()
        self._alter_pool.shutdown(wait=False, cancel_futures=True)
        for part in list(self._partitions.values()):
            part.close()

