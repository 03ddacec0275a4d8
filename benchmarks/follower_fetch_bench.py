"""Follower fetching (KIP-392): one consumer per rack reading an RF=3 topic, from leaders only against
from the in-sync replica in its own rack, on three brokers in racks a, b and c (rack-aware selector).

    python benchmarks/follower_fetch_bench.py [--records 200000] [--rounds 5]

A topic of 3 partitions (one leader per broker) is filled once with `--records` records of 100 B
(acks=all). Each round runs both modes, alternating which goes first: three `kanal perf consume`
processes at once, each reading the whole topic from offset 0, without a rack (every partition from its
leader) or with its rack (`--client-rack a|b|c`). The throughput of a mode is the three consumers' records
over the slowest one's seconds; the in-rack share is, over the brokers' metrics, bytes returned to
consumers of the broker's own rack over all bytes returned (kanal_broker_topic_bytes_out_same_rack /
kanal_broker_topic_bytes_out). A warm-up read of each mode comes first, unmeasured: followers learn the
last high-water mark on their next fetch after the fill.

Prints one JSON object: per mode the median records/s and the median in-rack share, and the goal's
ratios (issue 47: in-rack share >= 0.9, rack-aware / leader-only throughput >= 0.9).
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
import urllib.request
from pathlib import Path

from cluster_bench import create_topic  # benchmarks/ is on the path when this runs as a script

from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster

RACKS = ("a", "b", "c")
READ_S_MAX = 300  # one consumer's read is bounded in time as well as in records


def fill(bootstrap: str, records: int) -> None:
    producer = Producer(ProducerConfig(bootstrap=bootstrap, acks="all", linger_ms=5,
                                       batch_size_bytes=256 * 1024))
    value = os.urandom(100)
    try:
        for start in range(0, records, 1000):
            producer.produce_many("bench", [value] * min(1000, records - start))
        if not producer.flush(300):
            raise SystemExit("the fill was not acknowledged")
    finally:
        producer.close()


def bytes_out(cluster: LocalCluster) -> tuple[float, float]:
    """(all consumer bytes, bytes to consumers in the broker's rack), summed over the brokers."""
    total = same = 0.0
    for node in cluster.brokers:
        with urllib.request.urlopen(f"http://{node.extra['metrics']}/metrics", timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith("kanal_broker_topic_bytes_out_total "):
                    total += float(line.split()[1])
                elif line.startswith("kanal_broker_topic_bytes_out_same_rack_total "):
                    same += float(line.split()[1])
    return total, same


def read_all(cluster: LocalCluster, records: int, racked: bool) -> dict:
    """Three consumers at once, each reading the whole topic; records/s and the in-rack share."""
    before = bytes_out(cluster)
    commands = [[str(Path(sys.executable).parent / "kanal"), "perf", "consume", "bench", "--quiet",
                 "--bootstrap", cluster.bootstrap, "--num-records", str(records),
                 "--max-seconds", str(READ_S_MAX), "--client-rack", rack if racked else ""]
                for rack in RACKS]
    processes = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in commands]
    results = []
    for process in processes:
        out, _ = process.communicate(timeout=READ_S_MAX + 60)
        if process.returncode != 0:
            raise SystemExit(f"a consumer failed ({process.returncode}): {out}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    if any(r["records"] != records for r in results):
        raise SystemExit(f"a consumer read fewer than {records} records: {results}")
    after = bytes_out(cluster)
    total, same = after[0] - before[0], after[1] - before[1]
    return {"records_s": round(3 * records / max(r["seconds"] for r in results)),
            "in_rack_share": round(same / total, 4) if total else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records in the topic (<= 2,000,000)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not 1_000 <= args.records <= 2_000_000 or not 1 <= args.rounds <= 20:
        parser.error("--records must be in [1000, 2000000] and --rounds in [1, 20]")
    data_dir = Path(tempfile.mkdtemp(prefix="kanal-follower-fetch-bench-"))
    cluster = LocalCluster(data_dir, controllers=1, brokers=3, racks=RACKS,
                           broker_flags=["--replica-selector", "rack-aware"])
    modes = ("leader_only", "rack_aware")
    rounds: list[dict] = []
    try:
        cluster.start(timeout_s=90)
        create_topic(cluster, "bench", 3, 3)
        started = time.monotonic()
        fill(cluster.bootstrap, args.records)
        fill_s = time.monotonic() - started
        for mode in modes:  # warm-up, unmeasured
            read_all(cluster, args.records, mode == "rack_aware")
        for i in range(args.rounds):
            order = modes if i % 2 == 0 else modes[::-1]
            rounds.append({mode: read_all(cluster, args.records, mode == "rack_aware") for mode in order})
            print(json.dumps({"round": i, **rounds[-1]}), file=sys.stderr, flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    medians = {mode: {key: statistics.median(r[mode][key] for r in rounds)
                      for key in ("records_s", "in_rack_share")} for mode in modes}
    result = {
        "benchmark": "follower_fetch", "records": args.records, "record_bytes": 100, "partitions": 3,
        "replication_factor": 3, "consumers": 3, "rounds": args.rounds, "fill_s": round(fill_s, 1),
        "median": medians,
        "ratios": {
            "in_rack_share_rack_aware": medians["rack_aware"]["in_rack_share"],
            "throughput_rack_aware_over_leader_only": round(statistics.median(
                r["rack_aware"]["records_s"] / r["leader_only"]["records_s"] for r in rounds), 3),
        },
        "goals": {"in_rack_share_rack_aware": ">= 0.9", "throughput_rack_aware_over_leader_only": ">= 0.9"},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
