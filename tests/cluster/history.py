"""Writing and reading a whole topic, for history checks."""

from __future__ import annotations

import time

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1 import broker_pb2


def end_offsets(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high-water mark, from its leader."""
    md = ClusterMetadata(cluster.bootstrap)
    try:
        view = md.refresh([topic])
        out = {}
        for p in range(partitions):
            request = broker_pb2.ListOffsetsRequest()
            request.topics.add(topic=topic).partitions.add(partition=p, timestamp_ms=-1)
            answer = md.stub(view.brokers[view.topics[topic][p].leader]).ListOffsets(request, timeout=10)
            out[p] = answer.topics[0].partitions[0].offset
        return out
    finally:
        md.close()


def read_topic(
    cluster: LocalCluster, topic: str, partitions: int, timeout_s: float = 60
) -> list[tuple[int, int, bytes]]:
    """Every record of every partition from offset 0 up to its current high-water mark."""
    ends = end_offsets(cluster, topic, partitions)
    out: list[tuple[int, int, bytes]] = []
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                       max_poll_records=5000))
    try:
        consumer.assign([(topic, p) for p in range(partitions)])
        for p in range(partitions):
            consumer.seek((topic, p), 0)
        deadline = time.monotonic() + timeout_s
        positions = {p: 0 for p in range(partitions)}
        while any(positions[p] < ends[p] for p in positions):
            if time.monotonic() > deadline:
                raise AssertionError(f"read {positions} of {ends} before the deadline")
            for r in consumer.poll(0.5):
                out.append((r.partition, r.offset, r.value))
                positions[r.partition] = r.offset + 1
    finally:
        consumer.close()
    return out


def produce_history(producer: Producer, topic: str, count: int, start: int, acked: dict, errors: list,
                    keys: int = 20) -> None:
    """Queue `count` records b"v-%06d" (i from `start`, key b"k{i % keys}"); each acknowledgement lands in
    `acked` as (partition, offset) -> value, each final failure in `errors`."""
    for i in range(start, start + count):
        value = b"v-%06d" % i

        def done(error, meta, value=value):
            if error is None:
                acked[(meta.partition, meta.offset)] = value
            else:
                errors.append((value, error))

        producer.produce(topic, value, key=b"k%d" % (i % keys), on_delivery=done)
