"""Where a Python producer's CPU goes, per process, with the client and the broker of different checkouts.

    python benchmarks/produce_cpu_split.py --side before=/work/wt-base/.venv/bin/python \\
        --side after=.venv/bin/python [--rounds 2] [--seconds 5] [--records-max 3000000]

For each side's interpreter as the broker's (a one-broker cluster with three controllers, started by that
interpreter, so with that checkout's broker code), every side's interpreter runs the producer in turn
(alternating, --rounds times): `cluster_bench.py`'s client case (a fresh Producer with default settings,
acks=1, produce_many of 1,000 100-byte records per call to a topic of 6 partitions, bounded by
--records-max and --seconds, then flush). Each run reports records/s and the CPU seconds per million
records of the producer process, of the broker and of the three controllers (from /proc, over the run),
so a before/after gap can be placed: a producer that costs more per record shows in its own column
whichever broker it runs against; a broker that costs more shows in its column whichever producer sends.
CPU per record moves far less with other load on the machine than records/s does (PERFORMANCE.md).
Prints one JSON object: every run, and the medians per (broker, client) pair.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_TOPIC_PARTITIONS = 6
_RECORD_BYTES = 100
_RECORDS_PER_CALL = 1000


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(topics: int) -> None:
    """Child mode: start the cluster, create the topics, print its endpoints and pids as one JSON line,
    and run until stdin closes (the parent's end of the pipe)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from cluster_bench import create_topic  # the benchmark's own topic creation, waiting for leaders

    from kanal.deploy.local_cluster import LocalCluster

    data_dir = Path(tempfile.mkdtemp(prefix="kanal-cpu-split-"))
    cluster = LocalCluster(data_dir, controllers=3, brokers=1)
    cluster.start(timeout_s=90)
    try:
        for i in range(topics):
            create_topic(cluster, f"split-{i}", _TOPIC_PARTITIONS, 1)
        print(json.dumps({"bootstrap": cluster.bootstrap, "broker": cluster.brokers[0].pid,
                          "controllers": [c.pid for c in cluster.controllers]}), flush=True)
        sys.stdin.read()  # returns when the parent closes the pipe
    finally:
        cluster.stop()
        cluster.remove_data()


def produce(cluster: dict, topic: str, records_max: int, seconds: float) -> None:
    """Child mode: the client case against `cluster`; prints one JSON line of figures."""
    from kanal.clients.producer import Producer
    from kanal.clients.producer_config import ProducerConfig

    os.sync()  # no writeback of an earlier run's records during this one
    producer = Producer(ProducerConfig(bootstrap=cluster["bootstrap"], acks="1", enable_idempotence=False))
    values = [os.urandom(_RECORD_BYTES)] * _RECORDS_PER_CALL
    others = [cluster["broker"], *cluster["controllers"]]
    cpu_before = [time.process_time(), *map(_cpu_s, others)]
    started = time.perf_counter()
    sent = 0
    while sent < records_max and time.perf_counter() - started < seconds:
        producer.produce_many(topic, values)
        sent += _RECORDS_PER_CALL
    producer.flush(120)
    elapsed = time.perf_counter() - started
    cpu_after = [time.process_time(), *map(_cpu_s, others)]
    producer.close()
    per_m = [(a - b) / sent * 1e6 for a, b in zip(cpu_after, cpu_before)]
    print(json.dumps({"records_s": round(sent / elapsed), "client_cpu_s_per_m": round(per_m[0], 3),
                      "broker_cpu_s_per_m": round(per_m[1], 3),
                      "controllers_cpu_s_per_m": round(sum(per_m[2:]), 3)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", action="append", default=[], metavar="NAME=PYTHON",
                        help="a checkout's interpreter, named (give two or more)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each client against each broker")
    parser.add_argument("--seconds", type=float, default=5.0, help="time bound of one run's produce loop")
    parser.add_argument("--records-max", type=int, default=3_000_000, help="record bound of one run")
    parser.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)  # child mode: topics
    parser.add_argument("--produce", default="", help=argparse.SUPPRESS)  # child mode: cluster JSON
    parser.add_argument("--topic", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.produce:
        produce(json.loads(args.produce), args.topic, args.records_max, args.seconds)
        return
    if not all("=" in s for s in args.side):
        parser.error("--side takes NAME=PYTHON")
    sides = dict(s.split("=", 1) for s in args.side)
    if len(sides) < 2 or not 1 <= args.rounds <= 10 or not 0.5 <= args.seconds <= 60:
        parser.error("two or more --side, --rounds in [1, 10], --seconds in [0.5, 60]")
    me = str(Path(__file__).resolve())
    runs = []
    for broker_side, broker_python in sides.items():
        runs_here = args.rounds * len(sides)
        server = subprocess.Popen([broker_python, me, "--serve", str(runs_here)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            cluster_line = server.stdout.readline() if server.stdout else ""
            if not cluster_line:
                raise SystemExit(f"the {broker_side} cluster did not start (exit {server.wait(60)})")
            order = list(sides.items())
            for r in range(args.rounds):
                for i, (client_side, client_python) in enumerate(order if r % 2 == 0 else order[::-1]):
                    out = subprocess.run(
                        [client_python, me, "--produce", cluster_line.strip(),
                         "--topic", f"split-{r * len(sides) + i}", "--records-max", str(args.records_max),
                         "--seconds", str(args.seconds)],
                        check=True, capture_output=True, text=True, timeout=300)
                    run = {"broker": broker_side, "client": client_side, **json.loads(out.stdout)}
                    runs.append(run)
                    print(json.dumps(run), file=sys.stderr, flush=True)
        finally:
            if server.stdin:
                server.stdin.close()  # the child stops its cluster (by its pids) and exits
            server.wait(120)
    medians = {}
    for broker_side in sides:
        for client_side in sides:
            mine = [r for r in runs if r["broker"] == broker_side and r["client"] == client_side]
            medians[f"broker={broker_side} client={client_side}"] = {
                k: round(statistics.median(r[k] for r in mine), 3)
                for k in ("records_s", "client_cpu_s_per_m", "broker_cpu_s_per_m", "controllers_cpu_s_per_m")
            }
    print(json.dumps({"benchmark": "produce_cpu_split", "runs": runs, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
