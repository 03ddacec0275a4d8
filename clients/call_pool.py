"""CallPool: unary gRPC calls run as blocking calls on a few long-lived threads, each result handed to a
callback.

Why not `stub.Method.future(...)`: grpcio starts a "channel spin" thread whenever a channel goes from no
managed call in flight to one, and lets it exit when the count drops back to zero. A client that has one
call at a time in flight (a producer at low rates with linger 0, a consumer's long polls) therefore starts
and ends a thread per call. Measured on this machine, paced at 2,000 calls/s: ~490 µs of client CPU per
call with `future()`, ~340 µs with a blocking call on a pooled thread. On 2 cores shared with the brokers
that difference decides end-to-end latency.

A call submitted from inside a callback (a reply that lets the next request go) runs next on the same
thread, after the callback returns, instead of waking another pool thread: on a loaded machine each
thread hand-off costs from tens of microseconds to milliseconds, and a producer with one request in
flight pays it on every round trip. Only the first such call stays on the thread; further ones (requests
to other brokers) go to the executor, so calls to different brokers still run in parallel.

A failed call reaches its callback and its future as the KanalError it stands for (error_boundary.call:
the trailer's code, or the one the gRPC status maps to), never as a grpc.RpcError.

Threading: `submit` never blocks; calls beyond `threads_max` queue in the executor. Callbacks run on the
pool's threads, so they must be short and must not submit-and-wait on the same pool.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from kanal.clients.error_boundary import call
from kanal.v1.error import KanalError

log = logging.getLogger(__name__)

# (reply or None, the call's KanalError or None)
CallCallback = Callable[[Any, KanalError | None], None]


class CallPool:
    def __init__(self, threads_max: int, name: str) -> None:
        if threads_max < 1:
            raise ValueError(f"threads_max must be >= 1, not {threads_max}")
        self.threads_max = threads_max
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=threads_max, thread_name_prefix=name)
        # Per pool thread, while it runs a callback: the list a call submitted from that callback joins
        # (to run next on the same thread), or None when it already holds one.
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"<CallPool {self.name} threads_max={self.threads_max}>"

    def submit(self, method: Callable[..., Any], request: Any, timeout_s: float,
               on_done: CallCallback | None = None, what: str = "") -> Future:
        """Run `method(request, timeout=timeout_s)`; `on_done(reply, error)` when it ends. The returned
        future holds the reply or raises the KanalError, for callers that wait. `what` names the call in
        an error's message."""
        follow_on = getattr(self._local, "follow_on", None)
        if follow_on is not None:
            self._local.follow_on = None  # one per callback; more go to the executor
            future: Future = Future()
            follow_on.append((future, method, request, timeout_s, on_done, what))
            return future
        return self._executor.submit(self._run, method, request, timeout_s, on_done, what)

    def _run(self, method: Callable[..., Any], request: Any, timeout_s: float, on_done: CallCallback | None,
             what: str) -> Any:
        follow_on: list[tuple] = []
        try:
            return self._call(method, request, timeout_s, on_done, what, follow_on)
        finally:
            while follow_on:  # a call a callback submitted: it runs here, with no thread hand-off
                future, next_method, next_request, next_timeout_s, next_on_done, next_what = follow_on.pop()
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(self._call(next_method, next_request, next_timeout_s, next_on_done,
                                                     next_what, follow_on))
                    except KanalError as exc:  # the call failed: its future says so, as an executor's would
                        future.set_exception(exc)
                    except Exception as exc:  # a follow-on's boundary: its callback failed (logged as an
                        # error in _call); the future carries that, as an executor's would, and the
                        # follow-ons after it still run.
                        log.debug("a follow-on call to %s failed", next_method, exc_info=True)
                        future.set_exception(exc)

    def _call(self, method: Callable[..., Any], request: Any, timeout_s: float, on_done: CallCallback | None,
              what: str, follow_on: list[tuple]) -> Any:
        try:
            reply, error = call(method, request, timeout_s=timeout_s, what=what), None
        except KanalError as exc:
            reply, error = None, exc
        if on_done is not None:
            self._local.follow_on = follow_on
            try:
                on_done(reply, error)
            except BaseException:
                # A failing callback is a bug in the caller: say so loudly, nobody may be waiting on the
                # future.
                log.exception("the callback of a call to %s failed", method)
                raise
            finally:
                self._local.follow_on = None
        if error is not None:
            raise error
        return reply

    def close(self, wait: bool = True) -> None:
        """Stop taking calls; with `wait`, return once the calls in flight (and their callbacks) ended."""
        self._executor.shutdown(wait=wait, cancel_futures=not wait)
