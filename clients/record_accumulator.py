"""RecordAccumulator: records waiting to be sent, as one open batch per partition plus sealed batches in
order, with the buffer-memory bound that gives produce() its back-pressure.

A batch is sealed when it reaches batch_size_bytes or when its first record has lingered linger_ms.
Each partition has at most one batch in flight, so batches of a partition are sent, retried and
acknowledged in order. Thread-safe: produce() threads append, the sender thread drains, gRPC callback
threads complete; one lock guards it all and `wakeup` (a Condition on it) signals the sender.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kanal.v1.batch import NewRecord
from kanal.v1.error import ErrorCode, KanalError

TopicPartition = tuple[str, int]
DeliveryCallback = Callable[[Any, "RecordMetadata | None"], None]  # (error or None, metadata or None)


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


class ProducerBatch:
    __slots__ = (
        "attempts",
        "base_offset",
        "base_sequence",
        "callbacks",
        "created_s",
        "deadline_s",
        "done",
        "encoded",
        "error",
        "partition",
        "producer_id",
        "records",
        "retry_at_s",
        "size_bytes",
        "topic",
    )

    def __init__(self, topic: str, partition: int, created_s: float, deadline_s: float) -> None:
        self.topic = topic
        self.partition = partition
        self.records: list[NewRecord] = []
        self.size_bytes = 0
        self.created_s = created_s
        self.callbacks: list[tuple[int, DeliveryCallback]] = []
        self.done = threading.Event()
        self.base_offset = -1
        self.error: KanalError | None = None
        self.encoded: bytes | None = None  # encoded once, on first send; retries resend the same bytes
        self.base_sequence = -1
        self.producer_id = 0
        self.attempts = 0
        self.retry_at_s = 0.0
        self.deadline_s = deadline_s

    def __repr__(self) -> str:
        return (f"<ProducerBatch {self.topic}-{self.partition} records={len(self.records)} "
                f"bytes={self.size_bytes} attempts={self.attempts}>")

    def complete(self, base_offset: int, error: KanalError | None) -> None:
        self.base_offset = base_offset
        self.error = error
        self.done.set()
        for index, callback in self.callbacks:
            meta = None if error else RecordMetadata(self.topic, self.partition, base_offset + index,
                                                     self.records[index].timestamp_ms)
            callback(error, meta)


class RecordFuture:
    """The outcome of one produce() call; cheap (two slots), resolved when its batch is acknowledged."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the acknowledgement; raises the KanalError the batch failed with."""
        if not self._batch.done.wait(timeout):
            raise KanalError(ErrorCode.REQUEST_TIMED_OUT, "the record was not acknowledged in time")
        batch = self._batch
        if batch.error is not None:
            raise batch.error
        return RecordMetadata(batch.topic, batch.partition, batch.base_offset + self._index,
                              batch.records[self._index].timestamp_ms)


class RecordAccumulator:
    def __init__(self, *, batch_size_bytes: int, linger_ms: int, buffer_memory_bytes: int,
                 delivery_timeout_ms: int) -> None:
        self._batch_size = batch_size_bytes
        self._linger_s = linger_ms / 1000
        self._buffer_max = buffer_memory_bytes
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._lock = threading.Lock()
        self.wakeup = threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        self._open: dict[TopicPartition, ProducerBatch] = {}
        self._sealed: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._in_flight: set[TopicPartition] = set()
        self._buffered = 0
        self._unfinished = 0  # batches created and not yet completed
        self._flushing = 0

    def __repr__(self) -> str:
        return (f"<RecordAccumulator open={len(self._open)} sealed={sum(map(len, self._sealed.values()))} "
                f"in_flight={len(self._in_flight)} buffered={self._buffered}>")

    def append(self, topic: str, partition: int, record: NewRecord, size: int, max_block_s: float
               ) -> tuple[ProducerBatch, int, bool]:
        """Add a record; returns its batch, its index there, and whether that batch was just sealed."""
        with self._lock:
            if self._buffered + size > self._buffer_max:  # rare: only then is back-pressure worked out
                deadline = time.monotonic() + max_block_s
                while self._buffered + size > self._buffer_max:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not self._space.wait(remaining):
                        if self._buffered + size > self._buffer_max:
                            raise KanalError(ErrorCode.REQUEST_TIMED_OUT,
                                             f"buffer_memory_bytes ({self._buffer_max}) stayed full for "
                                             f"{max_block_s * 1000:.0f} ms")
            now = time.monotonic()
            key = (topic, partition)
            batch = self._open.get(key)
            if batch is None:
                batch = self._open[key] = ProducerBatch(topic, partition, now, now + self._delivery_timeout_s)
                self._unfinished += 1
            index = len(batch.records)
            batch.records.append(record)
            batch.size_bytes += size
            self._buffered += size
            sealed = batch.size_bytes >= self._batch_size
            if sealed:
                self._seal(key, batch)
                self.wakeup.notify()
            elif index == 0:
                self.wakeup.notify()  # the sender must learn the new linger deadline
            return batch, index, sealed

    def _seal(self, key: TopicPartition, batch: ProducerBatch) -> None:
        del self._open[key]
        self._sealed.setdefault(key, deque()).append(batch)

    def drain(self, now: float, sendable: Callable[[TopicPartition], bool]) -> tuple[list[ProducerBatch], float]:
        """Batches to send now — for each partition without a batch in flight, its first sealed batch, or
        its open batch once it has lingered (or a flush asks) — and how long the sender may sleep before
        something is due."""
        out: list[ProducerBatch] = []
        sleep_s = 1.0
        with self._lock:
            for key in list(self._sealed.keys() | self._open.keys()):
                if key in self._in_flight:
                    # Keep the open batch open: records sent behind an in-flight batch gather into one
                    # batch instead of one batch each (it is sealed when full, or here once it may go).
                    continue
                queue = self._sealed.get(key)
                if not queue:
                    batch = self._open.get(key)
                    if batch is None:
                        continue
                    due = batch.created_s + self._linger_s
                    if due > now and not self._flushing:
                        sleep_s = min(sleep_s, due - now)
                        continue
                    self._seal(key, batch)
                    queue = self._sealed[key]
                batch = queue[0]
                if batch.retry_at_s > now:
                    sleep_s = min(sleep_s, batch.retry_at_s - now)
                    continue
                if not sendable(key):
                    continue
                queue.popleft()
                self._in_flight.add(key)
                out.append(batch)
        return out, max(sleep_s, 0.0005)

    def requeue(self, batch: ProducerBatch, retry_at_s: float) -> None:
        """Put a batch that must be retried back at the head of its partition (order is kept)."""
        with self._lock:
            key = (batch.topic, batch.partition)
            self._in_flight.discard(key)
            batch.retry_at_s = retry_at_s
            self._sealed.setdefault(key, deque()).appendleft(batch)
            self.wakeup.notify()

    def completed(self, batch: ProducerBatch) -> None:
        """A batch is finished (acknowledged or failed for good): free its memory and its partition."""
        with self._lock:
            self._in_flight.discard((batch.topic, batch.partition))
            self._buffered -= batch.size_bytes
            self._unfinished -= 1
            self._space.notify_all()
            self.wakeup.notify_all()

    def begin_flush(self) -> None:
        with self._lock:
            self._flushing += 1
            self.wakeup.notify()

    def end_flush(self) -> None:
        with self._lock:
            self._flushing -= 1

    def wait_all_done(self, timeout_s: float | None) -> bool:
        with self._lock:
            return self.wakeup.wait_for(lambda: self._unfinished == 0, timeout_s)

    @property
    def unfinished(self) -> int:
        return self._unfinished

    def abort_all(self, error: KanalError) -> list[ProducerBatch]:
        """Take every batch not yet in flight out (for close without flushing)."""
        with self._lock:
            batches = list(self._open.values()) + [b for q in self._sealed.values() for b in q]
            self._open.clear()
            self._sealed.clear()
        return batches
