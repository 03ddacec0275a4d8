"""CoordinatorRuntime: what the group coordinator and the transaction coordinator share, written once so
both behave and fail alike (Kafka's coordinator-common CoordinatorRuntime and CoordinatorLoader): leading
the partitions of one internal topic (__consumer_offsets, __transaction_state), loading each from its log,
serving it from memory, writing to it, and a ticker that runs the coordinator's timers.

Ownership. A key (a group id, a transactional id) belongs to partition `mmh3(key) % partitions` of the
topic (kanal.v1.partitioning); the partition's leader coordinates it. `reconcile(image)` compares the
partitions this broker leads in the image (and at which leader epoch) with the ones it loads or serves:
- one it no longer leads at that epoch is resigned: the coordinator drops its state
  (`CoordinatorShard.unload`, under the lock, so no call sees half of it) and, once the lock is released,
  answers what waited on it;
- one it newly leads is loaded on the loader thread: the partition is read from log start to log end
  (_LOAD_READ_BYTES_MAX a read) into the coordinator's `PartitionLoad`, which is installed under the lock
  only while the partition is still being loaded at that epoch; from then on it is served.
Meanwhile a call for a key of a loading partition gets COORDINATOR_LOAD_IN_PROGRESS (saying how many
tries failed), a call for a key of a partition not led here NOT_COORDINATOR.

Failures: the one boundary (`guarded`, the load's done-callback, `run`).
- An expected KanalError (the replica does not exist yet, this broker stopped leading, not enough
  replicas for a write...) is a value: logged at WARNING saying what failed and why, and tried again: a
  load after a backoff doubling from _LOAD_RETRY_BACKOFF_MS_MIN to _LOAD_RETRY_BACKOFF_MS_MAX (by the
  ticker's reconcile; its partition answers COORDINATOR_LOAD_IN_PROGRESS meanwhile), a timer or job on
  the next round. A load that fails on a damaged log (CORRUPT_MESSAGE) is retried too, but logged at
  ERROR with its traceback: retrying will not mend it, an operator must look.
- Anything else is a bug: the process stops (`stop_process`, exit 70) with the traceback, whether it
  came from a load, a timer or a job of the coordinator's run through `guarded`. A coordinator whose
  ticker died would go on answering with sessions that never expire and transactions that never time
  out; one whose load failed for a bug would answer COORDINATOR_LOAD_IN_PROGRESS for ever. The supervisor
  restarts the broker; the partition's next leader loads it afresh. (After `close()` such a failure is
  logged with its traceback instead: the broker is stopping and closes what the work may still use.)
Every load's future has a done-callback that reads its outcome, so no exception stays unread in the pool.

Time. The timers, the load backoff and the load's duration read one injected clock (`now_ms()`, the
process clock by default), and the coordinators hand the same `now_ms` to their pure cores. Tests pass a
fake clock and call `tick()` themselves: a session timeout takes no waiting.

Threads. One ticker thread (`run`) reconciles (retrying failed loads) and runs the timers; one loader
thread loads partitions; gRPC threads and the coordinator's own workers (the transaction coordinator's
marker pool) call in.

Locks. `lock` guards the ownership maps and the coordinator's in-memory state (the coordinator uses it as
its own state lock). It is the innermost lock: a coordinator's write locks (per partition, per key) are
taken before it, never after, and it is never held across I/O, a log read or a call to another
coordinator.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kanal.metadata import MetadataImage
from kanal.server.clock import PROCESS_CLOCK
from kanal.server.fatal import StopProcess, stop_process
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.partitioning import partition_for_key

if TYPE_CHECKING:
    from kanal.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

_LOAD_READ_BYTES_MAX = 4 << 20
# A failed load is retried after 100 ms, then 200, 400 ... up to 30 s between tries: soon enough for a
# passing cause (the replica not created yet), sparse enough that a lasting one does not flood the log.
_LOAD_RETRY_BACKOFF_MS_MIN = 100
_LOAD_RETRY_BACKOFF_MS_MAX = 30_000


def load_retry_backoff_ms(failures: int) -> int:
    """How long to wait before retrying a load that has failed `failures` (>= 1) times in a row."""
    if failures < 1:
        raise ValueError(f"failures must be >= 1, got {failures}")
    return min(_LOAD_RETRY_BACKOFF_MS_MAX, _LOAD_RETRY_BACKOFF_MS_MIN << min(failures - 1, 30))


class TimeSource(Protocol):
    """The clock a coordinator reads: kanal.server.clock.Clock, or a test's fake."""

    def now_ms(self) -> int: ...


class PartitionLoad(Protocol):
    """One load of one partition, made by the coordinator (`CoordinatorShard.begin_load`) and fed by the
    loader thread."""

    def replay(self, data: bytes) -> int:
        """Take the log entries of `data` (as `Log.read` returns them); return the offset after the last
        entry taken, where the next read starts. Raises KanalError (CORRUPT_MESSAGE) on a damaged log."""
        ...

    def install(self) -> Callable[[], None] | None:
        """Under the runtime's lock: what was replayed becomes the coordinator's state. Returns what to do
        once the lock is released and the partition is served (finish the markers a state owes), or None."""
        ...

    def summary(self) -> str:
        """What was loaded, for the log line ("12 groups from 340 records (0 skipped)")."""
        ...


class CoordinatorShard(Protocol):
    """What a coordinator gives the runtime: how to load a partition's state and how to drop it."""

    def begin_load(self, p: int, epoch: int, now_ms: int) -> PartitionLoad:
        """A fresh load of partition `p`, led at leader epoch `epoch`, started at `now_ms`."""
        ...

    def unload(self, p: int, image: MetadataImage) -> Callable[[], None] | None:
        """Under the runtime's lock: drop the state of partition `p` (its keys, as `image` places them).
        Returns what to do once the lock is released (answer the calls that waited on it), or None."""
        ...


@dataclass(frozen=True, slots=True)
class Timer:
    """A coordinator's periodic work, run by the ticker: `run(now_ms)` every `interval_ms` (0: every
    tick). `what` names it in log lines."""

    what: str
    interval_ms: int
    run: Callable[[int], object]


@dataclass(slots=True, eq=False)
class _Load:
    """A partition this broker leads but does not serve yet: the leader epoch it is loaded at, how many
    tries have failed, and when the next may start (None while one is running). Compared by identity: a
    finished job counts only if its _Load is still the partition's."""

    epoch: int
    failures: int = 0
    retry_at_ms: int | None = None


class CoordinatorRuntime:
    """The partitions of `topic` this broker leads, loaded into `shard` and served, and the ticker that
    runs `timers` (see the module docstring). `name` ("group coordinator") opens its log lines and names
    its threads; `create_topic(image)` asks the controller for the topic on the first FindCoordinator that
    finds none (raising COORDINATOR_NOT_AVAILABLE while it may not be created yet)."""

    def __init__(self, *, name: str, topic: str, broker_id: int, replicas: ReplicaManager,
                 image: Callable[[], MetadataImage], shard: CoordinatorShard,
                 create_topic: Callable[[MetadataImage], None], write_timeout_ms: int, tick_interval_ms: int,
                 timers: Sequence[Timer] = (), clock: TimeSource = PROCESS_CLOCK,
                 stop_process: StopProcess = stop_process,
                 on_load_failure: Callable[[str], None] | None = None) -> None:
        if tick_interval_ms <= 0:
            raise ValueError(f"tick_interval_ms must be > 0, got {tick_interval_ms}")
        self.name = name
        self.topic = topic
        self.broker_id = broker_id
        self._replicas = replicas
        self._image = image
        self._shard = shard
        self._create_topic = create_topic
        self._write_timeout_ms = write_timeout_ms
        self._tick_s = tick_interval_ms / 1000
        self._timers = tuple(timers)
        self.clock = clock
        self._stop_process = stop_process
        self._on_load_failure = on_load_failure
        self.lock = threading.Lock()
        self._owned: dict[int, int] = {}  # partition -> leader epoch, loaded and served
        self._loading: dict[int, _Load] = {}  # partition -> its load, running or waiting to retry
        self._closed = False
        self._failed = False  # stop_process was called (it returns only in tests)
        self._reconciled_image = MetadataImage()  # the last image the replica manager had applied
        started_ms = clock.now_ms()
        self._timer_due_ms = [started_ms + t.interval_ms for t in self._timers]
        self._loader = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"{name.replace(' ', '-')}-loader"
        )

    def __repr__(self) -> str:
        return (f"<CoordinatorRuntime {self.topic} broker={self.broker_id} served={sorted(self._owned)} "
                f"loading={sorted(self._loading)}>")

    # ---- where keys live ----

    def partition_count(self, image: MetadataImage) -> int | None:
        topic = image.topics.get(self.topic)
        return len(topic.partitions) if topic is not None else None

    def partition_of(self, key: str, image: MetadataImage | None = None) -> int:
        count = self.partition_count(image or self._image())
        if count is None:
            raise KanalError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.topic} does not exist yet")
        return partition_for_key(key.encode(), count)

    def keys_in(self, p: int, keys: Iterable[str], image: MetadataImage) -> list[str]:
        """The keys that belong to partition `p` in `image` (all of them when the topic is gone)."""
        count = self.partition_count(image)
        return [k for k in keys if count is None or partition_for_key(k.encode(), count) == p]

    def partition_creating(self, key: str, image: MetadataImage | None = None) -> int:
        """The partition of `key`; when the topic does not exist yet, ask the controller to create it
        and answer COORDINATOR_NOT_AVAILABLE, which clients retry. Every call that may be a cluster's
        first need of the topic goes through here: FindCoordinator, and a transaction's AddOffsetsToTxn
        (a producer may send a group's offsets before any consumer of that group looked it up)."""
        image = image or self._image()
        if self.partition_count(image) is None:
            self._create_topic(image)
            raise KanalError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {self.topic}; retry")
        return self.partition_of(key, image)

    def find_coordinator(self, key: str) -> broker_pb2.FindCoordinatorResponse:
        """The broker that coordinates `key` (creating the topic on first need)."""
        image = self._image()
        p = self.partition_creating(key, image)
        leader = image.topics[self.topic].partitions[p].leader
        broker = image.brokers.get(leader)
        if leader < 0 or broker is None:
            raise KanalError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.topic}-{p} has no leader")
        return broker_pb2.FindCoordinatorResponse(node_id=leader, endpoint=broker.endpoint)

    # ---- ownership (call with `lock` held) ----

    def require_served(self, p: int, what: str) -> None:
        """Raise unless partition `p` is served here: COORDINATOR_LOAD_IN_PROGRESS while it loads, and
        while the published image says this broker leads it but `reconcile` has not taken that image yet
        (FindCoordinator answers from the published image, so a broker it names must never say "not me"
        in between: issue 42, item 3); else NOT_COORDINATOR naming `what` ("group 'g'")."""
        if p in self._owned:
            return
        load = self._loading.get(p)
        if load is not None:
            retrying = f" ({load.failures} tries failed so far; retrying)" if load.failures else ""
            raise KanalError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading {self.topic}-{p}{retrying}")
        leader = self._leader(self._image(), p)
        if not self._closed and leader == self.broker_id:
            raise KanalError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"broker {self.broker_id} now leads {self.topic}-{p} and is about to load it")
        if leader is None or leader < 0:  # as FindCoordinator would answer from this image
            raise KanalError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{self.topic}-{p} has no leader in broker {self.broker_id}'s metadata yet")
        raise KanalError(ErrorCode.NOT_COORDINATOR, f"broker {self.broker_id} does not coordinate {what}")

    def _leader(self, image: MetadataImage, p: int) -> int | None:
        """The leader of partition `p` in `image`; None when the image has no such partition."""
        topic = image.topics.get(self.topic)
        return topic.partitions[p].leader if topic is not None and p < len(topic.partitions) else None

    def serves(self, p: int) -> bool:
        return p in self._owned

    def served_epoch(self, p: int) -> int | None:
        """The leader epoch partition `p` is served at, or None (not served, or closing)."""
        return None if self._closed else self._owned.get(p)

    # ---- leadership changes and loading ----

    def reconcile(self, image: MetadataImage | None = None) -> None:
        """Load the partitions this broker now leads, resign the ones it no longer leads. Called with each
        new image once the replica manager has applied it (so the replicas exist); the ticker calls it
        without one to retry a failed load against that same image."""
        if image is not None:
            self._reconciled_image = image
        image = self._reconciled_image
        topic = image.topics.get(self.topic)
        led = {int(p.partition_id): p.leader_epoch for p in (topic.partitions if topic else ())
               if p.leader == self.broker_id}
        afterwards: list[Callable[[], None] | None] = []
        starts: list[tuple[int, _Load]] = []
        now_ms = self.clock.now_ms()
        with self.lock:
            if self._closed:
                return
            for p, epoch in [*self._owned.items(), *((q, load.epoch) for q, load in self._loading.items())]:
                if led.get(p) != epoch:
                    afterwards.append(self._resign(p, image))
            for p, epoch in led.items():
                if self._owned.get(p) == epoch:
                    continue
                load = self._loading.get(p)
                if load is None:
                    load = self._loading[p] = _Load(epoch)
                elif load.retry_at_ms is None or now_ms < load.retry_at_ms:
                    continue  # running, or waiting for its retry
                load.retry_at_ms = None
                starts.append((p, load))
        # Submitted outside `lock`: a job that is already done runs its callback here, and that takes it.
        for p, load in starts:
            try:
                future = self._loader.submit(self._load, p, load)
            except RuntimeError:
                if self._closed:
                    return  # close() shut the pool down meanwhile
                raise
            future.add_done_callback(functools.partial(self._load_done, p, load))
        for then in afterwards:
            if then is not None:
                then()

    def _resign(self, p: int, image: MetadataImage) -> Callable[[], None] | None:
        """Stop serving (or loading) partition `p` (lock held)."""
        self._owned.pop(p, None)
        self._loading.pop(p, None)
        then = self._shard.unload(p, image)
        log.info("no longer coordinating %s-%d", self.topic, p)
        return then

    def _load(self, p: int, load: _Load) -> None:
        """Replay partition `p` into the coordinator and serve it; runs on the loader thread. Any exception
        is the load's failure, handled by `_load_done`."""
        started_ms = self.clock.now_ms()
        loading = self._shard.begin_load(p, load.epoch, started_ms)
        part = self._replicas.partition(self.topic, p)
        with part.lock:
            offset: int = part.log.log_start_offset
        while True:
            with part.lock:
                if part.log.log_end_offset <= offset:
                    break
                data = part.log.read(offset, _LOAD_READ_BYTES_MAX).data
            if not data:
                break
            taken_to = loading.replay(data)
            if taken_to <= offset:
                # Log.read returns at least one whole entry, and a damaged one raises CorruptEntry: a load
                # that does not move on would read the same bytes for ever.
                raise RuntimeError(f"{self.topic}-{p}: the load took nothing of a read at offset {offset}")
            offset = taken_to
        with self.lock:
            if self._loading.get(p) is not load:
                return  # leadership moved on while loading
            del self._loading[p]
            self._owned[p] = load.epoch
            then = loading.install()
        log.info("coordinating %s-%d at epoch %d: %s, loaded in %d ms", self.topic, p, load.epoch,
                 loading.summary(), self.clock.now_ms() - started_ms)
        if then is not None:
            then()

    def _load_done(self, p: int, load: _Load, future: Future[None]) -> None:
        """Every load's outcome comes here. An expected failure is logged and counted, and the load is
        retried after a backoff (by the ticker's reconcile) while this broker still leads the partition at
        that epoch; an unexpected one stops the process."""
        if future.cancelled():
            return  # the runtime is closing
        exc = future.exception()
        if exc is None:
            return
        where = f"{self.topic}-{p} at epoch {load.epoch}"
        if not isinstance(exc, KanalError):
            self._count_load_failure("unexpected")
            self._fail(f"loading {where}", exc)
            return
        self._count_load_failure(exc.name)
        with self.lock:
            if self._loading.get(p) is load:
                load.failures += 1
                backoff_ms = load_retry_backoff_ms(load.failures)
                load.retry_at_ms = self.clock.now_ms() + backoff_ms
                then = f"retrying in {backoff_ms} ms (failure {load.failures})"
            else:
                then = "not retried: this broker no longer loads it at that epoch"
        if exc.code == ErrorCode.CORRUPT_MESSAGE:  # a damaged log: with the traceback, at ERROR
            log.error("loading %s failed: %r; %s", where, exc, then, exc_info=exc)
        else:  # expected: the replica is not there yet, or not led any more
            log.warning("could not load %s: %s; %s", where, exc, then)

    def _count_load_failure(self, cause: str) -> None:
        if self._on_load_failure is not None:
            self._on_load_failure(cause)

    # ---- writes ----

    def write(self, p: int, batch: bytes) -> None:
        """Append `batch` to partition `p` with acks=all; raise unless every ISR member has it."""
        request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=self._write_timeout_ms)
        request.topics.add(topic=self.topic).partitions.add(partition=p, batches=[batch])
        result = self._replicas.produce(request, internal=True).topics[0].partitions[0]
        if result.error == ErrorCode.NONE:
            return
        if result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise KanalError(ErrorCode.NOT_COORDINATOR, f"this broker stopped leading {self.topic}-{p}")
        raise KanalError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"writing {self.topic}-{p} failed: {result.error_message}")

    # ---- the boundary and the ticker ----

    def guarded(self, what: str, work: Callable[..., object], *args: object) -> bool:
        """Run `work(*args)` at the runtime's boundary (the ticker's timers, the coordinator's background
        jobs): True when it returned. An expected KanalError is logged at WARNING with its cause (False:
        the ticker tries again); anything else is a bug and stops the process."""
        try:
            work(*args)
        except KanalError as exc:
            log.warning("%s: %s did not complete: %s; the ticker tries again", self.name, what, exc)
            return False
        except Exception as exc:  # noqa: BLE001 - the runtime's boundary: a bug stops the process
            self._fail(what, exc)
            return False
        return True

    def tick(self) -> None:
        """One round of the ticker: retry failed loads (reconcile), then run the timers that are due."""
        self.guarded("reconcile", self.reconcile)
        now_ms = self.clock.now_ms()
        for i, timer in enumerate(self._timers):
            if self._failed or now_ms < self._timer_due_ms[i]:
                continue
            self._timer_due_ms[i] = now_ms + timer.interval_ms
            self.guarded(timer.what, timer.run, now_ms)

    def run(self, stop: threading.Event) -> None:
        """The ticker thread: `tick()` every tick interval until `stop` is set or the runtime closes. It
        never ends in silence: an unexpected exception stops the process (see the module docstring)."""
        try:
            while not stop.wait(self._tick_s) and not self._closed and not self._failed:
                self.tick()
        except Exception as exc:  # noqa: BLE001 - the runtime's boundary: a bug stops the process
            self._fail("the ticker", exc)

    def _fail(self, what: str, exc: BaseException) -> None:
        """An unexpected exception: stop the process. After close() it is logged with its traceback
        instead: the broker is stopping, and what failed most likely ran into a resource closed under
        it (a channel, a log)."""
        if self._closed:
            log.error("%s: %s failed while closing", self.name, what, exc_info=exc)
            return
        self._failed = True
        self._stop_process(f"the {self.name}: {what} failed unexpectedly", exc)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Resign every partition and stop loading; the ticker ends at its next tick."""
        with self.lock:
            self._closed = True
            afterwards = [self._resign(p, self._reconciled_image) for p in [*self._owned, *self._loading]]
        for then in afterwards:
            if then is not None:
                then()
        self._loader.shutdown(wait=False, cancel_futures=True)
