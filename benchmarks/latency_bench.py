"""End-to-end latency of kanal beside NATS JetStream's push consumer, in alternating rounds
(issue 25, goals 1-2).

    python benchmarks/latency_bench.py [--rounds 5] [--seconds 5] [--rate 2000] [--no-install]

Its own setup, not the test suite's: Debian's `nats-server` (apt-get, as root) and `nats-py` (pip, into the
interpreter running this) are installed when missing; `--no-install` refuses instead.

Three cases, each a producer in this process paced at --rate records/s (linger 0; 100-byte payloads that
start with their send time in ns) and a consumer in a process of its own, which notes the receive time
(one machine, one clock):

  kanal_1_broker_acks_1   one broker, a topic of one partition, Producer acks=1 (not idempotent), Consumer
                          with fetch_max_wait_ms 100 (cluster_bench.py's latency case)
  kanal_rf3_acks_all      three brokers, RF=3, min.insync.replicas=2, acks=all, the same clients
  jetstream_push          `nats-server -js` (file storage, one stream), nats-py publishing each message and
                          waiting for its ack (a stored message, as acks=1), an ephemeral push consumer
                          (deliver new, ack policy none: kanal's Consumer acknowledges nothing either)

and four floors, which bound what any design on Python gRPC reaches in the same round:

  grpc_round_trip         a bare gRPC round trip at the same pace: the health service's Check on the
                          one-broker cluster's broker, from a plain channel in this process, each call
                          timed alone. A record's path holds at least a request leg (Produce) and a reply
                          leg (the parked Fetch's answer), about one such round trip, so its p99 over
                          JetStream's is a floor for goal 1's ratio: above 3, no design on gRPC meets it
  floor_unary_protocol    end to end through a stand-in broker that does nothing but hold the records in
                          memory, with kanal's calls: unary Produce from a sender thread (one in flight)
                          and a unary long-poll Fetch from the consumer's main thread (grpc_floors.py)
  floor_stream_protocol   the same stand-in with the records on open streams: a bidirectional Produce
                          stream and a server stream pushing each append to the consumer (no request per
                          answer)
  floor_unary_push        the same stand-in, kanal's unary Produce and that server stream to the consumer

Both kanal clusters (one controller each) and the NATS server run for the whole benchmark (each floor case
starts a stand-in of its own); every round runs the seven cases once, in an order rotated from round to
round, each on a fresh topic or subject. Prints one JSON object: every round's p50 / p99 / max per case,
the medians of the rounds, and the ratios the goals are set on, p99 of kanal_1_broker_acks_1 /
jetstream_push (goal <= 3) and p99 of kanal_rf3_acks_all / kanal_1_broker_acks_1 (goal <= 1.5), each as
the ratio of the medians and as the median of the rounds' own ratios (a round's cases share the load of
the moment; `met` is judged on the latter), and the same ratios of the p50 medians, and the floors (each
floor case's p99 / jetstream_push p99, median of the rounds' ratios; a protocol floor above 3 says goal 1
is out of reach with that protocol in that run).
Every loop is bounded by count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from cluster_bench import create_topic, latency, latency_ms, latency_record, latency_summary, paced
from grpc_floors import protocol_latency
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kanal.deploy.local_cluster import LocalCluster, free_ports

CASES = ("kanal_1_broker_acks_1", "kanal_rf3_acks_all", "jetstream_push", "grpc_round_trip",
         "floor_unary_protocol", "floor_stream_protocol", "floor_unary_push")
GOALS = {"kanal_1_broker_p99_vs_jetstream_p99": ("kanal_1_broker_acks_1", "jetstream_push", 3.0),
         "kanal_rf3_p99_vs_kanal_1_broker_p99": ("kanal_rf3_acks_all", "kanal_1_broker_acks_1", 1.5)}
FLOORS = ("grpc_round_trip", "floor_unary_protocol", "floor_stream_protocol", "floor_unary_push")
NATS_SERVER_PATHS = ("/usr/sbin/nats-server", "/usr/bin/nats-server")


# ---- setup ----

def ensure_peers(install: bool) -> str:
    """The nats-server binary (installed from Debian when missing) and nats-py importable here."""
    server = shutil.which("nats-server") or next(
        (p for p in NATS_SERVER_PATHS if os.access(p, os.X_OK)), None
    )
    if server is None:
        if not install:
            raise SystemExit(
                "nats-server is missing: apt-get install nats-server (or run without --no-install)"
            )
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise SystemExit(
                "nats-server is missing and this is not root on Debian: install it, then run again"
            )
        first = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "nats-server"], capture_output=True, check=False
        )
        if first.returncode:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", "nats-server"], check=True, capture_output=True
            )
        server = shutil.which("nats-server") or next(p for p in NATS_SERVER_PATHS if os.access(p, os.X_OK))
    if importlib.util.find_spec("nats") is None:
        if not install:
            raise SystemExit(f"nats-py is missing: {sys.executable} -m pip install nats-py")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "nats-py>=2.6"], check=True)
    return server


class NatsServer:
    """`nats-server -js` on a free loopback port with its store in `store_dir`; stopped by PID."""

    def __init__(self, binary: str, store_dir: Path) -> None:
        self.port = free_ports(1)[0]
        self.url = f"nats://127.0.0.1:{self.port}"
        store_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(store_dir / "nats-server.log", "ab")  # noqa: SIM115 - the server's output, closed in stop()
        self.process = subprocess.Popen(
            [binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(store_dir)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"nats-server exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"nats-server did not listen within {timeout_s} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


# ---- JetStream ----

STREAM = "LATENCY"


async def _create_stream(url: str) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        await nc.jetstream().add_stream(name=STREAM, subjects=["latency.>"])
    finally:
        await nc.close()


def _jetstream_consumer(url: str, subject: str, count: int, seconds: float, ready, out: mp.Queue) -> None:
    """Its own process, as the kanal consumer is."""
    out.put(asyncio.run(_jetstream_consume(url, subject, count, seconds, ready)))


async def _jetstream_consume(url: str, subject: str, count: int, seconds: float, ready) -> list[float]:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await nats.connect(url)
    samples: list[float] = []
    done = asyncio.Event()

    async def received(msg) -> None:
        samples.append(latency_ms(msg.data, time.time_ns()))
        if len(samples) >= count:
            done.set()

    sub = await nc.jetstream().subscribe(
        subject,
        cb=received,
        manual_ack=True,
        deliver_policy=DeliverPolicy.NEW,
        config=ConsumerConfig(ack_policy=AckPolicy.NONE),
    )
    await nc.flush()  # the consumer exists and the subscription reached the server before anything is sent
    ready.set()
    try:
        await asyncio.wait_for(done.wait(), seconds + 10)
    except TimeoutError:
        pass
    await sub.unsubscribe()
    await nc.close()
    return samples


async def _jetstream_produce(url: str, subject: str, rate_s: int, count: int) -> None:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        interval = 1 / rate_s
        started = time.perf_counter()
        for i in range(count):
            target = started + i * interval
            while (now := time.perf_counter()) < target:
                await asyncio.sleep(min(0.0005, target - now))
            await js.publish(subject, latency_record(), timeout=10)
    finally:
        await nc.close()


def jetstream_latency(url: str, subject: str, rate_s: int, seconds: float) -> dict:
    count = int(rate_s * seconds)
    ctx = mp.get_context("spawn")
    ready, queue = ctx.Event(), ctx.Queue()
    reader = ctx.Process(target=_jetstream_consumer, args=(url, subject, count, seconds, ready, queue))
    reader.start()
    try:
        if not ready.wait(60):
            raise SystemExit("the JetStream consumer did not start")
        asyncio.run(_jetstream_produce(url, subject, rate_s, count))
        samples = queue.get(timeout=seconds + 30)
    finally:
        reader.join(30)
        if reader.is_alive():
            reader.kill()
    return latency_summary(samples, rate_s, count)


# ---- rounds ----

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="length of each case (records = rate x seconds)"
    )
    parser.add_argument("--rate", type=int, default=2000, help="records/s the producers are paced at")
    parser.add_argument(
        "--no-install", action="store_true", help="fail rather than install nats-server / nats-py"
    )
    parser.add_argument("--dir", default=None, help="where the clusters' and the NATS server's data go")
    args = parser.parse_args()
    if not 1 <= args.rounds <= 20 or not 1 <= args.seconds <= 60 or not 100 <= args.rate <= 20_000:
        parser.error("--rounds in [1, 20], --seconds in [1, 60], --rate in [100, 20000]")
    binary = ensure_peers(not args.no_install)
    root = Path(tempfile.mkdtemp(prefix="kanal-latency-bench-", dir=args.dir))
    one = LocalCluster(root / "one", controllers=1, brokers=1)
    three = LocalCluster(root / "three", controllers=1, brokers=3)
    nats_server = NatsServer(binary, root / "nats")
    rounds: list[dict] = []
    try:
        one.start(timeout_s=90)
        three.start(timeout_s=90)
        nats_server.wait_ready()
        asyncio.run(_create_stream(nats_server.url))
        runs = {
            "kanal_1_broker_acks_1": lambda name: _kanal_case(one, name, 1, "1", args),
            "kanal_rf3_acks_all": lambda name: _kanal_case(three, name, 3, "all", args),
            "jetstream_push": lambda name: jetstream_latency(nats_server.url, f"latency.{name}", args.rate,
                                                             args.seconds),
            "grpc_round_trip": lambda name: grpc_round_trip(one.brokers[0].endpoint, args.rate, args.seconds),
            "floor_unary_protocol": lambda name: protocol_latency("unary", args.rate, args.seconds),
            "floor_stream_protocol": lambda name: protocol_latency("stream", args.rate, args.seconds),
            "floor_unary_push": lambda name: protocol_latency("unary_push", args.rate, args.seconds),
        }
        for i in range(args.rounds):
            order = CASES[i % len(CASES):] + CASES[:i % len(CASES)]
            rounds.append({case: runs[case](f"r{i}-{case.replace('_', '-')}") for case in order})
            print(json.dumps({"round": i, **{c: rounds[-1][c] for c in CASES}}), file=sys.stderr)
    finally:
        one.stop()
        three.stop()
        nats_server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(summary(rounds, args), indent=2))


def grpc_round_trip(endpoint: str, rate_s: int, seconds: float) -> dict:
    """p50 / p99 of bare gRPC round trips (health Check) to `endpoint`, paced at rate_s, one at a time."""
    count = int(rate_s * seconds)
    samples: list[float] = []
    with grpc.insecure_channel(endpoint) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        request = health_pb2.HealthCheckRequest()
        check(request, timeout=10)  # connected before the clock starts
        for _ in paced(count, rate_s):
            t0 = time.perf_counter()
            check(request, timeout=10)
            samples.append((time.perf_counter() - t0) * 1000)
    return latency_summary(samples, rate_s, count)


def _kanal_case(cluster: LocalCluster, topic: str, rf: int, acks: str, args) -> dict:
    create_topic(cluster, topic, 1, rf, **({"min.insync.replicas": "2"} if rf == 3 else {}))
    return latency(cluster, topic, args.rate, args.seconds, acks=acks)


def summary(rounds: list[dict], args) -> dict:
    medians = {case: {q: statistics.median(r[case][q] for r in rounds) for q in ("p50_ms", "p99_ms")}
               for case in CASES}
    goals = {}
    for name, (num, den, goal) in GOALS.items():
        of_medians = round(medians[num]["p99_ms"] / medians[den]["p99_ms"], 3)
        of_rounds = round(statistics.median(r[num]["p99_ms"] / r[den]["p99_ms"] for r in rounds), 3)
        goals[name] = {"ratio_of_medians": of_medians, "median_of_round_ratios": of_rounds, "goal_max": goal,
                       "met": of_rounds <= goal}
    # p50 beside it: on a loaded machine a p99 of 10,000 records swings several-fold between rounds.
    p50 = {name.replace("p99", "p50"): round(medians[num]["p50_ms"] / medians[den]["p50_ms"], 3)
           for name, (num, den, _) in GOALS.items()}
    goal_1 = GOALS["kanal_1_broker_p99_vs_jetstream_p99"][2]
    floor = {}
    for case in FLOORS:
        ratio = round(statistics.median(r[case]["p99_ms"] / r["jetstream_push"]["p99_ms"] for r in rounds), 3)
        floor[f"{case}_p99_vs_jetstream_p99"] = ratio
        floor[f"{case}_rules_out_goal_1"] = ratio > goal_1
    return {"benchmark": "latency", "rate_records_s": args.rate, "seconds_per_case": args.seconds,
            "load_average_1m_at_end": round(os.getloadavg()[0], 1), "rounds": rounds, "medians": medians,
            "p99_ratios": goals, "p50_ratio_of_medians": p50, "floor": floor}


if __name__ == "__main__":
    main()
