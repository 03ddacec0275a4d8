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
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from kanal.broker.producer_snapshot import decode_snapshot
from kanal.broker.producer_state import ProducerStateTable
from kanal.broker.remote_segment_state import SegmentEndState, chain_segment
from kanal.broker.storage.remote_keys import segment_keys
from kanal.broker.storage.remote_segment_index import describe_segment_bytes
from kanal.broker.storage.remote_segment_meta import RemoteSegmentMeta, decode_meta, encode_meta
from kanal.broker.storage.remote_storage import ObjectExists, RemoteStorage, RemoteStorageError
from kanal.broker.storage.transaction_checkpoint import decode_checkpoint
from kanal.broker.storage.transaction_index import TransactionIndex
from kanal.metadata.image import RemoteLog
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

if TYPE_CHECKING:
    from kanal.broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS_MIN = 100
UPLOADS_PER_RUN_MAX = 8
PartitionKey = tuple[str, int]  # (topic id, partition)


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

    def remote_upload_candidate(self, recorded_end: int | None = None) -> UploadJob | None: ...

    def remote_upload_lag(self) -> tuple[int, int]: ...


@dataclass(slots=True)
class _Backoff:
    next_try_ms: int = 0
    delay_ms: int = 0


class RemoteLogManager:
    def __init__(self, storage: RemoteStorage, *, cluster_id: Callable[[], str], broker_id: int,
                 broker_epoch: Callable[[], int], call_controller: Callable[[str, Any], Any],
                 metrics: BrokerMetrics, retry_backoff_ms_max: int) -> None:
        self.storage = storage
        self._cluster_id = cluster_id
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._call_controller = call_controller
        self._metrics = metrics
        self._retry_backoff_ms_max = retry_backoff_ms_max
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="remote-upload")
        self._lock = threading.Lock()
        self._inflight: dict[PartitionKey, Future[None]] = {}
        self._backoff: dict[PartitionKey, _Backoff] = {}
        # State at the end of this manager's last recorded upload per partition: the next upload's start.
        self._carried: dict[PartitionKey, SegmentEndState] = {}

    def __repr__(self) -> str:
        return f"<RemoteLogManager {self.storage.url} in flight={len(self._inflight)}>"

    def close(self) -> None:
        """Stop; an upload in flight is not waited for (storage may hang): its file stays open until it
        ends, and an upload cut here is retried by the next leader as any crashed one is."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def in_flight(self) -> set[PartitionKey]:
        with self._lock:
            return set(self._inflight)

    def tick(self, partitions: Iterable[UploadSource], now_ms: int) -> None:
        """Start the uploads that are due (called from the broker's maintenance loop)."""
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
