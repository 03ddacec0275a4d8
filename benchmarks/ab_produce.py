"""Produce throughput of two checkouts side by side: before and after a change, in alternating rounds.

    python benchmarks/ab_produce.py --before /work/main/.venv/bin/python --after .venv/bin/python \\
        [--rounds 5] [--seconds 5] [--clusters one] [--producers 1,2] [--quotas]

Each round runs `cluster_bench.py --quick --produce-only` once with each interpreter (its own editable
install, so its own broker code), alternating which goes first. `--after-authorizer-acls N` runs the
"after" side with the brokers' authorizer on and N ACLs (same interpreter on both sides: the cost of the
ACL check in the produce path). Prints one JSON object: every round's
records/s per case, the medians of the rounds and after/before for each case (PERFORMANCE.md: a goal is
judged on the median of five rounds, measured side by side). --quotas passes cluster_bench.py's --quotas:
a quota set for another client id, so the brokers' quota enforcement runs on every call (a checkout
without quotas ignores it), where without it no quota is set at all. Each run also reports
`cpu_s_per_million_records`: the CPU its whole process tree used per million records produced (for
this figure lower is better); on a shared machine it moves far less with the load of the moment than
records/s does. `median_of_round_ratios` pairs each round's two runs (run back to back, so under the
same load) before taking the median: the ratio of the two sides' medians can pair a quiet minute of one
side with a busy one of the other.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).with_name("cluster_bench.py")


def run(python: str, args, extra: list[str]) -> dict[str, float]:
    cpu_before = _children_cpu_s()
    out = subprocess.run([python, str(BENCH), "--quick", "--produce-only", "--seconds", str(args.seconds),
                          "--clusters", args.clusters, "--producers", args.producers, *extra,
                          *(["--quotas"] if args.quotas else [])],
                         check=False, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise SystemExit(f"{python} {BENCH.name} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout)
    figures = {}
    records = 0
    for cluster in ("one_broker_acks_1", "three_brokers_acks_all_rf3"):
        for case, value in result.get(cluster, {}).get("100B", {}).items():
            figures[f"{cluster}.{case}"] = value["records_s"]
            records += value["records"]
    # CPU of the whole run (every process of the cluster, the producers, the cluster's start and stop)
    # per million records produced: on a machine shared with other work, records/s swing with the load of
    # the moment, while the CPU a record costs moves far less. Lower is better.
    figures["cpu_s_per_million_records"] = round((_children_cpu_s() - cpu_before) / records * 1e6, 2)
    return figures


def _children_cpu_s() -> float:
    usage = resource.getrusage(
        resource.RUSAGE_CHILDREN
    )  # waited-for descendants: the cluster's processes too
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="python of the checkout before the change")
    parser.add_argument("--after", required=True, help="python of the checkout after the change")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clusters", default="one")
    parser.add_argument("--producers", default="1,2",
                        help="producer process counts of each case (1: the single-producer cases only)")
    parser.add_argument("--after-authorizer-acls", type=int, default=-1,
                        help="run the after side with the brokers' authorizer on and this many ACLs")
    parser.add_argument("--quotas", action="store_true",
                        help="a quota for another client id is set, so enforcement runs on every call")
    args = parser.parse_args()
    extra = {"before": [], "after": ["--authorizer-acls", str(args.after_authorizer_acls)]
             if args.after_authorizer_acls >= 0 else []}
    rounds = []
    for i in range(args.rounds):
        order = [("before", args.before), ("after", args.after)]
        if i % 2:
            order.reverse()
        rounds.append({name: run(python, args, extra[name]) for name, python in order})
        print(json.dumps({"round": i, **rounds[-1]}), file=sys.stderr, flush=True)  # kept if the run is cut
    cases = sorted(rounds[0]["before"])
    medians = {
        side: {c: statistics.median(r[side][c] for r in rounds) for c in cases}
        for side in ("before", "after")
    }
    print(
        json.dumps(
            {
                "benchmark": "ab_produce",
                "quotas": args.quotas,
                "rounds": rounds,
                "medians": medians,
                "after_vs_before": {c: round(medians["after"][c] / medians["before"][c], 3) for c in cases},
                "median_of_round_ratios": {
                    c: round(statistics.median(r["after"][c] / r["before"][c] for r in rounds), 3)
                    for c in cases
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
