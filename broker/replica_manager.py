"""ReplicaManager: the partitions this broker hosts, and the produce / fetch / list-offsets paths over them.

It reconciles its replicas with every new metadata image (create, lead, follow, delete), runs one
follower fetcher per leader it follows, answers Produce (acks 0/1/all), Fetch (consumers below the
high-water mark, followers up to the log end, long polls) and ListOffsets. Per-partition errors go into
the reply; one partition's failure never fails another's.

Topic ids (KIP-516). A replica belongs to one topic incarnation, named by its topic id: the id is
recorded in its directory (storage/partition_metadata.py) and the replica is never used for another id.
On reconcile, a replica whose topic name now has another id (deleted and recreated) is deleted and a
fresh one created; a directory on disk recording another id is never adopted but removed as a stray
(`_claim_directory`). The first image given (the metadata follower publishes none before its initial
catch-up, metadata_catch_up.py, so it is the cluster as it is now) also removes the replica directories it
does not name at all (topics deleted while this broker was away). No image is reconciled (and so nothing
deleted) unless it names the cluster that registration checked this broker's data directory against
(`set_cluster`, storage/cluster_identity.py): a quorum started afresh knows no topics, and its word would
delete every replica. A Fetch naming a topic id that is not the
one hosted under the name is answered UNKNOWN_TOPIC_ID (`partition`), so a follower never copies across
incarnations.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kanal.broker.config import BrokerConfig
from kanal.broker.controller_client import ControllerClient
from kanal.broker.fetch_call import FetchCall, check_topic_id
from kanal.broker.leader_state import IsrProposal
from kanal.broker.metadata_sync import MetadataSync
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.partition import FOLLOWER, LEADER, Assignment, Partition
from kanal.broker.produce_call import ProduceCall, ProduceWait, SchemaRecheck
from kanal.broker.remote_fetch import RemoteReader
from kanal.broker.remote_log_manager import RemoteLogManager
from kanal.broker.replica_fetcher import ReplicaFetcher
from kanal.broker.replication_throttle import ReplicationThrottle
from kanal.broker.schema_validation import SchemaRefusal, SchemaValidation, schema_validation_of
from kanal.broker.storage.cluster_identity import foreign_replicas, foreign_replicas_message, mismatch_message
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.partition_metadata import (
    DELETE_SUFFIX,
    STRAY_SUFFIX,
    DirectoryVerdict,
    judge_directory,
    read_topic_id,
    remove_directory,
    replica_directories,
    sweep_removed,
    write_topic_id,
)
from kanal.broker.waiter import Waiter
from kanal.metadata import MetadataImage, topic_config_texts
from kanal.metadata.ids import BrokerId
from kanal.metadata.topic_config import effective_topic_configs
from kanal.server.clock import PROCESS_CLOCK
from kanal.server.fatal import stop_process
from kanal.v1 import broker_pb2, controller_pb2
from kanal.v1.batch import CONTROL_ABORT, CONTROL_COMMIT, build_control_batch
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import INTERNAL_TOPICS

log = logging.getLogger(__name__)

ACKS_ALL = -1
EARLIEST, LATEST = -2, -1
_PRODUCE_TIMEOUT_MS_MAX = 300_000
_COMPACTION_INTERVAL_MS = 30_000
_ALTER_RESEND_BACKOFF_S = 0.1
# The longest a produce refused by schema validation waits for this broker's image to catch up before its
# recheck (metadata_sync.py): a fetch round trip is milliseconds; longer means no controller answers.
_RECHECK_WAIT_S_MAX = 2.0


class ReplicaManager:
    def __init__(self, config: BrokerConfig, controllers: ControllerClient, metrics: BrokerMetrics,
                 broker_epoch: Callable[[], int],
                 fetch_loop: asyncio.AbstractEventLoop | None = None) -> None:
        """`fetch_loop`: the event loop the replica fetchers run on (the broker's gRPC loop, see
        replica_fetcher.py); without one, the first fetcher starts a loop of the manager's own."""
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
        self._fetch_loop = fetch_loop
        self._own_loop_thread: threading.Thread | None = None
        self._image = MetadataImage()
        self._swept = False  # the first reconcile removed the directories the image does not name
        # The cluster id registration checked against the data directory (set_cluster); None: not set, as
        # in tests of the manager alone. Images naming another cluster are never reconciled.
        self._cluster_id: str | None = None
        self._adopted_cluster = False
        self._fatal: Callable[[str], object] = stop_process
        # The last image on_metadata finished with (None before the first): Metadata answers from it, so a
        # client told "broker N leads p" finds p's replica on N.
        self.reconciled_image: MetadataImage | None = None
        # Tiered storage: the uploads of partitions led here (set by the server when the broker has
        # --remote-storage); None: no remote storage, such topics keep every segment.
        self.remote_log: RemoteLogManager | None = None
        # Tiered storage reads (consumers below a local log start); None without remote storage.
        self.remote_reader: RemoteReader | None = None
        # Brings the image up to a moment before a schema refusal is final (set by the server;
        # metadata_sync.py); None: refusals are final at once.
        self.metadata_sync: MetadataSync | None = None

    def __repr__(self) -> str:
        return f"<ReplicaManager broker={self.broker_id} partitions={len(self._partitions)}>"

    # ---- lookups ----

    def partition(self, topic: str, partition_id: int, topic_id: str = "") -> Partition:
        """The hosted replica of `topic`-`partition_id`. With `topic_id` (a Fetch's TopicRequest.topic_id),
        UNKNOWN_TOPIC_ID unless that is the id of the topic this broker knows, and hosts, by that name."""
        if topic_id:
            known = self._image.topics.get(topic)
            check_topic_id(topic, topic_id, known.topic_id if known is not None else None)
        part = self._partitions.get((topic, partition_id))
        if part is not None:
            # The image may already name a new incarnation that reconciliation has not hosted yet.
            check_topic_id(topic, topic_id, part.topic_id)
        if part is None:
            if topic in self._image.topics and 0 <= partition_id < len(self._image.topics[topic].partitions):
                raise KanalError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {self.broker_id} hosts no replica of {topic}-{partition_id}")
            raise KanalError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic or partition {topic}-{partition_id}"
            )
        return part

    def recovery_log_ends(self) -> list[controller_pb2.ReplicaLogEnd]:
        """Where this broker's logs of recovering partitions end (sent with each heartbeat: the controller
        elects the longest once every replica reported, kanal.metadata.recovery_election). Only from the
        image reconciled last: by then an offline partition has no fetcher, so its log no longer moves."""
        image = self.reconciled_image
        if image is None:
            return []
        ends = []
        for topic, p in image.iter_partitions():
            if not p.recovering or not p.offline or self.broker_id not in p.replicas:
                continue
            part = self._partitions.get((topic.name, p.partition_id))
            if part is None or part.topic_id != topic.topic_id:
                continue  # not opened (a damaged directory): no report, so no election picks around it
            last_epoch = part.log.epoch_cache.latest_epoch
            ends.append(controller_pb2.ReplicaLogEnd(
                topic_id=topic.topic_id, partition_id=p.partition_id, partition_epoch=p.partition_epoch,
                last_leader_epoch=-1 if last_epoch is None else last_epoch,
                log_end_offset=part.log.log_end_offset,
            ))
        return ends

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

    def set_cluster(self, cluster_id: str, *, adopted: bool,
                    fatal: Callable[[str], object] = stop_process) -> None:
        """The cluster registration checked the data directory against (storage/cluster_identity.py);
        `adopted`: the directory recorded none until this start. Before the first image."""
        self._cluster_id = cluster_id
        self._adopted_cluster = adopted
        self._fatal = fatal

    def _foreign_image(self, image: MetadataImage) -> str | None:
        """Why this image must not be reconciled (it would delete replicas on the word of a quorum that
        is not this directory's cluster); None when it may be."""
        if self._cluster_id is None:
            return None
        node = f"broker {self.broker_id}"
        if image.cluster_id != self._cluster_id:
            named = image.cluster_id or "(none)"
            return mismatch_message(node, self.config.data_dir, self._cluster_id, named)
        if self._adopted_cluster and not self._swept:
            on_disk = replica_directories(Path(self.config.data_dir))
            recorded = [read_topic_id(d) or "" for d in on_disk.values()]
            if foreign_replicas(recorded, {str(t) for t in image.topics_by_id}):
                return foreign_replicas_message(node, self.config.data_dir, len(on_disk), image.cluster_id)
        return None

    def on_metadata(self, old: MetadataImage, new: MetadataImage) -> None:
        """Make the hosted replicas match the image: create, lead, follow, update ISR, delete."""
        foreign = self._foreign_image(new)
        if foreign is not None:
            log.error("%s", foreign)
            self._fatal(foreign)  # stops the process; nothing was changed
            return
        self._image = new
        wanted: set[tuple[str, int]] = set()
        follow: dict[int, list[Partition]] = {}
        # Fenced brokers must not be proposed into an ISR (the controller would refuse them).
        ineligible = {b for b, reg in new.brokers.items() if reg.fenced}
        # Per topic, not per partition: the allowed ids are the same for all of a topic's partitions.
        schema_policies: dict[str, SchemaValidation | None] = {}
        for topic, p in new.iter_partitions():
            if self.broker_id not in p.replicas:
                continue
            key = (topic.name, p.partition_id)
            wanted.add(key)
            assignment = Assignment(topic.topic_id, tuple(p.replicas), tuple(p.isr), p.leader, p.leader_epoch,
                                    p.partition_epoch)
            part = self._partitions.get(key)
            if part is not None and part.topic_id != topic.topic_id:
                # Deleted and recreated between two images this broker saw: the old log is not the new
                # topic's.
                with self._lock:
                    self._partitions.pop(key)
                part.delete()
                log.info("deleted replica %s-%d of topic id %s: the name now has topic id %s",
                         topic.name, p.partition_id, part.topic_id, topic.topic_id)
                part = None
            log_config, min_isr = self._log_config(new, topic.name)
            if part is None:
                try:
                    directory = self._claim_directory(topic.name, p.partition_id, topic.topic_id)
                    part = Partition(
                        topic.name,
                        p.partition_id,
                        directory,
                        log_config,
                        self.broker_id,
                        min_isr,
                        self,
                        topic_id=topic.topic_id,
                    )
                except KanalError as exc:  # a damaged directory: this replica stays offline, the others go on
                    log.error("cannot open replica %s-%d: %s", topic.name, p.partition_id, exc)
                    continue
                with self._lock:
                    self._partitions[key] = part
            else:
                part.log.config = log_config
                part.min_insync_replicas = min_isr
            self._set_throttle(part, p.adding_replicas, new, topic.name)
            if topic.name not in schema_policies:
                schema_policies[topic.name] = schema_validation_of(new, topic.name)
            part.schema_validation = schema_policies[topic.name]
            part.set_remote(new.remote_log(topic.topic_id, p.partition_id))
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
        for gone in [k for k in self._partitions if k not in wanted]:
            with self._lock:
                part = self._partitions.pop(gone)
            part.delete()
            log.info("deleted replica %s-%d", *gone)
        if not self._swept:
            self._swept = True
            self._remove_unnamed_directories(wanted)
        self._update_fetchers(follow, new)
        self._update_gauges(new)
        if self.remote_log is not None:
            self.remote_log.on_image(old, new)  # deleted topics' remote objects (off this thread)
        self.reconciled_image = new
        self.wake_long_polls()

    def _set_throttle(self, part: Partition, adding, image: MetadataImage, topic: str) -> None:
        """Throttle this replica's copying while a reassignment adds it and a rate is configured (kept
        across images while the rate stays, so its debt carries over)."""
        rate = None
        if self.broker_id in adding:
            rate = effective_topic_configs(topic_config_texts(image, topic, self.broker_id))[
                "follower.replication.throttled.rate"]
        current = part.replication_throttle
        if rate is None:
            part.replication_throttle = None
        elif current is None or current.rate_bytes_per_s != rate:
            part.replication_throttle = ReplicationThrottle(rate, int(time.monotonic() * 1000))

    def _log_config(self, image: MetadataImage, topic: str) -> tuple[LogConfig, int]:
        """The partition log's settings and min.insync.replicas: cluster default < broker < topic."""
        texts = topic_config_texts(image, topic, self.broker_id)
        return LogConfig.from_topic_configs(texts), int(effective_topic_configs(texts)["min.insync.replicas"])

    def _directory(self, topic: str, partition_id: int) -> Path:
        return Path(self.config.data_dir) / f"{topic}-{partition_id}"

    def _claim_directory(self, topic: str, partition_id: int, topic_id: str) -> Path:
        """The directory for a new replica of `topic_id`, recording that id: one left by an earlier topic of
        the same name is removed first (storage/partition_metadata.py has the rule). STORAGE_ERROR when its
        file is damaged: then it is neither adopted nor removed."""
        directory = self._directory(topic, partition_id)
        exists = directory.is_dir()
        recorded = read_topic_id(directory) if exists else None
        verdict = judge_directory(exists, recorded, topic_id)
        if verdict == DirectoryVerdict.STRAY:
            removed = remove_directory(directory, STRAY_SUFFIX)
            self._metrics.stray_replicas_removed.inc()
            log.warning(
                "%s records topic id %s, but topic %r now has id %s: an earlier topic of that name. It is "
                "never adopted; removed it (as %s) and starting an empty replica",
                directory,
                recorded,
                topic,
                topic_id,
                removed.name,
            )
        elif verdict == DirectoryVerdict.UPGRADE:
            log.info(
                "%s records no topic id (written before kanal recorded them): adopting it for topic id %s",
                directory,
                topic_id,
            )
        if verdict != DirectoryVerdict.ADOPT:
            write_topic_id(directory, topic_id)  # before any log file, so a directory's owner is always known
        return directory

    def _remove_unnamed_directories(self, wanted: set[tuple[str, int]]) -> None:
        """Once, on the first (complete) image: remove half-deleted leftovers, and the replica directories
        the image does not give this broker (their topic was deleted, or moved away, while it was down)."""
        data_dir = Path(self.config.data_dir)
        for path in sweep_removed(data_dir):
            log.info("removed %s, left half-deleted by an earlier run", path.name)
        for key, directory in sorted(replica_directories(data_dir).items()):
            if key in wanted:
                continue
            removed = remove_directory(directory, DELETE_SUFFIX)
            self._metrics.stray_replicas_removed.inc()
            log.warning(
                "removed %s (as %s): the metadata gives this broker no replica of %s-%d (its topic was "
                "deleted while this broker was away)",
                directory,
                removed.name,
                *key,
            )

    def _update_fetchers(self, follow: dict[int, list[Partition]], image: MetadataImage) -> None:
        with self._lock:
            for leader_id in list(self._fetchers):
                if leader_id not in follow:
                    self._fetchers.pop(leader_id).stop()
            for leader_id, parts in follow.items():
                broker = image.brokers.get(BrokerId(leader_id))
                if broker is None:
                    continue
                fetcher = self._fetchers.get(leader_id)
                if fetcher is not None and fetcher.endpoint != broker.peer_endpoint:
                    self._fetchers.pop(leader_id).stop()
                    fetcher = None
                if fetcher is None:
                    fetcher = ReplicaFetcher(self.metrics, leader_id, broker.peer_endpoint, self.config,
                                             self._broker_epoch, self._loop_for_fetchers(),
                                             remote_reader=self.remote_reader)
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

    def begin_produce(self, request: broker_pb2.ProduceRequest, notify: Callable[[], None], *,
                      internal: bool = False, allow_control: bool = False) -> ProduceCall:
        """Append every partition of a Produce and register its acks=all waits; nothing waits here.
        `notify` is called (from any thread) each time one of the waits is answered; the caller then
        checks `done` and `finish`es the reply (produce_call.py). Client calls may not write to
        internal topics (`internal` is the group coordinator's own writes)."""
        if request.acks not in (0, 1, ACKS_ALL):
            raise KanalError(
                ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1 (all), got {request.acks}"
            )
        if request.timeout_ms < 0:
            raise KanalError(ErrorCode.INVALID_REQUEST, f"timeout_ms must be >= 0 (0: the broker's default "
                                                        f"{self.config.produce_timeout_ms_default}), got "
                                                        f"{request.timeout_ms}")
        timeout_ms = min(
            request.timeout_ms or self.config.produce_timeout_ms_default, _PRODUCE_TIMEOUT_MS_MAX
        )
        arrived_s = time.monotonic()
        call = ProduceCall(broker_pb2.ProduceResponse(), arrived_s + timeout_ms / 1000,
                           self._set_produce_error, arrived_s=arrived_s, acks=request.acks)
        now_ms = PROCESS_CLOCK.now_ms()
        for topic_data in request.topics:
            out_topic = call.reply.topics.add(topic=topic_data.topic)
            for data in topic_data.partitions:
                out = out_topic.partitions.add(partition=data.partition)
                try:
                    if not internal and topic_data.topic in INTERNAL_TOPICS:
                        raise KanalError(ErrorCode.INVALID_TOPIC, f"{topic_data.topic} is an internal topic: "
                                                                  "only kanal itself writes to it")
                    part = self.partition(topic_data.topic, data.partition)
                    if not data.batches:
                        raise KanalError(ErrorCode.INVALID_REQUEST, "no batches")
                    self._append(call, part, list(data.batches), out, notify, now_ms, timeout_ms,
                                 allow_control=allow_control, internal=internal, recheck=True)
                except KanalError as exc:
                    self._set_produce_error(out, topic_data.topic, data.partition, exc)
        return call

    def _append(self, call: ProduceCall, part: Partition, batches: list[bytes],
                out: broker_pb2.ProduceResponse.PartitionResult, notify: Callable[[], None], now_ms: int,
                timeout_ms: int, *, allow_control: bool, internal: bool, recheck: bool) -> None:
        """One partition's batches of `call`; a schema refusal that may be stale goes to `call.rechecks`
        when `recheck` (the first attempt), any other refusal into `out`."""
        wait = ProduceWait(part, out, notify)
        refused: KanalError | None
        try:
            refused, wait.request_id = part.append_as_leader(
                batches, call.acks, now_ms, out, timeout_ms=timeout_ms,
                on_replicated=wait.answered if call.acks == ACKS_ALL else None,
                allow_control=allow_control, validate_producer=not internal)
        except SchemaRefusal as exc:  # nothing of the partition stored
            refused = exc
        if wait.request_id is not None:
            call.waits.append(wait)
        if refused is None:
            return
        if recheck and isinstance(refused, SchemaRefusal) and refused.may_be_stale:
            # Every batch before the refused one is in `out` (stored, or a duplicate of a stored one).
            unstored = batches[len(out.batch_base_offsets):]
            call.rechecks.append(SchemaRecheck(part.topic, part.partition_id, unstored, out, refused))
            return
        # The batches before it are stored: their offsets stay in `out`.
        self._set_produce_error(out, part.topic, part.partition_id, refused)

    def sync_for_rechecks(self, call: ProduceCall) -> bool:
        """Blocks (never on the event loop, never under a partition lock): whether this broker's image now
        holds every metadata record committed before `call` arrived, so its schema rechecks may run. False
        without a MetadataSync (tests of the manager alone), or when it could not be established in time."""
        sync = self.metadata_sync
        if sync is None or not call.rechecks:
            return False
        return sync.caught_up_since(call.arrived_s, max(0.0, min(call.remaining_s(), _RECHECK_WAIT_S_MAX)))

    def recheck_produce(self, call: ProduceCall, notify: Callable[[], None]) -> None:
        """After `sync_for_rechecks`: append each recheck's unstored batches again, against the partition's
        policy from the newer image; a refusal now is final. Another request may have appended to the
        partition meanwhile: an idempotent producer's own later batches were refused for their sequence (it
        retries them after these), so only batches without idempotence can land out of order, as any retry
        of theirs can."""
        for recheck in call.take_rechecks():
            try:
                part = self.partition(recheck.topic, recheck.partition)
                self._append(call, part, recheck.batches, recheck.out, notify, PROCESS_CLOCK.now_ms(),
                             max(0, int(call.remaining_s() * 1000)), allow_control=False, internal=False,
                             recheck=False)
            except KanalError as exc:
                self._set_produce_error(recheck.out, recheck.topic, recheck.partition, exc)

    def produce(self, request: broker_pb2.ProduceRequest, *, internal: bool = False,
                allow_control: bool = False) -> broker_pb2.ProduceResponse:
        """A Produce answered on the caller's thread, which waits (the coordinators' writes)."""
        woken = threading.Event()
        call = self.begin_produce(request, woken.set, internal=internal, allow_control=allow_control)
        if self.sync_for_rechecks(call):
            self.recheck_produce(call, woken.set)
        return call.wait_on_thread(woken)

    def write_txn_markers(
        self, request: broker_pb2.WriteTxnMarkersRequest
    ) -> broker_pb2.WriteTxnMarkersResponse:
        """WriteTxnMarkers: the COMMIT / ABORT marker into each partition this broker leads, acks=all;
        answered per partition once replicated (a partition whose transaction is already closed gets a
        marker that changes nothing, so a coordinator's retry is harmless)."""
        if request.producer_id <= 0 or request.producer_epoch < 0:
            raise KanalError(ErrorCode.INVALID_REQUEST, "WriteTxnMarkers needs a producer id and epoch")
        marker = build_control_batch(CONTROL_COMMIT if request.commit else CONTROL_ABORT,
                                     producer_id=request.producer_id, producer_epoch=request.producer_epoch,
                                     coordinator_epoch=request.coordinator_epoch,
                                     timestamp_ms=PROCESS_CLOCK.now_ms())
        produce = broker_pb2.ProduceRequest(acks=ACKS_ALL)
        for topic in request.topics:
            produce.topics.add(
                topic=topic.topic,
                partitions=[
                    broker_pb2.ProduceRequest.PartitionData(partition=p, batches=[marker])
                    for p in topic.partitions
                ],
            )
        reply = broker_pb2.WriteTxnMarkersResponse()
        for topic in self.produce(produce, internal=True, allow_control=True).topics:
            for result in topic.partitions:
                reply.results.add(topic=topic.topic, partition=result.partition, error=result.error,
                                  error_message=result.error_message)
        return reply

    def _set_produce_error(self, out, topic: str, partition_id: int, exc: KanalError) -> None:
        out.error = exc.code
        out.error_message = exc.message
        self._metrics.request_errors.labels("Produce", exc.name).inc()
        if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            out.current_leader, out.current_leader_endpoint = self.leader_hint(topic, partition_id)

    # ---- fetch ----

    def begin_fetch(self, request: broker_pb2.FetchRequest, waiter: Waiter | None) -> FetchCall:
        """A Fetch and its long poll (fetch_call.py); STALE_BROKER_EPOCH for a follower that is not the
        registered, unfenced broker it claims to be."""
        return FetchCall(self, request, waiter, self._image)

    def fetch(self, request: broker_pb2.FetchRequest, is_active: Callable[[], bool] = lambda: True,
              on_call_end: Callable[[Callable[[], None]], object] | None = None) -> broker_pb2.FetchResponse:
        """A Fetch answered on the caller's thread, which waits (tests and tools; the broker's gRPC
        service drives FetchCall on its event loop instead). `on_call_end` (gRPC's
        `context.add_callback`) lets a cancelled call end its wait at once."""
        woken = threading.Event()
        call = self.begin_fetch(request, woken)
        if on_call_end is not None:
            on_call_end(woken.set)  # the loop then sees is_active() False and returns
        purgatory = self._metrics.fetch_purgatory.labels(call.kind)
        try:
            while not call.read() and is_active():
                purgatory.inc()
                try:
                    woken.wait(call.remaining_s())
                finally:
                    purgatory.dec()
            call.complete_remote()
        finally:
            call.close()
        return call.reply

    # ---- list offsets ----

    def list_offsets(self, request: broker_pb2.ListOffsetsRequest) -> broker_pb2.ListOffsetsResponse:
        reply = broker_pb2.ListOffsetsResponse()
        for topic_query in request.topics:
            out_topic = reply.topics.add(topic=topic_query.topic)
            for q in topic_query.partitions:
                out = out_topic.partitions.add(partition=q.partition, offset=-1, timestamp_ms=-1)
                try:
                    part = self.partition(topic_query.topic, q.partition)
                    committed = request.isolation_level == broker_pb2.READ_COMMITTED
                    found = None
                    if self.remote_reader is not None and q.timestamp_ms >= 0:
                        found = part.remote_offset_for_timestamp(q.timestamp_ms, self.remote_reader,
                                                                 read_committed=committed)
                    out.offset, out.timestamp_ms = found if found is not None else part.list_offset(
                        q.timestamp_ms, read_committed=committed)
                except KanalError as exc:
                    out.error = exc.code
        return reply

    # ---- background ----

    def maintenance(self, now_ms: int) -> None:
        compact_due = now_ms - self._last_compaction_ms >= _COMPACTION_INTERVAL_MS
        if compact_due:
            self._last_compaction_ms = now_ms
        producers = parked = 0
        for part in list(self._partitions.values()):
            try:
                producers += part.maintenance(now_ms, compact_due, self.config.producer_id_expiration_ms)
            except KanalError as exc:
                log.warning("maintenance of %r: %s", part, exc)
            parked += part.pending_produces
        self._metrics.producer_ids.set(producers)
        self._metrics.produce_purgatory.set(parked)
        if self.remote_log is not None:
            self.remote_log.tick(list(self._partitions.values()), now_ms)

    def send_alter_partition(self, part: Partition, proposal: IsrProposal, *, resend: bool = False) -> None:
        """Send an ISR change to the controller off the request path; the answer goes back to the core. A
        resend (the controller did not decide) waits a moment first, so a controller that is down is not
        hammered, and goes only if the proposal is still the one in flight."""
        if not resend:
            log.info("proposing %r", proposal)
        self._alter_pool.submit(
            self._alter_partition, part, proposal, _ALTER_RESEND_BACKOFF_S if resend else 0.0
        )

    def _alter_partition(self, part: Partition, proposal: IsrProposal, delay_s: float) -> None:
        from kanal.v1 import controller_pb2

        if delay_s:
            time.sleep(delay_s)  # a backoff on a worker thread, not a synchronisation
            if not part.proposal_in_flight(proposal):
                return

        request = controller_pb2.AlterPartitionRequest(
            broker_id=self.broker_id, broker_epoch=self._broker_epoch()
        )
        topic_id = part.assignment.topic_id if part.assignment else ""
        request.items.add(
            topic_id=topic_id,
            partition_id=part.partition_id,
            leader_epoch=proposal.leader_epoch,
            partition_epoch=proposal.partition_epoch,
            new_isr=list(proposal.new_isr),
            new_isr_broker_epochs=list(proposal.broker_epochs),
        )
        try:
            reply = self._controllers.call("AlterPartition", request)
        except KanalError as exc:
            part.on_alter_partition_answer(proposal, error=exc.code)
            return
        if reply.error != ErrorCode.NONE or not reply.items:
            part.on_alter_partition_answer(proposal, error=reply.error or ErrorCode.UNKNOWN_SERVER_ERROR)
            return
        item = reply.items[0]
        part.on_alter_partition_answer(
            proposal,
            error=item.error,
            isr=list(item.isr),
            leader_epoch=item.leader_epoch,
            partition_epoch=item.partition_epoch,
        )

    def _loop_for_fetchers(self) -> asyncio.AbstractEventLoop:
        if self._fetch_loop is None:
            self._fetch_loop = asyncio.new_event_loop()
            self._own_loop_thread = threading.Thread(target=self._fetch_loop.run_forever,
                                                     name="replica-fetch-loop", daemon=True)
            self._own_loop_thread.start()
        return self._fetch_loop

    def stop_fetchers(self, timeout_s: float = 5.0) -> None:
        """Stop every replica fetcher and wait (up to `timeout_s`) until their tasks have ended, closing
        their channels. The broker calls it while its loop still runs; not with the lock held by the caller
        (the loop may need it)."""
        with self._lock:
            fetchers = list(self._fetchers.values())
            self._fetchers.clear()
        stopped = [fetcher.stop() for fetcher in fetchers]
        loop = self._fetch_loop
        if stopped and loop is not None and loop.is_running():
            concurrent.futures.wait(stopped, timeout=timeout_s)

    def close(self) -> None:
        # Partitions are closed below: no fetcher may be applying an answer to one by then.
        self.stop_fetchers()
        loop = self._fetch_loop
        if self._own_loop_thread is not None and loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._own_loop_thread.join(timeout=5)
        self._alter_pool.shutdown(wait=False, cancel_futures=True)
        if self.remote_log is not None:
            self.remote_log.close()
        if self.remote_reader is not None:
            self.remote_reader.close()
        for part in list(self._partitions.values()):
            part.close()

