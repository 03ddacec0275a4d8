"""ProduceCall: one Produce request after its appends, with the acks=all waits it registered.

No thread waits for an acks=all produce (Kafka's produce purgatory). The replica manager appends every
partition of the request and registers each partition's wait in the same critical section as its
append (partition.py); each wait is answered through a callback from whichever thread completes it: an
HW move (a follower's fetch), a resignation, or the shell's timer. The callback records the answer and
calls `notify`, which the caller chose: the gRPC event loop's wake-up for a client's call, a
threading.Event for the group coordinator's own writes. The caller then `finish`es the reply.

The deadline is `timeout_ms` from the moment the request arrived, for every partition of it alike.

Schema rechecks. A partition refused by schema validation for an id the leader's image may not know yet
(schema_validation.py, `may_be_stale`) is not answered at once: its unstored batches wait in `rechecks`
until the caller has brought the image up to the request's arrival (metadata_sync.py) and appended them
again (ReplicaManager.recheck_produce), or the call finishes, which answers each one left with its refusal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError

if TYPE_CHECKING:
    from kanal.broker.partition import Partition


class ProduceWait:
    """One partition's acks=all wait: `error` is None until answered, then an ErrorCode."""

    __slots__ = ("_notify", "error", "out", "part", "request_id")

    def __init__(self, part: Partition, out: broker_pb2.ProduceResponse.PartitionResult,
                 notify: Callable[[], None]) -> None:
        self.part = part
        self.out = out
        self.request_id: int | None = None
        self.error: int | None = None
        self._notify = notify

    def __repr__(self) -> str:
        return f"<ProduceWait {self.part.name} request={self.request_id} error={self.error}>"

    def answered(self, error: int) -> None:
        """The partition's callback (any thread, maybe under the partition's lock): record and hand on."""
        self.error = error
        self._notify()


@dataclass(frozen=True, slots=True)
class SchemaRecheck:
    """A partition of the call whose batches from `batches` on were refused by schema validation with a
    refusal that may be stale (the module docstring); `out` already lists the batches stored before them."""

    topic: str
    partition: int
    batches: list[bytes]
    out: broker_pb2.ProduceResponse.PartitionResult
    refusal: KanalError


class ProduceCall:
    def __init__(self, reply: broker_pb2.ProduceResponse, deadline_s: float,
                 on_error: Callable[[broker_pb2.ProduceResponse.PartitionResult, str, int, KanalError], None],
                 *, arrived_s: float | None = None, acks: int = 1) -> None:
        self.reply = reply
        self.deadline_s = deadline_s  # time.monotonic() seconds
        # When the request arrived (time.monotonic() seconds): a schema recheck needs the image to hold
        # every registration committed before then.
        self.arrived_s = time.monotonic() if arrived_s is None else arrived_s
        self.acks = acks
        self.waits: list[ProduceWait] = []
        self.rechecks: list[SchemaRecheck] = []
        self._on_error = on_error

    def __repr__(self) -> str:
        return (f"<ProduceCall waits={len(self.waits)} open={sum(1 for w in self.waits if w.error is None)} "
                f"rechecks={len(self.rechecks)}>")

    def take_rechecks(self) -> list[SchemaRecheck]:
        taken, self.rechecks = self.rechecks, []
        return taken

    @property
    def done(self) -> bool:
        return all(wait.error is not None for wait in self.waits)

    def remaining_s(self) -> float:
        return self.deadline_s - time.monotonic()

    def time_out_open(self) -> None:
        """At the deadline (or when the call was cancelled): every wait still open is answered now."""
        for wait in self.waits:
            if wait.error is None and wait.request_id is not None:
                wait.part.time_out_produce(wait.request_id)

    def finish(self) -> broker_pb2.ProduceResponse:
        """The reply, once `done`: a partition whose wait failed lists no stored batch (the producer
        retries every batch; idempotence makes that safe) and carries the wait's error."""
        if not self.done:
            raise RuntimeError(f"{self!r}: finish before every wait was answered")
        for recheck in self.take_rechecks():  # not checked again (no sync, or it failed): the refusal stands
            self._on_error(recheck.out, recheck.topic, recheck.partition, recheck.refusal)
        for wait in self.waits:
            if wait.error is not None and wait.error != ErrorCode.NONE:  # `done`: every wait has an error
                del wait.out.batch_base_offsets[:]
                part = wait.part
                self._on_error(wait.out, part.topic, part.partition_id, KanalError(
                    wait.error, f"{part.name}: acks=all produce did not complete"))
        return self.reply

    def wait_on_thread(self, woken: threading.Event) -> broker_pb2.ProduceResponse:
        """For a caller on its own thread (the group coordinator's writes), whose `notify` sets `woken`:
        block until every wait is answered or the deadline passes, then finish."""
        while not self.done:
            remaining = self.remaining_s()
            if remaining <= 0:
                self.time_out_open()
                break
            woken.wait(remaining)
            woken.clear()
        return self.finish()
