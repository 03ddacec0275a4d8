"""`kanal audit`: replay the metadata log of a data dir with Spark and write the cluster's history.

    kanal audit                                   # kanal dev's data, checked against its controllers
    kanal audit --data-dir /backup/kanal --controllers 10.0.0.1:9601,10.0.0.2:9601 --out /tmp/audit
    kanal audit --master spark://spark:7077 --data-dir /mnt/kanal

Writes Parquet tables (audit.py lists them) and report.html to --out, prints a short summary. Exit
status: 0 when the replay reached the end of the log, found no damage and every reachable controller's
image equals it; 1 otherwise; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from kanal.commands.report import CommandParser, command_error
from kanal.spark.cli_common import (
    add_common_args,
    controllers_of,
    dev_state,
    report_findings,
    resolve_data_dir,
    run_job,
    security_of,
    spark_missing,
)
from kanal.v1.error import ErrorCode, KanalError


def main(argv: list[str] | None = None) -> int:
    p = CommandParser(prog="kanal audit", description=__doc__.splitlines()[0])
    add_common_args(p, "audit")
    p.add_argument(
        "--controllers",
        help="controller endpoints host:port,... to compare the replayed image with "
        "(default: kanal dev's, or the quorum of --bootstrap)",
    )
    args = p.parse_args(argv)
    missing = spark_missing()
    if missing:  # one line naming what to install, exit 1 (MISSING_DEPENDENCY)
        raise KanalError(ErrorCode.MISSING_DEPENDENCY, f"kanal audit {missing}")
    data_dir = resolve_data_dir(args)
    if not data_dir.is_dir():
        return command_error(
            "kanal audit",
            f"no data directory {data_dir} (start `kanal dev` or give --data-dir)",
            exit_status=2,
        )
    security = security_of(args)
    controllers = _controllers(args, security)
    from kanal.spark.audit import run_audit
    from kanal.spark.audit_report import audit_html, audit_summary

    print(f"kanal audit: reading {data_dir} on {args.master}", file=sys.stderr, flush=True)
    result = run_job("audit", args.master, args.quiet, "reading and replaying the metadata log",
                     lambda spark, step: run_audit(spark, data_dir, args.out, controllers=controllers,
                                                   fail_fast=args.fail_fast, split_bytes=args.split_bytes,
                                                   security=security, progress=step),
                     audit_html, audit_summary, args.out, as_json=args.output == "json",
                     driver_memory=args.driver_memory)
    if result is None:
        return 1
    report_findings("audit", result.notices, result.damage)
    ok = result.history.stopped is None and not result.damage and result.image_matches is not False
    return 0 if ok else 1


def _controllers(args: argparse.Namespace, security) -> list[str]:
    if args.controllers:
        return [c.strip() for c in args.controllers.split(",") if c.strip()]
    if args.bootstrap:
        return controllers_of(args.bootstrap, security)
    state = dev_state()
    if state.get("controllers") and not args.data_dir:
        return [c for c in state["controllers"].split(",") if c]
    return []


if __name__ == "__main__":
    sys.exit(main())
