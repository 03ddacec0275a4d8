"""Consumer-group benchmark against a cluster it starts itself (3 controllers, 3 brokers on loopback).

    python benchmarks/group_bench.py [--rounds 3] [--records 600000] [--seconds 60]

Cases:
  join_to_stable_ms    a group of 9 members is Stable; a 10th subscribes: time until the coordinator reports
                       the group Stable with 10 members and every member owns its new partitions
  leave_to_stable_ms   one of 10 members closes (LeaveGroup): time until Stable with 9, partitions covered
  crash_to_stable_ms   one of 10 members goes silent (no heartbeat, no LeaveGroup — a hung or killed
                       process as the coordinator sees it): time until Stable with 9. This is the session
                       timeout (--session-ms) plus the rebalance, so it is printed beside that timeout
  group_consume        a 3-member group (3 processes) reads a 6-partition topic of 100-byte records from the
                       beginning: records/s and MB/s over all members, from the group's first record to its
                       last (process start and the first join are left out)
The brokers use Kafka's default group.initial.rebalance.delay.ms (3 s): members that start together land in
one generation. It applies only to a group's first rebalance, so it is not part of the join case.
Members are consumer threads in one process for the rebalance cases (one poll loop each); medians over
--rounds. Prints one JSON object; every loop is bounded by count and by --seconds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1.error import ErrorCode, KanalError

BROKER_FLAGS = ["--heartbeat-interval-ms", "200", "--group-session-timeout-ms-min", "200",
                "--group-initial-rebalance-delay-ms", "3000", "--offsets-topic-partitions", "10"]
CONTROLLER_FLAGS = ["--session-timeout-ms", "2000", "--election-timeout-ms", "300"]


class Member:
    """One consumer of the group with its own poll loop."""

    def __init__(self, bootstrap: str, group: str, topic: str, session_ms: int) -> None:
        self.consumer = Consumer(ConsumerConfig(
            bootstrap=bootstrap, group_id=group, session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(50, session_ms // 5), auto_offset_reset="earliest",
            fetch_max_wait_ms=100))
        self.consumer.subscribe([topic])
        self._stop = threading.Event()
        self.silent = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.05)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(30)
        if not self.silent:
            self.consumer.close()

    def go_silent(self) -> None:
        """Stop polling and heartbeating without leaving: what the coordinator sees of a hung process."""
        self.silent = True
        self._stop.set()
        self.thread.join(30)
        self.consumer._stopping.set()  # the heartbeat thread ends; nothing is sent any more


def wait_stable(admin: Admin, group: str, members: int, partitions: int, deadline_s: float) -> float:
    """Seconds until the coordinator reports `group` Stable with `members` members owning all partitions."""
    started = time.perf_counter()
    while time.perf_counter() - started < deadline_s:
        try:
            info = admin.describe_group(group)
        except KanalError as exc:
            if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            time.sleep(0.005)
            continue
        owned = sum(len(t.partitions) for m in info.members for t in m.assignment.partitions)
        if info.state == "Stable" and len(info.members) == members and owned == partitions:
            return time.perf_counter() - started
        time.sleep(0.005)
    raise SystemExit(f"group {group} not Stable with {members} members within {deadline_s}s")


def rebalance_cases(cluster: LocalCluster, rounds: int, session_ms: int, seconds: float) -> dict:
    topic, partitions = "bench-groups", 30
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, partitions, 3)
    joins, leaves, crashes = [], [], []
    with Admin(cluster.bootstrap) as admin:
        for r in range(rounds):
            group = f"bench-{r}"
            members = [Member(cluster.bootstrap, group, topic, session_ms) for _ in range(9)]
            wait_stable(admin, group, 9, partitions, seconds)
            started = time.perf_counter()
            members.append(Member(cluster.bootstrap, group, topic, session_ms))
            wait_stable(admin, group, 10, partitions, seconds)
            joins.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            members.pop().close()
            wait_stable(admin, group, 9, partitions, seconds)
            leaves.append((time.perf_counter() - started) * 1000)
            members.append(Member(cluster.bootstrap, group, topic, session_ms))
            wait_stable(admin, group, 10, partitions, seconds)
            victim = members.pop()
            started = time.perf_counter()
            victim.go_silent()
            wait_stable(admin, group, 9, partitions, seconds + session_ms / 1000)
            crashes.append((time.perf_counter() - started) * 1000)
            for m in members:
                m.close()
            victim.consumer.close()
    return {"members": 10, "partitions": partitions, "rounds": rounds, "session_timeout_ms": session_ms,
            "join_to_stable_ms": _summary(joins), "leave_to_stable_ms": _summary(leaves),
            "crash_to_stable_ms": _summary(crashes)}


def _summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 1), "min": round(min(values), 1),
            "max": round(max(values), 1)}


def _group_member(bootstrap: str, group: str, topic: str, total: mp.Value, target: int, seconds: float,
                  out: mp.Queue) -> None:
    consumer = Consumer(
        ConsumerConfig(
            bootstrap=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1000,
            max_poll_records=5000,
        )
    )
    consumer.subscribe([topic])
    count = 0
    nbytes = 0
    first = last = None
    deadline = time.monotonic() + seconds
    while total.value < target and time.monotonic() < deadline:
        records = consumer.poll(0.2)
        if not records:
            continue
        last = time.time()  # wall clock: compared across the member processes
        first = first or last
        count += len(records)
        nbytes += sum(len(r.value) for r in records)
        with total.get_lock():
            total.value += len(records)
    consumer.close()
    out.put((count, nbytes, first, last))


def group_consume(cluster: LocalCluster, records: int, seconds: float) -> dict:
    topic = "bench-group-consume"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, 6, 3)
    value = os.urandom(100)
    with Producer(
        ProducerConfig(bootstrap=cluster.bootstrap, acks="1", enable_idempotence=False)
    ) as producer:
        for _ in range(records):
            producer.produce(topic, value)
        producer.flush()
    ctx = mp.get_context("spawn")
    total = ctx.Value("q", 0)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_group_member,
            args=(cluster.bootstrap, "bench-consume", topic, total, records, seconds, out),
        )
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(30)
    count = sum(r[0] for r in results)
    nbytes = sum(r[1] for r in results)
    elapsed = max(r[3] for r in results if r[3]) - min(r[2] for r in results if r[2])
    return {"members": 3, "partitions": 6, "record_bytes": 100, "records": count,
            "seconds": round(elapsed, 2), "records_per_s": round(count / elapsed),
            "mb_per_s": round(nbytes / elapsed / 1e6, 1), "per_member": [r[0] for r in results]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--records", type=int, default=600_000)
    p.add_argument("--session-ms", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=60)
    args = p.parse_args()
    with LocalCluster(Path(tempfile.mkdtemp(prefix="kanal-group-bench-")), controllers=3, brokers=3,
                      controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS) as cluster:
        cluster.start(timeout_s=90)
        result = {"rebalance": rebalance_cases(cluster, args.rounds, args.session_ms, args.seconds),
                  "group_consume": group_consume(cluster, args.records, args.seconds)}
        cluster.remove_data()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
