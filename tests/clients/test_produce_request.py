"""The hand-written ProduceRequest (kanal.clients.produce_request) is byte for byte what protobuf writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kanal.clients.produce_request import encode_produce_request
from kanal.v1 import broker_pb2

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
# A batch as the pieces that join to it: the encoder must frame their joined length.
BATCH = st.lists(st.binary(max_size=200), min_size=1, max_size=3).map(tuple)
PARTITIONS = st.lists(st.tuples(st.one_of(st.just(0), INT32), st.lists(BATCH, max_size=3)), max_size=4)
TOPICS = st.lists(st.tuples(st.one_of(st.just(""), st.text(max_size=12)), PARTITIONS), max_size=4)


@settings(max_examples=300, deadline=None)
@given(acks=st.sampled_from([0, 1, -1]), timeout_ms=st.one_of(st.just(0), INT32), topics=TOPICS)
def test_hand_written_request_is_what_protobuf_writes(acks, timeout_ms, topics):
    expected = broker_pb2.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
    for name, partitions in topics:
        topic = expected.topics.add(topic=name)
        for partition, batches in partitions:
            topic.partitions.add(partition=partition, batches=[b"".join(pieces) for pieces in batches])
    assert encode_produce_request(acks, timeout_ms, topics) == expected.SerializeToString()


def test_large_batches_round_trip_through_protobuf():
    # Lengths past the one- and two-byte varints, as real batches (up to batch_size_bytes) have.
    big = (b"h" * 3, b"r" * 700_000, b"t" * 9)
    data = encode_produce_request(-1, 30_000, [("orders", [(5, [big, (b"x" * 20_000,)])]), ("é", [(0, [])])])
    request = broker_pb2.ProduceRequest.FromString(data)
    assert (request.acks, request.timeout_ms) == (-1, 30_000)
    assert [t.topic for t in request.topics] == ["orders", "é"]
    assert request.topics[0].partitions[0].partition == 5
    assert list(request.topics[0].partitions[0].batches) == [b"".join(big), b"x" * 20_000]
    assert list(request.topics[1].partitions[0].batches) == []
