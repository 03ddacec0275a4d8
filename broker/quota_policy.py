"""Client quota enforcement, the pure part: which quota applies to a call, how fast the client goes, and
how long it is throttled. No I/O, no clock: every method takes `now_ms`. The gRPC shell is
quota_interceptor.py.

Entities. A quota table maps entity keys to quotas. A key is `(user, client_id)` where each half is a
name, "" for that half's default, or None when the entity has no such half:

    ("alice", "app")  user alice with client id app      ("alice", None)  user alice, any client id
    ("alice", "")     user alice, her default client id   ("", None)       the default user
    ("", "app")       any user's client id app            (None, "app")    client id app, any user
    ("", "")          the default user's default client   (None, "")       the default client id

Precedence (Kafka's, most specific first), resolved for each quota key on its own, so a client may take
its produce quota from one level and its fetch quota from another:

    1 (user, client)  2 (user, "")  3 (user, None)  4 ("", client)  5 ("", "")  6 ("", None)
    7 (None, client)  8 (None, "")                                         no match: not limited

Sharing. The level that matched decides who shares one rate (a *sensor*, Kafka's metric tags): levels
1, 2, 4, 5, 7 and 8 give each (user, client id) its own rate (a default quota is a per-client allowance,
not a pool); levels 3 and 6 give one rate to all of a user's client ids (the user's quota is a pool).

Throttle. After a call's bytes (or handler milliseconds) are recorded, a sensor whose rate over its
sampled windows (quota_sampler.py) is above its quota is throttled for

    throttle_ms = (observed - quota) / quota x window_ms

(Kafka's formula: how long the client must stay idle for the rate over the window to fall back to the
quota), capped at the sampler's span, after which every sample has expired anyway. The call's reply
carries it, and the broker holds that sensor's next calls until then (`delay_ms`).

Quota keys and what is measured: `producer_byte_rate` - bytes of Produce requests; `consumer_byte_rate` -
bytes of consumer Fetch replies (followers' fetches are replication and never count); `request_percentage`
- handler time of every call, as a percentage of one thread (100 = one thread's whole time).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from kanal.broker.quota_sampler import QuotaWindows, RateSampler

EntityKey = tuple[str | None, str | None]
QuotaTable = Mapping[EntityKey, Mapping[str, float]]

# Cached resolutions beyond this many (distinct users x client ids) are dropped and resolved again.
RESOLUTION_CACHE_ENTRIES_MAX = 10_000


class QuotaKind(enum.Enum):
    PRODUCE = "producer_byte_rate"
    FETCH = "consumer_byte_rate"
    REQUEST = "request_percentage"


def table_from_image(
    client_quotas: Mapping[tuple[str, str], Mapping[str, float]],
    user_client_quotas: Mapping[tuple[str, str], Mapping[str, float]],
) -> dict[EntityKey, dict[str, float]]:
    """The quota table of a metadata image: `client_quotas` keyed ("user" | "client-id", name) and the
    user+client-id entities keyed (user, client id)."""
    table: dict[EntityKey, dict[str, float]] = {}
    for (entity_type, name), quotas in client_quotas.items():
        key: EntityKey = (name, None) if entity_type == "user" else (None, name)
        table[key] = dict(quotas)
    for (user, client_id), quotas in user_client_quotas.items():
        table[(user, client_id)] = dict(quotas)
    return table


def precedence(user: str, client_id: str) -> list[tuple[EntityKey, EntityKey]]:
    """(table key to look up, sensor key that shares a rate) in Kafka's order, most specific first."""
    per_client: EntityKey = (user, client_id)
    per_user: EntityKey = (user, "")
    return [
        ((user, client_id), per_client), ((user, ""), per_client), ((user, None), per_user),
        (("", client_id), per_client), (("", ""), per_client), (("", None), per_user),
        ((None, client_id), ("", client_id)), ((None, ""), ("", client_id)),
    ]


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    """The quota a call is held to: its value, the table entity it came from, the sensor it counts in."""

    value: float
    entity: EntityKey
    sensor: EntityKey


def resolve(table: QuotaTable, kind: QuotaKind, user: str, client_id: str) -> ResolvedQuota | None:
    """The most specific quota of `kind` for (user, client id), or None: not limited."""
    for key, sensor in precedence(user, client_id):
        quotas = table.get(key)
        if quotas is not None and kind.value in quotas:
            return ResolvedQuota(quotas[kind.value], key, sensor)
    return None


def entity_label(entity: EntityKey) -> str:
    """A metric label for a table entity: `user=alice,client-id=app`, `client-id=<default>`. Bounded: one
    per configured quota entity, however many clients match it."""
    parts = []
    for half, name in zip(("user", "client-id"), entity):
        if name is not None:
            parts.append(f"{half}={name or '<default>'}")
    return ",".join(parts)


def throttle_ms(observed: float, quota: float, window_ms: float, throttle_ms_max: float) -> int:
    """(observed - quota) / quota x window, in whole milliseconds (rounded up, so a throttled client is
    never told 0), capped at `throttle_ms_max`; 0 at or below the quota."""
    if observed <= quota:
        return 0
    exact = (observed - quota) / quota * window_ms
    return int(min(-(-exact // 1), throttle_ms_max))


@dataclass(frozen=True, slots=True)
class QuotaOutcome:
    """What one recorded call came to for one quota: the entity, its rate now (bytes/s, or percent of a
    thread) and the throttle (0: within the quota)."""

    kind: QuotaKind
    entity: EntityKey
    rate: float
    throttle_ms: int


class QuotaTracker:
    """The rates and throttles of every sensor on one broker. Not thread-safe: the shell holds a lock."""

    def __init__(self, windows: QuotaWindows, table: QuotaTable | None = None) -> None:
        self.windows = windows
        self._table: QuotaTable = table or {}
        self._resolved: dict[tuple[QuotaKind, str, str], ResolvedQuota | None] = {}
        self._samplers: dict[tuple[QuotaKind, EntityKey], RateSampler] = {}
        self._throttled_until_ms: dict[tuple[QuotaKind, EntityKey], float] = {}
        self._next_sweep_ms = 0.0

    def __repr__(self) -> str:
        return (f"<QuotaTracker entities={len(self._table)} sensors={len(self._samplers)} "
                f"throttled={len(self._throttled_until_ms)}>")

    @property
    def active(self) -> bool:
        """Whether any quota is set: with none, nothing needs measuring."""
        return bool(self._table)

    def set_table(self, table: QuotaTable) -> None:
        """A new quota table (the metadata log changed). Rates measured so far are kept: a lowered quota
        throttles a client that was fast a moment ago at once."""
        self._table = table
        self._resolved.clear()

    def quota_for(self, kind: QuotaKind, user: str, client_id: str) -> ResolvedQuota | None:
        key = (kind, user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        if len(self._resolved) >= RESOLUTION_CACHE_ENTRIES_MAX:
            self._resolved.clear()
        found = self._resolved[key] = resolve(self._table, kind, user, client_id)
        return found

    def limited(self, user: str, client_id: str) -> bool:
        """Whether any quota applies to (user, client id): if none does, its calls need no measuring and
        can never be throttled."""
        return any(self.quota_for(kind, user, client_id) is not None for kind in QuotaKind)

    def record(
        self, kind: QuotaKind, user: str, client_id: str, value: float, now_ms: float
    ) -> QuotaOutcome | None:
        """Count `value` (bytes; handler milliseconds for REQUEST) for the call's sensor and throttle the
        sensor when it is over its quota. None when no quota of `kind` applies."""
        self._maybe_sweep(now_ms)
        quota = self.quota_for(kind, user, client_id)
        if quota is None:
            return None
        sensor_key = (kind, quota.sensor)
        sampler = self._samplers.get(sensor_key)
        if sampler is None:
            sampler = self._samplers[sensor_key] = RateSampler(self.windows)
        sampler.record(value, now_ms)
        rate = sampler.rate_per_s(now_ms)
        if kind is QuotaKind.REQUEST:
            rate = rate / 10  # handler ms per second -> percent of one thread
        throttle = throttle_ms(rate, quota.value, sampler.window_ms(now_ms), self.windows.span_ms)
        if throttle > 0:
            until = now_ms + throttle
            if until > self._throttled_until_ms.get(sensor_key, 0.0):
                self._throttled_until_ms[sensor_key] = until
        return QuotaOutcome(kind, quota.entity, rate, throttle)

    def delay_ms(self, kinds: tuple[QuotaKind, ...], user: str, client_id: str, now_ms: float) -> float:
        """How long a call counted under `kinds` must wait before it is served (0: at once)."""
        wait = 0.0
        for kind in kinds:
            quota = self.quota_for(kind, user, client_id)
            if quota is None:
                continue
            until = self._throttled_until_ms.get((kind, quota.sensor))
            if until is not None and until > now_ms:
                wait = max(wait, until - now_ms)
        return wait

    def _maybe_sweep(self, now_ms: float) -> None:
        """Forget sensors idle for a whole span (their rate is 0 and their throttle over), so one-off
        client ids do not pile up."""
        if now_ms < self._next_sweep_ms:
            return
        self._next_sweep_ms = now_ms + self.windows.span_ms
        span_ms = self.windows.span_ms
        for key in [k for k, s in self._samplers.items()
                    if s.last_record_ms is None or now_ms - s.last_record_ms >= span_ms]:
            del self._samplers[key]
        for key in [k for k, until in self._throttled_until_ms.items() if until <= now_ms]:
            del self._throttled_until_ms[key]
