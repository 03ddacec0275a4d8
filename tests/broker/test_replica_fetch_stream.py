"""The follower's side of ReplicaFetch (broker/replica_stream.py, ReplicaFetcher._fetch) against small
gRPC servers of the test's own on 127.0.0.1: fetches go on one stream, in order; a stream is replaced
only between exchanges once it is old; a leader without the method (UNIMPLEMENTED, an older broker in a
rolling upgrade) is fetched from with unary Fetch."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest

from kanal.broker.config import BrokerConfig
from kanal.broker.replica_fetcher import ReplicaFetcher
from kanal.v1 import broker_pb2


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
    made = []

    def make(leader: FakeLeader) -> ReplicaFetcher:
        config = BrokerConfig(
            broker_id=1, listen="127.0.0.1:1", controllers=("127.0.0.1:2",), data_dir=tmp_path
        )
        fetcher = ReplicaFetcher(None, 0, f"127.0.0.1:{leader.port}", config, lambda: 7)  # type: ignore[arg-type]
        made.append((fetcher, leader))
        return fetcher

    yield make
    for fetcher, leader in made:
        fetcher._end_session()  # the fetcher's thread was never started: its channel is closed here
        fetcher._channel.close()
        leader.server.stop(0)


def request(offset: int) -> broker_pb2.FetchRequest:
    out = broker_pb2.FetchRequest(replica_id=1, replica_epoch=7, max_wait_ms=0, min_bytes=1)
    out.topics.add(topic="t").partitions.add(partition=0, fetch_offset=offset)
    return out


def offsets(fetcher: ReplicaFetcher, count: int) -> list[int]:
    return [
        fetcher._fetch(fetcher._stub, request(i)).topics[0].partitions[0].log_end_offset for i in range(count)
    ]


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
    assert leader.unary_calls == 5 and not fetcher._streaming
