"""`kanal chaos`: run faults against a cluster while workloads record a history, and check histories.

    kanal chaos run --target dev --faults kill,pause,partition --duration 60s --seed 7 [--runs 3]
    kanal chaos run --target containers --image kanal:dev --faults kill,pause,partition --duration 60s
    kanal chaos run --target dev --faults power,clock,disk --duration 60s   # power cuts, clock steps,
                                                                            # full disks
    kanal chaos run --target HOST:PORT[,HOST:PORT] --faults '' --duration 60s  # no faults: workloads +
                                                                               # checker
    kanal chaos mutate --duration 60s --seeds 5 [--mutations raft-journal-no-fsync,unclean-election]
    kanal chaos check HISTORY.jsonl
    kanal chaos schedule --faults kill,partition --duration 60s --seed 7   # the faults a seed gives

`run` prints a progress line while it runs and a table per run (faults injected, records acknowledged,
unavailability windows, violations), writes each run's history to `--history-dir` (default
./chaos-histories/seed-N.jsonl), and exits 1 when any run shows a violation (2 on bad arguments, 3 when a
run could not be carried out). Run `r` of `--runs N` uses seed `--seed + r`. `--target dev` and
`--target containers` need root: every node runs in its own network namespace. Ctrl-C heals every fault and
stops everything the run started before it exits.

Before a dev or containers run starts anything it checks for `ip`, `iptables` and, with `power` among the
faults, FUSE (`fusermount3`, /dev/fuse), and names the Debian packages that give them
(`bash deploy/bootstrap.sh chaos` installs them).

`mutate` is the mutation suite: each mutation of mutation.py (brokers and controllers from a copy of the
code with one deliberate bug) over `--seeds` runs on the dev target, and a caught/missed row per mutation
(one JSON object per line with `--output json`); exit 1 when any mutation was missed in any seed.

`--unsafe-test-mutation NAME` runs the brokers from a copy of kanal.broker with a deliberate bug
(mutation.py; for the mutation check that proves the runner finds what it should). Never for real use.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NoReturn

from kanal.commands.command_config import add_client_security_flags, layered_settings, security_from
from kanal.commands.report import OUTPUT_HELP, CommandParser, bounded_number, command_error
from kanal.deploy.chaos.checker import check
from kanal.deploy.chaos.history import read_history
from kanal.deploy.chaos.mutation import MUTATION_CLASSES, MUTATIONS
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


def _count_up_to(maximum: int) -> Callable[[str], int]:
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
                     help=f"comma-separated, of {','.join(FAULT_KINDS)} (default: kill,pause,partition)")
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
                     help="TEST ONLY: nodes from a copy of kanal's code with this deliberate bug")
    run.add_argument("--unclean", action="store_true",
                     help="the workload topic with unclean.leader.election.enable=true (the checker "
                     "then allows the loss an unclean election causes, and only that)")
    run.add_argument("--no-overlap", action="store_true",
                     help="faults strictly one at a time (the schedules of before overlapping episodes)")
    mut = sub.add_parser("mutate",
                         help="the mutation suite: each deliberate bug over seeds; caught or missed")
    mut.add_argument("--mutations", default=",".join(MUTATIONS),
                     help=f"comma-separated, of {','.join(MUTATIONS)} (default: all)")
    mut.add_argument("--faults", type=faults, default=("kill", "pause", "partition", "power"),
                     help="fault kinds (default kill,pause,partition,power)")
    mut.add_argument("--duration", type=duration_s, default=60.0, help="per run (default 60s)")
    mut.add_argument("--seed", type=int, default=1, help="first seed (default 1)")
    mut.add_argument("--seeds", type=_count_up_to(RUNS_MAX), default=3, help="seeds per mutation (default 3)")
    mut.add_argument("--history-dir", type=Path, default=Path("chaos-mutants"),
                     help="where each run's history is written (default chaos-mutants)")
    mut.add_argument("--output", choices=("text", "json"), default="text", help=OUTPUT_HELP)
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
    sch.add_argument("--no-overlap", action="store_true", help="faults strictly one at a time")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "check":
        return _check(args)
    if args.command == "schedule":
        try:
            steps = schedule(ScheduleOptions(faults=args.faults, duration_s=args.duration, seed=args.seed,
                                             overlap=not args.no_overlap))
        except ValueError as exc:
            return command_error("kanal chaos", str(exc), exit_status=2)
        for f in steps:
            print(json.dumps(dataclasses.asdict(f)) if args.output == "json" else f.describe())
        return 0
    if args.command == "mutate":
        return _mutate(args)
    return _run(args)


# What a dev or containers run needs beside Python, and the Debian package that gives it.
TOOLS = (("ip", "iproute2"), ("iptables", "iptables"))
POWER_TOOLS = (("fusermount3", "fuse3"),)


def preflight(target: str, fault_kinds: tuple[str, ...], which: Callable[[str], str | None] = shutil.which,
              fuse_device: Path = Path("/dev/fuse")) -> str | None:
    """What is missing for a run on `target` with these faults, as one sentence naming the Debian packages;
    None when nothing is. Asked before anything starts (a missing iptables used to show only once the
    cluster was up)."""
    if target not in ("dev", "containers"):
        return None
    if "remote" in fault_kinds:
        if target != "dev":
            return "the remote fault needs --target dev (its S3 server and proxy run on the host)"
        if importlib.util.find_spec("moto") is None:
            return ("the remote fault runs an S3 server from moto: pip install 'moto[server]' (the test "
                    "extra brings it: bash deploy/bootstrap.sh test)")
    needed = list(TOOLS) + (list(POWER_TOOLS) if "power" in fault_kinds else [])
    missing = [(tool, package) for tool, package in needed if which(tool) is None]
    if "power" in fault_kinds and not fuse_device.exists():
        missing.append(("/dev/fuse", "fuse3 (and a kernel with FUSE)"))
    if not missing:
        return None
    tools = ", ".join(tool for tool, _ in missing)
    packages = " ".join(dict.fromkeys(package.split()[0] for _, package in missing))
    return (f"kanal chaos --target {target} needs {tools}: install the Debian packages {packages} "
            f"(apt-get install {packages}, or `bash deploy/bootstrap.sh chaos` as root)")


def _check(args: argparse.Namespace) -> int:
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


def _raise_interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def _run(args: argparse.Namespace) -> int:
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
    missing = preflight(args.target, args.faults)
    if missing is not None:
        return command_error("kanal chaos", missing, exit_status=2)
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
                             mutation=args.unsafe_test_mutation, image=args.image, security=security,
                             unclean=args.unclean, overlap=not args.no_overlap)
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
            # What is left here is the harness itself (a namespace that cannot be made, a workload's own
            # bug): a cluster that does not come back is a verdict (no_recovery), never this.
            return _failed(tty, f"run with seed {seed} could not be carried out (the chaos harness failed, "
                           f"no verdict about kanal): {exc}", 3, ErrorCode.UNKNOWN_SERVER_ERROR)
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


def _mutate(args: argparse.Namespace) -> int:
    """Each mutation over `--seeds` dev runs; one row per mutation: caught in how many seeds, which
    violation kinds, which seeds missed it. A run the harness could not carry out counts as neither."""
    from kanal.deploy.chaos.runner import RunOptions, run_once

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    names = [n.strip() for n in args.mutations.split(",") if n.strip()]
    unknown = [n for n in names if n not in MUTATIONS]
    if unknown:
        return command_error("kanal chaos", f"unknown mutations {unknown}; known: {','.join(MUTATIONS)}",
                             exit_status=2)
    missing = preflight("dev", args.faults)
    if missing is not None:
        return command_error("kanal chaos", missing, exit_status=2)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)
    any_missed = False
    for name in names:
        caught, missed, harness, kinds = [], [], [], set()
        for seed in range(args.seed, args.seed + args.seeds):
            options = RunOptions(target="dev", faults=args.faults, duration_s=args.duration, seed=seed,
                                 history_path=args.history_dir / name / f"seed-{seed}.jsonl", mutation=name)
            try:
                result = run_once(options)
            except KeyboardInterrupt:
                return command_error("kanal chaos",
                                     "interrupted; every fault healed and every process stopped",
                                     exit_status=130)
            except (RuntimeError, TimeoutError, OSError, KanalError) as exc:
                harness.append((seed, repr(exc)[:200]))
                continue
            if result.ok:
                missed.append(seed)
            else:
                caught.append(seed)
                kinds |= {k for k, n in result.report.counts().items() if n}
        any_missed = any_missed or bool(missed)
        row = {"mutation": name, "class": MUTATION_CLASSES.get(name, ""), "duration_s": args.duration,
               "faults": list(args.faults), "caught": len(caught), "missed": len(missed),
               "caught_seeds": caught, "missed_seeds": missed, "violation_kinds": sorted(kinds),
               "harness_failed": harness}
        if args.output == "json":
            print(json.dumps(row), flush=True)
        else:
            print(f"{name:26} {row['class']:26} caught {len(caught)} of {len(caught) + len(missed)}"
                  f" ({', '.join(sorted(kinds)) or '-'}); missed seeds {missed or '-'}"
                  + (f"; harness failed {len(harness)}" if harness else ""), flush=True)
    return 1 if any_missed else 0


if __name__ == "__main__":
    sys.exit(main())
