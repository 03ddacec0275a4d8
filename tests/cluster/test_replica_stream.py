"""ReplicaFetch, the followers' fetch stream (broker/replica_stream.py), called with the generated stubs as
a client written from the .proto files would: answers pair with requests in order, with Fetch's rules
(long poll, the follower's broker epoch checked on every request), and a consumer's request on it is
refused. Replication itself runs on it in every cluster test (tests/cluster/test_replication.py)."""

from __future__ import annotations

import queue
import time

import grpc
import pytest

from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.batch import NewRecord, build_batch
from kanal.v1.error import ErrorCode

from .conftest import broker_node, create_topic, partition_info, resume_brokers, wait_until

pytestmark = pytest.mark.cluster


def batch(value: bytes) -> bytes:
    return build_batch([NewRecord(value, timestamp_ms=int(time.time() * 1000))])


def produce(stub, topic: str, value: bytes) -> broker_pb2.ProduceResponse.PartitionResult:
    request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=10000)
    request.topics.add(topic=topic).partitions.add(partition=0, batches=[batch(value)])
    return stub.Produce(request, timeout=20).topics[0].partitions[0]


def fetch_request(topic: str, offset: int, *, max_wait_ms: int = 0, **fields) -> broker_pb2.FetchRequest:
    request = broker_pb2.FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, **fields)
    request.topics.add(topic=topic).partitions.add(partition=0, fetch_offset=offset, max_bytes=1 << 20,
                                                   current_leader_epoch=-1, last_fetched_epoch=-1)
    return request


class Stream:
    """One ReplicaFetch stream: `send` a request, `answer` the next reply."""

    def __init__(self, stub: broker_pb2_grpc.BrokerStub) -> None:
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self.call = stub.ReplicaFetch(iter(self._requests.get, None), timeout=60)

    def send(self, request: broker_pb2.FetchRequest) -> None:
        self._requests.put(request)

    def answer(self) -> broker_pb2.FetchResponse.PartitionData:
        return next(self.call).topics[0].partitions[0]

    def close(self) -> None:
        self._requests.put(None)
        self.call.cancel()


@pytest.fixture
def leader(cluster):
    """(stub of the leader of a new RF=3 topic 'stream-N', the topic, its partition info, broker epochs)."""
    leader.count = getattr(leader, "count", 0) + 1
    topic = f"stream-{leader.count}"
    create_topic(cluster, topic, partitions=1, replication_factor=3, min_insync_replicas="2")
    info = partition_info(cluster, topic, 0)
    channel = grpc.insecure_channel(broker_node(cluster, info.leader).endpoint)
    stub = broker_pb2_grpc.BrokerStub(channel)
    epochs = {
        b.broker_id: b.broker_epoch for b in stub.Metadata(broker_pb2.MetadataRequest(), timeout=10).brokers
    }
    yield stub, topic, info, epochs
    channel.close()


def test_answers_come_in_request_order_and_a_request_long_polls(leader):
    stub, topic, info, epochs = leader
    follower = next(b for b in info.replicas if b != info.leader)
    assert produce(stub, topic, b"first").error == ErrorCode.NONE
    stream = Stream(stub)
    try:
        ident = {"replica_id": follower, "replica_epoch": epochs[follower]}
        stream.send(fetch_request(topic, 0, **ident))
        first = stream.answer()
        assert first.error == ErrorCode.NONE and first.records and first.log_end_offset == 1
        # The next request on the same stream parks at the log end until a produce appends.
        stream.send(fetch_request(topic, 1, max_wait_ms=10000, **ident))
        assert produce(stub, topic, b"second").error == ErrorCode.NONE
        second = stream.answer()
        assert second.error == ErrorCode.NONE and second.records and second.log_end_offset == 2
    finally:
        stream.close()


def test_a_forged_broker_epoch_ends_the_stream_and_counts_for_nothing(cluster, leader):
    """Each request's replica_epoch is checked, as on Fetch: a forged one ends the stream with
    STALE_BROKER_EPOCH and moves no follower's progress, so an acks=all write whose real followers
    sleep is not acknowledged."""
    stub, topic, info, epochs = leader
    followers = [broker_node(cluster, b) for b in info.replicas if b != info.leader]
    for node in followers:
        node.pause()
    try:
        request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=1000)
        request.topics.add(topic=topic).partitions.add(partition=0, batches=[batch(b"x")])
        acked = stub.Produce.future(request, timeout=20)
        for node in followers:
            stream = Stream(stub)
            try:
                stream.send(
                    fetch_request(topic, 1, replica_id=node.node_id, replica_epoch=epochs[node.node_id] + 1)
                )
                with pytest.raises(grpc.RpcError) as err:
                    stream.answer()
                assert dict(err.value.trailing_metadata())["kanal-error-code"] == str(
                    ErrorCode.STALE_BROKER_EPOCH
                )
            finally:
                stream.close()
        result = acked.result().topics[0].partitions[0]
        assert result.error != ErrorCode.NONE and not result.batch_base_offsets
    finally:
        resume_brokers(cluster, followers)
    wait_until(
        lambda: stub.Fetch(fetch_request(topic, 0), timeout=10).topics[0].partitions[0].high_watermark == 1,
        30,
        "the real followers to replicate the record",
    )


def test_a_consumers_request_on_the_stream_is_invalid(leader):
    stub, topic, _, _ = leader
    stream = Stream(stub)
    try:
        stream.send(fetch_request(topic, 0))  # no replica_id: a consumer's
        with pytest.raises(grpc.RpcError) as err:
            stream.answer()
        assert dict(err.value.trailing_metadata())["kanal-error-code"] == str(ErrorCode.INVALID_REQUEST)
    finally:
        stream.close()
