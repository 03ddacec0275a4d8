"""Background load and observers for the roll tests (issue 40): an acks=all producer whose every
acknowledgement is timed, and a sampler of the ISR sizes the brokers' metadata reports.

Both are threads the test starts and stops; neither decides anything: the test asserts on what they recorded.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.v1.error import KanalError

# Records queued per round, and the pause between rounds: about 1,000 records a second, enough that every
# leadership move is crossed by requests in flight, little enough that 2 cores also run six nodes.
_ROUND_RECORDS = 50
_ROUND_PAUSE_S = 0.05
KEYS = 20


@dataclass
class TimedLoad:
    """An acks=all, idempotent producer on its own thread until `stop()`; `acked` maps (partition, offset) to
    the value acknowledged there, `ack_times` holds each acknowledgement's time.monotonic()."""

    bootstrap: str
    topic: str
    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    errors: list = field(default_factory=list)
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> TimedLoad:
        self._thread = threading.Thread(target=self._run, name=f"load-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer(ProducerConfig(
            bootstrap=self.bootstrap, acks="all", enable_idempotence=True, linger_ms=2,
            batch_size_bytes=8 * 1024, retry_backoff_ms=20, request_timeout_ms=5000,
            delivery_timeout_ms=120_000,
        ))
        try:
            while not self._stop.is_set():
                for _ in range(_ROUND_RECORDS):
                    self._send(producer, self.sent)
                    self.sent += 1
                # Pacing of the load (not synchronisation): the stop event ends the wait early.
                self._stop.wait(_ROUND_PAUSE_S)
            producer.flush(120)
        finally:
            producer.close()

    def _send(self, producer: Producer, i: int) -> None:
        value = b"v-%07d" % i

        def done(error, meta, value=value):
            now = time.monotonic()
            with self._lock:
                if error is None:
                    self.acked[(meta.partition, meta.offset)] = value
                    self.ack_times.append(now)
                else:
                    self.errors.append((value, error))

        producer.produce(self.topic, value, key=b"k%d" % (i % KEYS), on_delivery=done)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(180)
            if self._thread.is_alive():
                raise AssertionError(f"the load on {self.topic} did not flush within 180 s")

    def max_stall_s(self, since: float, until: float) -> float:
        """The longest time without an acknowledgement within [since, until] (the window's edges count)."""
        start, end = self.largest_gap(since, until)
        return end - start

    def largest_gap(self, since: float, until: float) -> tuple[float, float]:
        """Where that longest time without an acknowledgement begins and ends."""
        with self._lock:
            times = sorted(t for t in self.ack_times if since <= t <= until)
        points = [since, *times, until]
        return max(itertools.pairwise(points), key=lambda gap: gap[1] - gap[0])


@dataclass
class IsrSampler:
    """Polls the ISR of every partition of `topic` from the brokers' metadata until `stop()`; `samples` holds
    (time.monotonic(), {partition: isr}) for each answer (unanswered polls, while a broker restarts, are
    counted in `unanswered`)."""

    bootstrap: str
    topic: str
    samples: list[tuple[float, dict[int, list[int]]]] = field(default_factory=list)
    unanswered: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> IsrSampler:
        self._thread = threading.Thread(target=self._run, name=f"isr-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            md = ClusterMetadata(self.bootstrap, request_timeout_ms=2000)
            try:
                partitions = md.refresh([self.topic]).topics[self.topic]
                isrs = {info.partition: list(info.isr) for info in partitions}
                self.samples.append((time.monotonic(), isrs))
            except KanalError:  # no broker answered (one restarting, the others slow): counted
                self.unanswered += 1
            finally:
                md.close()
            self._stop.wait(0.1)  # the sampling period

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def min_isr(self) -> int:
        return min(len(isr) for _, sample in self.samples for isr in sample.values())
