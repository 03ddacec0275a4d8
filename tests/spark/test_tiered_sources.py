"""The offline tools on a tiered cluster (issue 44), end to end: one cluster whose brokers keep closed
segments in a directory (`--remote-storage file://DIR`) and drop them from their disks beyond local
retention. While it runs, `kanal topics describe` shows the log start (0, in remote storage) and the local
log start above it, and a consumer from offset 0 reads every record: the reference. Once it is stopped,
`kanal-log` over the data dirs plus `remoteStorage` gives exactly the consumer's rows; without
`remoteStorage` the offsets only remote storage holds are reported lost, never skipped silently; and the
audit's `remote_uploads` lists every uploaded segment."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.spark.audit import run_audit

from ..cluster.conftest import BROKER_FLAGS, CONTROLLER_FLAGS, create_topic, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

TOPIC = "tiered-events"
PARTITIONS = 2
RECORDS = 3000
TIERED = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "32768"}
KANAL = [sys.executable, "-m", "kanal.deploy.cli"]

# (partition, offset, key, value, headers, timestamp ms): a record as both the consumer and kanal-log see it
Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


@dataclass(frozen=True)
class TieredRun:
    data_dir: Path
    remote_dir: Path
    read: list[Row]  # the consumer's read from offset 0, in (partition, offset) order
    first_local: dict[int, int]  # each partition's lowest local log start over its replicas
    described_text: str
    described_json: list


def _local_bases(cluster: LocalCluster, broker: int, partition: int) -> list[int]:
    directory = cluster.data_dir / f"broker-{broker}" / f"{TOPIC}-{partition}"
    return sorted(int(p.name[:-4]) for p in directory.glob("*.log"))


def _produce(cluster: LocalCluster) -> dict[tuple[int, int], bytes]:
    acked: dict[tuple[int, int], bytes] = {}
    errors: list = []
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", enable_idempotence=True,
                                       linger_ms=2, batch_size_bytes=4096, delivery_timeout_ms=60_000))
    try:
        for i in range(RECORDS):
            value = b"v-%06d" % i + b"." * 40

            def done(error, meta, value=value):
                if error is None:
                    acked[(meta.partition, meta.offset)] = value
                else:
                    errors.append(error)

            headers = [("i", b"%d" % i)] + ([("odd", None)] if i % 2 else [])
            producer.produce(TOPIC, value, key=b"k%d" % (i % 17) if i % 5 else None, headers=headers,
                             partition=i % PARTITIONS, on_delivery=done)
        assert producer.flush(60), "records still unacknowledged after 60 s"
    finally:
        producer.close()
    assert not errors, errors[:3]
    return acked


def _read_from_zero(cluster: LocalCluster, count: int) -> list[Row]:
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                       max_poll_records=5000))
    read: list[Row] = []
    try:
        consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while len(read) < count:
            assert time.monotonic() < deadline, f"read {len(read)} of {count}"
            read.extend((r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms)
                        for r in consumer.poll(0.5))
    finally:
        consumer.close()
    return sorted(read, key=lambda r: (r[0], r[1]))


def _kanal(cluster: LocalCluster, *args: str) -> str:
    result = subprocess.run([*KANAL, *args, "--bootstrap", cluster.bootstrap], check=False,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"kanal {' '.join(args)} failed: {result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> TieredRun:
    root = tmp_path_factory.mktemp("tiered-sources")
    remote_dir = root / "remote-storage"
    remote_dir.mkdir()
    cluster = LocalCluster(root / "cluster", controllers=1, brokers=3, controller_flags=CONTROLLER_FLAGS,
                           broker_flags=[*BROKER_FLAGS, "--remote-storage", remote_dir.as_uri()])
    cluster.start(timeout_s=90)
    try:
        create_topic(cluster, TOPIC, partitions=PARTITIONS, replication_factor=3, **TIERED)
        acked = _produce(cluster)
        wait_until(lambda: all(_local_bases(cluster, b, p)[0] > 0
                               for b in range(3) for p in range(PARTITIONS)),
                   60, "every replica to drop its oldest local segments")
        first_local = {p: min(_local_bases(cluster, b, p)[0] for b in range(3)) for p in range(PARTITIONS)}
        read = _read_from_zero(cluster, len(acked))
        assert {(r[0], r[1]): r[3] for r in read} == acked
        text = _kanal(cluster, "topics", "describe", TOPIC)
        described = json.loads(_kanal(cluster, "topics", "describe", TOPIC, "--output", "json"))
    finally:
        cluster.stop()
    return TieredRun(cluster.data_dir, remote_dir, read, first_local, text, described)


def _rows(df) -> list[Row]:
    got = df.selectExpr("partition", "offset", "key", "value", "headers", "unix_millis(timestamp) AS ts",
                        "_corrupt").collect()
    assert [r["_corrupt"] for r in got if r["_corrupt"] is not None] == []
    return sorted(
        ((r["partition"], r["offset"], _bytes(r["key"]), _bytes(r["value"]),
          tuple((h["key"], _bytes(h["value"])) for h in r["headers"]), r["ts"]) for r in got),
        key=lambda r: (r[0], r[1]))


def _bytes(value) -> bytes | None:
    return None if value is None else bytes(value)


def test_describe_shows_log_start_zero_below_the_local_log_start(run) -> None:
    [topic] = run.described_json
    assert sorted(p["partition"] for p in topic["partitions"]) == list(range(PARTITIONS))
    for p in topic["partitions"]:
        assert p["log_start"] == 0 and p["local_log_start"] > 0, p
    lines = [line for line in run.described_text.splitlines() if "partition " in line and "leader" in line]
    assert len(lines) == PARTITIONS, run.described_text
    for line, p in zip(lines, sorted(topic["partitions"], key=lambda p: p["partition"]), strict=True):
        assert line.rstrip().endswith(f"log start 0  local log start {p['local_log_start']}"), line


def test_kanal_log_with_remote_storage_reads_what_the_consumer_read(run, spark) -> None:
    df = (spark.read.format("kanal-log").option("topics", TOPIC)
          .option("remoteStorage", run.remote_dir.as_uri()).load(str(run.data_dir)))
    assert _rows(df) == run.read
    assert next(r[1] for r in run.read if r[0] == 0) == 0


def test_kanal_log_without_remote_storage_reports_the_offsets_only_remote_storage_holds(run, spark) -> None:
    df = spark.read.format("kanal-log").option("topics", TOPIC).load(str(run.data_dir))
    got = df.selectExpr("partition", "offset", "_corrupt", "_lost").collect()
    for p in range(PARTITIONS):
        rows = sorted((r for r in got if r["partition"] == p), key=lambda r: r["offset"])
        lost = [r for r in rows if r["_corrupt"] is not None]
        assert [(r["offset"], r["_lost"]) for r in lost] == [(0, True)], lost
        assert "remoteStorage" in lost[0]["_corrupt"], lost[0]["_corrupt"]
        records = [r["offset"] for r in rows if r["_corrupt"] is None]
        assert records and records[0] >= run.first_local[p] > 0
        assert records == list(range(records[0], records[0] + len(records)))
        expected = [r[1] for r in run.read if r[0] == p and r[1] >= records[0]]
        assert records == expected
    failfast = spark.read.format("kanal-log").option("topics", TOPIC).option("mode", "FAILFAST")
    with pytest.raises(Exception, match="remoteStorage"):
        failfast.load(str(run.data_dir)).count()


def test_audit_lists_every_uploaded_segment(run, spark, tmp_path) -> None:
    audit = run_audit(spark, run.data_dir, tmp_path / "audit")
    uploads = audit.tables["remote_uploads"].collect()
    objects = sorted(run.remote_dir.rglob("*.log"))
    assert len(uploads) == len(objects) > 0
    for p in range(PARTITIONS):
        segments = sorted((u["base_offset"], u["end_offset"]) for u in uploads if u["partition"] == p)
        assert segments[0][0] == 0 and all(u["topic"] == TOPIC for u in uploads)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(segments)), segments
        assert segments[-1][1] >= run.first_local[p]
    sizes = sorted(u["size_bytes"] for u in uploads)
    assert sizes == sorted(o.stat().st_size for o in objects)


def test_dump_log_of_a_remote_segment_by_url(run) -> None:
    first = min(run.remote_dir.rglob("*.log"), key=lambda o: o.name)
    result = subprocess.run([*KANAL, "dump-log", first.as_uri(), "--output", "json"], check=False,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    entries = [e for e in lines if e["type"] == "entry"]
    assert entries and not [e for e in lines if e["type"] == "damage"]
    assert entries[0]["base_offset"] == 0, entries[0]
