"""Clock: the servers' source of time, handed to the pure cores as `now_ms` (controllers and brokers).

Milliseconds since the Unix epoch, anchored to the wall clock once at start and advanced by the monotonic
clock, so it never goes backwards: a wall-clock step (NTP, a VM resume) must not fence every broker at
once, expire every group member's session or idle producer at once, or stamp records out of order.
Timestamps it gives are the wall clock's at start plus the time elapsed, so they stay comparable with
stored timestamps (retention, offsets retention). Tests pass a fake with the same `now_ms()` method.

`PROCESS_CLOCK` is a server process's one instance: a broker's appends, retention, group sessions,
transaction timeouts and producer expiry, and a controller's fencing, all read it.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Clock:
    def __init__(
        self,
        wall_s: Callable[[], float] = time.time,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._monotonic_s = monotonic_s
        self._anchor_wall_ms = int(wall_s() * 1000)
        self._anchor_monotonic_s = monotonic_s()

    def now_ms(self) -> int:
        return self._anchor_wall_ms + int((self._monotonic_s() - self._anchor_monotonic_s) * 1000)

    def __repr__(self) -> str:
        return f"<Clock now_ms={self.now_ms()}>"


# The process's clock (see the module note).
PROCESS_CLOCK = Clock()
