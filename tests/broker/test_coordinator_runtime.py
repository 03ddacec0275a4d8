"""The coordinator runtime alone, under a recording coordinator (the `CoordinatorShard` seam) and a fake
partition log: ownership follows leadership, a load failing with an expected error is retried after its
backoff with a WARNING saying why, an unexpected failure of a load or a timer stops the process through
the injected hook, timers run by the injected clock. The tests move the clock and call `tick()`; a wait
has a deadline and waits for the loader thread, never for time."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import pytest

from kanal.broker.coordinator_runtime import CoordinatorRuntime, Timer, load_retry_backoff_ms
from kanal.metadata import MetadataImage
from kanal.metadata.image import PartitionState, TopicImage
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError
from tests.broker.coordinator_broker import (
    FakeClock,
    InjectedBug,
    StopRecorder,
    run_the_ticker_until_it_stops_the_process,
)
from tests.harness.waiting import wait_until

TOPIC = "__test_state"
RUNTIME = "kanal.broker.coordinator_runtime"
WAIT_S = 10


def led_image(leader: int = 0, epoch: int = 1) -> MetadataImage:
    image = MetadataImage()
    image.topics[TOPIC] = TopicImage(TOPIC, "id", [PartitionState(0, (0, 1), (0, 1), leader, epoch, 1)])
    return image


@dataclass
class _Read:
    data: bytes


class FakeLog:
    """A partition log of `size` entries; each read returns one, its bytes the entry's offset."""

    def __init__(self, size: int) -> None:
        self.log_start_offset = 0
        self.log_end_offset = size

    def read(self, offset: int, bytes_max: int) -> _Read:
        return _Read(str(offset).encode())


class FakePartition:
    def __init__(self, size: int) -> None:
        self.lock = threading.Lock()
        self.log = FakeLog(size)


class FakeReplicas:
    """Partition 0 of TOPIC once `host()` ran; before, UNKNOWN_TOPIC_OR_PARTITION as the real replica
    manager answers for a replica not created yet."""

    def __init__(self) -> None:
        self.hosted: FakePartition | None = None
        self.produce_error = ErrorCode.NONE

    def host(self, size: int = 3) -> None:
        self.hosted = FakePartition(size)

    def partition(self, topic: str, p: int) -> FakePartition:
        if self.hosted is None:
            raise KanalError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no replica of {topic}-{p} here")
        return self.hosted

    def produce(self, request: broker_pb2.ProduceRequest, *, internal: bool) -> broker_pb2.ProduceResponse:
        reply = broker_pb2.ProduceResponse()
        reply.topics.add(topic=TOPIC).partitions.add(partition=0, error=self.produce_error,
                                                      error_message="injected")
        return reply


class RecordingLoad:
    def __init__(self, shard: RecordingShard, p: int, epoch: int) -> None:
        self._shard = shard
        self.p = p
        self.epoch = epoch
        self.offsets: list[int] = []

    def replay(self, data: bytes) -> int:
        if self._shard.replay_gate is not None:
            self._shard.replaying.set()
            assert self._shard.replay_gate.wait(WAIT_S)
        if self._shard.replay_fault is not None:
            raise self._shard.replay_fault
        offset = int(data)
        self.offsets.append(offset)
        return offset + 1

    def install(self) -> None:
        self._shard.served[self.p] = (self.epoch, self.offsets)

    def summary(self) -> str:
        return f"{len(self.offsets)} entries"


class RecordingShard:
    """A coordinator for the runtime: what was loaded and installed, what was dropped."""

    def __init__(self) -> None:
        self.begun: list[tuple[int, int]] = []
        self.served: dict[int, tuple[int, list[int]]] = {}
        self.unloaded: list[int] = []
        self.lock_held_after_unload: list[bool] = []
        self.replay_fault: BaseException | None = None
        self.replay_gate: threading.Event | None = None
        self.replaying = threading.Event()
        self.runtime: CoordinatorRuntime | None = None

    def begin_load(self, p: int, epoch: int, now_ms: int) -> RecordingLoad:
        self.begun.append((p, epoch))
        return RecordingLoad(self, p, epoch)

    def unload(self, p: int, image: MetadataImage):
        self.served.pop(p, None)
        self.unloaded.append(p)
        return lambda: self.lock_held_after_unload.append(self.runtime.lock.locked())


class Harness:
    def __init__(self, timers=()) -> None:
        self.clock = FakeClock()
        self.stop = StopRecorder()
        self.replicas = FakeReplicas()
        self.shard = RecordingShard()
        self.failures: list[str] = []
        self.published = led_image()  # the broker's published image, which FindCoordinator answers from
        self.runtime = CoordinatorRuntime(
            name="test coordinator", topic=TOPIC, broker_id=0, replicas=self.replicas,
            image=lambda: self.published, shard=self.shard, create_topic=lambda image: None,
            write_timeout_ms=1_000,
            tick_interval_ms=5, timers=timers, clock=self.clock, stop_process=self.stop,
            on_load_failure=self.failures.append)
        self.shard.runtime = self.runtime

    def served(self) -> bool:
        with self.runtime.lock:
            return self.runtime.serves(0)

    def refusal(self) -> KanalError:
        with self.runtime.lock, pytest.raises(KanalError) as err:
            self.runtime.require_served(0, "key 'k'")
        return err.value


@pytest.fixture
def harness():
    made: list[Harness] = []

    def make(**kw) -> Harness:
        made.append(Harness(**kw))
        return made[-1]

    yield make
    for h in made:
        h.runtime.close()


def test_a_led_partition_is_loaded_from_log_start_to_log_end_and_served(harness):
    h = harness()
    h.replicas.host(size=3)
    h.published = led_image(leader=1)
    assert h.refusal().code == ErrorCode.NOT_COORDINATOR
    h.runtime.reconcile(led_image(epoch=1))
    wait_until(h.served, WAIT_S, "the load")
    assert h.shard.served == {0: (1, [0, 1, 2])}
    with h.runtime.lock:
        assert h.runtime.served_epoch(0) == 1
    assert h.stop.calls == [] and h.failures == []


def test_a_load_failing_with_an_expected_error_is_retried_after_its_backoff_with_a_warning(harness, caplog):
    h = harness()
    with caplog.at_level(logging.WARNING, logger=RUNTIME):
        h.runtime.reconcile(led_image())  # the replica is not created yet
        wait_until(lambda: caplog.records, WAIT_S, "the failed load's warning (its last step)")
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = warning.getMessage()
    assert "could not load" in message and "UNKNOWN_TOPIC_OR_PARTITION" in message, message
    assert "retrying in 100 ms (failure 1)" in message, message
    assert h.failures == ["UNKNOWN_TOPIC_OR_PARTITION"]
    refusal = h.refusal()
    assert refusal.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and "1 tries failed" in refusal.message

    h.replicas.host()
    h.clock.advance(99)
    h.runtime.tick()
    assert h.shard.begun == [(0, 1)], "retried before its backoff"
    h.clock.advance(1)
    h.runtime.tick()
    wait_until(h.served, WAIT_S, "the retried load")
    assert h.shard.begun == [(0, 1), (0, 1)] and h.stop.calls == []


def test_a_load_failing_unexpectedly_stops_the_process(harness):
    h = harness()
    h.replicas.host()
    h.shard.replay_fault = InjectedBug("injected into the replay")
    h.runtime.reconcile(led_image())
    assert h.stop.called.wait(WAIT_S), "the failed load did not stop the process"
    [(reason, exc)] = h.stop.calls
    assert isinstance(exc, InjectedBug)
    assert "test coordinator" in reason and f"loading {TOPIC}-0 at epoch 1" in reason, reason
    assert h.failures == ["unexpected"]
    assert not h.served()


def test_a_resigned_partition_is_dropped_under_the_lock_and_answered_after_it(harness):
    h = harness()
    h.replicas.host()
    h.runtime.reconcile(led_image(leader=0))
    wait_until(h.served, WAIT_S, "the load")
    h.published = led_image(leader=1, epoch=2)  # broker 1 leads it now
    h.runtime.reconcile(h.published)
    assert h.shard.unloaded == [0] and h.shard.served == {}
    assert h.shard.lock_held_after_unload == [False], "waiting calls are answered outside the lock"
    assert h.refusal().code == ErrorCode.NOT_COORDINATOR


def test_a_partition_the_published_image_gives_this_broker_is_load_in_progress_until_served(harness):
    """Issue 42, item 3: FindCoordinator names the leader of the published image, and the runtime takes
    that image a moment later (after the replica manager); in between the named broker must say "loading",
    never NOT_COORDINATOR, or a client that just found it is told to look elsewhere."""
    h = harness()
    h.replicas.host(size=1)
    h.published = led_image(leader=0)  # published, not reconciled yet
    refusal = h.refusal()
    assert refusal.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and "about to load" in refusal.message
    h.published = led_image(leader=-1)  # no leader in this broker's metadata: as FindCoordinator says
    assert h.refusal().code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    h.published = led_image(leader=0)
    h.runtime.reconcile(h.published)
    wait_until(h.served, WAIT_S, "the load")
    with h.runtime.lock:
        h.runtime.require_served(0, "key 'k'")


def test_a_load_that_ends_after_the_leadership_moved_on_is_not_installed(harness):
    h = harness()
    h.replicas.host(size=1)
    h.shard.replay_gate = threading.Event()
    h.runtime.reconcile(led_image(epoch=1))
    assert h.shard.replaying.wait(WAIT_S)
    h.runtime.reconcile(led_image(epoch=2))  # a new leader epoch while epoch 1 still loads
    assert h.shard.unloaded == [0]
    h.shard.replay_gate.set()
    wait_until(h.served, WAIT_S, "the load at epoch 2")
    assert h.shard.begun == [(0, 1), (0, 2)]
    assert h.shard.served[0][0] == 2, "only the load of the current epoch is installed"


def test_timers_run_by_the_injected_clock(harness):
    ran: list[int] = []
    h = harness(timers=[Timer("a timer", 1_000, ran.append)])
    h.runtime.tick()
    h.clock.advance(999)
    h.runtime.tick()
    assert ran == []
    h.clock.advance(1)
    h.runtime.tick()
    h.runtime.tick()
    assert ran == [h.clock.now_ms()], "once, when due, with the clock's now_ms"


def test_a_kanal_error_in_a_timer_is_a_warning_saying_why_and_the_next_round_runs_it_again(harness, caplog):
    calls: list[int] = []
    others: list[int] = []

    def refused_once(now_ms: int) -> None:
        calls.append(now_ms)
        if len(calls) == 1:
            raise KanalError(ErrorCode.NOT_ENOUGH_REPLICAS, "injected: the ISR is too small")

    h = harness(timers=[Timer("the refused timer", 0, refused_once), Timer("another", 0, others.append)])
    with caplog.at_level(logging.WARNING, logger=RUNTIME):
        h.runtime.tick()
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "the refused timer" in warning.getMessage() and "NOT_ENOUGH_REPLICAS" in warning.getMessage()
    assert len(others) == 1, "the other timers still ran"
    h.runtime.tick()
    assert len(calls) == 2 and h.stop.calls == []


def test_an_unexpected_error_in_a_timer_stops_the_process_and_ends_the_ticker(harness):
    def bug(now_ms: int) -> None:
        raise InjectedBug("injected into a timer")

    h = harness(timers=[Timer("the broken timer", 0, bug)])
    run_the_ticker_until_it_stops_the_process(h.runtime.run, h.stop)
    [(reason, exc)] = h.stop.calls
    assert isinstance(exc, InjectedBug) and "the broken timer" in reason, reason


def test_after_close_a_failure_is_logged_with_its_traceback_instead_of_stopping(harness, caplog):
    h = harness()
    h.runtime.close()
    with caplog.at_level(logging.ERROR, logger=RUNTIME):
        assert not h.runtime.guarded("a job", lambda: (_ for _ in ()).throw(InjectedBug("a closed channel")))
    [error] = caplog.records
    assert "a job failed while closing" in error.getMessage() and isinstance(error.exc_info[1], InjectedBug)
    assert h.stop.calls == []


def test_a_write_this_broker_may_no_longer_make_is_not_coordinator(harness):
    h = harness()
    h.replicas.produce_error = ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KanalError) as err:
        h.runtime.write(0, b"batch")
    assert err.value.code == ErrorCode.NOT_COORDINATOR
    h.replicas.produce_error = ErrorCode.NOT_ENOUGH_REPLICAS
    with pytest.raises(KanalError) as err:
        h.runtime.write(0, b"batch")
    assert err.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "injected" in err.value.message


def test_load_retry_backoff_doubles_up_to_its_bound():
    assert [load_retry_backoff_ms(n) for n in (1, 2, 3, 4)] == [100, 200, 400, 800]
    assert load_retry_backoff_ms(10) == load_retry_backoff_ms(1000) == 30_000
    with pytest.raises(ValueError):
        load_retry_backoff_ms(0)
