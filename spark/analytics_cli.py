"""`kanal analytics`: per topic and partition statistics, throughput, key skew, producers and consumer lag.

    kanal analytics                                  # kanal dev's data dir
    kanal analytics --bootstrap 10.0.0.5:9092        # a live cluster through Fetch (no data dir needed)
    kanal analytics --data-dir /backup/kanal --topics orders,payments --out /tmp/analytics

Writes Parquet tables (analytics.py lists them) and report.html to --out, prints a short summary. Exit
status: 0, or 1 when damage was found or the job failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from kanal.spark.cli_common import Progress, add_common_args, resolve_data_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kanal analytics", description=__doc__.splitlines()[0])
    add_common_args(p, "analytics")
    p.add_argument("--topics", help="comma-separated topics (default: every non-internal topic)")
    p.add_argument("--hot-keys", type=int, default=10, help="hottest keys kept per topic (default 10)")
    args = p.parse_args(argv)
    if args.hot_keys < 1:
        p.error("--hot-keys must be >= 1")
    data_dir = None
    if not args.bootstrap:
        data_dir = resolve_data_dir(args)
        if not data_dir.is_dir():
            print(f"kanal analytics: no data directory {data_dir} (start `kanal dev`, give --data-dir or "
                  "--bootstrap)", file=sys.stderr)
            return 2
    topics = [t.strip() for t in args.topics.split(",") if t.strip()] if args.topics else None
    from kanal.spark.analytics import run_analytics
    from kanal.spark.analytics_report import analytics_html, analytics_summary
    from kanal.spark.session import kanal_session

    source = args.bootstrap or data_dir
    print(f"kanal analytics: reading {source} on {args.master}", file=sys.stderr, flush=True)
    from pyspark.sql import SparkSession

    # A session that already runs in this process (an embedding program, the tests) is left running.
    owned = SparkSession.getActiveSession() is None
    spark = kanal_session(args.master, "kanal-analytics")
    try:
        with Progress(spark, not args.quiet) as progress:
            progress.step("reading partitions and computing the tables")
            result = run_analytics(spark, data_dir=data_dir, bootstrap=args.bootstrap, out_dir=args.out,
                                   topics=topics, hot_keys_max=args.hot_keys, fail_fast=args.fail_fast)
            progress.step("writing the report")
            (args.out / "report.html").write_text(analytics_html(result))
            summary = analytics_summary(result)
    except Exception as exc:  # noqa: BLE001 - a command reports any failure in one line and an exit status
        print(f"kanal analytics: failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if owned:
            spark.stop()
    for line in summary:
        print(line)
    print(f"tables and report: {args.out} (report.html)")
    return 0 if not result.damage else 1


if __name__ == "__main__":
    sys.exit(main())
