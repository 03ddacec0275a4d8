"""Tiered storage on a live cluster (issue 44): closed segments of a topic with remote.storage.enable go to
remote storage, local segments beyond local retention go from the brokers' disks once uploaded and
recorded, and a consumer from offset 0 still reads every acknowledged record, byte for byte. A replica a
reassignment adds starts at the leader's local log start with the remote part's leader epochs, copying
nothing below it.

Remote storage is real, and every test runs twice: against an S3 bucket on a moto server process, and
against a directory (`file://`)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from kanal.broker.storage.remote_storage import RemoteStorage, open_remote_storage
from kanal.clients.admin import Admin
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode
from tests.harness import kafka_java

from .conftest import (
    BROKER_FLAGS,
    CONTROLLER_FLAGS,
    check_history,
    create_topic,
    librdkafka_read_from_zero,
    partition_info,
    wait_until,
)
from .history import produce_history

pytestmark = pytest.mark.cluster

TIERED = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "32768"}
# Orphan sweeps every second, of objects no record names once 2 s old (defaults: 10 min each).
ORPHAN_FLAGS = ["--remote-orphan-check-interval-ms", "1000", "--remote-orphan-grace-ms", "2000"]


@dataclass
class Tiered:
    """A cluster whose brokers keep tiered segments in `storage` (an S3 bucket on a moto server, or a
    directory); the test reads the store through the same interface the brokers use."""

    cluster: LocalCluster
    storage: RemoteStorage
    kind: str


@pytest.fixture(scope="module", params=["s3", "file"])
def tiered(request, tmp_path_factory) -> Iterator[Tiered]:
    root = tmp_path_factory.mktemp(f"tiered-{request.param}")
    if request.param == "s3":
        moto = request.getfixturevalue("moto_s3")
        url = f"s3://{moto.bucket}/{root.name}"
        options = {"endpoint": moto.endpoint, "region": moto.region, "access_key_id": moto.access_key_id,
                   "secret_access_key": moto.secret_access_key}
        flags = ["--remote-storage", url, "--remote-storage-endpoint", moto.endpoint,
                 "--remote-storage-region", moto.region, "--remote-storage-access-key-id", moto.access_key_id,
                 "--remote-storage-secret-access-key", moto.secret_access_key]
    else:
        directory = root / "remote-storage"
        directory.mkdir()
        url, options, flags = directory.as_uri(), {}, ["--remote-storage", directory.as_uri()]
    c = LocalCluster(root / "cluster", controllers=1, brokers=3, controller_flags=CONTROLLER_FLAGS,
                     broker_flags=[*BROKER_FLAGS, *ORPHAN_FLAGS, *flags], kafka_listeners=True)
    c.start(timeout_s=90)
    yield Tiered(c, open_remote_storage(url, **options), request.param)
    c.stop()


def produce(cluster: LocalCluster, topic: str, count: int, start: int, acked: dict) -> None:
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", enable_idempotence=True,
                                       linger_ms=2, batch_size_bytes=4096, request_timeout_ms=5000,
                                       delivery_timeout_ms=60_000))
    errors: list = []
    try:
        produce_history(producer, topic, count, start, acked, errors)
        assert producer.flush(60), "records still unacknowledged after 60 s"
    finally:
        producer.close()
    assert not errors, errors[:3]


def local_bases(cluster: LocalCluster, broker: int, topic: str) -> list[int]:
    directory = cluster.data_dir / f"broker-{broker}" / f"{topic}-0"
    return sorted(int(p.name[:-4]) for p in directory.glob("*.log"))


def remote_keys(storage: RemoteStorage) -> list[str]:
    return sorted(info.key for info in storage.list(""))


def topic_objects(storage: RemoteStorage, topic_id: str) -> list[str]:
    """The keys of a topic's objects: <cluster id>/<topic id>/<partition>/... (not staging ones)."""
    return sorted(info.key for info in storage.list("") if info.key.split("/")[1:2] == [topic_id])


def segment_range(key: str) -> tuple[int, int]:
    base, end, _ = key.rpartition("/")[2].split("-", 2)
    return int(base), int(end)


def topic_id_of(cluster: LocalCluster, topic: str) -> str:
    with Admin(cluster.bootstrap) as admin:
        return admin.describe_topic(topic).topic_id


def read_from_zero(cluster: LocalCluster, topic: str, count: int, **config) -> list[tuple[int, int, bytes]]:
    return read_until(cluster, topic, lambda read: len(read) >= count, f"{count} records", **config)


def read_until(cluster: LocalCluster, topic: str, done, what: str, **config) -> list[tuple[int, int, bytes]]:
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                       max_poll_records=5000, **config))
    read: list[tuple[int, int, bytes]] = []
    try:
        consumer.assign([(topic, 0)])
        deadline = time.monotonic() + 60
        while not done(read):
            assert time.monotonic() < deadline, f"read {len(read)} records, not {what}"
            read.extend((r.partition, r.offset, r.value) for r in consumer.poll(0.5))
    finally:
        consumer.close()
    return read


def test_closed_segments_go_to_remote_storage_and_a_consumer_still_reads_everything(tiered) -> None:
    cluster = tiered.cluster
    create_topic(cluster, "tiered-read", partitions=1, replication_factor=3, **TIERED)
    acked: dict = {}
    produce(cluster, "tiered-read", 4000, 0, acked)
    leader = partition_info(cluster, "tiered-read", 0).leader
    # Every broker drops the local segments remote storage holds, beyond local.retention.bytes.
    wait_until(lambda: all(local_bases(cluster, b, "tiered-read")[0] > 0 for b in range(3)), 60,
               "every replica to drop its oldest local segments")
    names = remote_keys(tiered.storage)
    assert any(n.endswith(".log") for n in names) and any(n.endswith(".meta") for n in names), names
    # <cluster id>/<topic id>/<partition>/<base>-<end>-e<leader epoch>.log|.meta
    assert all(re.fullmatch(r"[^/]+/[^/]+/0/\d{20}-\d{20}-e\d+\.(log|meta)", n) for n in names), names
    first_local = local_bases(cluster, leader, "tiered-read")[0]
    assert first_local > 0
    read = read_from_zero(cluster, "tiered-read", 4000)
    check_history(acked, read)
    assert read[0][1] == 0, "the consumer did not start at offset 0, below the local log start"


def test_read_committed_from_remote_segments_skips_aborted_transactions(tiered) -> None:
    cluster = tiered.cluster
    create_topic(cluster, "tiered-txn", partitions=1, replication_factor=3, **TIERED)
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, transactional_id=f"tt-{tiered.kind}",
                                       linger_ms=2, batch_size_bytes=4096))
    committed: list[bytes] = []
    try:
        producer.init_transactions()
        for t in range(40):
            producer.begin_transaction()
            values = [b"t%03d-%03d" % (t, i) + b"." * 100 for i in range(50)]
            for value in values:
                producer.produce("tiered-txn", value)
            if t % 3 == 1:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
                committed += values
    finally:
        producer.close()
    leader = partition_info(cluster, "tiered-txn", 0).leader
    wait_until(lambda: local_bases(cluster, leader, "tiered-txn")[0] > 0, 60, "local segments to go")
    read = read_from_zero(cluster, "tiered-txn", len(committed), isolation_level="read_committed")
    assert [value for _, _, value in read] == committed


def test_list_offsets_by_timestamp_finds_records_in_remote_segments(tiered) -> None:
    cluster = tiered.cluster
    create_topic(cluster, "tiered-time", partitions=1, replication_factor=3, **TIERED)
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", linger_ms=2,
                                       batch_size_bytes=4096))
    base_ms = int(time.time() * 1000) - 3_600_000  # an hour ago: within retention.ms (7 days)
    try:
        for i in range(3000):  # record i has timestamp base + 10 * i: offset i is the first at or after it
            producer.produce("tiered-time", b"%05d" % i + b"." * 60, timestamp=base_ms + 10 * i)
        assert producer.flush(60)
    finally:
        producer.close()
    leader = partition_info(cluster, "tiered-time", 0).leader
    wait_until(lambda: local_bases(cluster, leader, "tiered-time")[0] > 1000, 60, "local segments to go")
    first_local = local_bases(cluster, leader, "tiered-time")[0]
    md = ClusterMetadata(cluster.bootstrap)
    try:
        endpoint = md.refresh(["tiered-time"]).brokers[leader]
        for offset in (0, 7, 555, first_local - 1, first_local, 2999):
            request = broker_pb2.ListOffsetsRequest()
            request.topics.add(topic="tiered-time").partitions.add(partition=0,
                                                                  timestamp_ms=base_ms + 10 * offset - 5)
            answer = md.stub(endpoint).ListOffsets(request, timeout=30).topics[0].partitions[0]
            assert (answer.error, answer.offset, answer.timestamp_ms) == (0, offset, base_ms + 10 * offset)
    finally:
        md.close()


def test_a_kafka_client_reads_remote_segments_through_the_kafka_listener(tiered) -> None:
    cluster = tiered.cluster
    create_topic(cluster, "tiered-kafka", partitions=1, replication_factor=3, **TIERED)
    acked: dict = {}
    produce(cluster, "tiered-kafka", 4000, 0, acked)
    leader = partition_info(cluster, "tiered-kafka", 0).leader
    wait_until(lambda: local_bases(cluster, leader, "tiered-kafka")[0] > 0, 60, "local segments to go")
    read = librdkafka_read_from_zero(cluster.kafka_bootstrap, "tiered-kafka", 4000,
                                     {"group.id": f"tk-{tiered.kind}", "auto.offset.reset": "earliest"})
    check_history(acked, read)


def leader_offset(cluster: LocalCluster, topic: str, timestamp_ms: int) -> int:
    """The partition leader's ListOffsets answer (gRPC) for one special timestamp."""
    md = ClusterMetadata(cluster.bootstrap)
    try:
        endpoint = md.refresh([topic]).brokers[partition_info(cluster, topic, 0).leader]
        request = broker_pb2.ListOffsetsRequest()
        request.topics.add(topic=topic).partitions.add(partition=0, timestamp_ms=timestamp_ms)
        answer = md.stub(endpoint).ListOffsets(request, timeout=30).topics[0].partitions[0]
        assert answer.error == ErrorCode.NONE, answer
        return answer.offset
    finally:
        md.close()


def test_kafkas_get_offsets_tool_sees_the_remote_start_the_local_start_and_the_last_tiered_offset(tiered):
    """Apache Kafka's kafka-get-offsets (AdminClient.listOffsets: OffsetSpec earliest, earliestLocal over
    ListOffsets v8, latestTiered over v9) through the Kafka listener. Uploads and local retention may still
    move both answers, which only grow: each is bracketed by the leader's gRPC answers before and after."""
    cluster = tiered.cluster
    create_topic(cluster, "tiered-offsets", partitions=1, replication_factor=3, **TIERED)
    produce(cluster, "tiered-offsets", 3000, 0, {})
    leader = partition_info(cluster, "tiered-offsets", 0).leader
    wait_until(lambda: local_bases(cluster, leader, "tiered-offsets")[0] > 0, 60, "local segments to go")

    def kafka_offset(time_spec: str) -> int:
        out = kafka_java.tool(kafka_java.GET_OFFSETS, "--bootstrap-server", cluster.kafka_bootstrap,
                              "--topic", "tiered-offsets", "--time", time_spec)
        (line,) = out.split()
        topic, partition, offset = line.rsplit(":", 2)
        assert (topic, partition) == ("tiered-offsets", "0"), out
        return int(offset)

    assert kafka_offset("earliest") == 0  # the remote log's start
    assert kafka_offset("latest") == 3000
    for spec, timestamp_ms in (("earliest-local", -4), ("latest-tiered", -5)):
        before = leader_offset(cluster, "tiered-offsets", timestamp_ms)
        got = kafka_offset(spec)
        after = leader_offset(cluster, "tiered-offsets", timestamp_ms)
        assert 0 < before <= got <= after < 3000, (spec, before, got, after)


def epoch_checkpoint(cluster: LocalCluster, broker: int, topic: str) -> list[tuple[int, int]]:
    """The (leader epoch, start offset) entries of a replica's leader-epoch-checkpoint file."""
    path = cluster.data_dir / f"broker-{broker}" / f"{topic}-0" / "leader-epoch-checkpoint"
    lines = path.read_text().split()
    count = int(lines[1])
    return [(int(lines[2 + 2 * i]), int(lines[3 + 2 * i])) for i in range(count)]


def reassign(cluster: LocalCluster, topic: str, replicas: tuple[int, ...], what: str) -> None:
    """Move the partition to `replicas` and wait until the reassignment has finished and they are the ISR."""
    with Admin(cluster.bootstrap) as admin:
        (result,) = admin.alter_partition_reassignments({(topic, 0): replicas})
        assert result.error == ErrorCode.NONE, result.error_message

        def done():
            info = partition_info(cluster, topic, 0)
            return (sorted(info.replicas) == sorted(replicas) and sorted(info.isr) == sorted(replicas)
                    and info.leader in replicas and not admin.list_partition_reassignments())
        wait_until(done, 60, what)


def test_a_replica_added_by_reassignment_starts_at_the_local_start_with_the_remote_epochs(tiered) -> None:
    cluster = tiered.cluster
    topic = "tiered-join"
    create_topic(cluster, topic, partitions=1, replication_factor=2, **TIERED)
    if sorted(partition_info(cluster, topic, 0).replicas) != [0, 1]:
        reassign(cluster, topic, (0, 1), "the empty topic to move to brokers 0 and 1")
    acked: dict = {}
    produce(cluster, topic, 3000, 0, acked)
    wait_until(lambda: all(local_bases(cluster, b, topic)[0] > 0 for b in (0, 1)), 60,
               "both replicas to drop their oldest local segments")
    leader = partition_info(cluster, topic, 0).leader
    reassign(cluster, topic, (0, 1, 2), "broker 2 to join the ISR")
    bases = local_bases(cluster, 2, topic)
    assert bases[0] > 0, f"broker 2 copied the log from offset 0: {bases}"
    # About local.retention.bytes (32 KiB in 16 KiB segments) and the active segment: never the whole log.
    assert len(bases) <= len(local_bases(cluster, leader, topic)) + 1, bases
    # Its leader epochs reach below its local start (from the remote segments), as the leader's do.
    epochs = epoch_checkpoint(cluster, 2, topic)
    assert epochs and epochs[0][1] < bases[0], epochs
    assert epochs == epoch_checkpoint(cluster, leader, topic)
    # The old replicas go: broker 2 alone serves the whole log, remote part included.
    reassign(cluster, topic, (2,), "broker 2 to be the only replica")
    read = read_from_zero(cluster, topic, 3000)
    check_history(acked, read)
    assert read[0][1] == 0


def test_remote_retention_moves_the_log_start_and_deletes_the_dropped_segments(tiered) -> None:
    cluster, remote = tiered.cluster, tiered.storage
    topic = "tiered-retention"
    create_topic(cluster, topic, partitions=1, replication_factor=3,
                 **{**TIERED, "local.retention.bytes": "16384", "retention.bytes": "40000"})
    acked: dict = {}
    produce(cluster, topic, 4000, 0, acked)
    topic_id = topic_id_of(cluster, topic)
    end = max(offset for _, offset in acked) + 1

    def retained() -> int | None:
        """The log start once retention moved it and the objects below it are gone; else None."""
        with Admin(cluster.bootstrap) as admin:
            start = admin.log_bounds(topic, [0])[0][0]
        ranges = [segment_range(p) for p in topic_objects(remote, topic_id)]
        if start == 0 or not ranges or min(base for base, _ in ranges) != start:
            return None
        return start if all(stop > start for _, stop in ranges) else None

    start = wait_until(retained, 60, "remote retention to move the log start and delete what it dropped",
                       interval_s=0.5)
    assert start is not None and 0 < start < end
    read = read_until(cluster, topic, lambda r: bool(r) and r[-1][1] >= end - 1, f"up to offset {end - 1}")
    assert read[0][1] >= start, f"a consumer from earliest read offset {read[0][1]}, below the start {start}"
    assert read[0][1] < end - 1000, "the consumer did not start near the log start"
    check_history({k: v for k, v in acked.items() if k[1] >= read[0][1]}, read)


def uploaded_topic(cluster: LocalCluster, remote: RemoteStorage, topic: str) -> tuple[str, list[str]]:
    """Create a tiered topic, produce 2000 records, and wait for its first objects: its id and them."""
    create_topic(cluster, topic, partitions=1, replication_factor=3, **TIERED)
    produce(cluster, topic, 2000, 0, {})
    topic_id = topic_id_of(cluster, topic)
    return topic_id, wait_until(lambda: topic_objects(remote, topic_id), 60, f"objects of {topic} in storage")


def test_deleting_a_tiered_topic_deletes_its_remote_objects(tiered) -> None:
    cluster, remote = tiered.cluster, tiered.storage
    topic = "tiered-deleted"
    topic_id, _ = uploaded_topic(cluster, remote, topic)
    with Admin(cluster.bootstrap) as admin:
        admin.delete_topic(topic)
    wait_until(lambda: not topic_objects(remote, topic_id), 30, "the deleted topic's objects to go")


def test_an_orphan_object_is_removed_after_the_grace_period(tiered) -> None:
    cluster, remote = tiered.cluster, tiered.storage
    _, uploaded = uploaded_topic(cluster, remote, "tiered-orphans")
    recorded = [key for key in uploaded if key.endswith(".log")]  # a .meta may still be on its way
    directory = recorded[0].rpartition("/")[0]
    # An upload no record names (a deposed leader's), and a key of no segment at all.
    orphans = [f"{directory}/{10**9:020d}-{10**9 + 5:020d}-e99.log", f"{directory}/stray.bin"]
    for orphan in orphans:
        remote.put_if_absent(orphan, b"orphan")
    present = lambda: {info.key for info in remote.list(directory + "/")}
    wait_until(lambda: not set(orphans) & present(), 30, "the orphans to be removed")
    assert set(recorded) <= present(), "the sweep removed an object a record names"
