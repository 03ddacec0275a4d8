"""Randomized chaos runs on the dev target (a cluster in network namespaces; needs root) or the containers
target; prints one JSON object.

    .venv/bin/python benchmarks/chaos_runs.py [--runs 100] [--duration 25] [--seed 1000] \
        [--faults kill,pause,partition,disk] [--target dev|containers] [--summary FILE]

Run i uses seed `--seed + i` and every nemesis asked for (the schedule draws kinds and variants from the
seed: kills and pauses of any node, isolated nodes, controller splits, zombie leaders, leaders alone with
their clients, one-way cuts, flaky links). The summary: runs done, runs that could not be carried out (with
why), runs with violations and the violations by kind (each such run's history is kept in
`--history-dir`, named by seed, to replay with `kanal chaos check`), faults injected and the longest
unavailability window (no acknowledgement at all for more than 1 s) per nemesis, records acknowledged.
Progress goes to stderr, the JSON to stdout. Every run heals its faults and stops its processes itself.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from kanal.deploy.chaos.cli import duration_s, faults
from kanal.deploy.chaos.runner import RunOptions, run_once
from kanal.v1.error import KanalError


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--duration", type=duration_s, default=25.0)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--faults", type=faults, default=("kill", "pause", "partition"))
    p.add_argument("--target", default="dev", choices=("dev", "containers"))
    p.add_argument("--image", default="kanal:dev", help="for --target containers")
    p.add_argument("--history-dir", type=Path, default=Path("chaos-histories"))
    p.add_argument("--summary", type=Path, default=None, help="also write the summary here after every run")
    args = p.parse_args()
    # SIGTERM unwinds like Ctrl-C: the run in progress heals its faults and stops its processes.
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    violations: Counter[str] = Counter()
    injected: Counter[str] = Counter()
    longest: dict[str, float] = defaultdict(float)
    failed_runs, violating, acknowledged = [], [], 0
    summary: dict = {}
    for i in range(args.runs):
        seed = args.seed + i
        history = args.history_dir / f"seed-{seed}.jsonl"
        print(f"[{i + 1}/{args.runs}] seed {seed}", file=sys.stderr, flush=True)
        try:
            result = run_once(RunOptions(target=args.target, faults=args.faults, duration_s=args.duration,
                                         seed=seed, history_path=history, image=args.image))
        except (RuntimeError, TimeoutError, OSError, KanalError) as exc:
            failed_runs.append({"seed": seed, "error": repr(exc)[:500], "history": str(history)})
            print(f"  could not be carried out: {exc!r}", file=sys.stderr, flush=True)
            result = None
        if result is not None:
            acknowledged += result.report.acknowledged
            for fault, _ in result.injected:
                injected[f"{fault.kind}/{fault.variant}"] += 1
            for window in result.windows:
                longest[window.fault] = max(longest[window.fault], round(window.length_s, 3))
            if result.ok:  # keep only the histories worth reading
                history.unlink(missing_ok=True)
                shutil.rmtree(history.with_suffix(".logs"), ignore_errors=True)
            else:
                violating.append({"seed": seed, "history": str(history), "first": str(result.report.first)})
                violations.update({k: n for k, n in result.report.counts().items() if n})
                print(result.table(), file=sys.stderr, flush=True)
        summary = {
            "runs": i + 1, "runs_asked": args.runs,
            "duration_s_each": args.duration,
            "seeds": [args.seed, seed],
            "faults": list(args.faults),
            "runs_not_carried_out": failed_runs,
            "runs_with_violations": violating,
            "violations_by_kind": dict(violations),
            "faults_injected": dict(sorted(injected.items())),
            "longest_unavailability_s_per_nemesis": dict(sorted(longest.items())),
            "records_acknowledged": acknowledged,
            "wall_s": round(time.monotonic() - started, 1),
        }
        if args.summary is not None:  # after every run, so an interrupted series still leaves its figures
            args.summary.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 1 if violating or failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
