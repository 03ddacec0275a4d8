"""Controller quorum benchmark: starts its own 3-controller quorum on 127.0.0.1 and prints one JSON object.

    .venv/bin/python benchmarks/controller_bench.py [--writes 1000] [--inflight 8] [--failovers 5]

Measures, against real controller processes:
- metadata writes/s: single-partition topic creates (replication factor 3) sent back to back by one
  client, then with `--inflight` requests in flight (one thread each), straight to the active controller;
  the topics of each phase are deleted afterwards, so both phases start from the same cluster size;
- the time to create one topic of 10,000 partitions (after registering `--brokers` fake brokers);
- failover: the time from SIGKILL of the active controller to the first write accepted by the new one
  (median of `--failovers`; the killed controller is restarted and caught up between rounds).

Every loop is bounded in count and time; every process started here is stopped by its PID. Progress goes
to stderr, the JSON to stdout. Goals (DESIGN/issue): >= 1,000 writes/s, 10,000 partitions < 3 s,
failover < 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kanal.v1 import admin_pb2, controller_pb2, controller_pb2_grpc

NO_FORWARD = (("kanal-forwarded", "bench"),)
PHASE_TIME_MAX_S = 120.0


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class LocalQuorum:
    """Controller processes on loopback, started and stopped by PID."""

    def __init__(
        self, base: Path, size: int, extra_args: list[str], secret: str | None = "kanal-bench-secret",
        python: str = sys.executable,
    ) -> None:
        self.base = base
        self.python = python  # the interpreter (and so the kanal install) the controllers run
        self.ids = list(range(1, size + 1))
        ports = _free_ports(2 * size)
        self.grpc = {i: ports[2 * i - 2] for i in self.ids}
        self.raft = {i: ports[2 * i - 1] for i in self.ids}
        self.peers = ",".join(f"{i}=127.0.0.1:{self.raft[i]}=127.0.0.1:{self.grpc[i]}" for i in self.ids)
        self.extra_args = [*extra_args, *(["--cluster-secret", secret] if secret else [])]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.channels = {i: grpc.insecure_channel(f"127.0.0.1:{self.grpc[i]}") for i in self.ids}

    def start(self, i: int) -> None:
        with open(self.base / f"controller-{i}.out", "ab") as out:  # Popen keeps its own copy
            die_with_parent = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
            self.procs[i] = subprocess.Popen(
                [
                    *die_with_parent, self.python, "-m", "kanal.raft.controller_main",
                    "--id", str(i), "--listen", f"127.0.0.1:{self.grpc[i]}", "--raft", f"127.0.0.1:{self.raft[i]}",
                    "--peers", self.peers, "--data-dir", str(self.base / f"controller-{i}"),
                    "--log-level", "WARNING", *self.extra_args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def stub(self, i: int) -> controller_pb2_grpc.ControllerStub:
        return controller_pb2_grpc.ControllerStub(self.channels[i])

    def alive(self, i: int) -> bool:
        return i in self.procs and self.procs[i].poll() is None

    def kill(self, i: int) -> None:
        os.kill(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for channel in self.channels.values():
            channel.close()

    def active(self, timeout_s: float = 30.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in self.ids:
                if not self.alive(i):
                    continue
                try:
                    self.stub(i).CreateTopics(
                        admin_pb2.CreateTopicsRequest(
                            topics=[admin_pb2.CreatableTopic(name="probe", partitions=1, replication_factor=1)],
                            validate_only=True,
                        ),
                        timeout=1,
                        metadata=NO_FORWARD,
                    )
                    return i
                except grpc.RpcError:
                    continue
            time.sleep(0.02)
        raise TimeoutError("no active controller")

    def wait_serving_and_caught_up(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                serving = all(
                    health_pb2_grpc.HealthStub(self.channels[i]).Check(health_pb2.HealthCheckRequest(), timeout=1).status
                    == health_pb2.HealthCheckResponse.SERVING
                    for i in self.ids
                )
                ends = {self.stub(i).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=1).metadata_end_offset for i in self.ids}
                if serving and len(ends) == 1:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise TimeoutError("the quorum did not catch up")


def _free_ports(n: int) -> list[int]:
    sockets = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _create(stub, names, partitions=1, rf=3, timeout=30.0):
    reply = stub.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name=n, partitions=partitions, replication_factor=rf) for n in names]
        ),
        timeout=timeout,
        metadata=NO_FORWARD,
    )
    bad = [r for r in reply.results if r.error]
    if bad:
        raise RuntimeError(f"create failed: {bad[0]}")


def _delete(stub, names):
    for start in range(0, len(names), 2000):
        stub.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=names[start : start + 2000]), timeout=60, metadata=NO_FORWARD)


def _percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def bench_back_to_back(stub, count: int) -> dict:
    latencies = []
    names = []
    start = time.monotonic()
    for n in range(count):
        if time.monotonic() - start > PHASE_TIME_MAX_S:
            break
        name = f"seq-{n}"
        t = time.monotonic()
        _create(stub, [name])
        latencies.append(time.monotonic() - t)
        names.append(name)
    elapsed = time.monotonic() - start
    _delete(stub, names)
    return {
        "writes": len(names),
        "writes_per_s": round(len(names) / elapsed, 1),
        "latency_ms_p50": round(_percentile(latencies, 0.5) * 1000, 2),
        "latency_ms_p99": round(_percentile(latencies, 0.99) * 1000, 2),
    }


def bench_in_flight(stub, count: int, inflight: int) -> dict:
    lock = threading.Lock()
    counter = iter(range(count))
    done: list[str] = []
    errors: list[str] = []
    start = time.monotonic()

    def worker():
        while time.monotonic() - start < PHASE_TIME_MAX_S:
            with lock:
                n = next(counter, None)
            if n is None:
                return
            try:
                _create(stub, [f"par-{n}"])
            except (grpc.RpcError, RuntimeError) as exc:
                errors.append(str(exc))
                return
            with lock:
                done.append(f"par-{n}")

    threads = [threading.Thread(target=worker) for _ in range(inflight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    if errors:
        raise RuntimeError(errors[0])
    _delete(stub, done)
    return {"writes": len(done), "in_flight": inflight, "writes_per_s": round(len(done) / elapsed, 1)}


def bench_big_topic(stub, partitions: int) -> dict:
    t = time.monotonic()
    _create(stub, ["big-topic"], partitions=partitions, rf=3, timeout=60)
    elapsed = time.monotonic() - t
    _delete(stub, ["big-topic"])
    return {"partitions": partitions, "replication_factor": 3, "seconds": round(elapsed, 3)}


def bench_failover(q: LocalQuorum, rounds: int) -> dict:
    times = []
    for r in range(rounds):
        q.wait_serving_and_caught_up()
        victim = q.active()
        others = [i for i in q.ids if i != victim]
        t0 = time.monotonic()
        q.kill(victim)
        accepted = None
        n = 0
        while accepted is None and time.monotonic() - t0 < 30:
            for i in others:
                n += 1
                try:
                    _create(q.stub(i), [f"failover-{r}-{n}"], rf=1, timeout=2)
                    accepted = time.monotonic() - t0
                    break
                except grpc.RpcError:
                    continue
        if accepted is None:
            raise TimeoutError("no write accepted within 30 s of the failover")
        times.append(accepted)
        log(f"failover {r + 1}/{rounds}: {accepted * 1000:.0f} ms")
        q.start(victim)
    q.wait_serving_and_caught_up()
    return {
        "rounds": rounds,
        "median_ms": round(statistics.median(times) * 1000),
        "all_ms": [round(t * 1000) for t in times],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=1000, help="topic creates per throughput phase")
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--brokers", type=int, default=12)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--no-cluster-secret", action="store_true", help="plain Raft traffic (no encryption)")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kanal-controller-bench-"))
    secret = None if args.no_cluster_secret else "kanal-bench-secret"
    q = LocalQuorum(base, 3, ["--session-timeout-ms", "600000"], secret)
    result: dict = {
        "benchmark": "controller_quorum",
        "controllers": 3,
        "raft_encrypted": secret is not None,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    try:
        for i in q.ids:
            q.start(i)
        active = q.active()
        q.wait_serving_and_caught_up()
        stub = q.stub(active)
        for b in range(args.brokers):
            reply = stub.RegisterBroker(
                controller_pb2.RegisterBrokerRequest(broker_id=b, incarnation_id=uuid.uuid4().hex, endpoint=f"127.0.0.1:{30000 + b}"),
                timeout=10,
            )
            stub.BrokerHeartbeat(
                controller_pb2.BrokerHeartbeatRequest(broker_id=b, broker_epoch=reply.broker_epoch, metadata_offset=1 << 40),
                timeout=10,
            )
        log(f"quorum up in {base}, controller {active} active, {args.brokers} brokers")
        result["back_to_back"] = bench_back_to_back(stub, args.writes)
        log(f"back to back: {result['back_to_back']}")
        result["in_flight"] = bench_in_flight(stub, args.writes, args.inflight)
        log(f"in flight: {result['in_flight']}")
        result["big_topic"] = bench_big_topic(stub, args.partitions)
        log(f"big topic: {result['big_topic']}")
        result["failover"] = bench_failover(q, args.failovers)
        result["goals"] = {
            "writes_per_s_min": 1000,
            "big_topic_seconds_max": 3,
            "failover_ms_max": 2000,
        }
    finally:
        q.stop_all()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
