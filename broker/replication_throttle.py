"""ReplicationThrottle: the byte rate at which a follower copies a replica that a reassignment is adding.

Kafka throttles reassignment traffic (`follower.replication.throttled.rate`) so that moving a big
partition does not starve producers and in-sync followers of the leaders' disks and network. kanal sets
the rate with the config key of the same name (cluster default < broker < topic, bytes per second, -1 or
unset: no limit) and applies it, per partition, to replicas in the partition's `adding_replicas`
only: in-sync followers are never slowed, so acks=all latency does not depend on a move in progress.

A pure debt bucket, time as an argument (no clock inside):

- `allowance_bytes(now_ms)`: how many bytes the next fetch of this partition may ask for; 0 means skip it
  this round. Credit accrues at the rate and is capped at one second's worth, so an idle replica cannot
  save up a burst; a fetch is allowed whenever the balance is not negative, and asks for at most a tenth
  of a second's worth (at least `FETCH_BYTES_MIN`), which keeps the rate steady within a second.
- `record(nbytes, now_ms)`: what a fetch copied is charged, possibly driving the balance below zero (a
  record batch is never split, so one fetch may exceed its allowance); the debt is paid back by time.
- `wait_ms(now_ms)`: how long until the next fetch is allowed.

Over any window longer than a few fetches, copied bytes / elapsed time stays within a batch of the rate.
"""

from __future__ import annotations

# The least a throttled fetch asks for: below this, per-fetch overhead would dominate.
FETCH_BYTES_MIN = 1024
# Credit is capped at this many milliseconds' worth of the rate (no saved-up bursts).
_CREDIT_MS_MAX = 1000
# A fetch asks for at most this many milliseconds' worth of the rate.
_FETCH_MS = 100


class ReplicationThrottle:
    __slots__ = ("_balance", "_last_ms", "rate_bytes_per_s")

    def __init__(self, rate_bytes_per_s: int, now_ms: int) -> None:
        if rate_bytes_per_s < 1:
            raise ValueError(f"a replication throttle needs a rate >= 1 byte/s, got {rate_bytes_per_s}")
        self.rate_bytes_per_s = rate_bytes_per_s
        self._balance = 0.0
        self._last_ms = now_ms

    def __repr__(self) -> str:
        return f"<ReplicationThrottle {self.rate_bytes_per_s} B/s balance={self._balance:.0f}>"

    def _accrue(self, now_ms: int) -> None:
        elapsed = max(0, now_ms - self._last_ms)
        self._last_ms = max(self._last_ms, now_ms)
        cap = self.rate_bytes_per_s * _CREDIT_MS_MAX / 1000
        self._balance = min(cap, self._balance + self.rate_bytes_per_s * elapsed / 1000)

    def allowance_bytes(self, now_ms: int) -> int:
        self._accrue(now_ms)
        if self._balance < 0:
            return 0
        return max(FETCH_BYTES_MIN, self.rate_bytes_per_s * _FETCH_MS // 1000)

    def record(self, nbytes: int, now_ms: int) -> None:
        self._accrue(now_ms)
        self._balance -= nbytes

    def wait_ms(self, now_ms: int) -> int:
        self._accrue(now_ms)
        if self._balance >= 0:
            return 0
        return int(-self._balance * 1000 / self.rate_bytes_per_s) + 1
