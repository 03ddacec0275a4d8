"""BrokerThrottles: a client's side of quota throttling (broker.proto, "Client id and quotas").

A reply with `throttle_time_ms` > 0 means the broker measured this client over its quota: the client
sends nothing more to that broker until the throttle is over (the broker would hold the call anyway,
and a call it holds counts against the client's deadline). Other brokers are not affected: quotas are
enforced per broker.

The throttle times received are the client's quota metrics (Kafka's produce-throttle-time-avg/max and
fetch-throttle-time-avg/max): `metrics()` gives their count, total, average and maximum. Thread-safe.
"""

from __future__ import annotations

import threading
import time


class BrokerThrottles:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until_s: dict[str, float] = {}  # endpoint -> time.monotonic() when its throttle ends
        self._count = 0  # replies that carried a throttle
        self._total_ms = 0
        self._max_ms = 0

    def __repr__(self) -> str:
        return f"<BrokerThrottles throttled={self._count} total_ms={self._total_ms}>"

    def on_reply(self, endpoint: str, throttle_time_ms: int, now_s: float | None = None) -> None:
        """A reply from `endpoint` said `throttle_time_ms` (0 changes nothing)."""
        if throttle_time_ms <= 0:
            return
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            self._count += 1
            self._total_ms += throttle_time_ms
            self._max_ms = max(self._max_ms, throttle_time_ms)
            until = now_s + throttle_time_ms / 1000
            if until > self._until_s.get(endpoint, 0.0):
                self._until_s[endpoint] = until

    def until_s(self, endpoint: str) -> float:
        """time.monotonic() when `endpoint`'s throttle ends (0.0: never throttled)."""
        return self._until_s.get(endpoint, 0.0)

    def wait_s(self, endpoint: str, now_s: float) -> float:
        """How long the client must still wait before its next call to `endpoint` (0: none)."""
        until = self._until_s.get(endpoint)
        return until - now_s if until is not None and until > now_s else 0.0

    def next_end_s(self, now_s: float) -> float | None:
        """Seconds until the soonest throttle still running ends, None when no broker throttles us."""
        with self._lock:
            waits = [until - now_s for until in self._until_s.values() if until > now_s]
        return min(waits) if waits else None

    def metrics(self, prefix: str) -> dict[str, float]:
        """{prefix}_throttle_count (throttled replies), {prefix}_throttle_time_ms_total,
        {prefix}_throttle_time_ms_avg (over throttled replies), {prefix}_throttle_time_ms_max."""
        with self._lock:
            return {
                f"{prefix}_throttle_count": self._count,
                f"{prefix}_throttle_time_ms_total": self._total_ms,
                f"{prefix}_throttle_time_ms_avg": self._total_ms / self._count if self._count else 0.0,
                f"{prefix}_throttle_time_ms_max": self._max_ms,
            }
