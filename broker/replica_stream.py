"""ReplicaFetch: a follower's fetches to one leader as messages on one gRPC stream (broker.proto).

Why: with RF=3 and acks=all every produce costs each follower one or two Fetches at the leader (one
brings the data, the next reports the follower's new log end, which moves the high-water mark). As unary
calls on the leader's grpc.aio server each of those paid a whole call's setup and teardown (a new call,
its metadata, a Task, the status): measured on this machine with a 220 KB answer, about 450 µs of leader
CPU per unary call against about 240 µs per request/answer pair on an open stream (and 590 against 400
µs at the follower). The fetch itself is unchanged: each request is a follower FetchRequest, read and
long-polled exactly as a unary follower Fetch (fetch_call.py), with its replica id and broker epoch
checked on every request.

The rules of a session:
- one request in flight: the follower sends the next request only after it has read the answer, so
  answers pair with requests by order and a request's fetch offset is the follower's log end as of its
  last applied answer (the same thing a unary Fetch reports);
- a request that is not a follower's (no replica_id) ends the stream with INVALID_REQUEST; an error of a
  whole fetch ends it with that error (the error boundary of the handler); the follower then opens a new
  stream after its usual back-off;
- the follower replaces a stream older than `stream_age_s_max` between two exchanges (never in the
  middle of one), and gives every stream a deadline of that age plus one long poll plus a margin, so a
  leader that hangs (SIGSTOP) ends the stream with DEADLINE_EXCEEDED as a hung unary Fetch did;
- a leader without the method (an older broker during a rolling upgrade) answers UNIMPLEMENTED, which
  a grpc.aio client may see as INTERNAL when its first write races that answer: when a stream fails so
  before its first answer and the same request is then answered as a unary Fetch, the follower fetches
  from that leader with unary Fetch for `UNARY_FALLBACK_S` (replica_fetcher.py) before it tries a stream
  again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import grpc

from kanal.broker.fetch_call import follower_id
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

STREAM_AGE_S_MAX = 60.0
_DEADLINE_MARGIN_S = 10.0


async def serve_replica_stream(context: grpc.aio.ServicerContext,
                               fetch: Callable[[broker_pb2.FetchRequest], Awaitable[broker_pb2.FetchResponse]]
                               ) -> None:
    """The leader's side: answer each follower FetchRequest read from the stream with `fetch` (the same
    coroutine that serves a unary Fetch), in order, until the follower half-closes or cancels."""
    while True:
        request = await context.read()
        if request is grpc.aio.EOF:
            return
        if follower_id(request) is None:
            raise KanalError(ErrorCode.INVALID_REQUEST, "ReplicaFetch is for followers: set replica_id "
                                                        "(consumers use Fetch)")
        await context.write(await fetch(request))


class ReplicaFetchSession:
    """The follower's side: one open stream to a leader, on the fetcher's event loop (grpc.aio). Used by
    the one fetcher task; `cancel` ends the stream, and an exchange in progress raises CancelledError.

    Why `cancel` also cancels the awaiting task: grpc.aio (1.85) does not wake a write on a stream call that
    is cancelled before its initial metadata went out (while the channel connects, or right after the call
    was made): the write waits on an event only a sent metadata sets, until the call's deadline (70 s). A
    fetcher interrupted so sat out its whole deadline, and the partitions of that leader fell out of the
    ISR. So the session cancels the exchange's own await too, and takes that cancellation back (uncancel)
    when it surfaces: the task's cancellation count stays what its owner asked for (a stop)."""

    def __init__(self, channel: grpc.aio.Channel, metadata: Sequence[tuple[str, bytes]], poll_s_max: float,
                 stream_age_s_max: float = STREAM_AGE_S_MAX) -> None:
        self.opened_s = time.monotonic()
        self.stream_age_s_max = stream_age_s_max
        self.answered = False  # at least one exchange completed on this stream
        self._waiter: asyncio.Task | None = None  # the task in an exchange, while one is in progress
        self._waiter_cancelled = False  # cancel() cancelled that task's await
        self._call = broker_pb2_grpc.BrokerStub(channel).ReplicaFetch(
            timeout=stream_age_s_max + poll_s_max + _DEADLINE_MARGIN_S, metadata=tuple(metadata))

    def __repr__(self) -> str:
        return f"<ReplicaFetchSession age={time.monotonic() - self.opened_s:.1f}s>"

    @property
    def in_flight(self) -> bool:
        """An exchange is in progress."""
        return self._waiter is not None

    @property
    def expired(self) -> bool:
        """Old enough to be replaced before the next exchange (so its deadline never ends an exchange)."""
        return time.monotonic() - self.opened_s >= self.stream_age_s_max

    async def exchange(self, request: broker_pb2.FetchRequest) -> broker_pb2.FetchResponse:
        """Send one request and wait for its answer. grpc.RpcError when the stream ended (the leader refused
        or failed, the deadline passed); CancelledError after `cancel`."""
        waiter = self._waiter = asyncio.current_task()
        try:
            try:
                await self._call.write(request)
            except asyncio.InvalidStateError:  # the stream had already ended: say how
                code = await self._call.code()
                raise _StreamEnded(code if code != grpc.StatusCode.OK else grpc.StatusCode.UNAVAILABLE,
                                   f"the ReplicaFetch stream ended: {await self._call.details()}") from None
            reply = await self._call.read()
        except BaseException:
            if self._waiter_cancelled and waiter is not None:
                self._waiter_cancelled = False
                waiter.uncancel()
            raise
        finally:
            self._waiter = None
        if reply is grpc.aio.EOF:  # the leader ended the stream with OK between answers: not expected
            raise _StreamEnded(grpc.StatusCode.UNAVAILABLE, "the leader ended the ReplicaFetch stream")
        self.answered = True
        return reply

    def cancel(self) -> None:
        """End the stream; an exchange in progress raises CancelledError (on the loop, soon after)."""
        self._call.cancel()
        if self._waiter is not None and not self._waiter_cancelled:
            self._waiter_cancelled = True
            self._waiter.cancel()


class _StreamEnded(grpc.RpcError):
    """The stream ended without an error of its own to raise."""

    def __init__(self, code: grpc.StatusCode, why: str) -> None:
        super().__init__(why)
        self._code, self._why = code, why

    def code(self) -> grpc.StatusCode:
        return self._code

    def __str__(self) -> str:
        return self._why
