"""The follower's side of ReplicaFetch (broker/replica_stream.py, broker/replica_fetcher.py) against small
gRPC servers of the test's own on 127.0.0.1, the fetcher on an event loop as on a broker: fetches go on
one stream, in order; a stream is replaced only between exchanges once it is old; a leader without the
method (UNIMPLEMENTED, an older broker in a rolling upgrade) is fetched from with unary Fetch; a partition
added during a long poll is fetched at once, and stop ends a long poll at once; a call cancelled by anyone
else ends only that call, and a fetcher task ended by anything but stop stops the broker."""

from __future__ import annotations

import asyncio
import socket
import threading
from concurrent import futures

import grpc
import pytest

from kanal.broker.config import BrokerConfig
from kanal.broker.replica_fetcher import ReplicaFetcher
from kanal.broker.replica_stream import ReplicaFetchSession
from kanal.v1 import broker_pb2
from tests.harness.waiting import wait_until


class FakeLeader:
    """Answers each follower fetch with its fetch offset in `log_end_offset`; counts calls and streams."""

    def __init__(self, *, streams: bool) -> None:
        self.unary_calls = 0
        self.streams_opened = 0
        self._lock = threading.Lock()
        handlers = {"Fetch": grpc.unary_unary_rpc_method_handler(
            self._fetch, broker_pb2.FetchRequest.FromString, broker_pb2.FetchResponse.SerializeToString)}
        if streams:
            handlers["ReplicaFetch"] = grpc.stream_stream_rpc_method_handler(
                self._stream, broker_pb2.FetchRequest.FromString, broker_pb2.FetchResponse.SerializeToString)
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("kanal.v1.Broker", handlers),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @staticmethod
    def _answer(request: broker_pb2.FetchRequest) -> broker_pb2.FetchResponse:
        reply = broker_pb2.FetchResponse()
        preq = request.topics[0].partitions[0]
        reply.topics.add(topic=request.topics[0].topic).partitions.add(partition=preq.partition,
                                                                       log_end_offset=preq.fetch_offset)
        return reply

    def _fetch(self, request, context):
        with self._lock:
            self.unary_calls += 1
        return self._answer(request)

    def _stream(self, requests, context):
        with self._lock:
            self.streams_opened += 1
        for request in requests:
            yield self._answer(request)


@pytest.fixture
def make_fetcher(tmp_path):
    """Fetchers on an event loop of the test's own, in a thread, as on a broker's gRPC loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    made = []

    def make(leader: FakeLeader) -> ReplicaFetcher:
        config = BrokerConfig(
            broker_id=1, listen="127.0.0.1:1", controllers=("127.0.0.1:2",), data_dir=tmp_path
        )
        fetcher = ReplicaFetcher(None, 0, f"127.0.0.1:{leader.port}", config, lambda: 7, loop)  # type: ignore[arg-type]
        made.append((fetcher, leader))
        return fetcher

    yield make
    for fetcher, leader in made:
        # The fetcher's task was never started: its stream and channel are closed here.
        on_loop(fetcher, close_channel(fetcher))
        leader.server.stop(0)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


async def close_channel(fetcher: ReplicaFetcher) -> None:
    fetcher._end_call()
    if fetcher._channel is not None:
        await fetcher._channel.close()


def on_loop(fetcher: ReplicaFetcher, coroutine):
    return asyncio.run_coroutine_threadsafe(coroutine, fetcher._loop).result(10)


def request(offset: int) -> broker_pb2.FetchRequest:
    out = broker_pb2.FetchRequest(replica_id=1, replica_epoch=7, max_wait_ms=0, min_bytes=1)
    out.topics.add(topic="t").partitions.add(partition=0, fetch_offset=offset)
    return out


def offsets(fetcher: ReplicaFetcher, count: int) -> list[int]:
    return [on_loop(fetcher, fetcher._fetch(request(i))).topics[0].partitions[0].log_end_offset
            for i in range(count)]


def test_fetches_share_one_stream_and_answers_come_in_order(make_fetcher):
    leader = FakeLeader(streams=True)
    fetcher = make_fetcher(leader)
    assert offsets(fetcher, 50) == list(range(50))
    assert (leader.streams_opened, leader.unary_calls) == (1, 0)


def test_an_old_stream_is_replaced_between_exchanges(make_fetcher):
    leader = FakeLeader(streams=True)
    fetcher = make_fetcher(leader)
    assert offsets(fetcher, 2) == [0, 1]
    fetcher._session.opened_s -= fetcher._session.stream_age_s_max  # old now: the next exchange replaces it
    assert offsets(fetcher, 3) == [0, 1, 2]
    assert leader.streams_opened == 2 and leader.unary_calls == 0


def test_a_leader_without_replica_fetch_is_fetched_with_unary_fetch(make_fetcher):
    leader = FakeLeader(streams=False)
    fetcher = make_fetcher(leader)
    assert offsets(fetcher, 5) == list(range(5))
    assert leader.unary_calls == 5 and fetcher._unary_until_s > 0


class ParkingLeader:
    """A stream-only leader that long-polls: every request parks until its stream ends or `park_s` passes,
    but the first one that names partition 1, which is answered at once (partition 1 had one batch).
    Records the partitions of every request it reads, and how many streams have ended."""

    def __init__(self, park_s: float = 30.0) -> None:
        self.requests: list[list[int]] = []
        self.streams_ended = 0
        self.answered_1 = False
        self._changed = threading.Condition()
        self._park_s = park_s
        handlers = {"ReplicaFetch": grpc.stream_stream_rpc_method_handler(
            self._stream, broker_pb2.FetchRequest.FromString, broker_pb2.FetchResponse.SerializeToString)}
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("kanal.v1.Broker", handlers),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _stream(self, requests, context):
        ended = threading.Event()
        context.add_callback(ended.set)
        try:
            for request in requests:
                parts = [p.partition for t in request.topics for p in t.partitions]
                with self._changed:
                    self.requests.append(parts)
                    self._changed.notify_all()
                with self._changed:
                    at_once = 1 in parts and not self.answered_1
                    self.answered_1 = self.answered_1 or at_once
                if not at_once:
                    ended.wait(self._park_s)
                reply = broker_pb2.FetchResponse()
                topic = reply.topics.add(topic="t")
                for p in parts:
                    topic.partitions.add(partition=p)
                yield reply
        finally:
            with self._changed:
                self.streams_ended += 1
                self._changed.notify_all()

    def wait_for(self, condition, timeout_s: float = 10.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: condition(self), timeout_s)


class FollowedPartition:
    """What a fetcher needs of a followed partition: where to fetch from, and where answers go."""

    def __init__(self, partition_id: int) -> None:
        self.topic, self.partition_id, self.topic_id = "t", partition_id, ""
        self.replication_throttle = None
        self.answers = 0

    def fetch_position(self) -> tuple[int, int, int]:
        return 0, 0, -1

    def apply_fetched(self, leader_id: int, data) -> int:
        self.answers += 1
        return 0


def parked_fetcher(make_fetcher) -> tuple[ParkingLeader, ReplicaFetcher]:
    """A started fetcher following partition 0 of a ParkingLeader, its first request parked there."""
    leader = ParkingLeader()
    fetcher = make_fetcher(leader)
    fetcher.start()
    fetcher.set_partitions([FollowedPartition(0)])
    assert leader.wait_for(lambda lead: lead.requests == [[0]])
    return leader, fetcher


def test_a_partition_added_during_a_long_poll_is_fetched_at_once(make_fetcher):
    leader = ParkingLeader()
    fetcher = make_fetcher(leader)
    first, second = FollowedPartition(0), FollowedPartition(1)
    fetcher.start()
    fetcher.set_partitions([first])
    assert leader.wait_for(lambda lead: lead.requests == [[0]])  # parked: partition 0 has nothing
    fetcher.set_partitions([first, second])
    # The parked poll is cancelled (its stream ends) and a request naming both goes out at once, not when
    # the 30 s poll would have ended.
    assert leader.wait_for(lambda lead: [0, 1] in lead.requests and lead.streams_ended >= 1)
    wait_until(lambda: second.answers >= 1, 10, "an answer for the added partition", 0.01)
    # One answer each, from the request naming both: nothing of the cancelled poll was applied.
    assert (first.answers, second.answers) == (1, 1)
    fetcher.stop().result(10)


def test_stop_ends_a_long_poll_at_once(make_fetcher):
    leader, fetcher = parked_fetcher(make_fetcher)
    fetcher.stop().result(10)  # the task has ended, well before the leader's 30 s poll would
    assert leader.wait_for(lambda lead: lead.streams_ended == 1)


def test_a_call_cancelled_by_someone_else_ends_only_that_call(make_fetcher):
    # gRPC or a closed channel may cancel the call in flight; the fetcher must go on fetching (a new
    # stream after its back-off), or this broker would never rejoin the ISR of these partitions.
    leader, fetcher = parked_fetcher(make_fetcher)
    on_loop(fetcher, cancel_call(fetcher))
    assert leader.wait_for(lambda lead: lead.streams_ended >= 1 and len(lead.requests) >= 2)
    assert not fetcher._done.done() and not fetcher._task.done()
    fetcher.stop().result(10)


async def cancel_call(fetcher: ReplicaFetcher) -> None:
    fetcher._session.cancel()


def test_a_fetcher_task_cancelled_without_stop_stops_the_broker(make_fetcher, monkeypatch):
    # Only stop() may end a fetcher: a task that ended any other way would leave its partitions out of the
    # ISR for good while the broker went on answering, so it stops the process loudly instead.
    stopped: list[str] = []
    monkeypatch.setattr("kanal.broker.replica_fetcher.stop_process",
                        lambda reason, exc=None: stopped.append(reason))
    _, fetcher = parked_fetcher(make_fetcher)
    fetcher._loop.call_soon_threadsafe(fetcher._task.cancel)
    fetcher._done.result(10)
    assert stopped == ["the replica fetcher from leader 0 was cancelled without a stop"]


class SilentLeader:
    """A TCP listener that never speaks HTTP/2: a stream call to it stays before its initial metadata (as
    one does for a moment on every new stream, while its channel connects)."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.server = self  # make_fetcher's teardown stops `leader.server`

    def stop(self, grace) -> None:
        self._socket.close()


def test_a_session_cancelled_before_its_stream_started_ends_its_exchange_at_once(make_fetcher):
    # grpc.aio leaves a write on a stream cancelled before its metadata went out waiting until the
    # deadline; the session must end the exchange itself, and hand the task back uncancelled.
    leader = SilentLeader()
    fetcher = make_fetcher(leader)  # only for its loop and teardown

    async def cancelled_exchange() -> tuple[str, int]:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{leader.port}")
        session = ReplicaFetchSession(channel, (), poll_s_max=0.5)
        exchange = asyncio.ensure_future(exchange_and_report(session))
        while not session.in_flight:
            await asyncio.sleep(0.001)
        session.cancel()
        try:
            return await asyncio.wait_for(exchange, 5)  # not the stream's 70 s deadline
        finally:
            await channel.close()

    assert on_loop(fetcher, cancelled_exchange()) == ("CancelledError", 0)


async def exchange_and_report(session: ReplicaFetchSession) -> tuple[str, int]:
    try:
        await session.exchange(request(0))
    except asyncio.CancelledError:
        return "CancelledError", asyncio.current_task().cancelling()
    return "answered", asyncio.current_task().cancelling()


def test_a_partition_added_while_the_stream_connects_is_fetched_on_a_new_stream(make_fetcher):
    leader = SilentLeader()
    fetcher = make_fetcher(leader)
    fetcher.start()
    fetcher.set_partitions([FollowedPartition(0)])
    first = wait_for_session(fetcher, lambda s: s is not None and s.in_flight)
    fetcher.set_partitions([FollowedPartition(0), FollowedPartition(1)])
    # The stuck exchange is interrupted at once and the next round goes out on a new stream.
    wait_for_session(fetcher, lambda s: s is not None and s is not first and s.in_flight)
    fetcher.stop().result(10)


def wait_for_session(fetcher: ReplicaFetcher, condition) -> ReplicaFetchSession:
    def matching() -> ReplicaFetchSession | None:
        session = on_loop(fetcher, current_session(fetcher))
        return session if condition(session) else None

    return wait_until(matching, 10, "a session matching the condition", 0.01)


async def current_session(fetcher: ReplicaFetcher) -> ReplicaFetchSession | None:
    return fetcher._session
