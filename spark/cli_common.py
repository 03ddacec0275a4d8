"""What `kanal audit` and `kanal analytics` share: finding the `kanal dev` cluster, the Spark session, and a
progress line while Spark works.

Defaults come from `kanal dev`: it keeps its data in $KANAL_HOME/dev-data (~/.kanal/dev-data) and, while
running, writes $KANAL_HOME/dev.json with the bootstrap brokers, the controllers and the data dir.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self, TypeVar

import grpc

from kanal.commands.command_config import add_client_security_flags, layered_settings, security_from
from kanal.commands.report import OUTPUT_HELP, command_error
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.spark.segment_files import GROUP_BYTES_MAX_DEFAULT
from kanal.v1 import admin_pb2, broker_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.error_trailer import call_error

# The driver's heap when a command starts the JVM: a replay pulls the metadata rows into the driver, and
# Spark's default 1g ran out on 2 M rows.
DRIVER_MEMORY_DEFAULT = "2g"

R = TypeVar("R")
log = logging.getLogger(__name__)
KANAL_HOME = Path(os.environ.get("KANAL_HOME", Path.home() / ".kanal"))
PROGRESS_INTERVAL_S = 0.5


def dev_state() -> dict:
    """What a running `kanal dev` wrote ({} when none)."""
    try:
        return json.loads((KANAL_HOME / "dev.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def add_common_args(p: argparse.ArgumentParser, default_out: str) -> None:
    add_client_security_flags(p)  # TLS and credentials for --bootstrap and --controllers (a secured cluster)
    p.add_argument("--data-dir", type=Path, help="data dir, cluster dir or a copy (default: kanal dev's)")
    p.add_argument("--bootstrap", help="brokers host:port,... (default: kanal dev's, when it runs)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--out", type=Path, default=KANAL_HOME / default_out, help="where Parquet tables and "
                   f"report.html go (default {KANAL_HOME / default_out})")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first damaged segment instead of "
                   "reporting it and reading the rest")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--output", choices=("text", "json"), default="text",
                   help=f"{OUTPUT_HELP} (the summary lines and where the tables and report are)")
    p.add_argument(
        "--driver-memory",
        type=_jvm_memory,
        default=DRIVER_MEMORY_DEFAULT,
        help=f"heap of the Spark driver this command starts, e.g. 4g (default {DRIVER_MEMORY_DEFAULT}; "
        "Spark's own 1g is short for a large replay)",
    )
    p.add_argument(
        "--split-bytes",
        type=_split_bytes,
        default=GROUP_BYTES_MAX_DEFAULT,
        help="segment bytes read by one Spark task (whole segment files; default "
        f"{GROUP_BYTES_MAX_DEFAULT // (1024 * 1024)} MiB): smaller spreads a large partition over more cores",
    )


def security_of(args: argparse.Namespace) -> ClientSecurity | None:
    """The TLS settings and credentials of the command's flags and client config files (None: plaintext),
    read as the client commands read them (kanal.commands.command_config)."""
    return security_from(layered_settings(args, os.environ, dev_state(), talks_to_dev=not args.bootstrap))


def _jvm_memory(text: str) -> str:
    """A JVM memory size as Spark takes it: digits and a unit k, m, g or t (512m, 4g)."""
    value = text.strip().lower()
    if not re.fullmatch(r"[1-9][0-9]*[kmgt]", value):
        raise argparse.ArgumentTypeError(f"--driver-memory must be a size such as 512m or 4g, got {text!r}")
    return value


def _split_bytes(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--split-bytes must be >= 1, got {value}")
    return value


def resolve_data_dir(args: argparse.Namespace) -> Path:
    if args.data_dir:
        return args.data_dir
    state = dev_state()
    return Path(state.get("data_dir") or KANAL_HOME / "dev-data")


def controllers_of(bootstrap: str, security: ClientSecurity | None = None) -> list[str]:
    """Controller endpoints from a broker's DescribeCluster (the quorum's voters); none when no broker
    answered. A refusal that is not retriable (credentials, an authorization) is raised: another broker
    would refuse the same."""
    for endpoint in [e.strip() for e in bootstrap.split(",") if e.strip()]:
        with open_channel(endpoint, (), security) as channel:
            try:
                reply = broker_pb2_grpc.BrokerStub(channel).DescribeCluster(
                    admin_pb2.DescribeClusterRequest(), timeout=10
                )
            except grpc.RpcError as exc:
                error = call_error(exc, f"DescribeCluster at {endpoint}")
                if not error.retriable:
                    raise error from None
                continue
            return [v.endpoint for v in reply.quorum.voters if v.endpoint]
    return []


class Progress:
    """A line on stderr saying what Spark is doing: the step, and tasks done of the running stages."""

    def __init__(self, spark, enabled: bool = True) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._enabled = enabled
        self._step = ""
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kanal-progress", daemon=True)
        self._tty = sys.stderr.isatty()
        self._last_line = ""
        self._last_print = 0.0

    def __enter__(self) -> Self:
        if self._enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        if self._enabled and self._tty:
            print(file=sys.stderr)

    def step(self, text: str) -> None:
        self._step = text
        if self._enabled and not self._tty:
            print(f"[{time.monotonic() - self._started:6.1f}s] {text}", file=sys.stderr, flush=True)

    def _run(self) -> None:
        while not self._stop.wait(PROGRESS_INTERVAL_S):
            done = total = 0
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            tasks = f" - Spark tasks {done}/{total}" if total else ""
            line = f"[{time.monotonic() - self._started:6.1f}s] {self._step}{tasks}"
            if self._tty:
                print(f"\r{line:<100}", end="", file=sys.stderr, flush=True)
            elif tasks and tasks != self._last_line and time.monotonic() - self._last_print >= 2.0:
                # Not a terminal (a log, CI): a plain line when the task count moved, at most every 2 s.
                self._last_line, self._last_print = tasks, time.monotonic()
                print(line, file=sys.stderr, flush=True)


SPARK_SETUP = "bash deploy/bootstrap.sh spark (or: pip install 'kanal[spark]')"


def spark_missing() -> str | None:
    """What `kanal audit` / `kanal analytics` need that this machine lacks, in one line (None: nothing).
    Checked before Spark starts, so a missing piece is one line, not a traceback from deep inside."""
    missing = []
    for module in ("pyspark", "pyarrow", "pandas"):  # pandas: pyspark's mapInArrow (the audit's replay)
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        return f"needs {', '.join(missing)}, which are not installed: {SPARK_SETUP}"
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and Path(java_home, "bin", "java").exists()):
        return ("needs a Java runtime (17 or later) for Spark, and finds no `java` on PATH or in JAVA_HOME: "
                "on Debian, apt-get install openjdk-17-jre-headless")
    return None


def report_findings(command: str, notices: list[str], lost: list[str]) -> None:
    """One line on stderr per thing the readers noticed (a warning) and per range no copy could give (an
    error): the summary on stdout says it too, but a script watching stderr must not miss either."""
    for notice in notices:
        print(f"kanal {command}: WARNING: {notice}", file=sys.stderr)
    for what in lost:
        print(f"kanal {command}: ERROR: data missing: {what}", file=sys.stderr)


def run_job(command: str, master: str, quiet: bool, step: str, job: Callable[..., R],
            report_html: Callable[[R], str], summary: Callable[[R], list[str]], out: Path,
            as_json: bool = False, driver_memory: str | None = None) -> R | None:
    """Run `job(spark, step)` with a progress line (`step(text)` names what the job does now), write
    `out/report.html` and print the summary (both computed while the session is up: they may read the
    result's DataFrames). A session already running in this process (an embedding program, the tests) is
    used and left running; one started here is stopped.
    Returns the result, or None after printing the failure in one line."""
    from pyspark.sql import SparkSession

    from kanal.spark.session import kanal_session

    owned = SparkSession.getActiveSession() is None
    spark = kanal_session(master, f"kanal-{command}", driver_memory=driver_memory)
    try:
        with Progress(spark, not quiet) as progress:
            progress.step(step)
            result = job(spark, progress.step)
            progress.step("writing the report")
            out.mkdir(parents=True, exist_ok=True)
            (out / "report.html").write_text(report_html(result))
            lines = summary(result)
    except KanalError as exc:  # an expected failure: one line with its own code
        command_error(f"kanal {command}: failed", str(exc), exc.code)
        return None
    except Exception as exc:  # the command's boundary: any other failure (Spark's, a bug) is reported in
        # one line and an exit status, its traceback in the debug log.
        log.debug("kanal %s failed", command, exc_info=True)
        command_error(f"kanal {command}: failed", str(exc), ErrorCode.UNKNOWN_SERVER_ERROR)
        return None
    finally:
        if owned:
            spark.stop()
    if as_json:
        print(json.dumps({"summary": lines, "out": str(out), "report": str(out / "report.html")}))
        return result
    for line in lines:
        print(line)
    print(f"tables and report: {out} (report.html)")
    return result
