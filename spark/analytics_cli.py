"""`kanal analytics`: per topic and partition statistics, throughput, key skew, producers and consumer lag.

    kanal analytics                                  # kanal dev's data dir
    kanal analytics --bootstrap 10.0.0.5:9092        # a live cluster through Fetch (no data dir needed)
    kanal analytics --data-dir /backup/kanal --topics orders,payments --out /tmp/analytics

Writes Parquet tables (analytics.py lists them) and report.html to --out, prints a short summary. Exit
status: 0, or 1 when damage was found or the job failed, 2 for bad arguments.
"""

from __future__ import annotations

import sys

from kanal.commands.report import CommandParser, command_error
from kanal.spark.cli_common import (
    add_common_args,
    report_findings,
    resolve_data_dir,
    run_job,
    security_of,
    spark_missing,
)
from kanal.v1.error import ErrorCode, KanalError


def main(argv: list[str] | None = None) -> int:
    p = CommandParser(prog="kanal analytics", description=__doc__.splitlines()[0])
    add_common_args(p, "analytics")
    p.add_argument("--topics", help="comma-separated topics (default: every non-internal topic)")
    p.add_argument("--hot-keys", type=int, default=10, help="hottest keys kept per topic (default 10)")
    args = p.parse_args(argv)
    missing = spark_missing()
    if missing:  # one line naming what to install, exit 1 (MISSING_DEPENDENCY)
        raise KanalError(ErrorCode.MISSING_DEPENDENCY, f"kanal analytics {missing}")
    if args.hot_keys < 1:
        p.error("--hot-keys must be >= 1")
    data_dir = None
    if not args.bootstrap:
        data_dir = resolve_data_dir(args)
        if not data_dir.is_dir():
            return command_error("kanal analytics", f"no data directory {data_dir} (start `kanal dev`, give "
                                 "--data-dir or --bootstrap)", exit_status=2)
    if data_dir is not None:
        from kanal.spark.copy_plan import no_image_warning

        warning = no_image_warning(data_dir)
        if warning:
            print(f"kanal analytics: WARNING: {warning}", file=sys.stderr)
    topics = [t.strip() for t in args.topics.split(",") if t.strip()] if args.topics else None
    security = security_of(args) if args.bootstrap else None
    from kanal.spark.analytics import run_analytics
    from kanal.spark.analytics_report import analytics_html, analytics_summary

    print(
        f"kanal analytics: reading {args.bootstrap or data_dir} on {args.master}", file=sys.stderr, flush=True
    )
    result = run_job(
        "analytics",
        args.master,
        args.quiet,
        "reading partitions and computing the tables",
        lambda spark, _step: run_analytics(
            spark,
            data_dir=data_dir,
            bootstrap=args.bootstrap,
            out_dir=args.out,
            topics=topics,
            hot_keys_max=args.hot_keys,
            fail_fast=args.fail_fast,
            split_bytes=args.split_bytes,
            security=security,
        ),
        analytics_html,
        analytics_summary,
        args.out,
        as_json=args.output == "json",
        driver_memory=args.driver_memory,
    )
    if result is None:
        return 1
    report_findings("analytics", result.notices, result.damage)
    return 0 if not result.damage else 1


if __name__ == "__main__":
    sys.exit(main())
