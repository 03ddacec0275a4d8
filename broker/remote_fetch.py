"""RemoteReader: consumer reads of offsets that live only in remote storage (tiered storage, issue 44;
Kafka's RemoteLogReader), and the bounded cache behind them.

A remote segment's `.log` object is its segment file, so a read answers exactly what `LogSegment.read`
would have answered from the local file: whole entries from the batch holding the fetch offset, at most
`bytes_max` bytes but at least one entry, only batches that end below the limit (the high-water mark or
the last stable offset). The object's offset index, in its `.meta` object, gives where to start: at most
one index interval before the wanted batch.

The cache holds fixed-size chunks of data objects (`chunk_bytes`, aligned, so a sequential reader fetches
each range once) and decoded `.meta` objects, least recently used first out, never more than
`cache_bytes` of chunks. Everything here is blocking I/O: the broker calls it on a thread pool of its
own (`remote_io_pool`), never on its event loop and never under a partition lock.

Failures: a missing object means the segment was deleted by remote retention after the fetch found it
(OFFSET_OUT_OF_RANGE, as a local read below the log start: the consumer resets by its policy); any other
storage failure is STORAGE_ERROR, retriable: the consumer tries again, nothing is skipped.
"""

from __future__ import annotations

import struct
import threading
import time
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kanal.broker.storage.remote_keys import segment_keys
from kanal.broker.storage.remote_segment_meta import RemoteSegmentMeta, decode_meta
from kanal.broker.storage.remote_storage import ObjectMissing, RemoteStorage, RemoteStorageError
from kanal.metadata.image import RemoteSegment
from kanal.v1 import broker_pb2
from kanal.v1.batch import (
    BROKER_SUFFIX_BYTES,
    ENTRY_HEADER,
    ENTRY_HEADER_BYTES,
    decode_records,
    parse_batch,
    read_broker_suffix,
    scan_batch,
)
from kanal.v1.error import ErrorCode, KanalError

if TYPE_CHECKING:
    from kanal.broker.metrics import BrokerMetrics

_OFFSET_ENTRY = struct.Struct(">II")  # offset_index.py's entry
_TIME_ENTRY = struct.Struct(">qI")  # time_index.py's entry
META_CACHE_ENTRIES_MAX = 1024


@dataclass(frozen=True, slots=True)
class RemoteReadSpec:
    """A consumer read below a partition's local log start, decided under its lock, done off it."""

    topic_id: str
    partition: int
    segment: RemoteSegment
    offset: int
    bytes_max: int
    limit: int  # exclusive: the HW or the LSO, within the segment
    aborted: list[tuple[int, int]]  # read_committed: (producer id, first offset) that may overlap


class RemoteReadNeeded(Exception):
    """Raised by Partition.read_for_consumer for a read that only remote storage can answer: the fetch
    answers it off the event loop (RemoteReader.fill)."""

    def __init__(self, spec: RemoteReadSpec) -> None:
        super().__init__(f"remote read of {spec.topic_id}-{spec.partition} at {spec.offset}")
        self.spec = spec


class RemoteReader:
    def __init__(self, storage: RemoteStorage, *, cluster_id: Callable[[], str], cache_bytes: int,
                 chunk_bytes: int, metrics: BrokerMetrics, threads: int = 4) -> None:
        self.storage = storage
        self._cluster_id = cluster_id
        self._cache_bytes = cache_bytes
        self._chunk_bytes = chunk_bytes
        self._metrics = metrics
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._chunk_total = 0
        self._metas: OrderedDict[str, _Meta] = OrderedDict()
        # Remote reads and remote offset lookups run here, off the event loop.
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="remote-io")

    def __repr__(self) -> str:
        return f"<RemoteReader {self.storage.url} cached={self._chunk_total}/{self._cache_bytes} B>"

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    @property
    def cached_bytes(self) -> int:
        with self._lock:
            return self._chunk_total

    def read(self, topic_id: str, partition: int, segment: RemoteSegment, offset: int, bytes_max: int,
             limit: int) -> bytes:
        """Stored entries of `segment` from the batch holding `offset` (see the module docstring)."""
        started = time.perf_counter()
        try:
            data = self._read(topic_id, partition, segment, offset, bytes_max, limit)
        except ObjectMissing as exc:
            raise KanalError(ErrorCode.OFFSET_OUT_OF_RANGE, f"remote segment [{segment.base_offset}, "
                                                            f"{segment.end_offset}) is gone: {exc}") from None
        except RemoteStorageError as exc:
            raise KanalError(ErrorCode.STORAGE_ERROR, f"remote storage: {exc}") from None
        self._metrics.remote_fetch_bytes.inc(len(data))
        self._metrics.remote_fetch_latency.observe(time.perf_counter() - started)
        return data

    def fill(self, spec: RemoteReadSpec, out: broker_pb2.FetchResponse.PartitionData) -> int:
        """Answer one partition of a Fetch from remote storage (its bounds are filled already); the bytes
        returned. A failure becomes the partition's error."""
        try:
            data = self.read(spec.topic_id, spec.partition, spec.segment, spec.offset, spec.bytes_max,
                             spec.limit)
        except KanalError as exc:
            out.error = exc.code
            out.error_message = exc.message
            return 0
        out.records = data
        for producer_id, first_offset in spec.aborted if data else ():
            out.aborted_transactions.add(producer_id=producer_id, first_offset=first_offset)
        return len(data)

    def offset_for_timestamp(self, topic_id: str, partition: int, segment: RemoteSegment, timestamp_ms: int,
                             log_start_offset: int) -> tuple[int, int] | None:
        """The first offset of `segment` at or after `log_start_offset` whose record timestamp is >=
        `timestamp_ms`, with that timestamp (Log.offset_for_timestamp's rule, over the remote copy: the
        `.meta` time index says where to start, the batches say the rest); None when none is."""
        try:
            return self._offset_for_timestamp(topic_id, partition, segment, timestamp_ms, log_start_offset)
        except ObjectMissing:
            return None  # deleted by retention since: nothing of it is readable any more
        except RemoteStorageError as exc:
            raise KanalError(ErrorCode.STORAGE_ERROR, f"remote storage: {exc}") from None

    def _offset_for_timestamp(self, topic_id: str, partition: int, segment: RemoteSegment, timestamp_ms: int,
                              log_start_offset: int) -> tuple[int, int] | None:
        log_key, _ = self._keys(topic_id, partition, segment)
        meta = self.meta(topic_id, partition, segment)
        position = meta.position_before(meta.relative_offset_before(timestamp_ms))
        size = segment.size_bytes
        while position + ENTRY_HEADER_BYTES <= size:
            (length, _) = ENTRY_HEADER.unpack(self._bytes(log_key, size, position, ENTRY_HEADER_BYTES))
            entry = self._bytes(log_key, size, position, ENTRY_HEADER_BYTES + length)
            position += ENTRY_HEADER_BYTES + length
            body = entry[ENTRY_HEADER_BYTES:]
            if read_broker_suffix(body).last_offset < log_start_offset:
                continue
            if scan_batch(body).max_timestamp_ms < timestamp_ms:
                continue
            batch = parse_batch(body)
            for record in decode_records(batch):
                offset = batch.base_offset + record.offset_delta
                ts = batch.first_timestamp_ms + record.timestamp_delta_ms
                if ts >= timestamp_ms and offset >= log_start_offset:
                    return offset, ts
        return None

    def meta(self, topic_id: str, partition: int, segment: RemoteSegment) -> _Meta:
        """The segment's `.meta` object, decoded, with its offset index unpacked (cached)."""
        _, meta_key = self._keys(topic_id, partition, segment)
        with self._lock:
            cached = self._metas.get(meta_key)
            if cached is not None:
                self._metas.move_to_end(meta_key)
                return cached
        meta = _Meta(decode_meta(self.storage.get_range(meta_key, 0, segment.meta_bytes)))
        with self._lock:
            self._metas[meta_key] = meta
            while len(self._metas) > META_CACHE_ENTRIES_MAX:
                self._metas.popitem(last=False)
        return meta

    def _keys(self, topic_id: str, partition: int, segment: RemoteSegment) -> tuple[str, str]:
        return segment_keys(self._cluster_id(), topic_id, partition, segment.base_offset, segment.end_offset,
                            segment.leader_epoch)

    def _read(self, topic_id: str, partition: int, segment: RemoteSegment, offset: int, bytes_max: int,
              limit: int) -> bytes:
        log_key, _ = self._keys(topic_id, partition, segment)
        meta = self.meta(topic_id, partition, segment)
        position = meta.position_before(offset - segment.base_offset)
        size = segment.size_bytes
        out: list[bytes] = []
        total = 0
        while position + ENTRY_HEADER_BYTES <= size:
            (length, _) = ENTRY_HEADER.unpack(self._bytes(log_key, size, position, ENTRY_HEADER_BYTES))
            entry_size = ENTRY_HEADER_BYTES + length
            if length < BROKER_SUFFIX_BYTES or position + entry_size > size:
                raise KanalError(ErrorCode.CORRUPT_MESSAGE,
                                 f"remote segment {log_key}: an entry at byte {position} overruns the object")
            suffix_at = position + entry_size - BROKER_SUFFIX_BYTES
            suffix = read_broker_suffix(self._bytes(log_key, size, suffix_at, BROKER_SUFFIX_BYTES))
            if suffix.last_offset < offset:
                position += entry_size
                continue
            if suffix.last_offset >= limit or (out and total + entry_size > bytes_max):
                break
            out.append(self._bytes(log_key, size, position, entry_size))
            total += entry_size
            position += entry_size
        return b"".join(out)

    def _bytes(self, key: str, size: int, start: int, length: int) -> bytes:
        """[start, start + length) of the object `key` of `size` bytes, through the chunk cache."""
        parts = []
        end = start + length
        while start < end:
            number = start // self._chunk_bytes
            chunk = self._chunk(key, size, number)
            chunk_start = number * self._chunk_bytes
            take_end = min(end, chunk_start + len(chunk))
            if take_end <= start:
                raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"remote object {key} is shorter than {size} B")
            parts.append(chunk[start - chunk_start:take_end - chunk_start])
            start = take_end
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _chunk(self, key: str, size: int, number: int) -> bytes:
        with self._lock:
            cached = self._chunks.get((key, number))
            if cached is not None:
                self._chunks.move_to_end((key, number))
                self._metrics.remote_fetch_cache_hits.inc()
                return cached
        self._metrics.remote_fetch_cache_misses.inc()
        start = number * self._chunk_bytes
        data = self.storage.get_range(key, start, min(size, start + self._chunk_bytes))
        with self._lock:
            if (key, number) not in self._chunks:
                self._chunks[(key, number)] = data
                self._chunk_total += len(data)
            while self._chunk_total > self._cache_bytes and self._chunks:
                _, evicted = self._chunks.popitem(last=False)
                self._chunk_total -= len(evicted)
        return data


class _Meta:
    """A decoded `.meta` object with its offset index unpacked for lookups."""

    __slots__ = ("meta", "positions", "relatives", "time_relatives", "timestamps")

    def __init__(self, meta: RemoteSegmentMeta) -> None:
        self.meta = meta
        entries = [_OFFSET_ENTRY.unpack_from(meta.offset_index, i)
                   for i in range(0, len(meta.offset_index) - _OFFSET_ENTRY.size + 1, _OFFSET_ENTRY.size)]
        self.relatives = [relative for relative, _ in entries]
        self.positions = [position for _, position in entries]
        times = [_TIME_ENTRY.unpack_from(meta.time_index, i)
                 for i in range(0, len(meta.time_index) - _TIME_ENTRY.size + 1, _TIME_ENTRY.size)]
        self.timestamps = [ts for ts, _ in times]
        self.time_relatives = [relative for _, relative in times]

    def relative_offset_before(self, timestamp_ms: int) -> int:
        """Relative offset to scan from for the first batch with max timestamp >= `timestamp_ms` (the
        time index's rule, time_index.py)."""
        i = bisect_left(self.timestamps, timestamp_ms)
        return self.time_relatives[i - 1] if i else 0

    def position_before(self, relative_offset: int) -> int:
        """Position of the last indexed batch starting at or before `relative_offset` (0 when none)."""
        i = bisect_right(self.relatives, relative_offset)
        return self.positions[i - 1] if i else 0
