"""`kanal mirror` against the floors of issue 46's goals, measured side by side in one run.

    .venv/bin/python benchmarks/mirror_bench.py [--rounds 5] [--records 200000] [--rate 2000] [--seconds 10]

Two clusters on loopback (one controller and one broker each), a source topic of 3 partitions filled once
with `--records` records of 100 bytes. Each round runs, in an order that alternates from round to round:

  mirror_throughput   a `kanal mirror` flow (exactly once: transactions on the target) copying the whole
                      topic into a fresh target topic; records/s from the flow's start being done (its
                      internal topics, transactional id, syncs read back) to its last commit
  plain_loop          kanal's Consumer reading the same topic and kanal's Producer (idempotent, acks=all, no
                      transactions) writing it to a fresh target topic, the same partitions; records/s from
                      its start to the last acknowledgement
  mirror_latency      `--rate` records/s produced to a fresh source topic for `--seconds` while a flow copies
                      it; a read_committed consumer of the target notes each record's arrival: p99 of
                      (arrival - the record's timestamp, its send time). The flow runs in a process of its
                      own, as `kanal mirror` does: on a thread of this one it would take the GIL from the
                      load and the timing consumer, which the end-to-end case does not pay
  end_to_end          the same load read from the source itself (read_uncommitted, as a plain consumer):
                      kanal's own end-to-end p99, the floor the mirror's latency is measured against

Goals: mirror_throughput / plain_loop >= 0.7, mirror_latency p99 / end_to_end p99 <= 3; each judged on the
median of the rounds' own ratios. Prints one JSON object. Every loop is bounded by count and time.
"""

from __future__ import annotations

import argparse
import json
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer
from kanal.clients.consumer_config import ConsumerConfig
from kanal.clients.latency_histogram import LatencyHistogram
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.deploy.mirror.config import ClusterConfig, FlowConfig
from kanal.deploy.mirror.flow import Flow
from kanal.deploy.mirror.source import KanalSource

PARTITIONS = 3
VALUE = b"x" * 100
DEADLINE_S = 600


def fill(bootstrap: str, topic: str, records: int) -> None:
    with Producer(ProducerConfig(bootstrap=bootstrap, linger_ms=5)) as producer:
        for i in range(records):
            producer.produce(topic, VALUE, key=str(i % 1000).encode())
        producer.flush()


def bench_flow(source: str, target: str, alias: str, topic: str, commit_interval_ms: int) -> Flow:
    config = FlowConfig(ClusterConfig(alias, source), ClusterConfig("B", target), topics=topic,
                        sync_group_offsets=False, sync_topic_acls=False, sync_topic_configs=False,
                        commit_interval_ms=commit_interval_ms)
    return Flow(config, KanalSource(source), None)


def run_flow_process(source: str, target: str, alias: str, topic: str, commit_interval_ms: int) -> None:
    """`--flow-process`: one flow until stdin closes; prints "ready" once it copies."""
    flow = bench_flow(source, target, alias, topic, commit_interval_ms)
    stop = threading.Event()
    thread = threading.Thread(target=flow.run, args=(stop,))
    thread.start()
    if flow.ready.wait(60):
        print("ready", flush=True)
    sys.stdin.read()  # the bench closes it when the round is over
    stop.set()
    thread.join(60)


def start_flow_process(source: str, target: str, alias: str, topic: str,
                       commit_interval_ms: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, __file__, "--flow-process", source, target, alias, topic, str(commit_interval_ms)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    if not select.select([process.stdout], [], [], 90)[0] or process.stdout.readline().strip() != "ready":
        stop_flow_process(process)
        raise RuntimeError("the flow did not start")
    return process


def stop_flow_process(process: subprocess.Popen) -> None:
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(90)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
        raise RuntimeError("the flow process did not stop") from None


def mirror_throughput(a: LocalCluster, b: LocalCluster, alias: str, topic: str, records: int,
                      commit_interval_ms: int) -> float:
    flow = bench_flow(a.bootstrap, b.bootstrap, alias, topic, commit_interval_ms)
    stop = threading.Event()
    thread = threading.Thread(target=flow.run, args=(stop,))
    thread.start()
    if not flow.ready.wait(60):  # timed from here: the flow's start (internal topics, its transactional
        raise RuntimeError("the flow did not start")  # id, the syncs read back) is not copying
    started = time.monotonic()
    deadline = started + DEADLINE_S
    while flow.metrics.records < records:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"mirror round: {flow.metrics.records} of {records} copied")
        time.sleep(0.01)  # polling the flow's counter, not synchronising with it
    elapsed = time.monotonic() - started
    stop.set()
    thread.join(60)
    return records / elapsed


def plain_loop(a: LocalCluster, b: LocalCluster, topic: str, target_topic: str, records: int) -> float:
    with Admin(b.bootstrap) as admin:
        admin.create_topic(target_topic, PARTITIONS, 1)
    consumer = Consumer(ConsumerConfig(a.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                                       max_poll_records=5_000))
    producer = Producer(ProducerConfig(bootstrap=b.bootstrap, linger_ms=2))
    started = time.monotonic()
    try:
        consumer.assign([(topic, p) for p in range(PARTITIONS)])
        copied = 0
        while copied < records:
            if time.monotonic() - started > DEADLINE_S:
                raise RuntimeError(f"plain loop: {copied} of {records}")
            for r in consumer.poll(0.1):
                producer.produce(target_topic, r.value, key=r.key, partition=r.partition, headers=r.headers,
                                 timestamp=r.timestamp_ms)
                copied += 1
        producer.flush()
        return records / (time.monotonic() - started)
    finally:
        consumer.close()
        producer.close()


def latency(a: LocalCluster, b: LocalCluster, alias: str | None, topic: str, rate: int,
            seconds: float, commit_interval_ms: int = 100) -> dict:
    """p50/p99 of arrival - send time: through a mirror flow to the target (alias given) or read from the
    source itself (alias None)."""
    with Admin(a.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS, 1)
    flow_process = None
    read_from, read_topic, isolation = a, topic, "read_uncommitted"
    if alias is not None:
        flow_process = start_flow_process(a.bootstrap, b.bootstrap, alias, topic, commit_interval_ms)
        read_from, read_topic, isolation = b, f"{alias}.{topic}", "read_committed"
        with Admin(b.bootstrap) as admin:
            deadline = time.monotonic() + 60
            while read_topic not in admin.list_topics():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{read_topic} not created")
                time.sleep(0.05)
    histogram = LatencyHistogram()
    total = int(rate * seconds)
    consumer = Consumer(ConsumerConfig(read_from.bootstrap, auto_offset_reset="earliest",
                                       fetch_max_wait_ms=100, isolation_level=isolation,
                                       enable_auto_commit=False))
    consumer.assign([(read_topic, p) for p in range(PARTITIONS)])

    def consume() -> None:
        seen = 0
        deadline = time.monotonic() + seconds + 60
        while seen < total and time.monotonic() < deadline:
            for r in consumer.poll(0.1):
                histogram.add(max(0.0, time.time() - r.timestamp_ms / 1000))
                seen += 1

    reader = threading.Thread(target=consume)
    reader.start()
    with Producer(ProducerConfig(bootstrap=a.bootstrap, linger_ms=0)) as producer:
        started = time.monotonic()
        for i in range(total):
            ahead = started + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing the load at --rate
            producer.produce(topic, VALUE, key=str(i).encode(), timestamp=int(time.time() * 1000))
        producer.flush()
    reader.join(seconds + 90)
    consumer.close()
    if flow_process is not None:
        stop_flow_process(flow_process)
    if histogram.count < total:
        raise RuntimeError(f"latency round ({alias or 'source'}): {histogram.count} of {total} arrived")
    return {"p50_ms": round(histogram.percentile_s(50) * 1000, 2),
            "p99_ms": round(histogram.percentile_s(99) * 1000, 2)}


def main() -> None:
    if sys.argv[1:2] == ["--flow-process"]:
        source, target, alias, topic, interval = sys.argv[2:7]
        run_flow_process(source, target, alias, topic, int(interval))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--rate", type=int, default=2_000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--commit-interval-ms", type=int, default=FlowConfig.__dataclass_fields__[
        "commit_interval_ms"].default, help="the flow's (default: kanal mirror's default)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mirror-bench-"))
    a = LocalCluster(root / "a", controllers=1, brokers=1)
    b = LocalCluster(root / "b", controllers=1, brokers=1)
    rounds = []
    try:
        a.start(timeout_s=90)
        b.start(timeout_s=90)
        with Admin(a.bootstrap) as admin:
            admin.create_topic("bench", PARTITIONS, 1)
        fill(a.bootstrap, "bench", args.records)
        for r in range(args.rounds):
            row: dict[str, object] = {}
            cases = [
                ("mirror_throughput", lambda r=r: mirror_throughput(a, b, f"T{r}", "bench", args.records,
                                                                    args.commit_interval_ms)),
                ("plain_loop", lambda r=r: plain_loop(a, b, "bench", f"plain-{r}", args.records)),
                ("mirror_latency",
                 lambda r=r: latency(a, b, f"L{r}", f"lat-m-{r}", args.rate, args.seconds,
                                     args.commit_interval_ms)),
                ("end_to_end", lambda r=r: latency(a, b, None, f"lat-e-{r}", args.rate, args.seconds)),
            ]
            if r % 2:
                cases = [cases[1], cases[0], cases[3], cases[2]]
            for name, run in cases:
                row[name] = run()
            row["throughput_ratio"] = round(float(row["mirror_throughput"]) / float(row["plain_loop"]), 3)
            row["latency_ratio"] = round(row["mirror_latency"]["p99_ms"] / row["end_to_end"]["p99_ms"], 3)
            rounds.append(row)
    finally:
        a.stop()
        b.stop()
    throughput = statistics.median(r["throughput_ratio"] for r in rounds)
    latency_ratio = statistics.median(r["latency_ratio"] for r in rounds)
    print(json.dumps({
        "records": args.records, "rate": args.rate, "commit_interval_ms": args.commit_interval_ms,
        "rounds": rounds,
        "mirror_over_plain_throughput": throughput, "goal_throughput": ">= 0.7",
        "met_throughput": throughput >= 0.7,
        "mirror_over_end_to_end_p99": latency_ratio, "goal_latency": "<= 3",
        "met_latency": latency_ratio <= 3,
    }, indent=1))


if __name__ == "__main__":
    main()
