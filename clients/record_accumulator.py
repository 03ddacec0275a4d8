"""RecordAccumulator: records waiting to be sent, as one open batch per partition plus sealed batches in
order, with the buffer-memory bound that gives produce() its back-pressure.

A batch is sealed when it reaches batch_size_bytes or when its first record has lingered linger_ms.
Each partition has at most one request in flight, carrying one or more of its batches in order, so
batches of a partition are sent, retried and acknowledged in order. Thread-safe: produce() threads
append, the sender thread drains, gRPC callback threads complete; one lock guards it all and `wakeup`
(a Condition on it) signals the sender.

With `native=True` (the C extension built) batches hold the C RecordList and buffer memory is the C
BufferMemory, so the Producer's C Appender (`native_appender`) can append records and charge memory
without the interpreter; it takes the same lock and hands every uncommon case back to Python.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kanal.clients.producer_batch import BufferMemory, DeliveryCallback, ProducerBatch, RecordList
from kanal.clients.producer_batch import native as _native
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import TopicPartition


class NativeAppender(Protocol):
    """What the producer uses of the C Appender (clients/_producer_fast.c)."""

    # Set to 1 when the producer closes: every later call goes to the Python fallback, which raises.
    closed: int
    # produce() with the Python Producer.produce's signature; the producer installs it as its own.
    produce: Callable[..., Any]

    def produce_many(self, topic: str, values: Any, keys: Any, partition: int | None, timestamp: int | None,
                     on_delivery: Any) -> tuple[list[Any], Any, Any] | None:
        """(batches, owners, indexes) of the records it placed, or None for a call it leaves to Python."""
        ...

class RecordAccumulator:
    def __init__(self, *, batch_size_bytes: int, linger_ms: int, buffer_memory_bytes: int,
                 delivery_timeout_ms: int, native: bool = False) -> None:
        if native and _native is None:
            raise KanalError(ErrorCode.INVALID_CONFIG, "the native producer path is not built")
        self.native = native
        self._records_type = _native.RecordList if native and _native is not None else RecordList
        self.memory = _native.BufferMemory() if native and _native is not None else BufferMemory()
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
        self._unfinished = 0  # batches created and not yet completed
        self._flushing = 0

    def __repr__(self) -> str:
        return (f"<RecordAccumulator open={len(self._open)} sealed={sum(map(len, self._sealed.values()))} "
                f"in_flight={len(self._in_flight)} buffered={self.memory.buffered_bytes}"
                f"{' native' if self.native else ''}>")

    @property
    def lock(self) -> threading.Lock:
        """The one lock: held around wait_for_space and append_locked by callers appending many records."""
        return self._lock

    def append(self, topic: str, partition: int, value: bytes | None, key: bytes | None, timestamp_ms: int,
               headers: Sequence[tuple[str, bytes | None]], size: int, max_block_s: float,
               on_delivery: DeliveryCallback | None = None) -> tuple[ProducerBatch, int, bool]:
        """Add a record (encoded into its partition's open batch at once); returns its batch, its index
        there, and whether that batch was just sealed. `on_delivery` is registered before the batch can
        be sent, so it is called however fast the batch completes."""
        with self._lock:
            self.wait_for_space(size, max_block_s)
            return self.append_locked(topic, partition, value, key, timestamp_ms, headers, size, on_delivery)

    def wait_for_space(self, size: int, max_block_s: float) -> None:
        """Under the lock: block until `size` more bytes fit in buffer_memory_bytes (back-pressure), or
        raise REQUEST_TIMED_OUT after max_block_s."""
        memory = self.memory
        if memory.buffered_bytes + size <= self._buffer_max:
            return  # the common case: no clock is read
        deadline = time.monotonic() + max_block_s
        while memory.buffered_bytes + size > self._buffer_max:
            remaining = deadline - time.monotonic()
            timed_out = remaining <= 0 or not self._space.wait(remaining)
            if timed_out and memory.buffered_bytes + size > self._buffer_max:
                raise KanalError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"buffer_memory_bytes ({self._buffer_max}) stayed full for "
                                 f"{max_block_s * 1000:.0f} ms")

    def append_locked(self, topic: str, partition: int, value: bytes | None, key: bytes | None,
                      timestamp_ms: int, headers: Sequence[tuple[str, bytes | None]], size: int,
                      on_delivery: DeliveryCallback | None = None) -> tuple[ProducerBatch, int, bool]:
        """append() for a caller that holds the lock and has made room (wait_for_space)."""
        tp = (topic, partition)
        batch = self._open.get(tp)
        if batch is not None:
            index = batch.append(value, key, timestamp_ms, headers)
        else:
            batch = ProducerBatch(topic, partition, 0.0, 0.0, self._records_type())
            index = batch.append(value, key, timestamp_ms, headers)  # a bad record leaves no empty batch
            self._register(tp, batch)
        if on_delivery is not None:
            batch.callbacks.append((index, on_delivery))
        records = batch.records
        records.size_bytes += size
        self.memory.buffered_bytes += size
        if records.size_bytes < self._batch_size:
            return batch, index, False
        self.seal_full(tp, batch)
        return batch, index, True

    def open_batch(self, key: TopicPartition) -> ProducerBatch:
        """Under the lock: a new, empty open batch for a partition that has none (the C Appender's way to
        start a batch without leaving C)."""
        batch = ProducerBatch(key[0], key[1], 0.0, 0.0, self._records_type())
        self._register(key, batch)
        return batch

    def _register(self, key: TopicPartition, batch: ProducerBatch) -> None:
        now = time.monotonic()
        batch.created_s, batch.deadline_s = now, now + self._delivery_timeout_s
        self._open[key] = batch
        self._unfinished += 1
        self.wakeup.notify()  # the sender must learn the new linger deadline

    def native_appender(self, *, partition_counts: dict[str, int], sticky: dict[str, int],
                        randrange: Callable[[int], int], fallback: Callable[..., object],
                        record_bytes_max: int, max_block_s: float) -> NativeAppender:
        """The C Appender for a producer (its produce() and produce_many()), sharing this accumulator's
        lock, open batches and memory, and the producer's partition counts and sticky partitions;
        `fallback` is the Python produce() it hands every uncommon call to (produce_many returns None
        for those, and the Python produce_many does them). produce_many waits for buffer memory itself,
        up to max_block_s."""
        if not self.native or _native is None:
            raise KanalError(ErrorCode.INVALID_CONFIG, "the accumulator was made without native=True")
        return _native.Appender(
            lock=self._lock, open_batches=self._open, open_batch=self.open_batch,
            wait_for_space=lambda size: self.wait_for_space(size, max_block_s), seal_full=self.seal_full,
            memory=self.memory,
            batch_size_bytes=self._batch_size, buffer_memory_bytes=self._buffer_max,
            partition_counts=partition_counts, sticky=sticky, randrange=randrange, fallback=fallback,
            record_bytes_max=record_bytes_max)

    def seal_full(self, key: TopicPartition, batch: ProducerBatch) -> None:
        """A batch reached batch_size_bytes: seal it and wake the sender. Called under the lock (by
        append, or by the C Appender)."""
        self._seal(key, batch)
        self.wakeup.notify()

    def _seal(self, key: TopicPartition, batch: ProducerBatch) -> None:
        del self._open[key]
        self._sealed.setdefault(key, deque()).append(batch)

    def drain(self, now: float, sendable: Callable[[TopicPartition], bool],
              batches_per_partition_max: int = 1) -> tuple[list[ProducerBatch], float]:
        """Batches to send now — for each partition without batches in flight, its first sealed batches
        (up to batches_per_partition_max, in order: one request carries them, and the broker appends them
        in that order), or its open batch once it has lingered (or a flush asks) — and how long the sender
        may sleep before something is due. A partition's batches come out consecutively."""
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
                for _ in range(batches_per_partition_max - 1):
                    if not queue or queue[0].retry_at_s > now:
                        break
                    out.append(queue.popleft())
        return out, max(sleep_s, 0.0005)

    def expired(self, now: float) -> list[ProducerBatch]:
        """Take out the batches past their delivery deadline that never went out (their partition has no
        leader the producer knows, or was never sendable): the sender fails them, so a flush or a
        transaction's commit ends (REQUEST_TIMED_OUT, or the refusal of the batch's last attempt) instead of
        waiting for ever. A partition with a batch in flight is left to that call's answer. In order from a
        partition's head: a batch is never failed while an older one of its partition waits."""
        out: list[ProducerBatch] = []
        with self._lock:
            for key in list(self._sealed.keys() | self._open.keys()):
                if key in self._in_flight:
                    continue
                queue = self._sealed.get(key)
                while queue and queue[0].deadline_s < now:
                    out.append(queue.popleft())
                if not queue:
                    batch = self._open.get(key)
                    if batch is not None and batch.deadline_s < now:
                        del self._open[key]
                        out.append(batch)
        return out

    def requeue_all(self, batches: list[ProducerBatch], retry_at_s: float) -> None:
        """Put batches of one partition, in their order, back at its head, and free the partition: in one
        step, so no later batch of it can be drained in between."""
        with self._lock:
            key = (batches[0].topic, batches[0].partition)
            queue = self._sealed.setdefault(key, deque())
            for batch in reversed(batches):
                batch.retry_at_s = retry_at_s
                queue.appendleft(batch)
            self._in_flight.discard(key)
            self.wakeup.notify()

    def release(self, key: TopicPartition) -> None:
        """The partition's batches in flight are all resolved (see completed(release=False))."""
        with self._lock:
            self._in_flight.discard(key)
            self.wakeup.notify_all()

    def completed(self, batch: ProducerBatch, release: bool = True) -> None:
        """A batch is finished (acknowledged or failed for good): free its memory and, unless
        release=False (more batches of the partition, sent with it, are still being resolved), its
        partition."""
        with self._lock:
            if release:
                self._in_flight.discard((batch.topic, batch.partition))
            self.memory.buffered_bytes -= batch.records.size_bytes
            self._unfinished -= 1
            self._space.notify_all()
            self.wakeup.notify_all()

    def buffered_partitions(self) -> set[TopicPartition]:
        """The partitions with records not yet sent (an open or sealed batch)."""
        with self._lock:
            return {key for key, batch in self._open.items() if batch.record_count} | {
                key for key, sealed in self._sealed.items() if sealed}

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
