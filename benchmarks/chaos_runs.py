"""Randomized chaos runs on the dev target (a cluster in network namespaces; needs root) or the containers
target; prints one JSON object.

    .venv/bin/python benchmarks/chaos_runs.py [--runs 100] [--duration 25] [--seed 1000] \
        [--faults kill,pause,partition,disk,power,clock] [--target dev|containers] [--summary FILE]
    .venv/bin/python benchmarks/chaos_runs.py --combine SUMMARY.json SUMMARY.json ...   # series side by side

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


def combine(summaries: list[dict]) -> dict:
    """One summary of several series (run side by side on other seeds, or one interrupted and one resumed):
    counts added, longest windows the longest of any, the seed ranges listed."""
    out: dict = {
        "runs": 0,
        "runs_asked": 0,
        "duration_s_each": sorted({s["duration_s_each"] for s in summaries}),
        "seeds": [s["seeds"] for s in summaries],
        "faults": sorted({f for s in summaries for f in s["faults"]}),
        "runs_not_carried_out": [],
        "runs_with_violations": [],
        "violations_by_kind": Counter(),
        "faults_injected": Counter(),
        "longest_unavailability_s_per_nemesis": {},
        "records_acknowledged": 0,
        "wall_s": 0.0,
    }
    for s in summaries:
        for key in ("runs", "runs_asked", "records_acknowledged", "wall_s"):
            out[key] += s[key]
        out["runs_not_carried_out"] += s["runs_not_carried_out"]
        out["runs_with_violations"] += s["runs_with_violations"]
        out["violations_by_kind"].update(s["violations_by_kind"])
        out["faults_injected"].update(s["faults_injected"])
        longest = out["longest_unavailability_s_per_nemesis"]
        for fault, length in s["longest_unavailability_s_per_nemesis"].items():
            longest[fault] = max(longest.get(fault, 0.0), length)
    out["violations_by_kind"] = dict(out["violations_by_kind"])
    out["faults_injected"] = dict(sorted(out["faults_injected"].items()))
    out["longest_unavailability_s_per_nemesis"] = dict(
        sorted(out["longest_unavailability_s_per_nemesis"].items())
    )
    out["wall_s"] = round(out["wall_s"], 1)
    return out


def main() -> int:
    if sys.argv[1:2] == ["--combine"]:
        print(json.dumps(combine([json.loads(Path(f).read_text()) for f in sys.argv[2:]]), indent=2))
        return 0
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
