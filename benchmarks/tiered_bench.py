"""Tiered storage (issue 44): the three goals' ratios, each measured side by side in one run.

    python benchmarks/tiered_bench.py [--records 300000] [--rounds 5] [--restart-gib 1,10]

1. **Produce with uploads running**: one broker with remote storage on a moto S3 server; two topics, one
   tiered (`remote.storage.enable`, 4 MiB segments, 8 MiB local retention: uploads and local deletions
   run while records arrive) and one not; each round produces `--records` records of 100 B into each
   (`kanal perf produce`, acks=all), alternating which goes first. Ratio: tiered / plain records/s.
2. **Catch-up from remote**: after the rounds, a consumer (`kanal perf consume`) reads each topic from
   offset 0 to its end, alternating: the tiered one is read almost wholly from S3 (all but its local
   tail), the plain one from local segments. Ratio: tiered / plain MB/s.
3. **Restart time against remote data**: one broker with `file://` remote storage (moto holds objects in
   memory, 10 GiB would not fit), a tiered topic of 256 MiB segments and 256 MiB local retention filled
   to the first size of `--restart-gib`, all uploaded; the broker is restarted (SIGTERM, start, SERVING)
   five times; then filled to the second size and restarted five times again. Ratio: median restart
   seconds at the larger size / at the smaller.

Prints one JSON object: medians, ratios, goals.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.harness (moto)

from cluster_bench import create_topic  # benchmarks/ is on the path when this runs as a script

from kanal.deploy.local_cluster import LocalCluster
from kanal.deploy.s3_server import MotoServer

KANAL = str(Path(sys.executable).parent / "kanal")
RUN_S_MAX = 600  # each perf process is bounded in time as well as in records
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(4 << 20),
          "local.retention.bytes": str(8 << 20)}


def perf(*argv: str) -> dict:
    out = subprocess.run([KANAL, "perf", *argv, "--quiet", "--max-seconds", str(RUN_S_MAX)],
                         capture_output=True, text=True, timeout=RUN_S_MAX + 60, check=False)
    if out.returncode != 0:
        raise SystemExit(f"kanal perf {' '.join(argv)} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def metric(cluster: LocalCluster, name: str) -> float:
    with urllib.request.urlopen(f"http://{cluster.brokers[0].extra['metrics']}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise SystemExit(f"no {name} in the broker's metrics")


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)  # polling a condition with a deadline, not a synchronisation by time


def produce_and_catch_up(records: int, rounds: int, root: Path) -> dict:
    moto = MotoServer.start(root / "moto.log")
    cluster = LocalCluster(root / "s3-cluster", controllers=1, brokers=1, broker_flags=[
        "--remote-storage", f"s3://{moto.bucket}/bench", "--remote-storage-endpoint", moto.endpoint,
        "--remote-storage-region", moto.region, "--remote-storage-access-key-id", moto.access_key_id,
        "--remote-storage-secret-access-key", moto.secret_access_key])
    try:
        cluster.start(timeout_s=90)
        create_topic(cluster, "plain", 1, 1, **{"segment.bytes": str(4 << 20)})
        create_topic(cluster, "tiered", 1, 1, **TIERED)
        produce_rounds = []
        for i in range(rounds):
            order = ("plain", "tiered") if i % 2 == 0 else ("tiered", "plain")
            produce_rounds.append({topic: perf("produce", topic, "--bootstrap", cluster.bootstrap, "--acks",
                                               "all", "--num-records", str(records))["records_s"]
                                   for topic in order})
            print(json.dumps({"produce_round": i, **produce_rounds[-1]}), file=sys.stderr, flush=True)
        wait_for(lambda: metric(cluster, "kanal_remote_log_upload_lag_segments") == 0, 300, "uploads")
        remote_bytes_before = metric(cluster, "kanal_remote_fetch_bytes_total")
        total = records * rounds
        consume_rounds = []
        for i in range(rounds):
            order = ("plain", "tiered") if i % 2 == 0 else ("tiered", "plain")
            consume_rounds.append({topic: perf("consume", topic, "--bootstrap", cluster.bootstrap,
                                               "--num-records", str(total)) for topic in order})
            print(json.dumps({"consume_round": i, **{t: r["mb_s"] for t, r in consume_rounds[-1].items()}}),
                  file=sys.stderr, flush=True)
        remote_read = metric(cluster, "kanal_remote_fetch_bytes_total") - remote_bytes_before
        uploaded = metric(cluster, "kanal_remote_log_bytes_uploaded_total")
    finally:
        cluster.stop()
        moto.stop()
    for r in consume_rounds:
        if any(r[t]["records"] != total for t in r):
            raise SystemExit(f"a consumer read fewer than {total} records: {r}")
    topics = ("plain", "tiered")
    return {
        "produce_records_s": {t: statistics.median(r[t] for r in produce_rounds) for t in topics},
        "produce_tiered_over_plain": round(statistics.median(
            r["tiered"] / r["plain"] for r in produce_rounds), 3),
        "consume_mb_s": {t: statistics.median(r[t]["mb_s"] for r in consume_rounds) for t in topics},
        "consume_tiered_over_plain": round(statistics.median(
            r["tiered"]["mb_s"] / r["plain"]["mb_s"] for r in consume_rounds), 3),
        "bytes_uploaded": uploaded, "bytes_read_from_remote": remote_read,
    }


def restart_times(sizes_gib: list[float], root: Path) -> dict:
    remote = root / "remote-storage"
    remote.mkdir()
    cluster = LocalCluster(root / "file-cluster", controllers=1, brokers=1,
                           broker_flags=["--remote-storage", remote.as_uri()])
    broker = None
    results = {}
    try:
        cluster.start(timeout_s=90)
        broker = cluster.brokers[0]
        create_topic(cluster, "restart", 1, 1, **{"remote.storage.enable": "true",
                                                  "segment.bytes": str(256 << 20),
                                                  "local.retention.bytes": str(256 << 20)})
        produced = 0
        for size in sizes_gib:
            records = int(size * (1 << 30) / 1000) - produced
            if records > 0:
                perf("produce", "restart", "--bootstrap", cluster.bootstrap, "--record-size", "1000",
                     "--num-records", str(records))
                produced += records
            wait_for(lambda: metric(cluster, "kanal_remote_log_upload_lag_segments") == 0, 900, "uploads")
            remote_bytes = sum(p.stat().st_size for p in remote.rglob("*") if p.is_file())
            times = []
            for _ in range(5):
                started = time.monotonic()
                cluster.restart(broker, timeout_s=300)
                times.append(time.monotonic() - started)
            results[f"{size:g}_gib"] = {"remote_bytes": remote_bytes, "restart_s": times,
                                        "median_restart_s": round(statistics.median(times), 3)}
            print(json.dumps({"restart": size, **results[f"{size:g}_gib"]}), file=sys.stderr, flush=True)
    finally:
        cluster.stop()
    small, large = (results[f"{s:g}_gib"]["median_restart_s"] for s in (sizes_gib[0], sizes_gib[-1]))
    return {"restarts": results, "restart_large_over_small": round(large / small, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000,
                        help="records per produce round (<= 5,000,000)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--restart-gib", default="1,10", help="remote data sizes for goal 3, in GiB")
    parser.add_argument("--skip", choices=("none", "restart", "throughput"), default="none")
    args = parser.parse_args()
    sizes = [float(s) for s in args.restart_gib.split(",")]
    if (not 1_000 <= args.records <= 5_000_000 or not 1 <= args.rounds <= 20
            or not all(0 < s <= 50 for s in sizes)):
        parser.error("--records in [1000, 5000000], --rounds in [1, 20], sizes in (0, 50] GiB")
    root = Path(tempfile.mkdtemp(prefix="kanal-tiered-bench-"))
    result: dict = {"benchmark": "tiered", "records_per_round": args.records, "rounds": args.rounds}
    try:
        if args.skip != "throughput":
            result.update(produce_and_catch_up(args.records, args.rounds, root))
        if args.skip != "restart":
            result.update(restart_times(sizes, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["goals"] = {"produce_tiered_over_plain": ">= 0.9", "consume_tiered_over_plain": ">= 0.5",
                       "restart_large_over_small": "<= 1.1"}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
