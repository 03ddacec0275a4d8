"""`kanal demo`: kanal's main job end to end on the embedded default, a local cluster on loopback.

It starts 3 controllers and 3 brokers as processes, creates a replicated topic, produces keyed records with
acks=all, reads them all back, kills the leader of a partition mid-stream with SIGKILL, keeps producing,
and checks that every acknowledged record is still there exactly once. Then it stops every process.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.deploy.local_cluster import LocalCluster

TOPIC = "orders"
PARTITIONS = 3


def say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kanal demo", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="cluster data (default: a temp dir, removed)")
    parser.add_argument("--records", type=int, default=100_000, help="records to produce (1..5,000,000)")
    args = parser.parse_args(argv)
    if not 1 <= args.records <= 5_000_000:
        parser.error("--records must be in [1, 5000000]")
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="kanal-demo-"))
    cluster = LocalCluster(root, controllers=3, brokers=3,
                           controller_flags=["--session-timeout-ms", "3000"],
                           broker_flags=["--heartbeat-interval-ms", "500", "--replica-lag-ms-max", "5000"])
    say(f"kanal demo: starting 3 controllers and 3 brokers on 127.0.0.1 (data in {root})")
    started = time.perf_counter()
    try:
        cluster.start(timeout_s=120)
        say(f"  cluster ready in {time.perf_counter() - started:.1f} s; bootstrap {cluster.bootstrap}")
        return run(cluster, args.records)
    except (RuntimeError, TimeoutError) as exc:
        print(f"kanal demo: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
        say("  stopped every process")
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)


def run(cluster: LocalCluster, total: int) -> int:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        leaders = {p.partition: p.leader for p in admin.describe_topic(TOPIC).partitions}
    say(f"  created topic {TOPIC}: {PARTITIONS} partitions, replication factor 3, leaders {leaders}")

    acked: dict[tuple[int, int], bytes] = {}
    failed: list = []

    def produce(producer: Producer, start: int, count: int) -> None:
        for i in range(start, start + count):
            value = b"order-%08d" % i

            def done(error, meta, value=value):
                if error is None:
                    acked[(meta.partition, meta.offset)] = value
                else:
                    failed.append(error)

            producer.produce(TOPIC, value, key=b"customer-%d" % (i % 100), on_delivery=done)

    half = total // 2
    with Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", retry_backoff_ms=50)) as producer:
        t0 = time.perf_counter()
        produce(producer, 0, half)
        producer.flush()
        say(f"  produced {half:,} keyed records with acks=all, idempotent: "
            f"{half / (time.perf_counter() - t0):,.0f} records/s")
        victim = next(n for n in cluster.brokers if n.node_id == leaders[0])
        victim.kill()
        say(f"  SIGKILLed broker {victim.node_id}, leader of {TOPIC}-0, and kept producing")
        t0 = time.perf_counter()
        produce(producer, half, total - half)
        producer.flush()
        say(f"  produced {total - half:,} more records during the failover in {time.perf_counter() - t0:.1f} s")
    with Admin(cluster.bootstrap) as admin:
        new_leaders = {p.partition: p.leader for p in admin.describe_topic(TOPIC).partitions}
    say(f"  leaders now {new_leaders}")

    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest", max_poll_records=10_000))
    consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
    read: dict[tuple[int, int], bytes] = {}
    t0 = time.perf_counter()
    deadline = time.monotonic() + 60
    while len(read) < len(acked) and time.monotonic() < deadline:
        for r in consumer.poll(1.0):
            read[(r.partition, r.offset)] = r.value
    consumer.close()
    say(f"  consumed {len(read):,} records in {time.perf_counter() - t0:.1f} s")
    lost = [k for k, v in acked.items() if read.get(k) != v]
    duplicates = len(read) - len(set(read.values()))
    say(f"  acknowledged {len(acked):,}, failed {len(failed)}, lost {len(lost)}, duplicates {duplicates}")
    ok = not failed and not lost and not duplicates and len(acked) == total
    say("kanal demo: " + ("every acknowledged record survived the leader kill, exactly once" if ok else "FAILED"))
    return 0 if ok else 1
