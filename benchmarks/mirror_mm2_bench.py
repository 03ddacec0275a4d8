"""`kanal mirror` beside Apache Kafka's MirrorMaker 2, both exactly once, copying the same topic in one run.

    .venv/bin/python benchmarks/mirror_mm2_bench.py [--rounds 5] [--records 200000] [--mm2-tasks 1]

Set-up: two single-broker Apache Kafka 4.4 clusters (KRaft, from `deploy/kafka_jars.sh .kafka-jars server`,
started by benchmarks/apache_kafka.py) and two kanal clusters of one controller and one broker
(benchmarks/mirror_bench.py's set-up), all on 127.0.0.1. On each source, topic `bench` of 3 partitions is
filled once with `--records` records of 100 bytes keyed str(i % 1000), uncompressed, acks=all.

Each round runs both cases, in an order that alternates from round to round:

  mm2    MirrorMaker 2 (`deploy/kafka_jars.sh .kafka-jars mirrormaker`; the version and why are there) in
         dedicated mode (org.apache.kafka.connect.mirror.MirrorMaker, one process, a properties file), flow
         `M<round>->B` with exactly once on (`B.exactly.once.source.support = enabled` and the internal REST
         server that it needs in dedicated mode), reading the source read_committed as kanal's flow does,
         `--mm2-tasks` source tasks (MirrorMaker's default is 1, as kanal's flow is one thread). A fresh
         source alias each round gives a fresh remote topic `M<round>.bench` and fresh Connect internal
         topics, so each round copies the whole topic from the start. The remote topic is created before
         MirrorMaker starts, with message.timestamp.type=LogAppendTime: the first record's append time is
         the moment the copy began (MirrorMaker's own start, ~10-30 s of a JVM joining its group, is not
         timed). records/s = records / (when a read_committed librdkafka consumer of the target saw the last
         record - the earliest append time among them). After the last record the consumer reads on for a
         second (`extra_records`: more than the source held would be duplicates), and the remote topic's
         end offsets minus the records are the transaction markers (`transaction_markers`: none would mean
         the copy was not transactional).
  kanal  mirror_bench.py's mirror_throughput: a `kanal mirror` flow (exactly once: transactions on the
         target) copies the kanal source's `bench` into a fresh remote topic; records/s from the flow's
         start being done (its internal topics, transactional id, syncs read back) to its last commit.

The two clocks are not the same: kanal's starts before its first record is read, MirrorMaker's at its first
record's append on the target (which favours MirrorMaker by about one fetch and one produce). Prints one JSON
object: every round (both rates and kanal/mm2), their medians, the median of the rounds' ratios, and the load
average before and after. Every loop is bounded by count and time; every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from apache_kafka import free_port, jvm_argv, log_tail, spawn_jvm, start_kafka, stop_kafka, write_properties
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka_bench import create_topic, produce
from mirror_bench import PARTITIONS, VALUE, fill, mirror_throughput

from kanal.clients.admin import Admin
from kanal.deploy.local_cluster import LocalCluster
from kanal.deploy.mirror.config import FlowConfig

ROOT = Path(__file__).resolve().parents[1]
JARS = ROOT / ".kafka-jars"
TOPIC = "bench"
KEYS = 1_000  # as mirror_bench.fill keys its records
MM2_START_S_MAX = 180  # MirrorMaker's JVM start, group join and task start, before its first copy
COPY_S_MAX = 600  # one round's copy
DRAIN_S = 1.0  # how long the target is read after the last record, for duplicates


def mm2_properties(alias: str, source: str, target: str, tasks: int) -> dict[str, str]:
    """The dedicated-mode configuration of flow `alias`->B. Replication factors are 1 (one broker each);
    ACL and config sync are off as in kanal's bench flow (no authorizer here; nothing to sync)."""
    rest_port = free_port()
    return {
        "clusters": f"{alias}, B",
        f"{alias}.bootstrap.servers": source,
        "B.bootstrap.servers": target,
        f"{alias}->B.enabled": "true",
        f"{alias}->B.topics": TOPIC,
        "B->" + alias + ".enabled": "false",
        "B->" + alias + ".emit.heartbeats.enabled": "false",  # else a disabled flow still writes heartbeats
        # KIP-618 in dedicated mode (Kafka 3.5+): the target's workers run exactly-once source tasks, and
        # the nodes talk through the internal REST server (KIP-710) to fence zombies and hand over configs.
        "B.exactly.once.source.support": "enabled",
        "dedicated.mode.enable.internal.rest": "true",
        "listeners": f"http://127.0.0.1:{rest_port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(rest_port),
        f"{alias}.consumer.isolation.level": "read_committed",
        "tasks.max": str(tasks),
        "sync.topic.acls.enabled": "false",
        "sync.topic.configs.enabled": "false",
        **{f"{name}.replication.factor": "1" for name in (
            "offset-syncs.topic", "checkpoints.topic", "heartbeats.topic", "offset.storage",
            "config.storage", "status.storage")},
        "replication.factor": "1",
    }


def start_mirror_maker(workdir: Path, properties: dict[str, str]) -> subprocess.Popen:
    workdir.mkdir(parents=True)
    config = workdir / "mm2.properties"
    write_properties(config, properties)
    argv = jvm_argv(JARS / "mirrormaker", workdir, workdir / "mm2.log")
    return spawn_jvm([*argv, "org.apache.kafka.connect.mirror.MirrorMaker", str(config)],
                     workdir / "mm2.out", workdir)


def mm2_round(workdir: Path, alias: str, source: str, target: str, records: int, tasks: int) -> dict:
    remote = f"{alias}.{TOPIC}"
    create_topic(target, remote, PARTITIONS, {"message.timestamp.type": "LogAppendTime"})
    consumer = Consumer({"bootstrap.servers": target, "group.id": f"mm2-bench-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(remote, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    spawned = time.time()
    process = start_mirror_maker(workdir, mm2_properties(alias, source, target, tasks))
    try:
        seen = 0
        first_ms = 1 << 62  # the earliest append time seen, ms
        deadline = time.monotonic() + MM2_START_S_MAX + COPY_S_MAX
        while seen < records:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"MirrorMaker round {alias}: {seen} of {records} copied (exit "
                                   f"{process.returncode})\n{log_tail(workdir / 'mm2.log')}")
            for message in consumer.consume(10_000, 0.5):
                if message.error() is not None:
                    continue
                first_ms = min(first_ms, message.timestamp()[1])
                seen += 1
        last = time.time()
        extra = 0
        drain_until = time.monotonic() + DRAIN_S
        while time.monotonic() < drain_until:
            extra += sum(1 for m in consumer.consume(10_000, 0.1) if m.error() is None)
        ends = sum(consumer.get_watermark_offsets(TopicPartition(remote, p), timeout=10)[1]
                   for p in range(PARTITIONS))
    finally:
        stop_kafka(process)
        consumer.close()
    return {"records_s": round(records / (last - first_ms / 1000)), "extra_records": extra,
            "transaction_markers": ends - records - extra, "start_s": round(first_ms / 1000 - spawned, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--mm2-tasks", type=int, default=1, help="MirrorMaker's tasks.max (its default: 1)")
    parser.add_argument("--commit-interval-ms", type=int, default=FlowConfig.__dataclass_fields__[
        "commit_interval_ms"].default, help="kanal's flow (default: kanal mirror's default)")
    args = parser.parse_args(argv)
    if not (1 <= args.rounds <= 20 and 1000 <= args.records <= 5_000_000 and 1 <= args.mm2_tasks <= 3):
        parser.error("--rounds 1..20, --records 1000..5000000, --mm2-tasks 1..3")
    for kind in ("server", "mirrormaker"):
        subprocess.run(["bash", str(ROOT / "deploy" / "kafka_jars.sh"), str(JARS), kind], check=True)
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="mirror-mm2-bench-"))
    kafka_a = kafka_b = None
    kanal_a = LocalCluster(work / "kanal-a", controllers=1, brokers=1)
    kanal_b = LocalCluster(work / "kanal-b", controllers=1, brokers=1)
    rounds = []
    try:
        kafka_a, source = start_kafka(work / "kafka-a")
        kafka_b, target = start_kafka(work / "kafka-b")
        kanal_a.start(timeout_s=90)
        kanal_b.start(timeout_s=90)
        create_topic(source, TOPIC, PARTITIONS)
        produce(source, TOPIC, args.records, VALUE, compression="none", keys=KEYS)
        with Admin(kanal_a.bootstrap) as admin:
            admin.create_topic(TOPIC, PARTITIONS, 1)
        fill(kanal_a.bootstrap, TOPIC, args.records)
        for r in range(args.rounds):
            cases = {
                "mm2": lambda r=r: mm2_round(work / f"mm2-{r}", f"M{r}", source, target, args.records,
                                             args.mm2_tasks),
                "kanal": lambda r=r: {"records_s": round(mirror_throughput(
                    kanal_a, kanal_b, f"K{r}", TOPIC, args.records, args.commit_interval_ms))},
            }
            order = ["mm2", "kanal"] if r % 2 == 0 else ["kanal", "mm2"]
            row: dict[str, object] = {"round": r + 1, "order": order}
            results = {name: cases[name]() for name in order}
            row.update(mm2=results["mm2"], kanal=results["kanal"],
                       kanal_over_mm2=round(results["kanal"]["records_s"] / results["mm2"]["records_s"], 3))
            rounds.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        kanal_a.stop()
        kanal_b.stop()
        for process in (kafka_a, kafka_b):
            if process is not None:
                stop_kafka(process)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "records": args.records, "record_bytes": len(VALUE), "partitions": PARTITIONS,
        "mm2_tasks": args.mm2_tasks, "kanal_commit_interval_ms": args.commit_interval_ms,
        "mm2_version": [p.name.removeprefix("connect-mirror-").removesuffix(".jar")
                        for p in (JARS / "mirrormaker").glob("connect-mirror-[0-9]*.jar")],
        "rounds": rounds,
        "median_mm2_records_s": statistics.median(r["mm2"]["records_s"] for r in rounds),
        "median_kanal_records_s": statistics.median(r["kanal"]["records_s"] for r in rounds),
        "median_kanal_over_mm2": statistics.median(r["kanal_over_mm2"] for r in rounds),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
