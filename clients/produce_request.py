"""A ProduceRequest (broker.proto) written by hand from batches kept as pieces.

Building the request as messages copies every batch's records four times on the producer (into the
RecordBatch, out of it when serialized, into the ProduceRequest, out of it again), and a producer batch is
up to batch_size_bytes; here the pieces are joined once. The bytes are what
ProduceRequest.SerializeToString writes for the same fields (proto3: zero scalars left out, fields in
number order, every element of `batches` written even when empty); tests/proto/test_produce_request.py
holds the two equal. The broker reads the request with protobuf as usual.

Pure: pieces in, bytes out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kanal.v1.batch import varint

# (partition, [batch pieces, ...]): each batch is the pieces that join to its producer bytes
# (kanal.v1.batch.encode_batch_parts), or a one-element tuple of bytes.
PartitionBatches = tuple[int, Sequence[Sequence[bytes]]]

_TAG_ACKS = b"\x08"  # ProduceRequest.acks, field 1, varint
_TAG_TIMEOUT_MS = b"\x10"  # field 2, varint
_TAG_TOPIC_DATA = b"\x1a"  # field 3, length-delimited
_TAG_TOPIC_NAME = b"\x0a"  # TopicData.topic, field 1
_TAG_PARTITION_DATA = b"\x12"  # TopicData.partitions, field 2
_TAG_PARTITION = b"\x08"  # PartitionData.partition, field 1, varint
_TAG_BATCH = b"\x12"  # PartitionData.batches, field 2, length-delimited


def encode_produce_request(acks: int, timeout_ms: int,
                           topics: Iterable[tuple[str, Iterable[PartitionBatches]]]) -> bytes:
    """The serialized ProduceRequest for `topics`: (topic, [(partition, [batch pieces, ...]), ...])."""
    out: list[bytes] = []
    if acks:
        out += (_TAG_ACKS, varint(acks))
    if timeout_ms:
        out += (_TAG_TIMEOUT_MS, varint(timeout_ms))
    for topic, partitions in topics:
        name = topic.encode()
        topic_out: list[bytes] = [_TAG_TOPIC_NAME, varint(len(name)), name] if name else []
        topic_size = sum(map(len, topic_out))
        for partition, batches in partitions:
            partition_out: list[bytes] = [_TAG_PARTITION, varint(partition)] if partition else []
            for pieces in batches:
                partition_out += (_TAG_BATCH, varint(sum(map(len, pieces))), *pieces)
            size = sum(map(len, partition_out))
            prefix = varint(size)
            topic_out += (_TAG_PARTITION_DATA, prefix, *partition_out)
            topic_size += 1 + len(prefix) + size
        out += (_TAG_TOPIC_DATA, varint(topic_size), *topic_out)
    return b"".join(out)
