"""Client quotas on the broker's gRPC server: the thin shell around quota_policy.QuotaTracker.

BrokerQuotas holds the tracker (under a lock: calls are measured on the event loop and on pool threads),
takes a new quota table from every metadata image (server.py's on_metadata: a quota written to the
metadata log holds here as soon as this broker has applied it, well within a second), and keeps the
quota metrics (broker/metrics.py).

QuotaInterceptor is a grpc.aio server interceptor on the Broker service. While no quota is set anywhere
it hands every handler back untouched (the only cost is the interceptor call), and a call of a client
no quota applies to runs unwrapped (one cached lookup). Otherwise it wraps the handler:

- Who: the user is the name of the call's principal (`kanal.security.principal.call_principal()`, read inside
  the wrapper, where the authenticator's interceptor, listed before this one, has bound it), the client
  id is the call's `kanal-client-id` metadata (kanal.v1.client_id; "" when absent).
- Delay: a call whose (user, client id) is still throttled for its kind (Produce: producer bytes, Fetch:
  consumer bytes, every call: request time) waits until the throttle is over before it is served. The
  wait of the coroutine handlers (Produce, Fetch, Metadata, ListOffsets, JoinGroup, SyncGroup) holds no
  thread: they sleep on the event loop inside the wrapper. A pool-thread handler (heartbeats, commits,
  admin calls) waits on its own thread: its principal is known only there (authentication needs the
  call's TLS context, which no grpc.aio interceptor sees). A client that honours throttle_time_ms never
  waits here.
- Measure: Produce counts its request's batch bytes, a consumer's Fetch its reply's record bytes (a
  follower's Fetch is replication: never measured, never delayed), and every call its handler time
  (request_percentage): for a coroutine handler only the time it actually runs on the loop (a parked
  long poll or acks=all wait costs nothing), for a pool-thread handler its whole run.
- Answer: the reply's `throttle_time_ms` (broker.proto) is the largest throttle the call caused.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import grpc

from kanal.broker.fetch_call import follower_id
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.quota_policy import QuotaKind, QuotaOutcome, QuotaTracker, entity_label, table_from_image
from kanal.broker.quota_sampler import QuotaWindows
from kanal.metadata import MetadataImage
from kanal.security.principal import call_principal
from kanal.v1.client_id import CLIENT_ID_METADATA_KEY

_SERVICE_PREFIX = "/kanal.v1.Broker/"
_PRODUCE = _SERVICE_PREFIX + "Produce"
_FETCH = _SERVICE_PREFIX + "Fetch"
# Which throttles hold a call of each kind (request time holds every call).
_DELAY_KINDS = {
    _PRODUCE: (QuotaKind.PRODUCE, QuotaKind.REQUEST),
    _FETCH: (QuotaKind.FETCH, QuotaKind.REQUEST),
}
_REQUEST_ONLY = (QuotaKind.REQUEST,)


def produce_request_bytes(request: Any) -> int:
    """Bytes of a ProduceRequest's batches: what producer_byte_rate counts."""
    return sum(len(batch) for topic in request.topics for part in topic.partitions for batch in part.batches)


def fetch_reply_bytes(reply: Any) -> int:
    """Bytes of a FetchResponse's records: what consumer_byte_rate counts."""
    return sum(len(part.records) for topic in reply.topics for part in topic.partitions)


class BrokerQuotas:
    def __init__(self, windows: QuotaWindows, metrics: BrokerMetrics) -> None:
        self._tracker = QuotaTracker(windows)
        self._lock = threading.Lock()
        self._metrics = metrics
        self._labels: set[tuple[str, str]] = set()  # metric label sets in use: (quota key, entity)
        self.active = False  # read without the lock: a bool swapped whole

    def __repr__(self) -> str:
        return f"<BrokerQuotas {self._tracker!r}>"

    def on_metadata(self, image: MetadataImage) -> None:
        """Take the image's quotas (the metadata follower's thread)."""
        table = table_from_image(image.client_quotas, image.user_client_quotas)
        with self._lock:
            self._tracker.set_table(table)
            self.active = self._tracker.active
            configured = {(key, entity_label(entity)) for entity, quotas in table.items() for key in quotas}
            for labels in self._labels - configured:
                for metric in (self._metrics.quota_throttle_time_ms, self._metrics.quota_throttled_calls,
                               self._metrics.quota_rate):
                    try:
                        metric.remove(*labels)
                    except KeyError:
                        pass  # that metric never saw the label set
            self._labels &= configured

    def delay_s(self, kinds: tuple[QuotaKind, ...], user: str, client_id: str) -> float:
        """How long a call must wait for its client's throttle to end (0: serve it now)."""
        with self._lock:
            return self._tracker.delay_ms(kinds, user, client_id, _now_ms()) / 1000

    def limited(self, user: str, client_id: str) -> bool:
        """Whether any quota applies to (user, client id) (QuotaTracker.limited)."""
        with self._lock:
            return self._tracker.limited(user, client_id)

    def limits(self, kind: QuotaKind, user: str, client_id: str) -> bool:
        """Whether a quota of `kind` applies to (user, client id): if not, nothing needs measuring."""
        with self._lock:
            return self._tracker.quota_for(kind, user, client_id) is not None

    def record(self, kind: QuotaKind, user: str, client_id: str, value: float) -> int:
        """Count `value` for the call; the throttle it caused in ms (0 when none or no quota)."""
        with self._lock:
            outcome = self._tracker.record(kind, user, client_id, value, _now_ms())
        if outcome is None:
            return 0
        self._observe(outcome)
        return outcome.throttle_ms

    def _observe(self, outcome: QuotaOutcome) -> None:
        labels = (outcome.kind.value, entity_label(outcome.entity))
        self._labels.add(labels)
        self._metrics.quota_rate.labels(*labels).set(outcome.rate)
        if outcome.throttle_ms > 0:
            self._metrics.quota_throttle_time_ms.labels(*labels).inc(outcome.throttle_ms)
            self._metrics.quota_throttled_calls.labels(*labels).inc()


class QuotaInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, quotas: BrokerQuotas, metrics: BrokerMetrics) -> None:
        self._quotas = quotas
        self._metrics = metrics
        self._throttle_field: dict[str, bool] = {}

    async def intercept_service(self, continuation: Callable, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        method = details.method
        if (handler is None or not self._quotas.active or handler.unary_unary is None
                or not method.startswith(_SERVICE_PREFIX)):
            return handler
        client_id = _client_id(details.invocation_metadata)
        behaviour = handler.unary_unary
        if inspect.iscoroutinefunction(behaviour):
            return handler._replace(unary_unary=self._wrap_async(behaviour, method, client_id))
        # A pool-thread handler: its principal is bound only on its thread (the authenticator needs the
        # call's TLS context, which a grpc.aio interceptor never sees), so the user is read there, and a
        # throttled call waits there, holding its pool thread for at most one throttle (a quota window
        # span). These are the light calls (heartbeats, commits, admin); Produce and Fetch wait on the loop.
        return handler._replace(unary_unary=self._wrap_sync(behaviour, method, client_id))

    def wrap(self, behaviour: Callable, method_name: str, client_id: str) -> Callable:
        """Broker handler `method_name` ("Produce") with the client's quotas applied, for a caller that is
        not a gRPC call: the Kafka listener, whose client id comes in its request header."""
        if not self._quotas.active:
            return behaviour
        method = _SERVICE_PREFIX + method_name
        if inspect.iscoroutinefunction(behaviour):
            return self._wrap_async(behaviour, method, client_id)
        return self._wrap_sync(behaviour, method, client_id)

    def _wrap_async(self, behaviour: Callable[..., Any], method: str, client_id: str) -> Callable[..., Any]:
        quotas, kinds = self._quotas, _DELAY_KINDS.get(method, _REQUEST_ONLY)

        async def served(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if method == _FETCH and follower_id(request) is not None:
                return await behaviour(request, context)  # replication: no client quota applies
            user = call_principal().name
            if not quotas.limited(user, client_id):
                return await behaviour(request, context)  # no quota for this client: never throttled
            delay_s = quotas.delay_s(kinds, user, client_id)
            if delay_s > 0:
                self._metrics.quota_delayed_calls.inc()
                await asyncio.sleep(delay_s)
            spent_s = [0.0]
            reply = None
            try:
                reply = await _running_time(behaviour(request, context), spent_s)
            finally:
                self._account(method, user, client_id, request, reply, spent_s[0])
            return reply

        return served

    def _wrap_sync(self, behaviour: Callable[..., Any], method: str, client_id: str) -> Callable[..., Any]:
        quotas = self._quotas

        def served(request: Any, context: grpc.ServicerContext) -> Any:
            user = call_principal().name
            if not quotas.limited(user, client_id):
                return behaviour(request, context)  # no quota for this client: never throttled
            delay_s = quotas.delay_s(_REQUEST_ONLY, user, client_id)
            if delay_s > 0:
                self._metrics.quota_delayed_calls.inc()
                time.sleep(delay_s)  # the throttle itself, on this call's own pool thread (see above)
            started = time.perf_counter()
            reply = None
            try:
                reply = behaviour(request, context)
            finally:
                self._account(method, user, client_id, request, reply, time.perf_counter() - started)
            return reply

        return served

    def _account(
        self, method: str, user: str, client_id: str, request: Any, reply: Any, spent_s: float
    ) -> None:
        """Record the call's bytes and time; put the throttle it caused into the reply."""
        quotas = self._quotas
        throttle = quotas.record(QuotaKind.REQUEST, user, client_id, spent_s * 1000)
        if method == _PRODUCE and quotas.limits(QuotaKind.PRODUCE, user, client_id):
            throttle = max(
                throttle, quotas.record(QuotaKind.PRODUCE, user, client_id, produce_request_bytes(request))
            )
        elif method == _FETCH and reply is not None and quotas.limits(QuotaKind.FETCH, user, client_id):
            throttle = max(
                throttle, quotas.record(QuotaKind.FETCH, user, client_id, fetch_reply_bytes(reply))
            )
        if throttle > 0 and reply is not None and self._has_throttle_field(method, reply):
            reply.throttle_time_ms = max(reply.throttle_time_ms, min(throttle, 2**31 - 1))

    def _has_throttle_field(self, method: str, reply: Any) -> bool:
        known = self._throttle_field.get(method)
        if known is None:
            descriptor = getattr(reply, "DESCRIPTOR", None)
            known = self._throttle_field[method] = (descriptor is not None
                                                    and "throttle_time_ms" in descriptor.fields_by_name)
        return known


def _client_id(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == CLIENT_ID_METADATA_KEY:
            return value if isinstance(value, str) else value.decode("ascii", "replace")
    return ""


def _now_ms() -> float:
    return time.monotonic() * 1000


@types.coroutine
def _running_time(coroutine: Any, spent_s: list[float]) -> Any:
    """Await `coroutine`, adding to spent_s[0] only the time it runs (each step between suspensions), not
    the time it is parked: the handler time of a long poll is its reads, not its wait."""
    value, error = None, None
    while True:
        started = time.perf_counter()
        try:
            yielded = coroutine.send(value) if error is None else coroutine.throw(error)
        except StopIteration as stop:
            spent_s[0] += time.perf_counter() - started
            return stop.value
        except BaseException:
            spent_s[0] += time.perf_counter() - started
            raise
        spent_s[0] += time.perf_counter() - started
        try:
            value, error = (yield yielded), None
        except BaseException as exc:  # noqa: BLE001 - not handled: thrown into the handler's coroutine next, as `await` does
            value, error = None, exc
