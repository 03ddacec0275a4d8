"""Floors: what a design on Python gRPC can reach on this machine with no broker or controller work at all
(issue 25). latency_bench.py and controller_bench.py run these beside kanal, in the same rounds.

A stand-in server is a grpc.aio server in a process of its own (as a broker is) holding nothing but a
list in memory; the clients are plain grpcio in Python, as kanal's are. Whatever kanal's storage,
validation, replication and Raft add comes on top of these figures, so a goal that a floor misses in a
run cannot be met by kanal in that run, by any change behind the same calls.

Latency, the records as in latency_bench.py (100 bytes, the first 20 the send time in ns), a producer
paced in this process and a consumer in a process of its own:

  unary       kanal's call pattern: Produce is a unary call from a sender thread, one call in flight,
              the records that came meanwhile in the next call (as kanal's producer does for one
              partition at linger 0); Fetch is a unary long poll (100 ms) answered at once when a
              Produce appends, issued again from the consumer's main thread as soon as its answer is
              read (no fetcher thread)
  stream      the same exchange on open streams: Produce messages on one bidirectional stream
              (grpcio's request-iterator thread sends them, each with every record queued by then; a
              reader thread takes the acks), and a server stream that pushes every append to the
              subscribed consumer (no request per answer at all)
  unary_push  unary Produce as in `unary`, and the server stream of `stream` to the consumer

Metadata writes: `rpc_chain_rate` is the Admin path's two hops, N client threads sharing one channel →
an aio "broker" that forwards each call with grpc.aio → an aio "controller" that answers at once, one
small message per call (as one CreateTopics of one topic is).

Every process started here is stopped by its PID; every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc
from cluster_bench import latency_ms, latency_record, latency_summary, paced

_LOG_SERVICE = "kanal.floor.Log"
_CHAIN_SERVICE = "kanal.floor.Chain"
_SEPARATOR = b"|"  # records are digits and padding, so this never occurs inside one
_LONG_POLL_S = 0.1
_CALL_TIMEOUT_S = 10.0
_STREAM_TIMEOUT_S = 120.0


# ---- stand-in servers (each runs in a spawned process) ----

def _serve_log(port_queue: mp.Queue) -> None:
    asyncio.run(_log_server(port_queue))


async def _log_server(port_queue: mp.Queue) -> None:
    log: list[bytes] = []
    parked: list[asyncio.Future] = []
    subscribers: list[asyncio.Queue] = []

    def append(records: list[bytes]) -> None:
        log.extend(records)
        for waiter in parked:
            if not waiter.done():
                waiter.set_result(None)
        parked.clear()
        for subscriber in subscribers:
            subscriber.put_nowait(records)

    async def produce(request: bytes, context) -> bytes:
        append(request.split(_SEPARATOR))
        return b"ok"

    async def fetch(request: bytes, context) -> bytes:
        """b"end": the log's end offset; else the records from that offset, waiting up to the long poll."""
        if request == b"end":
            return b"%d" % len(log)
        offset = int(request)
        if offset >= len(log):
            waiter = asyncio.get_running_loop().create_future()
            parked.append(waiter)
            try:
                await asyncio.wait_for(waiter, _LONG_POLL_S)
            except TimeoutError:
                pass
        return _SEPARATOR.join(log[offset:])

    async def produce_stream(requests, context):
        async for request in requests:
            records = request.split(_SEPARATOR)
            append(records)
            yield b"%d" % len(records)

    async def subscribe(request: bytes, context):
        pending: asyncio.Queue = asyncio.Queue()
        subscribers.append(pending)
        try:
            yield b""  # subscribed: the consumer is ready once it reads this
            while True:
                records = list(await pending.get())
                while not pending.empty():
                    records.extend(pending.get_nowait())
                yield _SEPARATOR.join(records)
        finally:
            subscribers.remove(pending)

    handlers = grpc.method_handlers_generic_handler(_LOG_SERVICE, {
        "Produce": grpc.unary_unary_rpc_method_handler(produce),
        "Fetch": grpc.unary_unary_rpc_method_handler(fetch),
        "ProduceStream": grpc.stream_stream_rpc_method_handler(produce_stream),
        "Subscribe": grpc.unary_stream_rpc_method_handler(subscribe),
    })
    await _serve(handlers, port_queue)


def _serve_chain(port_queue: mp.Queue, upstream_port: int | None) -> None:
    asyncio.run(_chain_server(port_queue, upstream_port))


async def _chain_server(port_queue: mp.Queue, upstream_port: int | None) -> None:
    """Answers Call at once (the controller), or forwards it to upstream_port and answers with its reply
    (the broker)."""
    if upstream_port is None:
        async def call(request: bytes, context) -> bytes:
            return request
    else:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{upstream_port}")
        forward = channel.unary_unary(f"/{_CHAIN_SERVICE}/Call")

        async def call(request: bytes, context) -> bytes:
            return await forward(request, timeout=_CALL_TIMEOUT_S)

    handlers = grpc.method_handlers_generic_handler(
        _CHAIN_SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(call)})
    await _serve(handlers, port_queue)


async def _serve(handlers, port_queue: mp.Queue) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handlers,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    port_queue.put(port)
    await server.wait_for_termination()


@contextmanager
def _server(target: Callable[..., None], *args: object) -> Iterator[int]:
    """A stand-in server process; yields its port, stops it by PID."""
    ctx = mp.get_context("spawn")
    ports: mp.Queue = ctx.Queue()
    process = ctx.Process(target=target, args=(ports, *args), daemon=True)
    process.start()
    try:
        yield ports.get(timeout=60)
    finally:
        process.kill()
        process.join(10)


# ---- latency ----

_WARM_UP = latency_record(0)  # sent before the clock starts, so no record waits for a connection


def _samples(now_ns: int, answer: bytes) -> list[float]:
    """Latencies of an answer's records in ms, the warm-up record left out."""
    return [latency_ms(r, now_ns) for r in answer.split(_SEPARATOR) if r != _WARM_UP]


# mode -> (how the producer sends, how the consumer receives)
_MODES = {"unary": ("unary", "fetch"), "unary_push": ("unary", "push"), "stream": ("stream", "push")}


def _consumer(port: int, receive: str, count: int, seconds: float, ready, out: mp.Queue) -> None:
    samples: list[float] = []
    deadline = time.monotonic() + seconds + 10
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        if receive == "fetch":
            fetch = channel.unary_unary(f"/{_LOG_SERVICE}/Fetch")
            offset = int(fetch(b"end", timeout=_CALL_TIMEOUT_S))
            ready.set()
            while len(samples) < count and time.monotonic() < deadline:
                answer = fetch(b"%d" % offset, timeout=_CALL_TIMEOUT_S)
                if answer:
                    got = _samples(time.time_ns(), answer)
                    offset += len(got)
                    samples.extend(got)
        else:
            pushed = channel.unary_stream(f"/{_LOG_SERVICE}/Subscribe")(b"", timeout=seconds + 10)
            next(pushed)  # the server has the subscription
            ready.set()
            try:
                for answer in pushed:
                    samples.extend(_samples(time.time_ns(), answer))
                    if len(samples) >= count:
                        break
            except grpc.RpcError:
                pass  # the deadline: what arrived is reported, and `received` shows what did not
            pushed.cancel()
    out.put(samples)


def _next_batch(waiting: queue.SimpleQueue[bytes | None]) -> tuple[bytes, bool]:
    """Every record queued by now (waiting for the first) as one message, and whether the end (None) came."""
    records = [waiting.get()]
    while True:
        try:
            records.append(waiting.get_nowait())
        except queue.Empty:
            break
    return _SEPARATOR.join(r for r in records if r is not None), records[-1] is None


def _produce_unary(channel: grpc.Channel, count: int, rate_s: int) -> None:
    produce = channel.unary_unary(f"/{_LOG_SERVICE}/Produce")
    waiting: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def sender() -> None:
        done = False
        while not done:
            batch, done = _next_batch(waiting)
            if batch:
                produce(batch, timeout=_CALL_TIMEOUT_S)

    produce(_WARM_UP, timeout=_CALL_TIMEOUT_S)
    thread = threading.Thread(target=sender, name="floor-sender", daemon=True)
    thread.start()
    for _ in paced(count, rate_s):
        waiting.put(latency_record())
    waiting.put(None)
    thread.join(_CALL_TIMEOUT_S + 30)


def _produce_stream(channel: grpc.Channel, count: int, rate_s: int, seconds: float) -> None:
    outgoing: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def requests() -> Iterator[bytes]:
        """Run by grpcio's request thread: each message carries every record queued by the time it goes
        (one record a message falls behind 2,000 records/s here: grpcio sends one message at a time)."""
        done = False
        while not done:
            batch, done = _next_batch(outgoing)
            if batch:
                yield batch

    acks = channel.stream_stream(f"/{_LOG_SERVICE}/ProduceStream")(requests(), timeout=seconds + 30)
    outgoing.put(_WARM_UP)
    next(acks)  # the stream is open and its first message stored before the clock starts
    acked = threading.Event()

    def reader() -> None:
        stored = 0
        for ack in acks:
            stored += int(ack)
            if stored >= count:
                break
        acked.set()

    thread = threading.Thread(target=reader, name="floor-acks", daemon=True)
    thread.start()
    for _ in paced(count, rate_s):
        outgoing.put(latency_record())
    acked.wait(seconds + 30)
    outgoing.put(None)
    acks.cancel()
    thread.join(10)


def protocol_latency(mode: str, rate_s: int, seconds: float) -> dict:
    """End-to-end latency through a fresh stand-in log server, `mode` one of _MODES (module doc)."""
    if mode not in _MODES:
        raise ValueError(f"mode is one of {sorted(_MODES)}, not {mode!r}")
    send, receive = _MODES[mode]
    count = int(rate_s * seconds)
    with _server(_serve_log) as port:
        ctx = mp.get_context("spawn")
        ready, out = ctx.Event(), ctx.Queue()
        reader = ctx.Process(target=_consumer, args=(port, receive, count, seconds, ready, out),
                             daemon=True)
        reader.start()
        try:
            if not ready.wait(60):
                raise SystemExit("the floor's consumer did not start")
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                if send == "unary":
                    _produce_unary(channel, count, rate_s)
                else:
                    _produce_stream(channel, count, rate_s, seconds)
            samples = out.get(timeout=seconds + 60)
        finally:
            reader.join(30)
            if reader.is_alive():
                reader.kill()
                reader.join(10)
    return latency_summary(samples, rate_s, count)


# ---- metadata writes ----

def rpc_chain_rate(clients: int, seconds: float, payload_bytes: int = 64) -> dict:
    """Calls/s through client threads -> aio broker stand-in -> aio controller stand-in (module doc)."""
    with (_server(_serve_chain, None) as controller_port, _server(_serve_chain, controller_port) as port,
          grpc.insecure_channel(f"127.0.0.1:{port}") as channel):
        call = channel.unary_unary(f"/{_CHAIN_SERVICE}/Call")
        payload = b"x" * payload_bytes
        call(payload, timeout=_CALL_TIMEOUT_S)  # connected before the clock starts
        done = [0] * clients
        started = time.perf_counter()
        stop = started + seconds

        def work(i: int) -> None:
            while time.perf_counter() < stop:
                call(payload, timeout=_CALL_TIMEOUT_S)
                done[i] += 1

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(seconds + _CALL_TIMEOUT_S + 5)
        elapsed = time.perf_counter() - started
    return {"clients": clients, "calls": sum(done), "calls_per_s": round(sum(done) / elapsed, 1)}
