"""Parked calls against one leader: does the broker keep answering while many calls wait?

    python benchmarks/purgatory_bench.py [--rounds 5] [--seconds 10] [--baseline-python PATH]

A cluster of 1 controller and 3 brokers on loopback; a topic `load` (1 partition, RF=3,
min.insync.replicas=2) and a topic `idle` (1 partition) both led by the same broker. Each round:
  - 1,000 consumer Fetches long-poll `idle` at its log end (max_wait_ms 30 s): they stay parked;
  - 100 producers each keep one acks=all Produce of one 100-byte record in flight on `load`;
  - Metadata is asked of the leader every 20 ms (deadline 5 s; a call past it counts as 5,000 ms).
For --seconds. Reported per round: Metadata p50/p99 ms, acks=all produces acknowledged and failed, ISR
shrinks on the leader, and how many fetches were parked. Goal (issue 17): Metadata p99 under 50 ms and no
ISR shrink.

--baseline-python runs the same rounds with another checkout's interpreter (its venv, so its kanal)
alternately with this one, and prints both sides and the ratio of the medians. Every loop is bounded by
count and time. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1 import admin_pb2, broker_pb2, broker_pb2_grpc
from kanal.v1.batch import NewRecord, build_batch

BROKER_FLAGS = ["--heartbeat-interval-ms", "500", "--replica-lag-ms-max", "10000"]
PARKED_FETCHES = 1000
PRODUCERS = 100
METADATA_EVERY_S = 0.02
METADATA_DEADLINE_S = 5.0
CHANNELS = 20  # the parked fetches spread over this many connections, as many consumers would


def metric(node, name: str, labels: str = "") -> float:
    text = urllib.request.urlopen(f"http://{node.extra['metrics']}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + labels + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def create_topic(cluster: LocalCluster, name: str, partitions: int, **configs: str) -> list[int]:
    """Create a topic (RF=3); each partition's leader once every ISR is full."""
    md = ClusterMetadata(cluster.bootstrap)
    try:
        topic = admin_pb2.CreatableTopic(
            name=name,
            partitions=partitions,
            replication_factor=3,
            configs=[admin_pb2.ConfigEntry(key=k, value=v) for k, v in configs.items()],
        )
        result = (
            md.any_stub().CreateTopics(admin_pb2.CreateTopicsRequest(topics=[topic]), timeout=30).results[0]
        )
        if result.error:
            raise RuntimeError(result.error_message)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            parts = md.refresh([name]).topics.get(name)
            if parts and all(p.leader >= 0 and len(p.isr) == 3 for p in parts):
                return [p.leader for p in parts]
            time.sleep(0.1)
        raise RuntimeError(f"{name} has no leaders with a full ISR")
    finally:
        md.close()


def fetch_at_end(
    topic: str, partition: int, offset: int, max_wait_ms: int = 30_000
) -> broker_pb2.FetchRequest:
    # replica_id -1, not left out: a checkout from before replica_id had presence took 0 for broker 0.
    request = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20)
    request.topics.add(topic=topic).partitions.add(
        partition=partition, fetch_offset=offset, max_bytes=1 << 20, current_leader_epoch=-1
    )
    return request


def one_round(leader_node, idle_partition: int, seconds: float) -> dict:
    channels = [grpc.insecure_channel(leader_node.endpoint) for _ in range(CHANNELS)]
    stubs = [broker_pb2_grpc.BrokerStub(c) for c in channels]
    try:
        stub = stubs[0]
        idle_end = (
            stub.Fetch(fetch_at_end("idle", idle_partition, 0, max_wait_ms=0), timeout=10)
            .topics[0]
            .partitions[0]
            .log_end_offset
        )
        shrinks_before = metric(leader_node, "kanal_broker_isr_shrinks_total")
        parked = [stubs[i % CHANNELS].Fetch.future(fetch_at_end("idle", idle_partition, idle_end), timeout=40)
                  for i in range(PARKED_FETCHES)]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and metric(
                leader_node, "kanal_fetch_purgatory_size", '{kind="consumer"}') < PARKED_FETCHES:
            time.sleep(0.05)
        parked_seen = metric(leader_node, "kanal_fetch_purgatory_size", '{kind="consumer"}')

        stop = threading.Event()
        counts = {"acked": 0, "failed": 0}
        lock = threading.Lock()
        value = b"x" * 100

        def producer(i: int) -> None:
            p_stub = stubs[i % CHANNELS]
            while not stop.is_set():
                request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=5000)
                request.topics.add(topic="load").partitions.add(
                    partition=0,
                    batches=[build_batch([NewRecord(value, timestamp_ms=int(time.time() * 1000))])],
                )
                try:
                    ok = p_stub.Produce(request, timeout=10).topics[0].partitions[0].error == 0
                except grpc.RpcError:
                    ok = False
                with lock:
                    counts["acked" if ok else "failed"] += 1

        threads = [threading.Thread(target=producer, args=(i,), daemon=True) for i in range(PRODUCERS)]
        for t in threads:
            t.start()
        latencies_ms = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            try:
                stub.Metadata(broker_pb2.MetadataRequest(topics=["load"]), timeout=METADATA_DEADLINE_S)
                latencies_ms.append((time.perf_counter() - started) * 1000)
            except grpc.RpcError:
                latencies_ms.append(METADATA_DEADLINE_S * 1000)
            time.sleep(METADATA_EVERY_S)
        stop.set()
        for t in threads:
            t.join(30)
        for f in parked:
            f.cancel()
        latencies_ms.sort()
        return {
            "metadata_calls": len(latencies_ms),
            "metadata_p50_ms": round(latencies_ms[len(latencies_ms) // 2], 2),
            "metadata_p99_ms": round(latencies_ms[int(len(latencies_ms) * 0.99)], 2),
            "metadata_max_ms": round(latencies_ms[-1], 2),
            "acks_all_acked": counts["acked"], "acks_all_failed": counts["failed"],
            "isr_shrinks": metric(leader_node, "kanal_broker_isr_shrinks_total") - shrinks_before,
            "fetches_parked": parked_seen,
        }
    finally:
        for c in channels:
            c.close()


def run_side(rounds: int, seconds: float) -> list[dict]:
    with (tempfile.TemporaryDirectory(prefix="purgatory-bench-") as tmp,
          LocalCluster(tmp, controllers=1, brokers=3, broker_flags=BROKER_FLAGS) as cluster):
        cluster.start(timeout_s=90)
        [leader] = create_topic(cluster, "load", 1, **{"min.insync.replicas": "2"})
        # One partition per broker: the parked fetches go to the one `load`'s leader leads.
        idle_partition = create_topic(cluster, "idle", 3).index(leader)
        node = next(b for b in cluster.brokers if b.node_id == leader)
        return [one_round(node, idle_partition, seconds) for _ in range(rounds)]


def summary(rounds: list[dict]) -> dict:
    keys = ("metadata_p50_ms", "metadata_p99_ms", "acks_all_acked", "acks_all_failed", "isr_shrinks")
    return {k: statistics.median(r[k] for r in rounds) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--baseline-python", default=None,
                        help="another checkout's interpreter: its rounds alternate with this one's")
    parser.add_argument("--one-side", action="store_true", help=argparse.SUPPRESS)  # a baseline's subprocess
    args = parser.parse_args()
    if args.one_side or args.baseline_python is None:
        rounds = run_side(args.rounds, args.seconds)
        print(json.dumps({"rounds": rounds, "median": summary(rounds)}))
        return
    sides: dict[str, list[dict]] = {"this": [], "baseline": []}
    for _ in range(args.rounds):
        for side, python in (("baseline", args.baseline_python), ("this", sys.executable)):
            out = subprocess.run(
                [python, __file__, "--one-side", "--rounds", "1", "--seconds", str(args.seconds)],
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            ).stdout
            sides[side] += json.loads(out.strip().splitlines()[-1])["rounds"]
    medians = {side: summary(rounds) for side, rounds in sides.items()}
    print(json.dumps({
        "parked_fetches": PARKED_FETCHES, "producers": PRODUCERS, "seconds": args.seconds,
        "rounds": sides, "median": medians,
        "metadata_p99_ratio_this_to_baseline": round(
            medians["this"]["metadata_p99_ms"] / max(medians["baseline"]["metadata_p99_ms"], 1e-9), 4),
    }))


if __name__ == "__main__":
    main()
