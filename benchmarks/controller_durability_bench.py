"""Controller writes before and after a change (issue 18: a durable Raft journal), side by side.

    .venv/bin/python benchmarks/controller_durability_bench.py --before OTHER_CHECKOUT/.venv/bin/python \
        [--rounds 5] [--writes 300] [--inflight 8]

Each round starts a fresh 3-controller quorum with each interpreter in turn (which goes first alternates
by round, PERFORMANCE.md), registers 3 brokers and measures metadata writes/s (single-partition topic
creates, replication factor 3) back to back and with `--inflight` in flight (controller_bench.py's
phases). Then, once per interpreter, a counting pass: `strace -f -c` attached to all three controllers
counts fsync + fdatasync calls during each phase, divided by the writes of the phase (strace slows the
processes, so the counting pass is not timed). Prints one JSON object: every round, the medians, the
after/before ratios and the syncs per write.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kanal.v1 import controller_pb2

_spec = importlib.util.spec_from_file_location(
    "controller_bench", Path(__file__).with_name("controller_bench.py")
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _quorum(python: str) -> tuple[object, Path]:
    base = Path(tempfile.mkdtemp(prefix="kanal-durability-bench-"))
    q = bench.LocalQuorum(base, 3, ["--session-timeout-ms", "600000"], python=python)
    for i in q.ids:
        q.start(i)
    active = q.active(60)
    q.wait_serving_and_caught_up()
    stub = q.stub(active)
    for b in range(3):
        reply = stub.RegisterBroker(
            controller_pb2.RegisterBrokerRequest(broker_id=b, incarnation_id=uuid.uuid4().hex,
                                                 endpoint=f"127.0.0.1:{30000 + b}"),
            timeout=10,
        )
        stub.BrokerHeartbeat(
            controller_pb2.BrokerHeartbeatRequest(
                broker_id=b, broker_epoch=reply.broker_epoch, metadata_offset=1 << 40
            ),
            timeout=10,
        )
    return q, base


def _close(q, base: Path) -> None:
    q.stop_all()
    shutil.rmtree(base, ignore_errors=True)


def _timed_round(python: str, writes: int, inflight: int) -> dict:
    q, base = _quorum(python)
    try:
        stub = q.stub(q.active())
        return {
            "back_to_back_writes_per_s": bench.bench_back_to_back(stub, writes)["writes_per_s"],
            "in_flight_writes_per_s": bench.bench_in_flight(stub, writes, inflight)["writes_per_s"],
        }
    finally:
        _close(q, base)


class _SyncCounter:
    """strace -f -c on the controllers, counting fsync and fdatasync, started and stopped by PID."""

    def __init__(self, pids: list[int], out: Path) -> None:
        self.out = out
        args = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(out)]
        for pid in pids:  # every thread, named: -p PID alone misses threads started before it
            for tid in sorted(os.listdir(f"/proc/{pid}/task")):
                args += ["-p", tid]
        self.proc = subprocess.Popen(args, stderr=subprocess.DEVNULL)
        time.sleep(3.0)  # strace attaches to every thread of the three; nothing to wait on

    def stop(self) -> int:
        os.kill(self.proc.pid, signal.SIGINT)
        self.proc.wait(30)
        total = 0
        for line in self.out.read_text().splitlines():
            fields = line.split()
            # % time, seconds, usecs/call, calls, [errors], syscall
            if len(fields) >= 5 and fields[-1] in ("fsync", "fdatasync") and re.fullmatch(r"\d+", fields[3]):
                total += int(fields[3])
        return total


def _count_round(python: str, writes: int, inflight: int) -> dict:
    q, base = _quorum(python)
    try:
        stub = q.stub(q.active())
        pids = [q.procs[i].pid for i in q.ids]
        result = {}
        for phase, run in (
            ("back_to_back", lambda: bench.bench_back_to_back(stub, writes)),
            ("in_flight", lambda: bench.bench_in_flight(stub, writes, inflight)),
        ):
            counter = _SyncCounter(pids, base / f"strace-{phase}.txt")
            done = run()["writes"]
            syncs = counter.stop()
            # The phase also deletes its topics in one call at the end: one more write.
            result[phase] = {"writes": done, "syncs_3_controllers": syncs,
                             "syncs_per_write_per_controller": round(syncs / (done + 1) / 3, 2)}
        return result
    finally:
        _close(q, base)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="python of the checkout to compare with")
    parser.add_argument("--after", default=sys.executable)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--inflight", type=int, default=8)
    args = parser.parse_args()
    pythons = {"before": args.before, "after": args.after}
    rounds = []
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        row = {}
        for label in order:
            row[label] = _timed_round(pythons[label], args.writes, args.inflight)
            bench.log(f"round {r} {label}: {row[label]}")
        rounds.append(row)
    medians = {
        label: {k: statistics.median(row[label][k] for row in rounds) for k in rounds[0][label]}
        for label in pythons
    }
    result = {
        "benchmark": "controller_durability",
        "rounds": rounds,
        "medians": medians,
        "ratio_after_over_before": {
            k: round(medians["after"][k] / medians["before"][k], 3) for k in medians["after"]
        },
    }
    if shutil.which("strace"):
        result["syncs"] = {
            label: _count_round(pythons[label], args.writes, args.inflight) for label in pythons
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
