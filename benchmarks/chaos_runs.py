"""Randomized chaos runs on the dev target (a cluster in network namespaces; needs root); prints one JSON
object.

    .venv/bin/python benchmarks/chaos_runs.py [--runs 100] [--duration 25] [--seed 1000] [--faults kill,pause,partition]

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
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from kanal.deploy.chaos.cli import duration_s, faults
from kanal.deploy.chaos.runner import RunOptions, run_once


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--duration", type=duration_s, default=25.0)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--faults", type=faults, default=("kill", "pause", "partition"))
    p.add_argument("--history-dir", type=Path, default=Path("chaos-histories"))
    args = p.parse_args()
    started = time.monotonic()
    violations: Counter[str] = Counter()
    injected: Counter[str] = Counter()
    longest: dict[str, float] = defaultdict(float)
    failed_runs, violating, acknowledged = [], [], 0
    for i in range(args.runs):
        seed = args.seed + i
        history = args.history_dir / f"seed-{seed}.jsonl"
        print(f"[{i + 1}/{args.runs}] seed {seed}", file=sys.stderr, flush=True)
        try:
            result = run_once(RunOptions(target="dev", faults=args.faults, duration_s=args.duration, seed=seed,
                                         history_path=history))
        except (RuntimeError, TimeoutError, OSError) as exc:
            failed_runs.append({"seed": seed, "error": repr(exc)[:500], "history": str(history)})
            print(f"  could not be carried out: {exc!r}", file=sys.stderr, flush=True)
            continue
        acknowledged += result.report.acknowledged
        for fault, _ in result.injected:
            injected[f"{fault.kind}/{fault.variant}"] += 1
        for window in result.windows:
            longest[window.fault] = max(longest[window.fault], round(window.length_s, 3))
        if result.ok:
            history.unlink(missing_ok=True)  # keep only the histories worth reading
        else:
            violating.append({"seed": seed, "history": str(history), "first": str(result.report.first)})
            violations.update({k: n for k, n in result.report.counts().items() if n})
            print(result.table(), file=sys.stderr, flush=True)
    print(json.dumps({
        "runs": args.runs,
        "duration_s_each": args.duration,
        "seeds": [args.seed, args.seed + args.runs - 1],
        "faults": list(args.faults),
        "runs_not_carried_out": failed_runs,
        "runs_with_violations": violating,
        "violations_by_kind": dict(violations),
        "faults_injected": dict(sorted(injected.items())),
        "longest_unavailability_s_per_nemesis": dict(sorted(longest.items())),
        "records_acknowledged": acknowledged,
        "wall_s": round(time.monotonic() - started, 1),
    }, indent=2))
    return 1 if violating or failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
