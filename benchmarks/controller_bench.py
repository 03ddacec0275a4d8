"""Controller quorum benchmark: starts its own 3-controller quorum on 127.0.0.1 and prints one JSON object.

    .venv/bin/python benchmarks/controller_bench.py [--writes 1000] [--inflight 8] [--failovers 5]
    .venv/bin/python benchmarks/controller_bench.py --admin-vs-pysyncobj [--rounds 5] [--seconds 5] \
        [--baseline-python ../main/.venv/bin/python]
    .venv/bin/python benchmarks/controller_bench.py --failovers-only [--failovers 5]

`--admin-vs-pysyncobj` (issue 25, goal 3) measures, side by side and alternating in one run, for `--rounds`
rounds (medians reported, with every round):
- kanal: metadata writes/s through the user's path — `kanal.clients.admin.Admin`'s CreateTopics call (the
  call `Admin.create_topic` makes, without its wait for the broker to see the leaders) → a real broker →
  the active controller of 3 (kanal.deploy.local_cluster: encrypted Raft with the cluster secret, the
  fsynced Raft journal, the fsynced metadata log: every write durable on a majority before it is
  acknowledged), single-partition topics, replication factor 1 (one broker), from 8 and from 64 client
  threads sharing one Admin, each for `--seconds`; the topics are deleted after each phase and the phase
  ends once the broker has removed their directories, so every phase starts from the same cluster;
- a bare pysyncobj 3-node quorum, three processes of its own started fresh in every round: its leader
  calls a replicated method with a `--payload-bytes` argument asynchronously, keeping
  `--pysyncobj-inflight` (1,000) calls in flight, and counts commands/s committed and applied for
  `--seconds` after one second of warm-up (a run with failed calls, a leader change, is run again). Two
  configurations: `pysyncobj` = its defaults (journal in memory, no encryption, appendEntriesUseBatch
  on), what the goal is measured against; `pysyncobj_comparable` = what of kanal's settings pysyncobj
  has: encrypted traffic (password) and its file journal (never fsynced: pysyncobj has no fsync);
- `rpc_chain` (grpc_floors.py), a floor: the same client threads calling through the path's two gRPC hops
  alone (an aio broker stand-in forwarding each call to an aio controller stand-in that answers at once:
  no decision, no Raft, no disk), at 8 and 64 clients;
- the ratio kanal / pysyncobj per round and of the medians. Goal: >= 0.5 at 64 clients. The floor's ratio
  to pysyncobj bounds kanal's: below 0.5, no change behind the same calls meets the goal in that run.
With `--baseline-python`, a second cluster run by that interpreter (the code before a change) takes the
same phases in the same rounds (`baseline_*`), and `after_over_baseline_*` is the median of the per-round
ratios this code / baseline.

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
import concurrent.futures
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import grpc
from grpc_floors import rpc_chain_rate
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kanal.deploy.local_cluster import free_ports
from kanal.v1 import admin_pb2, controller_pb2, controller_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

NO_FORWARD = (("kanal-forwarded", "bench"),)
ADMIN_GOAL_RATIO_MIN = 0.5
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
        ports = free_ports(2 * size)
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
                    *die_with_parent,
                    self.python,
                    "-m",
                    "kanal.raft.controller_main",
                    "--id",
                    str(i),
                    "--listen",
                    f"127.0.0.1:{self.grpc[i]}",
                    "--raft",
                    f"127.0.0.1:{self.raft[i]}",
                    "--peers",
                    self.peers,
                    "--data-dir",
                    str(self.base / f"controller-{i}"),
                    "--log-level",
                    "WARNING",
                    *self.extra_args,
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
                            topics=[
                                admin_pb2.CreatableTopic(name="probe", partitions=1, replication_factor=1)
                            ],
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
                    health_pb2_grpc.HealthStub(self.channels[i])
                    .Check(health_pb2.HealthCheckRequest(), timeout=1)
                    .status
                    == health_pb2.HealthCheckResponse.SERVING
                    for i in self.ids
                )
                ends = {
                    self.stub(i)
                    .DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=1)
                    .metadata_end_offset
                    for i in self.ids
                }
                if serving and len(ends) == 1:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise TimeoutError("the quorum did not catch up")


def _create(stub, names, partitions=1, rf=3, timeout=30.0):
    reply = stub.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreatableTopic(name=n, partitions=partitions, replication_factor=rf) for n in names
            ]
        ),
        timeout=timeout,
        metadata=NO_FORWARD,
    )
    bad = [r for r in reply.results if r.error]
    if bad:
        raise RuntimeError(f"create failed: {bad[0]}")


def _delete(stub, names):
    for start in range(0, len(names), 2000):
        stub.DeleteTopics(
            admin_pb2.DeleteTopicsRequest(names=names[start : start + 2000]), timeout=60, metadata=NO_FORWARD
        )


def _percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def _run_workers(worker, count: int) -> None:
    """Run `worker` on `count` threads at once and wait for all of them. A worker handles the failures it
    expects; anything else is raised here, so a phase never reports a rate its dead workers did not run."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        for future in [pool.submit(worker) for _ in range(count)]:
            future.result()


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

    _run_workers(worker, inflight)
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


# ---- --admin-vs-pysyncobj: the user's Admin path beside a bare pysyncobj quorum ------------------------


def _bare_pysyncobj_node(args: argparse.Namespace) -> int:
    """One node of the bare pysyncobj quorum (a child process). Whichever node is the leader once one is
    elected drives: it keeps `--pysyncobj-inflight` asynchronous calls in flight for `--seconds` (after one
    second of warm-up) and writes {"commands": n, "seconds": s, "failed": f} to `--pysyncobj-result`; the
    nodes run until the parent stops them by PID. Driving on the leader spares the calls pysyncobj's
    forwarding hop, so the peer is measured at its best."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    conf = SyncObjConf(dynamicMembershipChange=False)
    if args.pysyncobj_conf == "comparable":
        # What kanal's controllers also have: encrypted Raft traffic and a journal on disk (pysyncobj's
        # own: written through an mmap, never fsynced; it has no setting that fsyncs).
        conf = SyncObjConf(
            dynamicMembershipChange=False,
            password="kanal-bench-secret",
            journalFile=args.pysyncobj_result + f".{args.pysyncobj_node.rsplit(':', 1)[1]}.journal",
        )

    class Register(SyncObj):
        def __init__(self, address: str, others: list[str]) -> None:
            super().__init__(address, others, conf)
            self.applied = 0

        @replicated
        def put(self, value: bytes) -> int:
            self.applied += 1
            return self.applied

    node = Register(args.pysyncobj_node, [a for a in args.pysyncobj_peers.split(",") if a])
    deadline = time.monotonic() + 60
    while not node._isReady() or node._getLeader() is None:
        if time.monotonic() > deadline:
            raise TimeoutError("the bare pysyncobj quorum elected no leader in 60 s")
        time.sleep(0.01)
    if node._getLeader() != node.selfNode:
        while True:  # stopped by the parent (SIGTERM, by PID)
            time.sleep(1)
    payload = os.urandom(args.payload_bytes)
    cond = threading.Condition()
    state = {"inflight": 0, "done": 0, "failed": 0}

    def callback(_result, error) -> None:
        with cond:
            state["inflight"] -= 1
            state["done" if error == 0 else "failed"] += 1
            cond.notify()

    start = time.monotonic()
    measuring_from = start + 1.0  # warm-up
    stop_at = measuring_from + args.seconds
    done_at_start = None
    while time.monotonic() < stop_at:
        with cond:
            if done_at_start is None and time.monotonic() >= measuring_from:
                done_at_start = state["done"]
            while state["inflight"] >= args.pysyncobj_inflight and time.monotonic() < stop_at:
                cond.wait(0.05)
            state["inflight"] += 1
        node.put(payload, callback=callback)
    with cond:
        done = state["done"] - (done_at_start or 0)
        failed = state["failed"]
    partial = Path(args.pysyncobj_result + ".tmp")
    partial.write_text(
        json.dumps(
            {"commands": done, "seconds": round(time.monotonic() - measuring_from, 3), "failed": failed}
        )
    )
    os.replace(partial, args.pysyncobj_result)  # the parent sees the whole result or none
    while True:  # stopped by the parent
        time.sleep(1)


def bench_bare_pysyncobj(
    base: Path, seconds: float, inflight: int, payload_bytes: int, conf: str = "defaults"
) -> dict:
    """Start a bare pysyncobj 3-node quorum, let its leader drive it, stop it; commands/s. A run in which
    calls failed (a leader change on a busy machine) is run again, twice at most."""
    for attempt in range(1, 4):
        result = _bare_pysyncobj_once(base, seconds, inflight, payload_bytes, conf)
        result["attempt"] = attempt
        if result["failed"] == 0:
            break
        log(f"bare pysyncobj ({conf}): {result['failed']} calls failed (leader change?); running it again")
    return result


def _bare_pysyncobj_once(base: Path, seconds: float, inflight: int, payload_bytes: int, conf: str) -> dict:
    ports = free_ports(3)
    addresses = [f"127.0.0.1:{p}" for p in ports]
    result_file = base / f"pysyncobj-result-{uuid.uuid4().hex[:8]}.json"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for n, address in enumerate(addresses):
            others = ",".join(a for a in addresses if a != address)
            command = [sys.executable, __file__, "--pysyncobj-node", address, "--pysyncobj-peers", others,
                       "--seconds", str(seconds), "--pysyncobj-inflight", str(inflight),
                       "--payload-bytes", str(payload_bytes), "--pysyncobj-result", str(result_file),
                       "--pysyncobj-conf", conf]
            with open(base / f"pysyncobj-{n}.err", "ab") as err:
                procs.append(
                    subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
                )
        deadline = time.monotonic() + seconds + 90
        while not result_file.exists():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"the bare pysyncobj quorum gave no result: "
                                   f"{(base / 'pysyncobj-0.err').read_text()[-2000:]}")
            time.sleep(0.1)
        result = json.loads(result_file.read_text())
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
    result["commands_per_s"] = round(result["commands"] / result["seconds"], 1)
    return result


def _cpu_s(pid: int) -> float:
    """CPU time (user + system) a process has used so far (Linux /proc), 0 when it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def bench_admin_writes(admin, clients: int, seconds: float, prefix: str,
                       broker_dirs: list[Path] | None = None, pids: dict[str, int] | None = None) -> dict:
    """Single-partition topic creates through Admin (→ broker → active controller) from `clients`
    threads for `seconds`; the topics are deleted afterwards (not timed), and when `broker_dirs` are
    given, the phase ends only once no broker holds a directory of them any more, so a phase never pays
    for the previous phase's deletions. A failed create (REQUEST_TIMED_OUT on a starved machine) is
    counted in `errors`, not in `writes`, and its topic is deleted too (it may have been applied).
    `pids` (name -> pid): the CPU each of those processes used per write during the timed part — on a
    shared machine a steadier figure than writes/s."""
    lock = threading.Lock()
    names: list[str] = []
    failed: list[str] = []
    latencies: list[float] = []
    errors: list[str] = []
    counter = iter(range(1 << 30))
    cpu_before = {name: _cpu_s(pid) for name, pid in (pids or {}).items()}
    cpu_before["client"] = time.process_time()
    start = time.monotonic()
    stop_at = start + seconds

    def worker() -> None:
        while time.monotonic() < stop_at:
            with lock:
                name = f"{prefix}-{next(counter)}"
            request = admin_pb2.CreateTopicsRequest(
                topics=[admin_pb2.CreatableTopic(name=name, partitions=1, replication_factor=1)])
            t = time.monotonic()
            try:
                # The call Admin.create_topic makes (Admin._call: any broker, which forwards to the active
                # controller); create_topic then polls the broker's metadata for the leader, which is the
                # brokers' metadata propagation, not the controller's write.
                result = admin._call("CreateTopics", request).results[0]
            except KanalError as exc:  # the admin client's every failure: counted and reported with the phase
                with lock:
                    errors.append(repr(exc))
                    failed.append(name)
                continue
            if result.error:
                # TOPIC_ALREADY_EXISTS: the broker tried again after an attempt deadline and the first
                # attempt had been applied (a starved machine). Not counted as a write.
                with lock:
                    errors.append(f"{name}: {result.error} {result.error_message}")
                    failed.append(name)
                continue
            with lock:
                names.append(name)
                latencies.append(time.monotonic() - t)

    _run_workers(worker, clients)
    elapsed = time.monotonic() - start
    cpu_after = {name: _cpu_s(pid) for name, pid in (pids or {}).items()}
    cpu_after["client"] = time.process_time()
    cpu_ms_per_write = {name: round((cpu_after[name] - cpu_before[name]) * 1000 / max(1, len(names)), 3)
                        for name in cpu_after}
    cpu_ms_per_write["total"] = round(sum(cpu_ms_per_write.values()), 3)
    created = names + failed
    for first in range(0, len(created), 500):
        reply = admin._call("DeleteTopics", admin_pb2.DeleteTopicsRequest(names=created[first:first + 500]))
        bad = [
            r
            for r in reply.results
            if r.error and not (r.name in failed and r.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        ]
        if bad:
            raise RuntimeError(f"delete failed: {bad[0]}")
    deadline = time.monotonic() + PHASE_TIME_MAX_S
    while broker_dirs and any(
        entry.startswith(f"{prefix}-") for d in broker_dirs if d.is_dir() for entry in os.listdir(d)
    ):
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the brokers still hold partitions of deleted topics {prefix}-* after {PHASE_TIME_MAX_S} s"
            )
        time.sleep(0.1)
    return {
        "clients": clients,
        "writes": len(names),
        "seconds": round(elapsed, 3),
        "writes_per_s": round(len(names) / elapsed, 1),
        "latency_ms_p50": round((_percentile(latencies, 0.5) or 0) * 1000, 2),
        "latency_ms_p99": round((_percentile(latencies, 0.99) or 0) * 1000, 2),
        "errors": len(errors),
        **({"first_error": errors[0]} if errors else {}),
        "cpu_ms_per_write": cpu_ms_per_write,
    }


@contextlib.contextmanager
def _interpreter(python: str):
    """While the block runs, child processes that LocalCluster starts use `python` (another kanal
    install: the code before a change). LocalCluster starts its nodes with sys.executable."""
    saved = sys.executable
    sys.executable = python
    try:
        yield
    finally:
        sys.executable = saved


def run_admin_vs_pysyncobj(args: argparse.Namespace, base: Path) -> dict:
    from kanal.clients.admin import Admin
    from kanal.deploy.local_cluster import LocalCluster

    variants = {"kanal": LocalCluster(base / "cluster", controllers=3, brokers=1)}
    if args.baseline_python:
        # The same phases against a cluster of the code before the change, in the same rounds.
        variants["baseline"] = LocalCluster(base / "baseline", controllers=3, brokers=1)
    rounds: list[dict] = []
    admins: dict[str, Admin] = {}
    try:
        for name, cluster in variants.items():
            with _interpreter(args.baseline_python if name == "baseline" else sys.executable):
                cluster.start()
            admins[name] = Admin(cluster.bootstrap)
            admins[name]._call("CreateTopics", admin_pb2.CreateTopicsRequest(  # warm-up: a leader, channels
                topics=[admin_pb2.CreatableTopic(name="warm-up", partitions=1, replication_factor=1)]))
        for r in range(args.rounds):
            # Alternate which side goes first, so none always runs on a warmer (or more tired) machine.
            entry: dict = {"round": r + 1}
            order = [*variants, "pysyncobj", "rpc_chain"]
            order = order[r % len(order):] + order[: r % len(order)]
            for side in order:
                if side in variants:
                    cluster = variants[side]
                    for clients in (8, 64):
                        entry[f"{side}_{clients}"] = bench_admin_writes(
                            admins[side], clients, args.seconds, f"r{r}c{clients}",
                            [cluster.data_dir / f"broker-{b.node_id}" for b in cluster.brokers],
                            {n.name: n.pid for n in cluster.nodes if n.pid is not None})
                        log(f"round {r + 1} {side} {clients} clients: {entry[f'{side}_{clients}']}")
                elif side == "rpc_chain":
                    for clients in (8, 64):
                        entry[f"rpc_chain_{clients}"] = rpc_chain_rate(clients, args.seconds)
                        log(f"round {r + 1} rpc_chain {clients} clients: {entry[f'rpc_chain_{clients}']}")
                else:
                    for conf, key in (("defaults", "pysyncobj"), ("comparable", "pysyncobj_comparable")):
                        entry[key] = bench_bare_pysyncobj(base, args.seconds, args.pysyncobj_inflight,
                                                          args.payload_bytes, conf)
                        log(f"round {r + 1} {key}: {entry[key]}")
            bare = entry["pysyncobj"]["commands_per_s"]
            comparable = entry["pysyncobj_comparable"]["commands_per_s"]
            for clients in (8, 64):
                chain = entry[f"rpc_chain_{clients}"]["calls_per_s"]
                entry[f"rpc_chain_ratio_{clients}"] = round(chain / bare, 4)
            for side in variants:
                prefix = "" if side == "kanal" else f"{side}_"
                for clients in (8, 64):
                    entry[f"{prefix}ratio_{clients}"] = round(
                        entry[f"{side}_{clients}"]["writes_per_s"] / bare, 4
                    )
                    entry[f"{prefix}ratio_{clients}_comparable"] = round(
                        entry[f"{side}_{clients}"]["writes_per_s"] / comparable, 4)
            rounds.append(entry)
    finally:
        for admin in admins.values():
            admin.close()
        for cluster in variants.values():
            cluster.stop()
    medians = {
        "kanal_8_writes_per_s": statistics.median(e["kanal_8"]["writes_per_s"] for e in rounds),
        "kanal_64_writes_per_s": statistics.median(e["kanal_64"]["writes_per_s"] for e in rounds),
        "kanal_64_latency_ms_p50": statistics.median(e["kanal_64"]["latency_ms_p50"] for e in rounds),
        "pysyncobj_commands_per_s": statistics.median(e["pysyncobj"]["commands_per_s"] for e in rounds),
        "pysyncobj_comparable_commands_per_s": statistics.median(
            e["pysyncobj_comparable"]["commands_per_s"] for e in rounds),
        "ratio_8": statistics.median(e["ratio_8"] for e in rounds),
        "ratio_64": statistics.median(e["ratio_64"] for e in rounds),
        "ratio_64_comparable": statistics.median(e["ratio_64_comparable"] for e in rounds),
        "rpc_chain_8_calls_per_s": statistics.median(e["rpc_chain_8"]["calls_per_s"] for e in rounds),
        "rpc_chain_64_calls_per_s": statistics.median(e["rpc_chain_64"]["calls_per_s"] for e in rounds),
        "rpc_chain_ratio_64": statistics.median(e["rpc_chain_ratio_64"] for e in rounds),
    }
    for side in variants:
        for clients in (8, 64):
            medians[f"{side}_{clients}_cpu_ms_per_write"] = statistics.median(
                e[f"{side}_{clients}"]["cpu_ms_per_write"]["total"] for e in rounds)
    if args.baseline_python:
        for clients in (8, 64):
            medians[f"baseline_{clients}_writes_per_s"] = statistics.median(
                e[f"baseline_{clients}"]["writes_per_s"] for e in rounds)
            medians[f"baseline_ratio_{clients}"] = statistics.median(
                e[f"baseline_ratio_{clients}"] for e in rounds
            )
            medians[f"after_over_baseline_{clients}"] = statistics.median(
                e[f"kanal_{clients}"]["writes_per_s"] / e[f"baseline_{clients}"]["writes_per_s"]
                for e in rounds
            )
    return {
        "benchmark": "controller_admin_vs_pysyncobj",
        "kanal": "Admin CreateTopics -> 1 broker -> active controller of 3; encrypted Raft, fsynced Raft "
                 "journal and metadata log; 1 partition, RF 1",
        "pysyncobj": f"bare 3-node quorum driven by its leader, {args.pysyncobj_inflight} async calls in "
                     f"flight, {args.payload_bytes}-byte argument; 'pysyncobj': its defaults (journal in "
                     "memory, no encryption); 'pysyncobj_comparable': encrypted (password) with its file "
                     "journal (mmap, never fsynced: pysyncobj cannot fsync); the goal ratio is against the "
                     "defaults",
        "baseline": args.baseline_python,
        "seconds_per_phase": args.seconds,
        "rounds": rounds,
        "medians": medians,
        "rpc_chain": "client threads -> aio broker stand-in -> aio controller stand-in answering at once "
                     "(grpc_floors.py): the path's two gRPC hops with no work behind them",
        "goal": {"ratio_64_min": ADMIN_GOAL_RATIO_MIN, "met": medians["ratio_64"] >= ADMIN_GOAL_RATIO_MIN,
                 "floor_rules_it_out": medians["rpc_chain_ratio_64"] < ADMIN_GOAL_RATIO_MIN},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
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
    parser.add_argument("--admin-vs-pysyncobj", action="store_true",
                        help="Admin-path writes/s beside a bare pysyncobj quorum's commands/s (issue 25)")
    parser.add_argument("--failovers-only", action="store_true", help="measure only failover")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each timed phase")
    parser.add_argument("--pysyncobj-inflight", type=int, default=1000)
    parser.add_argument(
        "--baseline-python",
        help="with --admin-vs-pysyncobj: also run a cluster with this "
        "interpreter (another kanal install, e.g. main's .venv/bin/python) in the same rounds",
    )
    parser.add_argument("--payload-bytes", type=int, default=256)
    parser.add_argument("--pysyncobj-node", help=argparse.SUPPRESS)
    parser.add_argument("--pysyncobj-peers", default="", help=argparse.SUPPRESS)
    parser.add_argument("--pysyncobj-result", help=argparse.SUPPRESS)
    parser.add_argument(
        "--pysyncobj-conf", choices=["defaults", "comparable"], default="defaults", help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.pysyncobj_node:
        return _bare_pysyncobj_node(args)
    base = Path(tempfile.mkdtemp(prefix="kanal-controller-bench-"))
    if args.admin_vs_pysyncobj:
        try:
            print(json.dumps(run_admin_vs_pysyncobj(args, base)))
        finally:
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
        return 0
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
                controller_pb2.RegisterBrokerRequest(
                    broker_id=b, incarnation_id=uuid.uuid4().hex, endpoint=f"127.0.0.1:{30000 + b}"
                ),
                timeout=10,
            )
            stub.BrokerHeartbeat(
                controller_pb2.BrokerHeartbeatRequest(
                    broker_id=b, broker_epoch=reply.broker_epoch, metadata_offset=1 << 40
                ),
                timeout=10,
            )
        log(f"quorum up in {base}, controller {active} active, {args.brokers} brokers")
        if not args.failovers_only:
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
