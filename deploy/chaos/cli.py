"""`kanal chaos`: run faults against a cluster while workloads record a history, and check histories.

    kanal chaos run --target dev --faults kill,pause,partition --duration 60s --seed 7 [--runs 3]
    kanal chaos run --target containers --image kanal:dev --faults kill,pause,partition --duration 60s
    kanal chaos run --target dev --faults power,clock,disk --duration 60s   # power cuts, clock steps,
                                                                            # full disks
    kanal chaos run --target HOST:PORT[,HOST:PORT] --faults '' --duration 60s  # no faults: workloads +
                                                                               # checker
    kanal chaos check HISTORY.jsonl
    kanal chaos schedule --faults kill,partition --duration 60s --seed 7   # the faults a seed gives

`run` prints a progress line while it runs and a table per run (faults injected, records acknowledged,
unavailability windows, violations), writes each run's history to `--history-dir` (default
./chaos-histories/seed-N.jsonl), and exits 1 when any run shows a violation (2 on bad arguments, 3 when a
run could not be carried out). Run `r` of `--runs N` uses seed `--seed + r`. `--target dev` and
`--target containers` need root: every node runs in its own network namespace. Ctrl-C heals every fault and
stops everything the run started before it exits.

`--unsafe-test-mutation NAME` runs the brokers from a copy of kanal.broker with a deliberate bug
(mutation.py; for the mutation check that proves the runner finds what it should). Never for real use.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

from kanal.commands.command_config import add_client_security_flags, layered_settings, security_from
from kanal.commands.report import OUTPUT_HELP, CommandParser, bounded_number, command_error
from kanal.deploy.chaos.checker import check
from kanal.deploy.chaos.history import read_history
from kanal.deploy.chaos.mutation import MUTATIONS
from kanal.deploy.chaos.schedule import FAULT_KINDS, ScheduleOptions, schedule
from kanal.v1.error import ErrorCode, KanalError


def duration_s(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (like 60s, 2m, 1500ms)")
    value, unit = float(m.group(1)), m.group(2) or "s"
    return value / 1000 if unit == "ms" else value * 60 if unit == "m" else value


# Bounds of the workload's size flags: a run starts a whole cluster, so a bad value is refused up front.
PARTITIONS_MAX = 1000
PRODUCERS_MAX = 64
RUNS_MAX = 100_000  # --runs: zero runs would check nothing and pass


def _count_up_to(maximum: int):
    return bounded_number(int, 1, f"1-{maximum}", maximum)


def faults(text: str) -> tuple[str, ...]:
    chosen = tuple(f for f in (p.strip() for p in text.split(",")) if f)
    unknown = [f for f in chosen if f not in FAULT_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown faults {unknown}; known: {','.join(FAULT_KINDS)}")
    return chosen


def parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="kanal chaos", description="Jepsen-style fault runner and history checker")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run workloads under faults and check the history")
    run.add_argument(
        "--target",
        default="dev",
        help="dev (processes in network namespaces; root), containers (the image; root and Docker) "
        "or a bootstrap address (no faults)",
    )
    run.add_argument("--image", default="kanal:dev", help="the containers target's image (default kanal:dev)")
    run.add_argument("--faults", type=faults, default=("kill", "pause", "partition"),
                     help=f"comma-separated, of {','.join(FAULT_KINDS)} (default: all)")
    run.add_argument("--duration", type=duration_s, default=60.0, help="per run (default 60s)")
    run.add_argument("--seed", type=int, default=1, help="seed of the fault schedule (default 1)")
    run.add_argument("--runs", type=_count_up_to(RUNS_MAX), default=1,
                     help="runs, each with the next seed (default 1)")
    run.add_argument("--history-dir", type=Path, default=Path("chaos-histories"),
                     help="where each run's history is written (default chaos-histories)")
    run.add_argument("--partitions", type=_count_up_to(PARTITIONS_MAX), default=3,
                     help="partitions of the workload topic (default 3)")
    run.add_argument("--producers", type=_count_up_to(PRODUCERS_MAX), default=2,
                     help="producers of the workload, each sending ~100 records/s to every partition in turn "
                     "(default 2)")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    run.add_argument("--output", choices=("text", "json"), default="text",
                     help=f"{OUTPUT_HELP} (each run's verdict: one JSON object per line)")
    run.add_argument("--unsafe-test-mutation", choices=sorted(MUTATIONS), default=None,
                     help="TEST ONLY: brokers from a copy of kanal.broker with this deliberate bug")
    # A secured cluster given by its bootstrap address: the client commands' TLS and credential flags.
    add_client_security_flags(run)
    chk = sub.add_parser("check", help="check a recorded history")
    chk.add_argument("history", type=Path, help="a history file written by `kanal chaos run`")
    chk.add_argument("--all", action="store_true", help="print every violation, not only the first")
    chk.add_argument("--output", choices=("text", "json"), default="text",
                     help=f"{OUTPUT_HELP} (the counts and violations as one JSON object)")
    sch = sub.add_parser("schedule", help="print the fault schedule a seed gives")
    sch.add_argument("--faults", type=faults, default=("kill", "pause", "partition"),
                     help="fault kinds, comma-separated (default kill,pause,partition)")
    sch.add_argument("--duration", type=duration_s, default=60.0, help="length of the schedule (default 60s)")
    sch.add_argument("--seed", type=int, default=1, help="seed of the schedule (default 1)")
    sch.add_argument("--output", choices=("text", "json"), default="text",
                     help=f"{OUTPUT_HELP} (one JSON object per fault)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "check":
        return _check(args)
    if args.command == "schedule":
        try:
            steps = schedule(ScheduleOptions(faults=args.faults, duration_s=args.duration, seed=args.seed))
        except ValueError as exc:
            return command_error("kanal chaos", str(exc), exit_status=2)
        for f in steps:
            print(json.dumps(dataclasses.asdict(f)) if args.output == "json" else f.describe())
        return 0
    return _run(args)


def _check(args) -> int:
    try:
        events = read_history(args.history)
    except (OSError, ValueError) as exc:
        return command_error("kanal chaos check", str(exc), exit_status=2)
    report = check(events)
    if args.output == "json":
        shown = report.violations if args.all else report.violations[:1]
        print(json.dumps({"history": str(args.history), "events": len(events),
                          "acknowledged": report.acknowledged, "read": report.read,
                          "final_records": report.final_records,
                          "unchecked": [list(tp) for tp in report.unchecked], "ok": report.ok,
                          "violations_by_kind": {k: n for k, n in report.counts().items() if n},
                          "violations": [str(v) for v in shown]}))
        return 0 if report.ok else 1
    print(f"{args.history}: {len(events)} events, {report.acknowledged} acknowledged, {report.read} read, "
          f"{report.final_records} in the final read")
    if report.unchecked:
        print(f"unchecked (no final read): {report.unchecked}")
    if report.ok:
        print("no violations")
        return 0
    print("violations: " + ", ".join(f"{k} {n}" for k, n in report.counts().items() if n))
    for v in report.violations if args.all else [report.first]:
        print(v)
    return 1


def _failed(tty: bool, message: str, exit_status: int, code: int = ErrorCode.INVALID_REQUEST) -> int:
    """End the progress line (on a terminal), then the error as one line, or one JSON object."""
    if tty:
        sys.stderr.write("\n")
    return command_error("kanal chaos", message, code, exit_status=exit_status)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _run(args) -> int:
    from kanal.deploy.chaos.runner import RunOptions, run_once

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.runs < 1:
        return command_error("kanal chaos", "--runs must be at least 1", exit_status=2)
    try:
        security = security_from(layered_settings(args, os.environ, None, talks_to_dev=False))
    except KanalError as exc:
        return command_error("kanal chaos", exc.message, exc.code, exit_status=2)
    if security is not None and args.target in ("dev", "containers"):
        return command_error("kanal chaos", "TLS settings apply to a cluster given by its bootstrap address; "
                             "the dev and containers targets start their own plaintext cluster",
                             exit_status=2)
    # SIGTERM unwinds like Ctrl-C, through every `finally` that heals a fault or stops a process. SIGINT is
    # set too: a shell starts a background job with SIGINT ignored, and Python then never raises
    # KeyboardInterrupt, so `kill -INT` would leave the run going (kanal dev sets both as well).
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)
    tty = sys.stderr.isatty()

    last_line_at = [0.0]

    def progress(line: str) -> None:
        if args.quiet:
            return
        if tty:
            sys.stderr.write(f"\r\033[K{line}")
        elif " t=" not in line or time.monotonic() - last_line_at[0] >= 5.0:
            sys.stderr.write(f"{line}\n")  # a log, not a terminal: each step, and the clock every 5 s
            last_line_at[0] = time.monotonic()
        sys.stderr.flush()

    violations = 0
    for r in range(args.runs):
        seed = args.seed + r
        options = RunOptions(target=args.target, faults=args.faults, duration_s=args.duration, seed=seed,
                             history_path=args.history_dir / f"seed-{seed}.jsonl",
                             partitions=args.partitions, producers=args.producers,
                             mutation=args.unsafe_test_mutation, image=args.image, security=security)
        try:
            options.schedule_options()
            result = run_once(options, progress)
        except ValueError as exc:
            return _failed(tty, str(exc), 2)
        except KeyboardInterrupt:
            return _failed(tty, "interrupted; every fault healed and every process stopped "
                           f"(history so far: {options.history_path})", 130)
        except (RuntimeError, TimeoutError, OSError, KanalError) as exc:
            # KanalError: the cluster refused what the run needs after healing (the final read's fence
            # record, say, on a partition whose ISR never recovered): no verdict on the history.
            return _failed(tty, f"run with seed {seed} could not be carried out: {exc}", 3,
                           ErrorCode.UNKNOWN_SERVER_ERROR)
        if tty and not args.quiet:
            sys.stderr.write("\r\033[K")
        if args.output == "json":
            print(json.dumps(result.as_dict()), flush=True)
        else:
            print(result.table(r + 1, args.runs), flush=True)
        violations += 0 if result.ok else 1
    if args.runs > 1 and args.output != "json":
        print(f"{args.runs} runs, {violations} with violations")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
