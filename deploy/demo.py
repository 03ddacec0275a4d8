"""`kanal demo`: kanal's main job end to end on the embedded default, a local cluster on loopback.

It starts 3 controllers and 3 brokers as processes, creates a replicated topic, produces keyed records with
acks=all, kills the leader of a partition mid-stream with SIGKILL, keeps producing, restarts the killed
broker on its data and waits until it is back in every ISR, then reads everything back with a consumer
group of 3 members, and checks that every acknowledged record is there exactly once
and that the group committed up to the end. Then it stops every process.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.commands.report import OUTPUT_HELP, CommandParser, command_error
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1.error import ErrorCode

TOPIC = "orders"
PARTITIONS = 3
GROUP = "billing"


# Progress lines go to stdout, or to stderr when stdout carries the JSON verdict (--output json).
_progress = sys.stdout


def say(text: str) -> None:
    print(text, file=_progress, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog="kanal demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="cluster data (default: a temp dir, removed)"
    )
    parser.add_argument("--records", type=int, default=100_000, help="records to produce (1..5,000,000)")
    parser.add_argument("--output", choices=("text", "json"), default="text",
                        help=f"{OUTPUT_HELP} (json: the verdict and its counts as one JSON object on stdout; "
                        "the progress lines go to stderr)")
    args = parser.parse_args(argv)
    global _progress
    _progress = sys.stderr if args.output == "json" else sys.stdout
    if not 1 <= args.records <= 5_000_000:
        parser.error("--records must be in [1, 5000000]")
    # SIGTERM ends the demo as Ctrl-C does: through the `finally` below, which stops every process it
    # started (the default action would leave the cluster running).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="kanal-demo-"))
    cluster = LocalCluster(root, controllers=3, brokers=3,
                           controller_flags=["--session-timeout-ms", "3000", "--election-timeout-ms", "400"],
                           broker_flags=["--heartbeat-interval-ms", "500", "--replica-lag-ms-max", "5000"],
                           kafka_listeners=True)
    say(f"kanal demo: starting 3 controllers and 3 brokers on 127.0.0.1 (data in {root})")
    say("  insecure on purpose: plaintext gRPC, no authentication, loopback only (see 'Securing kanal' "
        "in the README)")
    started = time.perf_counter()
    try:
        cluster.start(timeout_s=120)
        say(f"  cluster ready in {time.perf_counter() - started:.1f} s; bootstrap {cluster.bootstrap}")
        say(f"  kafka bootstrap: {cluster.kafka_bootstrap}")
        return run(cluster, args.records, as_json=args.output == "json")
    except (RuntimeError, TimeoutError) as exc:
        return command_error("kanal demo", str(exc), ErrorCode.UNKNOWN_SERVER_ERROR)
    finally:
        cluster.stop()
        say("  stopped every process")
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)


def run(cluster: LocalCluster, total: int, as_json: bool = False) -> int:
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
        say(f"  produced {total - half:,} more records during the failover in "
            f"{time.perf_counter() - t0:.1f} s")
    with Admin(cluster.bootstrap) as admin:
        new_leaders = {p.partition: p.leader for p in admin.describe_topic(TOPIC).partitions}
        say(f"  leaders now {new_leaders}")
        # Back on its data: it truncates what it had past the new leaders' logs and catches up. The group
        # needs it too: the offsets topic is only ever created with all 3 replicas (as in Kafka).
        t0 = time.perf_counter()
        cluster.restart(victim, timeout_s=120)
        wait_for_full_isr(admin, time.monotonic() + 120)
        say(f"  restarted broker {victim.node_id} on its data: back in every ISR in "
            f"{time.perf_counter() - t0:.1f} s")

    read, twice = read_with_group(cluster, len(acked))
    with Admin(cluster.bootstrap) as admin:
        lag = sum(o.lag for o in admin.describe_group(GROUP).offsets)
    say(f"  group {GROUP!r} committed its positions; its lag is now {lag}")
    lost = [k for k, v in acked.items() if read.get(k) != v]
    duplicates = len(read) - len(set(read.values()))
    say(f"  acknowledged {len(acked):,}, failed {len(failed)}, lost {len(lost)}, duplicates {duplicates}")
    ok = not failed and not lost and not duplicates and not twice and not lag and len(acked) == total
    say(
        "kanal demo: "
        + ("every acknowledged record survived the leader kill, exactly once" if ok else "FAILED")
    )
    if as_json:
        print(json.dumps({"ok": ok, "records": total, "acknowledged": len(acked), "failed": len(failed),
                          "lost": len(lost), "duplicates": duplicates, "read": len(read), "read_twice": twice,
                          "group_lag": lag, "killed_broker": victim.node_id, "leaders_before": leaders,
                          "kafka_bootstrap": cluster.kafka_bootstrap,
                          "leaders_after": new_leaders}), flush=True)
    return 0 if ok else 1


def wait_for_full_isr(admin: Admin, deadline: float) -> None:
    while not all(len(p.isr) == len(p.replicas) for p in admin.describe_topic(TOPIC).partitions):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{TOPIC}'s replicas did not all rejoin the ISR")
        time.sleep(0.1)  # polling a condition with a deadline


def read_with_group(cluster: LocalCluster, expected: int) -> tuple[dict[tuple[int, int], bytes], int]:
    """Read the topic with a group of 3 consumers (one thread each) until `expected` records arrived.
    Returns what was read and how many records were read twice."""
    read: dict[tuple[int, int], bytes] = {}
    per_member = [0, 0, 0]
    twice = 0
    lock = threading.Lock()
    stop = threading.Event()

    def member(i: int) -> None:
        nonlocal twice
        consumer = Consumer(
            ConsumerConfig(
                bootstrap=cluster.bootstrap,
                group_id=GROUP,
                auto_offset_reset="earliest",
                max_poll_records=10_000,
                client_id=f"demo-member-{i}",
            )
        )
        try:
            consumer.subscribe([TOPIC])
            while not stop.is_set():
                for r in consumer.poll(0.2):
                    with lock:
                        twice += (r.partition, r.offset) in read
                        read[(r.partition, r.offset)] = r.value
                        per_member[i] += 1
        finally:
            consumer.close()  # commits what it read and leaves the group

    t0 = time.perf_counter()
    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 90
    while len(read) < expected and time.monotonic() < deadline and all(t.is_alive() for t in threads):
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(60)
    say(f"  a consumer group of 3 members read {len(read):,} records in {time.perf_counter() - t0:.1f} s "
        f"(per member: {', '.join(f'{n:,}' for n in per_member)}; read twice: {twice})")
    return read, twice
