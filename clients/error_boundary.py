"""The clients' error boundary: where a failed call to a broker becomes a KanalError, and where the
clients decide, by that error's code alone, whether to try again.

- `call(rpc, request, timeout_s=..., what=...)`: one unary call. A failure leaves as the KanalError it
  stands for (kanal.v1.error_trailer.call_error, the one translation both sides share): the code and
  message of kanal's error trailer when a kanal server refused the call, else the code its gRPC status
  maps to (a broker that is down or unreachable: BROKER_NOT_AVAILABLE; a deadline: REQUEST_TIMED_OUT).
  `what` names the call in the message ("Produce to 127.0.0.1:9092").
- `retrying(attempt, timeout_s=..., backoff_s=...)`: runs `attempt(remaining_s)` until it returns. A
  KanalError whose code is not retriable (errors.proto's `retriable` option: an authorization refusal, an
  invalid request, a fenced producer) is raised at once: the same call cannot succeed later. A retriable
  one (a broker down or starting, a deadline, a leader or coordinator that moved) is tried again after
  `backoff_s` while the time lasts; when it is up the last error is raised, with its own code.
  `on_retry(error)` runs before each new attempt (refresh metadata, forget a coordinator).

The producer's sends and the consumer's fetches run many partitions at once, each under its own deadline
(delivery_timeout_ms, request_timeout_ms), so they keep their own loops; those loops read the same
KanalError and the same `retriable` option (producer.py `_resolve`, consumer_fetcher.py `_fetch_failed`).
CallPool (call_pool.py) runs `call` on its threads for them.

No locks, no threads; `clock` and `sleep` are arguments so tests run the retry loop without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from kanal.v1.error import KanalError
from kanal.v1.error_trailer import call_error

R = TypeVar("R")


def call(rpc: Callable[..., R], request: Any, *, timeout_s: float, what: str = "") -> R:
    """`rpc(request, timeout=timeout_s)`; a failed call raised as its KanalError (call_error)."""
    try:
        return rpc(request, timeout=timeout_s)
    except grpc.RpcError as exc:
        raise call_error(exc, what) from None


def retrying(
    attempt: Callable[[float], R],
    *,
    timeout_s: float,
    backoff_s: float,
    on_retry: Callable[[KanalError], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    """`attempt(remaining_s)` until it returns; a non-retriable KanalError at once, a retriable one again
    after `backoff_s` until `timeout_s` has passed, then the last one. An error `on_retry` raises ends
    the loop with that error."""
    deadline = clock() + timeout_s
    while True:
        try:
            return attempt(deadline - clock())
        except KanalError as error:
            if not error.retriable or clock() + backoff_s >= deadline:
                raise
            last = error
        sleep(backoff_s)  # a backoff between attempts, not a synchronisation
        if on_retry is not None:
            on_retry(last)
