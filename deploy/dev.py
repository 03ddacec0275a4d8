"""`kanal dev`: a local cluster — 3 controllers and 3 brokers by default — as processes on 127.0.0.1.

It waits until every node is SERVING, prints the bootstrap address (and writes it to ~/.kanal/dev.json so
the other `kanal` commands find it without --bootstrap), then runs until Ctrl-C or SIGTERM and stops
every process it started. Data stays in --data-dir (default ~/.kanal/dev-data) across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from kanal.deploy.local_cluster import LocalCluster

KANAL_HOME = Path(os.environ.get("KANAL_HOME", Path.home() / ".kanal"))
STATE_FILE = KANAL_HOME / "dev.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kanal dev", description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=KANAL_HOME / "dev-data")
    p.add_argument("--controllers", type=int, default=3)
    p.add_argument("--brokers", type=int, default=3)
    args = p.parse_args(argv)
    if not 1 <= args.controllers <= 7 or not 1 <= args.brokers <= 64:
        p.error("--controllers must be in [1, 7] and --brokers in [1, 64]")
    if STATE_FILE.exists():
        state = json.loads(STATE_FILE.read_text())
        if _alive(state.get("pid")):
            print(f"kanal dev: a dev cluster is already running (pid {state['pid']}, bootstrap "
                  f"{state['bootstrap']})", file=sys.stderr)
            return 1
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    cluster = LocalCluster(args.data_dir, controllers=args.controllers, brokers=args.brokers)
    print(f"kanal dev: starting {args.controllers} controllers and {args.brokers} brokers, data in {args.data_dir}",
          flush=True)
    try:
        cluster.start(timeout_s=120)
    except (RuntimeError, TimeoutError) as exc:
        print(f"kanal dev: the cluster did not start: {exc}", file=sys.stderr)
        return 1
    KANAL_HOME.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(json.dumps({"pid": os.getpid(), "bootstrap": cluster.bootstrap,
                                      "controllers": cluster.controller_endpoints,
                                      "data_dir": str(args.data_dir)}))
    print(f"kanal dev: ready. bootstrap: {cluster.bootstrap}", flush=True)
    for node in cluster.nodes:
        print(f"  {node.name:<13} {node.endpoint:<22} pid {node.pid}  log {node.log_path}", flush=True)
    print("kanal dev: other kanal commands use this cluster by default; Ctrl-C stops it.", flush=True)
    try:
        while not stopping.wait(1.0):
            dead = [n for n in cluster.nodes if not n.running]
            if dead:
                print(f"kanal dev: {', '.join(n.name for n in dead)} exited; see its log", file=sys.stderr)
                break
    finally:
        print("kanal dev: stopping", flush=True)
        cluster.stop()
        STATE_FILE.unlink(missing_ok=True)
    return 0


def _alive(pid) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
