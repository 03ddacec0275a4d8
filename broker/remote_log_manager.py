"""RemoteLogManager: a partition leader's uploads of closed segments to remote storage (tiered storage,
issue 44; Kafka's RLMCopyTask).

Rules, in the order an upload runs them:

1. **What goes up.** For each partition this broker leads with `remote.storage.enable`, the closed
   segment holding the remote log's end offset (the first one at the log start when nothing is remote
   yet), and only once it lies wholly below the high-water mark and the last stable offset: every record
   in it is committed and every transaction in it is decided, so a remote segment never changes. When the
   remote log ends inside a local segment (another leader uploaded before, and replicas roll segments on
   their own), the part of that segment from the remote end on goes up: offsets are batch boundaries on
   every replica. One upload at a time per partition, in offset order.
2. **Pinned, then off the lock.** The candidate is chosen and its file opened under the partition lock
   (`Partition.remote_upload_candidate`); the open file keeps its bytes even if the segment is deleted
   meanwhile. The walk (remote_segment_index.py: every CRC checked, nothing damaged is uploaded), the state
   chain (remote_segment_state.py) and the I/O run on this manager's thread, never under the lock or on
   the event loop.
3. **Never overwrite.** Objects are created with `put_if_absent` under keys made of the cluster id, topic
   id, partition, offsets and the uploader's leader epoch (`segment_keys`), so a retry after a crash meets
   its own object: one of the same size is taken as uploaded, another is deleted and put again (only this
   leader epoch's leader writes that key).
4. **Recorded after durable.** Only once both objects are stored does the leader ask the controller to
   record the segment (AlterRemoteLog, at its leader epoch). A deposed leader is refused there
   (FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER): its objects are then orphans, which the orphan sweep
   removes. Nothing here deletes a local segment: replicas drop local segments only below the remote end
   of the metadata they have applied (`Partition.maintenance`).
5. **Retries.** A retriable storage or controller failure is tried again after a backoff that doubles from
   100 ms to `remote_retry_backoff_ms_max`, per partition; the local segment stays meanwhile.

After the upload, on this manager's housekeeping thread (never the event loop, never a partition lock):

6. **Remote retention** (Kafka's RLMExpirationTask), on the partition's leader: `retention.ms` and
   `retention.bytes` bound the whole log, remote and local. The oldest remote segments go while their
   newest record is older than `retention.ms`, or while the log without them (remote bytes plus the local
   bytes above the remote end) still holds `retention.bytes` (`remote_retention`, pure). The new start (the
   next segment's base, or the remote end) is committed first (AlterRemoteLog NewLogStart); only once the
   controller accepted it are both objects of each dropped segment deleted. A crash between leaves
   objects no record names, below the start: the orphan sweep removes them.
7. **Orphan sweep**, per partition led here, at most every `orphan_check_interval_ms` and never at
   start-up (a restarted broker's image may still be catching up): the partition's prefix is listed
   (staging objects too) and a key is deleted when no segment of the image names it, no upload of this
   broker is writing it or waiting for its record to be applied here, and it is older than
   `orphan_grace_ms`, or when it lies wholly below the remote log start (`orphan_keys`, pure). Uploads
   cut by a crash, deposed leaders' uploads and retention's leftovers all end here.
8. **Topic deletion**: the lowest-id unfenced broker of the image (`is_janitor`: deterministic, and a
   double delete is harmless) deletes `<cluster id>/<topic id>/` of every topic an image change removed,
   and, at the sweep interval, the objects older than the grace period under topic ids the image does
   not hold (a deletion missed while no janitor ran, a zombie's late upload). Topic ids are never reused,
   so a new topic's objects are never taken for an old one's; the grace period covers a new topic this
   broker's image does not show yet.

The state at the upload's start offset (the idempotence and transaction state the `.meta` object carries
at its end is chained from it) comes from this manager's previous upload of the partition, else from the
`.meta` object of the remote segment ending there (one small read, after a restart or a leader change),
else, when nothing is remote yet and the upload starts at the log start, from nothing, as a replica
replaying its log from the start would.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import threading
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from kanal.broker.producer_snapshot import decode_snapshot
from kanal.broker.producer_state import ProducerStateTable
from kanal.broker.remote_segment_state import SegmentEndState, chain_segment
from kanal.broker.storage.remote_keys import partition_prefix, segment_keys
from kanal.broker.storage.remote_object import is_staging_key
from kanal.broker.storage.remote_segment_index import SegmentContents, describe_segment_bytes
from kanal.broker.storage.remote_segment_meta import RemoteSegmentMeta, decode_meta, encode_meta
from kanal.broker.storage.remote_storage import ObjectExists, ObjectInfo, RemoteStorage, RemoteStorageError
from kanal.broker.storage.transaction_checkpoint import decode_checkpoint
from kanal.broker.storage.transaction_index import TransactionIndex
from kanal.metadata.image import MetadataImage, RemoteLog, RemoteSegment
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

if TYPE_CHECKING:
    from kanal.broker.metrics import BrokerMetrics
    from kanal.broker.storage.log_config import LogConfig

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS_MIN = 100
UPLOADS_PER_RUN_MAX = 8
DELETE_BATCH_KEYS_MAX = 1000  # keys per storage delete call (S3's DeleteObjects takes at most 1000)
PartitionKey = tuple[str, int]  # (topic id, partition)
_TOPICS = "topics"  # the housekeeping key of the sweep for deleted topics' objects
# <base:020d>-<end:020d>-e<leader epoch>.log|.meta, the last part of segment_keys' keys.
_SEGMENT_KEY_NAME = re.compile(r"(\d{20})-(\d{20})-e\d+\.(?:log|meta)")


def segment_key_range(key: str) -> tuple[int, int] | None:
    """The [base, end) offsets a segment object's key names (segment_keys), None for any other key."""
    found = _SEGMENT_KEY_NAME.fullmatch(key.rpartition("/")[2])
    return (int(found[1]), int(found[2])) if found else None


def image_keys(cluster_id: str, topic_id: str, partition: int, remote: RemoteLog | None) -> set[str]:
    """Every key the image's remote log of a partition names (both objects of each segment)."""
    if remote is None:
        return set()
    return {key for s in remote.segments
            for key in segment_keys(cluster_id, topic_id, partition, s.base_offset, s.end_offset,
                                    s.leader_epoch)}


# ---- the decisions (pure: no I/O, no clock) ----


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """Remote retention's answer for one partition: move the remote log start to `new_start`, then delete
    the objects of `dropped` (the oldest segments, in offset order)."""

    new_start: int
    dropped: tuple[RemoteSegment, ...]
    reason: str  # for the RemoteLogStartRecord and the log line


def remote_retention(remote: RemoteLog, local_bytes_above_end: int, now_ms: int, retention_ms: int | None,
                     retention_bytes: int | None) -> RetentionDecision | None:
    """Which oldest remote segments `retention.ms` / `retention.bytes` (None: unlimited) drop, counting the
    whole log: the remote segments plus `local_bytes_above_end` (the local segments not uploaded yet). A
    segment goes while its newest record is older than `retention.ms`, or while the log without it still
    holds `retention.bytes` (the local rule, log.py `delete_old_segments`). None: nothing goes. The new
    start is the first kept segment's base, or the remote end when every segment goes."""
    segments = remote.segments
    total = sum(s.size_bytes for s in segments) + local_bytes_above_end
    reasons: list[str] = []
    dropped = 0
    while dropped < len(segments):
        segment = segments[dropped]
        if retention_ms is not None and segment.max_timestamp_ms < now_ms - retention_ms:
            reason = f"retention.ms={retention_ms}"
        elif retention_bytes is not None and total - segment.size_bytes >= retention_bytes:
            reason = f"retention.bytes={retention_bytes}"
        else:
            break
        if reason not in reasons:
            reasons.append(reason)
        total -= segment.size_bytes
        dropped += 1
    if not dropped:
        return None
    new_start = segments[dropped].base_offset if dropped < len(segments) else remote.end_offset
    return RetentionDecision(new_start, segments[:dropped], ", ".join(reasons))


def orphan_keys(listed: Iterable[ObjectInfo], named: Collection[str], in_flight: Collection[str],
                now_ms: int, grace_ms: int, log_start_offset: int | None) -> list[str]:
    """The keys of a partition's listing (staging objects included) the sweep deletes: those no image
    segment names (`named`), no upload of this broker is writing or waiting on (`in_flight`: a staging
    object counts as its final key's), and that are older than `grace_ms` or name a segment wholly below
    `log_start_offset` (the remote log's start; None: no remote log yet)."""
    chosen = []
    for info in listed:
        target = info.key.rsplit(".", 2)[0] if is_staging_key(info.key) else info.key
        if target in named or target in in_flight:
            continue
        offsets = segment_key_range(target)
        below = log_start_offset is not None and offsets is not None and offsets[1] <= log_start_offset
        if below or info.last_modified_ms < now_ms - grace_ms:
            chosen.append(info.key)
    return chosen


def stray_topic_keys(listed: Iterable[ObjectInfo], cluster_id: str, topic_ids: Collection[str], now_ms: int,
                     grace_ms: int) -> list[str]:
    """The keys under `<cluster_id>/` whose topic id is not in `topic_ids` (the image's) and that are older
    than `grace_ms`: a deleted topic's leftovers. The grace period spares a topic created so recently that
    the image it was compared with does not show it yet."""
    prefix = f"{cluster_id}/"
    return [info.key for info in listed
            if info.key.startswith(prefix) and info.key[len(prefix):].partition("/")[0] not in topic_ids
            and info.last_modified_ms < now_ms - grace_ms]


def is_janitor(image: MetadataImage, broker_id: int) -> bool:
    """Whether this broker deletes deleted topics' objects: the lowest-id unfenced broker of the image."""
    live = image.live_brokers()
    return bool(live) and min(live) == broker_id


@dataclass(frozen=True, slots=True)
class RetentionView:
    """What remote retention and the orphan sweep need of a tiered partition led here, taken under its
    lock (Partition.remote_retention_view)."""

    topic: str
    topic_id: str
    partition: int
    leader_epoch: int
    remote: RemoteLog | None  # the applied image's remote log; None: nothing recorded yet
    local_bytes_above_end: int  # bytes of local segments starting at or above the remote end
    config: LogConfig


@dataclass(frozen=True, slots=True)
class UploadJob:
    """A segment (or its part from `base_offset`) pinned for upload by a partition's leader."""

    topic: str
    topic_id: str
    partition: int
    leader_epoch: int
    base_offset: int  # the first offset uploaded: the segment's base, or the remote end inside it
    end_offset: int  # the segment's next offset
    fd: int  # the segment's .log, opened under the partition lock; the job closes it
    position: int  # byte position of the batch at base_offset in the file
    size: int  # the file's size when pinned (a closed segment does not grow)
    index_interval_bytes: int
    remote: RemoteLog | None  # the partition's remote log in the image the leader had when pinning


class UploadSource(Protocol):
    """What the manager needs of a hosted partition (Partition; a Protocol so this module sits below it)."""

    topic_id: str
    partition_id: int
    remote: RemoteLog | None

    def remote_upload_candidate(self, recorded_end: int | None = None) -> UploadJob | None: ...

    def remote_upload_lag(self) -> tuple[int, int]: ...

    def remote_retention_view(self) -> RetentionView | None: ...


@dataclass(slots=True)
class _Backoff:
    next_try_ms: int = 0
    delay_ms: int = 0


class RemoteLogManager:
    def __init__(self, storage: RemoteStorage, *, cluster_id: Callable[[], str], broker_id: int,
                 broker_epoch: Callable[[], int], call_controller: Callable[[str, Any], Any],
                 metrics: BrokerMetrics, retry_backoff_ms_max: int, orphan_check_interval_ms: int = 600_000,
                 orphan_grace_ms: int = 600_000) -> None:
        self.storage = storage
        self._cluster_id = cluster_id
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._call_controller = call_controller
        self._metrics = metrics
        self._retry_backoff_ms_max = retry_backoff_ms_max
        self._orphan_check_interval_ms = orphan_check_interval_ms
        self._orphan_grace_ms = orphan_grace_ms
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="remote-upload")
        # Retention, sweeps and topic deletion: a thread of their own, so a backlog of uploads never holds
        # them up (nor they an upload).
        self._cleanup_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="remote-cleanup")
        self._lock = threading.Lock()
        self._inflight: dict[PartitionKey, Future[None]] = {}
        self._backoff: dict[PartitionKey, _Backoff] = {}
        # State at the end of this manager's last recorded upload per partition: the next upload's start.
        self._carried: dict[PartitionKey, SegmentEndState] = {}
        # Keys this broker's uploads are writing, or wrote and got recorded but the image applied here does
        # not show yet: key -> (partition, the segment's end offset). The orphan sweep leaves them alone.
        self._uploading: dict[str, tuple[PartitionKey, int]] = {}
        # Housekeeping jobs queued or running (a partition's key, or _TOPICS for the topic sweep): one each.
        self._cleaning: set[PartitionKey | str] = set()
        # The remote log start this leader last got committed per partition: no retention is decided again
        # until the applied image shows it.
        self._committed_start: dict[PartitionKey, int] = {}
        self._first_tick_ms: int | None = None
        self._next_sweep_ms: dict[PartitionKey | str, int] = {}
        self._image = MetadataImage()

    def __repr__(self) -> str:
        return f"<RemoteLogManager {self.storage.url} in flight={len(self._inflight)}>"

    def close(self) -> None:
        """Stop; an upload in flight is not waited for (storage may hang): its file stays open until it
        ends, and an upload cut here is retried by the next leader as any crashed one is."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._cleanup_pool.shutdown(wait=False, cancel_futures=True)

    def in_flight(self) -> set[PartitionKey]:
        with self._lock:
            return set(self._inflight)

    def in_flight_keys(self) -> set[str]:
        """The object keys the orphan sweep must leave alone (see `_uploading`)."""
        with self._lock:
            return set(self._uploading)

    def tick(self, partitions: Iterable[UploadSource], now_ms: int) -> None:
        """Start the uploads, retention and sweeps that are due (called from the broker's maintenance
        loop; `now_ms` is wall-clock time, as record timestamps and object modification times are)."""
        partitions = list(partitions)
        lag_segments = lag_bytes = 0
        for part in partitions:
            lag = part.remote_upload_lag()
            lag_segments += lag[0]
            lag_bytes += lag[1]
            key = (part.topic_id, part.partition_id)
            with self._lock:
                if key in self._inflight or self._backoff.get(key, _Backoff()).next_try_ms > now_ms:
                    continue
            job = part.remote_upload_candidate(self._recorded_end(key))
            if job is None:
                continue
            with self._lock:
                future = self._pool.submit(self._run, part, key, job, now_ms)
                self._inflight[key] = future
            future.add_done_callback(partial(self._done, key))
        self._metrics.remote_upload_lag_segments.set(lag_segments)
        self._metrics.remote_upload_lag_bytes.set(lag_bytes)
        self._housekeeping(partitions, now_ms)

    # ---- one upload, on the manager's thread ----

    def _done(self, key: PartitionKey, _: Future[None]) -> None:
        with self._lock:
            self._inflight.pop(key, None)

    def _recorded_end(self, key: PartitionKey) -> int | None:
        with self._lock:
            carried = self._carried.get(key)
        return carried.end_offset if carried is not None else None

    def _run(self, part: UploadSource, key: PartitionKey, job: UploadJob, now_ms: int) -> None:
        """Upload `job`, then the segments after it while there are some, up to UPLOADS_PER_RUN_MAX (a
        backlog drains without waiting a maintenance tick per segment; other partitions get their turn
        after that many). The next one starts where the controller recorded this one's end, before this
        broker has applied the record: uploads never wait on the metadata, local deletions always do."""
        for _ in range(UPLOADS_PER_RUN_MAX):
            if not self._run_one(key, job, now_ms):
                return
            next_job = part.remote_upload_candidate(self._recorded_end(key))
            if next_job is None:
                return
            job = next_job

    def _run_one(self, key: PartitionKey, job: UploadJob, now_ms: int) -> bool:
        """One upload; whether it was recorded."""
        try:
            self._upload(key, job)
        except (RemoteStorageError, KanalError) as exc:
            retriable = exc.retriable
            self._metrics.remote_upload_errors.labels("retriable" if retriable else "fatal").inc()
            log.warning("upload of %s-%d [%d, %d) failed (%s): %s", job.topic, job.partition, job.base_offset,
                        job.end_offset, "will retry" if retriable else "not retried", exc)
            with self._lock:
                backoff = self._backoff.setdefault(key, _Backoff())
                backoff.delay_ms = min(max(RETRY_BACKOFF_MS_MIN, 2 * backoff.delay_ms),
                                       self._retry_backoff_ms_max)
                backoff.next_try_ms = now_ms + backoff.delay_ms
                self._carried.pop(key, None)
        except Exception:
            log.exception("upload of %s-%d [%d, %d) failed", job.topic, job.partition, job.base_offset,
                          job.end_offset)
        else:
            with self._lock:
                self._backoff.pop(key, None)
            return True
        finally:
            os.close(job.fd)
        return False

    def _upload(self, key: PartitionKey, job: UploadJob) -> None:
        with mmap.mmap(job.fd, job.size, prot=mmap.PROT_READ) as mapped:
            view = memoryview(mapped)[job.position:job.size]
            try:
                contents = describe_segment_bytes(view, job.base_offset, job.index_interval_bytes)
                if contents.end_offset != job.end_offset:
                    raise KanalError(ErrorCode.CORRUPT_MESSAGE,
                                     f"segment bytes end at {contents.end_offset}, not {job.end_offset}")
                producers, transactions = self._state_at(key, job)
                state = chain_segment(view, job.base_offset, job.end_offset, producers, transactions)
                meta = encode_meta(RemoteSegmentMeta(
                    job.topic, job.base_offset, job.end_offset, contents.epochs, contents.offset_index,
                    contents.time_index, state.snapshot_bytes(), state.transactions_bytes()))
                log_key, meta_key = segment_keys(self._cluster_id(), job.topic_id, job.partition,
                                                 job.base_offset, job.end_offset, job.leader_epoch)
                data = bytes(view)
            finally:
                view.release()
        with self._lock:
            for object_key in (log_key, meta_key):
                self._uploading[object_key] = (key, job.end_offset)
        try:
            self._store_and_record(key, job, log_key, data, meta_key, meta, contents, state)
        except BaseException:
            with self._lock:  # not recorded: the objects are orphans now, the sweep's to remove
                self._uploading.pop(log_key, None)
                self._uploading.pop(meta_key, None)
            raise

    def _store_and_record(self, key: PartitionKey, job: UploadJob, log_key: str, data: bytes, meta_key: str,
                          meta: bytes, contents: SegmentContents,
                          state: SegmentEndState) -> None:
        self._put(log_key, data)
        self._put(meta_key, meta)
        self._metrics.remote_bytes_uploaded.inc(len(data) + len(meta))
        segment = metadata_pb2.RemoteLogSegmentRecord(
            topic_id=job.topic_id, partition_id=job.partition, base_offset=job.base_offset,
            end_offset=job.end_offset, size_bytes=len(data), meta_bytes=len(meta),
            max_timestamp_ms=contents.max_timestamp_ms, leader_epoch=job.leader_epoch,
            broker_id=self._broker_id,
            epochs=[metadata_pb2.RemoteLogEpochStart(epoch=e, start_offset=o) for e, o in contents.epochs],
            aborted_transactions=[metadata_pb2.RemoteLogAbortedTransaction(
                producer_id=a.producer_id, first_offset=a.first_offset, last_offset=a.last_offset)
                for a in state.aborted],
            open_transactions=[metadata_pb2.RemoteLogOpenTransaction(producer_id=p, first_offset=o)
                               for p, o in sorted(state.open_transactions.items())])
        self._record(job, segment)
        with self._lock:
            self._carried[key] = state
        self._metrics.remote_segments_uploaded.inc()
        log.info("uploaded %s-%d [%d, %d) (%d bytes) at leader epoch %d", job.topic, job.partition,
                 job.base_offset, job.end_offset, len(data), job.leader_epoch)

    def _state_at(self, key: PartitionKey, job: UploadJob) -> tuple[ProducerStateTable, TransactionIndex]:
        with self._lock:
            carried = self._carried.get(key)
        if carried is not None and carried.end_offset == job.base_offset:
            return carried.carried()
        remote = job.remote
        if remote is not None and remote.segments:
            last = remote.segments[-1]
            if last.end_offset != job.base_offset:
                raise KanalError(ErrorCode.OFFSET_OUT_OF_RANGE, f"the remote log ends at {last.end_offset}, "
                                                                f"the upload starts at {job.base_offset}")
            _, meta_key = segment_keys(self._cluster_id(), job.topic_id, job.partition, last.base_offset,
                                       last.end_offset, last.leader_epoch)
            meta = decode_meta(self.storage.get_range(meta_key, 0, last.meta_bytes))
            _, producers = decode_snapshot(meta.producer_snapshot)
            previous = decode_checkpoint(meta.transactions)
            return producers, TransactionIndex(dict(previous.ongoing), [], job.base_offset)
        # Nothing remote yet: the upload starts at the log start, where replay starts from nothing.
        producers = ProducerStateTable()
        producers.advance_to(job.base_offset)
        return producers, TransactionIndex(next_offset=job.base_offset)

    def _put(self, key: str, data: bytes) -> None:
        try:
            self.storage.put_if_absent(key, data)
        except ObjectExists:
            # A retry after a crash or a lost answer: this leader epoch's own key. The same size is the same
            # upload (the bytes are a function of the log); anything else is a torn attempt, put again.
            if self.storage.head(key).size == len(data):
                return
            self.storage.delete([key])
            self.storage.put_if_absent(key, data)

    def _record(self, job: UploadJob, segment: metadata_pb2.RemoteLogSegmentRecord) -> None:
        request = controller_pb2.AlterRemoteLogRequest(broker_id=self._broker_id,
                                                       broker_epoch=self._broker_epoch())
        item = request.items.add(topic_id=job.topic_id, partition_id=job.partition,
                                 leader_epoch=job.leader_epoch)
        item.segments_uploaded.segments.append(segment)
        reply = self._call_controller("AlterRemoteLog", request)
        if reply.error != ErrorCode.NONE:
            raise KanalError(reply.error, f"AlterRemoteLog: {reply.error_message}")
        answer = reply.items[0]
        if answer.error != ErrorCode.NONE:
            # FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER: deposed; OFFSET_OUT_OF_RANGE: someone else's
            # upload was recorded first. Either way these objects are orphans now; not retried.
            raise KanalError(answer.error, f"AlterRemoteLog refused {job.topic}-{job.partition} "
                                           f"[{job.base_offset}, {job.end_offset}): {answer.error_message}")

    # ---- housekeeping: retention, orphan sweeps, deleted topics (on the cleanup thread) ----

    def on_image(self, old: MetadataImage, new: MetadataImage) -> None:
        """A metadata image was applied here (ReplicaManager.on_metadata, after the partitions took their
        remote logs from it): on the janitor, delete the objects of the topics it removed."""
        self._image = new
        removed = sorted(set(old.topics_by_id) - set(new.topics_by_id))
        if removed and new.cluster_id and is_janitor(new, self._broker_id):
            self._submit_cleanup(None, self._delete_topics, new.cluster_id, removed)

    def _housekeeping(self, partitions: list[UploadSource], now_ms: int) -> None:
        if self._first_tick_ms is None:
            self._first_tick_ms = now_ms
        first_sweep_ms = self._first_tick_ms + self._orphan_check_interval_ms  # never at start-up
        self._forget_applied_uploads()
        for part in partitions:
            view = part.remote_retention_view()
            if view is None:
                continue
            key = (view.topic_id, view.partition)
            with self._lock:
                if key in self._cleaning:
                    continue
            decision = self._retention_due(key, view, now_ms)
            if decision is not None:
                self._submit_cleanup(key, self._retain, key, view, decision)
            elif now_ms >= self._next_sweep_ms.setdefault(key, first_sweep_ms):
                self._next_sweep_ms[key] = now_ms + self._orphan_check_interval_ms
                self._submit_cleanup(key, self._sweep_partition, part, view, now_ms)
        image = self._image
        if now_ms >= self._next_sweep_ms.setdefault(_TOPICS, first_sweep_ms) and image.cluster_id:
            self._next_sweep_ms[_TOPICS] = now_ms + self._orphan_check_interval_ms
            if is_janitor(image, self._broker_id):
                self._submit_cleanup(_TOPICS, self._sweep_topics, image.cluster_id, now_ms)

    def _retention_due(self, key: PartitionKey, view: RetentionView, now_ms: int) -> RetentionDecision | None:
        remote = view.remote
        if remote is None or not remote.segments:
            return None
        with self._lock:
            committed = self._committed_start.get(key)
            if committed is not None:
                if committed > remote.log_start_offset:
                    return None  # committed, not applied here yet: deciding again would repeat it
                del self._committed_start[key]
        return remote_retention(remote, view.local_bytes_above_end, now_ms, view.config.retention_ms,
                                view.config.retention_bytes)

    def _forget_applied_uploads(self) -> None:
        """Stop protecting the keys of recorded uploads the applied image shows (or whose topic is gone)."""
        image = self._image
        with self._lock:
            for object_key, ((topic_id, partition), end) in list(self._uploading.items()):
                if (topic_id, partition) in self._inflight:
                    continue
                remote = image.remote_log(topic_id, partition)
                if image.topic_by_id(topic_id) is None or (remote is not None and remote.end_offset >= end):
                    del self._uploading[object_key]

    def _submit_cleanup(self, job_key: PartitionKey | str | None, fn: Callable[..., None],
                        *args: Any) -> None:
        with self._lock:
            if job_key is not None:
                if job_key in self._cleaning:
                    return
                self._cleaning.add(job_key)
        try:
            self._cleanup_pool.submit(self._run_cleanup, job_key, fn, *args)
        except RuntimeError:  # shut down: the broker is stopping
            with self._lock:
                self._cleaning.discard(job_key)

    def _run_cleanup(self, job_key: PartitionKey | str | None, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except (RemoteStorageError, KanalError) as exc:
            # Retried at the next tick (retention) or sweep interval; nothing was half done that the next
            # run cannot finish (a start committed without its deletions leaves orphans to the sweep).
            log.warning("remote storage housekeeping (%s) failed: %s", getattr(fn, "__name__", fn), exc)
        except Exception:
            log.exception("remote storage housekeeping (%s) failed", getattr(fn, "__name__", fn))
        finally:
            if job_key is not None:
                with self._lock:
                    self._cleaning.discard(job_key)

    def _retain(self, key: PartitionKey, view: RetentionView, decision: RetentionDecision) -> None:
        """Commit the new remote log start, then delete the dropped segments' objects."""
        request = controller_pb2.AlterRemoteLogRequest(broker_id=self._broker_id,
                                                       broker_epoch=self._broker_epoch())
        item = request.items.add(topic_id=view.topic_id, partition_id=view.partition,
                                 leader_epoch=view.leader_epoch)
        item.new_log_start.log_start_offset = decision.new_start
        item.new_log_start.reason = decision.reason
        reply = self._call_controller("AlterRemoteLog", request)
        error, message = ((reply.error, reply.error_message) if reply.error != ErrorCode.NONE
                          else (reply.items[0].error, reply.items[0].error_message))
        if error != ErrorCode.NONE:
            # Deposed (the new leader decides), or the log moved meanwhile: decided again on a later image.
            log.warning("remote retention of %s-%d to %d refused: %s %s", view.topic, view.partition,
                        decision.new_start, ErrorCode.Name(error), message)
            return
        with self._lock:
            self._committed_start[key] = decision.new_start
        cluster_id = self._cluster_id()
        self._delete([object_key for s in decision.dropped
                      for object_key in segment_keys(cluster_id, view.topic_id, view.partition, s.base_offset,
                                                     s.end_offset, s.leader_epoch)])
        self._metrics.remote_segments_deleted.inc(len(decision.dropped))
        log.info("remote retention of %s-%d (%s): log start %d, %d segment(s) deleted", view.topic,
                 view.partition, decision.reason, decision.new_start, len(decision.dropped))

    def _sweep_partition(self, part: UploadSource, view: RetentionView, now_ms: int) -> None:
        """Delete the partition's orphans (rule 7)."""
        cluster_id = self._cluster_id()
        in_flight = self.in_flight_keys()  # before the listing: an upload starting later is too new to go
        prefix = partition_prefix(cluster_id, view.topic_id, view.partition)
        listed = list(self.storage.list(prefix, include_staging=True))
        remote = part.remote  # after the listing: a segment recorded meanwhile is named
        named = image_keys(cluster_id, view.topic_id, view.partition, remote)
        start = remote.log_start_offset if remote is not None else None
        keys = orphan_keys(listed, named, in_flight, now_ms, self._orphan_grace_ms, start)
        if keys:
            self._delete(keys)
            self._metrics.remote_orphans_removed.inc(len(keys))
            log.info("removed %d orphan object(s) of %s-%d (no record names them, older than %d ms or below "
                     "the remote log start %s): %s", len(keys), view.topic, view.partition,
                     self._orphan_grace_ms, start, ", ".join(keys[:5]))

    def _sweep_topics(self, cluster_id: str, now_ms: int) -> None:
        """Delete the objects of topics the image does not hold (rule 8)."""
        listed = list(self.storage.list(f"{cluster_id}/", include_staging=True))
        topic_ids = set(self._image.topics_by_id)  # after the listing: a topic created meanwhile is known
        keys = stray_topic_keys(listed, cluster_id, topic_ids, now_ms, self._orphan_grace_ms)
        if keys:
            self._delete(keys)
            self._metrics.remote_orphans_removed.inc(len(keys))
            log.info("removed %d object(s) of deleted topics: %s", len(keys), ", ".join(keys[:5]))

    def _delete_topics(self, cluster_id: str, topic_ids: list[str]) -> None:
        """Delete every object of the deleted topics `topic_ids`."""
        for topic_id in topic_ids:
            keys = [info.key for info in self.storage.list(partition_prefix(cluster_id, topic_id),
                                                           include_staging=True)]
            self._delete(keys)
            segments = sum(1 for key in keys if key.endswith(".log"))
            self._metrics.remote_segments_deleted.inc(segments)
            log.info("deleted topic %s: removed its %d remote object(s)", topic_id, len(keys))

    def _delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), DELETE_BATCH_KEYS_MAX):
            self.storage.delete(keys[i:i + DELETE_BATCH_KEYS_MAX])
