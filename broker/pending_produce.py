"""PendingProduces: acks=all produce requests waiting for the high-water mark (Kafka's produce purgatory).

An acks=all batch appended on the leader at offsets [base, last] is acknowledged when the high-water mark
reaches `last + 1` (its *required offset*): then every member of the ISR the high-water mark was computed
over has it. Each waiting request is completed exactly once, with one of:

- NONE: the high-water mark reached the required offset and the ISR (the maximal ISR the high-water mark
  is computed over, see leader_state.py) still has at least min.insync.replicas members;
- NOT_ENOUGH_REPLICAS_AFTER_APPEND: the high-water mark reached it, but the ISR had meanwhile shrunk
  below min.insync.replicas. This is Kafka's rule (Partition.checkEnoughReplicasReachOffset): the check
  is made when the request completes, not when the ISR shrinks, so an ISR that shrinks and grows back
  before the high-water mark passes gives NONE. The record is stored and replicated to the remaining ISR
  (a retry by a non-idempotent producer duplicates it);
- REQUEST_TIMED_OUT: its deadline passed first (the record may still become committed later);
- NOT_LEADER_OR_FOLLOWER: this broker stopped leading the partition (`fail_all`).

Bounded by `pending_max` (the caller checks `is_full` before appending). Pure: no clocks, no threads.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import NewType

from kanal.broker.storage.ids import Offset
from kanal.v1.error import ErrorCode, error_name

# The shell's handle for one waiting produce request (one per partition of a request).
ProduceRequestId = NewType("ProduceRequestId", int)


@dataclass(frozen=True, slots=True)
class ProduceCompletion:
    """A finished acks=all request: answer it with `error` (ErrorCode.NONE on success)."""

    request_id: ProduceRequestId
    error: int  # an ErrorCode
    required_offset: Offset

    def __repr__(self) -> str:
        return (
            f"<ProduceCompletion {self.request_id} {error_name(self.error)} required={self.required_offset}>"
        )


@dataclass(frozen=True, slots=True)
class _Pending:
    request_id: ProduceRequestId
    required_offset: Offset
    min_insync_replicas: int
    deadline_ms: int
    seq: int  # which heap items are this entry's (a request id may be reused after it completes)


class PendingProduces:
    def __init__(self, pending_max: int) -> None:
        if pending_max < 1:
            raise ValueError(f"pending_max must be >= 1, got {pending_max}")
        self.pending_max = pending_max
        self._entries: dict[ProduceRequestId, _Pending] = {}
        # Heaps with lazy deletion: an item whose (request id, seq) is no longer waiting is skipped.
        self._by_offset: list[tuple[int, int, ProduceRequestId]] = []
        self._by_deadline: list[tuple[int, int, ProduceRequestId]] = []
        self._seq = 0  # ties broken by arrival, so completions come in a stable order

    def __repr__(self) -> str:
        return (
            f"<PendingProduces {len(self._entries)}/{self.pending_max} next_deadline={self.next_deadline_ms}>"
        )

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._entries

    @property
    def is_full(self) -> bool:
        return len(self._entries) >= self.pending_max

    @property
    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a waiting request, for the shell's timer; None when none waits."""
        self._drop_stale(self._by_deadline)
        return self._by_deadline[0][0] if self._by_deadline else None

    def add(self, request_id: ProduceRequestId, required_offset: Offset, min_insync_replicas: int,
            deadline_ms: int) -> None:
        if request_id in self._entries:
            raise ValueError(f"produce request {request_id} is already waiting")
        if self.is_full:
            raise ValueError(f"{self!r} is full: check is_full before appending")
        self._seq += 1
        self._entries[request_id] = _Pending(request_id, required_offset, min_insync_replicas, deadline_ms,
                                             self._seq)
        heapq.heappush(self._by_offset, (required_offset, self._seq, request_id))
        heapq.heappush(self._by_deadline, (deadline_ms, self._seq, request_id))
        self._maybe_compact()

    def complete_up_to(self, high_watermark: Offset, isr_size: int) -> list[ProduceCompletion]:
        """Complete every request whose required offset is at or below the high-water mark."""
        done = []
        heap = self._by_offset
        while heap:
            self._drop_stale(heap)
            if not heap or heap[0][0] > high_watermark:
                break
            _, _, request_id = heapq.heappop(heap)
            pending = self._entries.pop(request_id)
            error = (
                ErrorCode.NONE
                if isr_size >= pending.min_insync_replicas
                else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            )
            done.append(ProduceCompletion(request_id, error, pending.required_offset))
        return done

    def expire(self, now_ms: int) -> list[ProduceCompletion]:
        """Complete with REQUEST_TIMED_OUT every request whose deadline is at or before now_ms."""
        done = []
        heap = self._by_deadline
        while heap:
            self._drop_stale(heap)
            if not heap or heap[0][0] > now_ms:
                break
            _, _, request_id = heapq.heappop(heap)
            pending = self._entries.pop(request_id)
            done.append(ProduceCompletion(request_id, ErrorCode.REQUEST_TIMED_OUT, pending.required_offset))
        return done

    def fail_all(self, error: int) -> list[ProduceCompletion]:
        """Complete every waiting request with `error`, in arrival order."""
        ordered = sorted(self._entries.values(), key=lambda pending: pending.seq)
        done = [ProduceCompletion(p.request_id, error, p.required_offset) for p in ordered]
        self._entries.clear()
        self._by_offset.clear()
        self._by_deadline.clear()
        return done

    def _maybe_compact(self) -> None:
        # Stale items leave a heap only when they reach its top; with the high-water mark stuck and
        # requests expiring, the offset heap would grow without bound. Rebuild both when mostly stale.
        if len(self._by_offset) + len(self._by_deadline) <= 4 * len(self._entries) + 64:
            return
        live = sorted(self._entries.values(), key=lambda p: p.seq)
        self._by_offset = [(p.required_offset, p.seq, p.request_id) for p in live]
        self._by_deadline = [(p.deadline_ms, p.seq, p.request_id) for p in live]
        heapq.heapify(self._by_offset)
        heapq.heapify(self._by_deadline)

    def _drop_stale(self, heap: list[tuple[int, int, ProduceRequestId]]) -> None:
        while heap:
            _, seq, request_id = heap[0]
            live = self._entries.get(request_id)
            if live is not None and live.seq == seq:
                return
            heapq.heappop(heap)
