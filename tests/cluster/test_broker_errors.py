"""Bad input against a real broker: each gets a clear error, nothing is stored, and the broker keeps
serving."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.batch import NewRecord, build_batch, decode_records, iter_entries, parse_batch
from kanal.v1.error import ErrorCode, KanalError

from .conftest import broker_node, create_topic, partition_info, wait_until

pytestmark = pytest.mark.cluster


def batch(*values: bytes) -> bytes:
    return build_batch([NewRecord(v, timestamp_ms=int(time.time() * 1000)) for v in values])


def produce(node, topic: str, partition: int, batches: list[bytes], acks: int = 1):
    request = broker_pb2.ProduceRequest(acks=acks, timeout_ms=5000)
    request.topics.add(topic=topic).partitions.add(partition=partition, batches=batches)
    with grpc.insecure_channel(node.endpoint) as channel:
        return broker_pb2_grpc.BrokerStub(channel).Produce(request, timeout=10).topics[0].partitions[0]


def fetch(node, topic: str, partition: int, offset: int):
    request = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1 << 20)
    request.topics.add(topic=topic).partitions.add(
        partition=partition, fetch_offset=offset, max_bytes=1 << 20, current_leader_epoch=-1
    )
    with grpc.insecure_channel(node.endpoint) as channel:
        return broker_pb2_grpc.BrokerStub(channel).Fetch(request, timeout=10).topics[0].partitions[0]


@pytest.fixture(scope="module")
def topic(cluster):
    create_topic(cluster, "errors", partitions=1, replication_factor=3, max_message_bytes="2048")
    info = partition_info(cluster, "errors", 0)
    leader = broker_node(cluster, info.leader)
    assert produce(leader, "errors", 0, [batch(b"first", b"second")]).error == ErrorCode.NONE
    return "errors", info, leader


def log_end(leader, topic: str) -> int:
    return fetch(leader, topic, 0, 0).log_end_offset


def test_unknown_topic_and_partition(cluster, topic):
    name, _, leader = topic
    assert produce(leader, "no-such-topic", 0, [batch(b"x")]).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(leader, name, 7, [batch(b"x")]).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(leader, "no-such-topic", 0, 0).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_illegal_topic_names_are_invalid_topic_and_leave_the_clients_working(cluster, topic):
    """A name that can never be a topic is refused before it reaches the wire. It used to be remembered as
    a wanted topic first, so every later metadata refresh of that client failed (a TypeError for a
    non-str name, an encoding error for a lone surrogate), whatever topic it was for."""
    name, _, _ = topic
    bad_names = (123, None, "\ud800", "bad name!", "", "x" * 250, "__cluster_metadata")
    with Producer(
        ProducerConfig(bootstrap=cluster.bootstrap, acks="1", enable_idempotence=False)
    ) as producer:
        for bad in bad_names:
            with pytest.raises(KanalError) as err:
                producer.produce(bad, b"x")
            assert err.value.code == ErrorCode.INVALID_TOPIC, bad
        with pytest.raises(KanalError) as err:
            producer.produce("no-such-topic", b"x")
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert producer.produce(name, b"after bad names").result(30).topic == name
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest"))
    try:
        for bad in bad_names:
            with pytest.raises(KanalError) as err:
                consumer.assign([(bad, 0)])
            assert err.value.code == ErrorCode.INVALID_TOPIC, bad
        consumer.assign([(name, 0)])
        with Admin(cluster.bootstrap) as admin:
            for bad in bad_names:
                for call, args in ((admin.create_topic, (bad, 1, 1)), (admin.describe_topic, (bad,)),
                                   (admin.delete_topic, (bad,)), (admin.create_partitions, (bad, 2))):
                    with pytest.raises(KanalError) as err:
                        call(*args)
                    assert err.value.code == ErrorCode.INVALID_TOPIC, (call.__name__, bad)
            assert admin.describe_topic(name).name == name
        values: list[bytes] = []
        wait_until(lambda: values.extend(r.value for r in consumer.poll(0.2)) or b"after bad names" in values,
                   timeout_s=30, what="the record produced after the bad names")
    finally:
        consumer.close()


def test_bad_consumer_arguments_fail_at_the_call_and_the_fetcher_goes_on(cluster, topic):
    """A float partition was truncated to another partition, and a float, str or out-of-int64 seek offset
    was accepted and then ended the fetcher thread, after which poll() returned nothing for ever."""
    name, _, _ = topic
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest"))
    try:
        for bad in ((name, 0.0), (name, "0"), (name,), name):
            with pytest.raises(TypeError):
                consumer.assign([bad])
        assert consumer.assignment() == []
        consumer.assign([(name, 0)])
        for offset in (1.5, "1", None):
            with pytest.raises(TypeError, match="seek offset must be an int"):
                consumer.seek((name, 0), offset)
        for offset in (-1, 1 << 63):
            with pytest.raises(KanalError) as err:
                consumer.seek((name, 0), offset)
            assert err.value.code == ErrorCode.INVALID_REQUEST
        with pytest.raises(TypeError, match="timestamp_ms must be an int"):
            consumer.seek_to_timestamp((name, 0), "now")
        consumer.seek((name, 0), 1)
        got: list = []
        wait_until(lambda: got.extend(consumer.poll(0.2)) or got, timeout_s=30, what="records from offset 1")
        assert (got[0].offset, got[0].value) == (1, b"second")
        assert consumer._fetcher.is_alive()

        def broken_plan():
            raise RuntimeError("a bug in the fetcher")

        consumer._plan = broken_plan  # a fault in the fetcher thread must reach the caller, not go quiet
        consumer.seek((name, 0), 0)
        with pytest.raises(KanalError) as err:
            wait_until(
                lambda: consumer.poll(0.2) and False,
                timeout_s=30,
                what="poll() to raise the fetcher's failure",
            )
        assert err.value.code == ErrorCode.UNKNOWN_SERVER_ERROR and "a bug in the fetcher" in str(err.value)
    finally:
        consumer.close()


def test_subscribe_takes_a_list_of_legal_names(cluster, topic):
    """subscribe("orders") iterated the string and joined for topics o, r, d, e and s."""
    name, _, _ = topic
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, group_id="subscribe-args",
                                       auto_offset_reset="earliest", enable_auto_commit=False))
    try:
        with pytest.raises(TypeError, match=r"use \['errors'\]"):
            consumer.subscribe(name)
        for bad in ([5], ["bad name"], [name, ""]):
            with pytest.raises(KanalError) as err:
                consumer.subscribe(bad)
            assert err.value.code == ErrorCode.INVALID_TOPIC, bad
        consumer.subscribe(iter([name]))  # any iterable of names
        values: list[bytes] = []
        wait_until(lambda: values.extend(r.value for r in consumer.poll(0.2)) or b"first" in values,
                   timeout_s=60, what="the group consumer's first records")
        assert consumer.assignment() == [(name, 0)]
    finally:
        consumer.close()


def test_corrupt_crc_oversized_and_garbage_batches_store_nothing(cluster, topic):
    name, _, leader = topic
    before = log_end(leader, name)
    damaged = parse_batch(batch(b"payload"))
    damaged.crc ^= 1
    assert produce(leader, name, 0, [damaged.SerializeToString()]).error == ErrorCode.CORRUPT_MESSAGE
    assert produce(leader, name, 0, [batch(b"x" * 4000)]).error == ErrorCode.MESSAGE_TOO_LARGE
    assert produce(leader, name, 0, [b"\x00\xff not a batch"]).error == ErrorCode.CORRUPT_MESSAGE
    assert produce(leader, name, 0, []).error == ErrorCode.INVALID_REQUEST
    assert log_end(leader, name) == before
    assert produce(leader, name, 0, [batch(b"still serving")]).error == ErrorCode.NONE  # others still work
    assert log_end(leader, name) == before + 1


def test_a_refused_batch_keeps_the_batches_before_it_and_names_their_offsets(cluster, topic):
    """Several batches of a partition in one request are appended in order; when one is refused, the
    ones before it stay stored (the reply lists their base offsets) and nothing after it is stored."""
    name, _, leader = topic
    before = log_end(leader, name)
    damaged = parse_batch(batch(b"damaged"))
    damaged.crc ^= 1
    result = produce(
        leader, name, 0, [batch(b"a1", b"a2"), batch(b"b"), damaged.SerializeToString(), batch(b"d")], acks=-1
    )
    assert result.error == ErrorCode.CORRUPT_MESSAGE
    assert list(result.batch_base_offsets) == [before, before + 2] and result.base_offset == before
    assert log_end(leader, name) == before + 3
    ok = produce(leader, name, 0, [batch(b"e"), batch(b"f1", b"f2")])
    assert ok.error == ErrorCode.NONE and list(ok.batch_base_offsets) == [before + 3, before + 4]
    refused_first = produce(leader, name, 0, [damaged.SerializeToString(), batch(b"g")])
    assert refused_first.error == ErrorCode.CORRUPT_MESSAGE and list(refused_first.batch_base_offsets) == []
    assert log_end(leader, name) == before + 6


def test_idempotent_batches_in_one_request_are_stored_once(cluster, topic):
    name, _, leader = topic
    with grpc.insecure_channel(leader.endpoint) as channel:
        ids = broker_pb2_grpc.BrokerStub(channel).InitProducerId(
            broker_pb2.InitProducerIdRequest(), timeout=10
        )
    now = int(time.time() * 1000)

    def seq_batch(sequence: int, *values: bytes) -> bytes:
        return build_batch([NewRecord(v, timestamp_ms=now) for v in values], producer_id=ids.producer_id,
                           producer_epoch=ids.producer_epoch, base_sequence=sequence)

    before = log_end(leader, name)
    batches = [seq_batch(0, b"s0", b"s1"), seq_batch(2, b"s2"), seq_batch(3, b"s3", b"s4", b"s5")]
    first = produce(leader, name, 0, batches, acks=-1)
    assert first.error == ErrorCode.NONE and list(first.batch_base_offsets) == [
        before,
        before + 2,
        before + 3,
    ]
    # The same request again (a retry after a lost reply), then with a new batch behind the duplicates.
    again = produce(leader, name, 0, batches, acks=-1)
    assert list(again.batch_base_offsets) == list(first.batch_base_offsets)
    more = produce(leader, name, 0, [*batches[1:], seq_batch(6, b"s6")], acks=-1)
    assert more.error == ErrorCode.NONE and list(more.batch_base_offsets) == [
        before + 2,
        before + 3,
        before + 6,
    ]
    assert log_end(leader, name) == before + 7
    gap = produce(leader, name, 0, [seq_batch(7, b"s7"), seq_batch(9, b"s9")], acks=-1)  # 8 is missing
    assert gap.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and list(gap.batch_base_offsets) == [
        before + 7
    ]
    assert log_end(leader, name) == before + 8


def test_a_duplicate_idempotent_batch_answers_none_with_the_original_offsets(cluster, topic):
    """The contract (broker.proto ProduceResponse, errors.proto DUPLICATE_SEQUENCE_NUMBER): a retry of a
    stored idempotent batch is answered NONE, not DUPLICATE_SEQUENCE_NUMBER, with the original batch's base
    offset, and nothing new is stored: a client treats the retried batch as stored at those offsets."""
    name, _, leader = topic
    with grpc.insecure_channel(leader.endpoint) as channel:
        ids = broker_pb2_grpc.BrokerStub(channel).InitProducerId(
            broker_pb2.InitProducerIdRequest(), timeout=10
        )
    assert ids.error == ErrorCode.NONE and ids.producer_id > 0
    now = int(time.time() * 1000)
    original = build_batch([NewRecord(b"dup-%d" % i, timestamp_ms=now) for i in range(3)],
                           producer_id=ids.producer_id, producer_epoch=ids.producer_epoch, base_sequence=0)
    stored = produce(leader, name, 0, [original], acks=-1)
    assert stored.error == ErrorCode.NONE
    end = log_end(leader, name)
    assert end == stored.base_offset + 3
    for acks in (-1, 1):
        again = produce(leader, name, 0, [original], acks=acks)
        assert (again.error, again.error_message) == (ErrorCode.NONE, "")
        assert again.base_offset == stored.base_offset and list(again.batch_base_offsets) == [
            stored.base_offset
        ]
        assert log_end(leader, name) == end
    read = fetch(leader, name, 0, stored.base_offset)
    values = [r.value for e in iter_entries(read.records) for r in decode_records(parse_batch(e.batch))]
    assert values == [b"dup-0", b"dup-1", b"dup-2"]


def test_produce_to_a_follower_names_the_leader(cluster, topic):
    name, info, leader = topic
    follower = broker_node(cluster, next(b for b in info.replicas if b != info.leader))
    result = produce(follower, name, 0, [batch(b"x")])
    assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert result.current_leader == info.leader and result.current_leader_endpoint == leader.endpoint


def test_fetch_outside_the_log_is_offset_out_of_range(cluster, topic):
    name, _, leader = topic
    end = log_end(leader, name)
    assert fetch(leader, name, 0, end + 100).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch(leader, name, 0, -5).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch(leader, name, 0, end).error == ErrorCode.NONE  # at the end: no data, no error


def test_malformed_request_is_refused_as_a_whole(cluster, topic):
    name, _, leader = topic
    request = broker_pb2.ProduceRequest(acks=5, timeout_ms=1000)
    request.topics.add(topic=name).partitions.add(partition=0, batches=[batch(b"x")])
    with grpc.insecure_channel(leader.endpoint) as channel, pytest.raises(grpc.RpcError) as err:
        broker_pb2_grpc.BrokerStub(channel).Produce(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.value.trailing_metadata())["kanal-error-code"] == str(ErrorCode.INVALID_REQUIRED_ACKS)
    with grpc.insecure_channel(leader.endpoint) as channel:  # bytes that are no ProduceRequest at all
        call = channel.unary_unary("/kanal.v1.Broker/Produce")
        with pytest.raises(grpc.RpcError):
            call(b"\xff\xff\xff\xff", timeout=10)
    assert produce(leader, name, 0, [batch(b"after")]).error == ErrorCode.NONE


def test_deleting_a_topic_removes_its_files_on_every_replica(cluster):
    create_topic(cluster, "doomed", partitions=2, replication_factor=3)
    dirs = [
        Path(cluster.data_dir) / f"broker-{b.node_id}" / f"doomed-{p}"
        for b in cluster.brokers
        for p in range(2)
    ]
    wait_until(lambda: all(d.is_dir() for d in dirs), 30, "every replica's directory")
    with Admin(cluster.bootstrap) as admin:
        admin.delete_topic("doomed")
    wait_until(lambda: not any(d.exists() for d in dirs), 30, "the replicas' directories to go")


def test_metrics_endpoint_has_kafka_like_names(cluster, topic):
    fetch(cluster.brokers[0], topic[0], 0, 0)  # labelled series appear once a request was served
    text = (
        urllib.request.urlopen(f"http://{cluster.brokers[0].extra['metrics']}/metrics", timeout=5)
        .read()
        .decode()
    )
    for name in ("kanal_replica_manager_under_replicated_partitions", "kanal_offline_partitions_count",
                 "kanal_replica_manager_isr_shrinks_total", "kanal_replica_manager_isr_expands_total",
                 "kanal_network_requests_total", "kanal_network_request_latency_seconds_bucket",
                 "kanal_broker_topic_bytes_in_total", "kanal_broker_topic_bytes_out_total"):
        assert name in text, name
