"""Applier: the thread that applies committed Raft entries to the MetadataStore, in order.

pysyncobj calls the replicated method for each committed entry from its own tick thread, the thread that
also sends heartbeats and counts votes. Applying a 10,000-partition batch takes a few hundred
milliseconds of Python, which would hold back heartbeats long enough to start needless elections, so the
replicated method only hands the entry's bytes to this thread (`submit`). The applier takes whatever is
queued (up to `group_entries_max`), applies each entry, fsyncs the metadata log once for the whole group
(group commit), and then reports the group to `on_applied`, which completes the waiting writes: no write
is acknowledged before its batch is durable.

Order is kept (one queue, one thread). pysyncobj believes an entry applied as soon as it is queued; its
two hooks that need the state to match its own view (writing a snapshot, loading one) call `drain()`
first. The queue is bounded: when the applier falls behind, `submit` blocks pysyncobj's thread, which
then stops acknowledging entries (back-pressure through Raft itself).

A failure while applying, or while reporting what was applied (`on_applied`, which settles the active
controller's proposals), is a broken invariant: `fatal` stops the process (kanal.server.fatal).

Housekeeping (`housekeeping`, optional): after every group and after `housekeeping_interval_s` idle, the
same thread runs the metadata log's retention and asks for a snapshot when one is due
(MetadataStore.maintain), so deleting segments never races an append. A failure there stops the process
too.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from kanal.raft.metadata_store import AppliedEntry, MetadataStore


class Applier:
    def __init__(
        self,
        store: MetadataStore,
        on_applied: Callable[[list[AppliedEntry]], None],
        fatal: Callable[[str, BaseException], object],
        *,
        queue_entries_max: int = 10_000,
        group_entries_max: int = 1_000,
        housekeeping: Callable[[], None] | None = None,
        housekeeping_interval_s: float = 1.0,
    ) -> None:
        if queue_entries_max < 1 or group_entries_max < 1:
            raise ValueError("queue_entries_max and group_entries_max must be >= 1")
        self._store = store
        self._on_applied = on_applied
        self._fatal = fatal
        self._queue_entries_max = queue_entries_max
        self._group_entries_max = group_entries_max
        self._housekeeping = housekeeping
        self._housekeeping_interval_s = housekeeping_interval_s
        self._queue: collections.deque[bytes] = collections.deque()
        self._cond = threading.Condition()
        self._submitted = 0
        self._done = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="metadata-applier", daemon=True)

    def __repr__(self) -> str:
        return f"<Applier submitted={self._submitted} done={self._done} queued={len(self._queue)}>"

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Apply what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def submit(self, data: bytes) -> None:
        """Queue one committed entry (pysyncobj's thread). Blocks while the queue is full."""
        with self._cond:
            while len(self._queue) >= self._queue_entries_max and not self._stopping:
                self._cond.wait(0.1)
            self._queue.append(data)
            self._submitted += 1
            self._cond.notify_all()

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted entry is applied and durable; False if the time ran out."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            target = self._submitted
            while self._done < target:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    @property
    def idle(self) -> bool:
        with self._cond:
            return self._done == self._submitted

    def _run(self) -> None:
        while True:
            with self._cond:
                idle_deadline = time.monotonic() + self._housekeeping_interval_s
                while not self._queue and not self._stopping:
                    left = idle_deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if not self._queue and self._stopping:
                    return
                group = [self._queue.popleft() for _ in range(min(len(self._queue), self._group_entries_max))]
                self._cond.notify_all()
            if not group:
                self._run_housekeeping()  # idle: retention and snapshot timers still run
                continue
            try:
                applied = [entry for data in group for entry in self._store.apply_entry(data)]
                self._store.flush()
            except BaseException as exc:  # noqa: BLE001 - the applier thread's top: a broken invariant, stop
                self._fatal(f"applying a committed metadata entry failed: {exc}", exc)
                return
            try:
                self._on_applied(applied)
            except BaseException as exc:  # noqa: BLE001 - the applier thread's top: a broken invariant, stop
                # The store is intact, but the active controller's proposals and waiters may be half
                # settled: entries that never leave its pipeline would stall every later write.
                self._fatal(f"completing writes after {len(applied)} applied entries failed: {exc}", exc)
                return
            with self._cond:
                self._done += len(group)
                self._cond.notify_all()
            self._run_housekeeping()

    def _run_housekeeping(self) -> None:
        if self._housekeeping is None:
            return
        try:
            self._housekeeping()
        except BaseException as exc:  # noqa: BLE001 - the applier thread's top: retention may have left the log half-changed
            self._fatal(f"metadata log housekeeping (snapshots, retention) failed: {exc}", exc)
