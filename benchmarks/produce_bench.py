"""Microseconds per Producer.produce() call, C hot path against pure Python, on a one-broker cluster.

    python benchmarks/produce_bench.py [--records 200000] [--rounds 5]

Only the caller's loop is timed: a long linger and large batches keep the sender out of the way while
it runs, and each round's records are then flushed to the broker (acks=1) before the next round. This
isolates what produce() itself costs per 100-byte record; `cluster_bench.py` measures the whole pipeline.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cluster_bench import create_topic  # benchmarks/ is on the path when this runs as a script

from kanal.clients.producer import NATIVE, Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster

CASES = ("no key", "key", "partition and timestamp")


def per_record_us(bootstrap: str, path: str, case: str, records: int, rounds: int) -> float:
    producer = Producer(
        ProducerConfig(
            bootstrap=bootstrap,
            acks="1",
            enable_idempotence=False,
            linger_ms=60_000,
            batch_size_bytes=64 << 20,
            buffer_memory_bytes=1 << 30,
            use_native_path=path == "native",
        )
    )
    if producer.native != (path == "native"):
        raise SystemExit(f"asked for the {path} path, got {producer!r}")
    value = os.urandom(100)
    keys = [b"customer-%d" % i for i in range(100)]
    produce = producer.produce
    best = float("inf")
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            if case == "no key":
                for _ in range(records):
                    produce("bench", value)
            elif case == "key":
                for i in range(records):
                    produce("bench", value, key=keys[i % 100])
            else:
                for i in range(records):
                    produce("bench", value, partition=i % 6, timestamp=1_700_000_000_000 + i)
            best = min(best, (time.perf_counter() - started) / records * 1e6)
            if not producer.flush(120):
                raise SystemExit("the records were not acknowledged")
    finally:
        producer.close()
    return round(best, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=200_000, help="records per round (bounded: <= 2,000,000)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not 1_000 <= args.records <= 2_000_000 or not 1 <= args.rounds <= 20:
        parser.error("--records must be in [1000, 2000000] and --rounds in [1, 20]")
    data_dir = Path(tempfile.mkdtemp(prefix="kanal-produce-bench-"))
    cluster = LocalCluster(data_dir, controllers=1, brokers=1)
    try:
        cluster.start(timeout_s=90)
        create_topic(cluster, "bench", 6, 1)
        paths = ["python", "native"] if NATIVE else ["python"]
        result = {"benchmark": "produce", "python": sys.version.split()[0], "native_available": NATIVE,
                  "record_bytes": 100, "us_per_record": {
                      path: {case: per_record_us(cluster.bootstrap, path, case, args.records, args.rounds)
                             for case in CASES} for path in paths}}
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
