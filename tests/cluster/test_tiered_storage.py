"""Tiered storage on a live cluster (issue 44): closed segments of a topic with remote.storage.enable go to
remote storage, local segments beyond local retention go from the brokers' disks once uploaded and
recorded, and a consumer from offset 0 still reads every acknowledged record, byte for byte.

Remote storage is real: a directory (`file://`) here; the S3 variant runs against a moto server process."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.deploy.local_cluster import LocalCluster

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, check_history, create_topic, partition_info, wait_until
from .history import produce_history

pytestmark = pytest.mark.cluster

TIERED = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "32768"}
# Orphan sweeps every second, of objects no record names once 2 s old (defaults: 10 min each).
ORPHAN_FLAGS = ["--remote-orphan-check-interval-ms", "1000", "--remote-orphan-grace-ms", "2000"]


@pytest.fixture(scope="module")
def tiered(tmp_path_factory) -> Iterator[tuple[LocalCluster, Path]]:
    root = tmp_path_factory.mktemp("tiered")
    remote = root / "remote-storage"
    remote.mkdir()
    c = LocalCluster(root / "cluster", controllers=1, brokers=3, controller_flags=CONTROLLER_FLAGS,
                     broker_flags=[*BROKER_FLAGS, *ORPHAN_FLAGS, "--remote-storage", remote.as_uri()])
    c.start(timeout_s=90)
    yield c, remote
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


def remote_objects(remote: Path) -> list[Path]:
    return sorted(p for p in remote.rglob("*") if p.is_file() and not p.name.endswith(".tmp"))


def topic_objects(remote: Path, topic_id: str) -> list[Path]:
    """The objects of a topic: <cluster id>/<topic id>/<partition>/... (not staging files)."""
    return sorted(p for p in remote.glob(f"*/{topic_id}/*/*") if p.is_file() and not p.name.endswith(".tmp"))


def segment_range(path: Path) -> tuple[int, int]:
    base, end, _ = path.name.split("-", 2)
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
    cluster, remote = tiered
    create_topic(cluster, "tiered-read", partitions=1, replication_factor=3, **TIERED)
    acked: dict = {}
    produce(cluster, "tiered-read", 4000, 0, acked)
    leader = partition_info(cluster, "tiered-read", 0).leader
    # Every broker drops the local segments remote storage holds, beyond local.retention.bytes.
    wait_until(lambda: all(local_bases(cluster, b, "tiered-read")[0] > 0 for b in range(3)), 60,
               "every replica to drop its oldest local segments")
    objects = remote_objects(remote)
    assert any(p.suffix == ".log" for p in objects) and any(p.suffix == ".meta" for p in objects), objects
    names = [str(p.relative_to(remote)) for p in objects]
    # <cluster id>/<topic id>/<partition>/<base>-<end>-e<leader epoch>.log|.meta
    assert all(re.fullmatch(r"[^/]+/[^/]+/0/\d{20}-\d{20}-e\d+\.(log|meta)", n) for n in names), names
    first_local = local_bases(cluster, leader, "tiered-read")[0]
    assert first_local > 0
    read = read_from_zero(cluster, "tiered-read", 4000)
    check_history(acked, read)
    assert read[0][1] == 0, "the consumer did not start at offset 0, below the local log start"


def test_remote_retention_moves_the_log_start_and_deletes_the_dropped_segments(tiered) -> None:
    cluster, remote = tiered
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


def uploaded_topic(cluster: LocalCluster, remote: Path, topic: str) -> tuple[str, list[Path]]:
    """Create a tiered topic, produce 2000 records, and wait for its first objects: its id and them."""
    create_topic(cluster, topic, partitions=1, replication_factor=3, **TIERED)
    produce(cluster, topic, 2000, 0, {})
    topic_id = topic_id_of(cluster, topic)
    return topic_id, wait_until(lambda: topic_objects(remote, topic_id), 60, f"objects of {topic} in storage")


def test_deleting_a_tiered_topic_deletes_its_remote_objects(tiered) -> None:
    cluster, remote = tiered
    topic = "tiered-deleted"
    topic_id, _ = uploaded_topic(cluster, remote, topic)
    with Admin(cluster.bootstrap) as admin:
        admin.delete_topic(topic)
    wait_until(lambda: not topic_objects(remote, topic_id), 30, "the deleted topic's objects to go")


def test_an_orphan_object_is_removed_after_the_grace_period(tiered) -> None:
    cluster, remote = tiered
    _, uploaded = uploaded_topic(cluster, remote, "tiered-orphans")
    recorded = [p for p in uploaded if p.suffix == ".log"]  # a .meta may still be on its way
    directory = recorded[0].parent
    # An upload no record names (a deposed leader's), and a key of no segment at all.
    orphans = [directory / f"{10**9:020d}-{10**9 + 5:020d}-e99.log", directory / "stray.bin"]
    for orphan in orphans:
        orphan.write_bytes(b"orphan")
    wait_until(lambda: not any(o.exists() for o in orphans), 30, "the orphans to be removed")
    assert all(p.exists() for p in recorded), "the sweep removed an object a record names"
