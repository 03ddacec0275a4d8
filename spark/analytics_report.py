"""AnalyticsReport: an AnalyticsResult as a self-contained HTML page and a short text summary."""

from __future__ import annotations

from collections import defaultdict

from kanal.spark.analytics import AnalyticsResult
from kanal.spark.html_report import Section, bar_chart, line_chart, page, paragraph, table


def _rows(result: AnalyticsResult, name: str, *cols: str) -> list[tuple]:
    return [tuple(r[c] for c in cols) for r in result.tables[name].select(*cols).collect()]


def _ms(ts) -> int:
    return int(ts.timestamp() * 1000)


def analytics_summary(result: AnalyticsResult) -> list[str]:
    stats = _rows(result, "partition_stats", "topic", "records", "bytes")
    topics = sorted({t for t, _, _ in stats})
    lines = [(f"{len(topics)} topics, {len(stats)} partitions, {sum(r for _, r, _ in stats):,} records, "
             f"{sum(b for _, _, b in stats):,} bytes")]
    for topic, records, distinct, skew in _rows(
        result, "topic_keys", "topic", "records", "distinct_keys", "skew"
    ):
        skew_text = f", hottest key {skew:.1f}x the mean" if skew else ""
        lines.append(f"  {topic}: {records:,} records, {distinct or 0:,} distinct keys{skew_text}")
    for topic, committed, aborted, open_, control in _rows(
        result,
        "transactions",
        "topic",
        "committed_records",
        "aborted_records",
        "open_records",
        "control_records",
    ):
        if committed or aborted or open_ or control:
            lines.append(f"  {topic}: transactional records {committed:,} committed, {aborted:,} aborted, "
                         f"{open_:,} open; {control:,} control records")
    for group, topic, partition, lag in _rows(result, "group_lag", "group", "topic", "partition", "lag"):
        lines.append(f"  group {group} on {topic}-{partition}: lag {lag:,}")
    lines += [f"DAMAGE: {d}" for d in result.damage]
    lines += [f"NOTICE: {n}" for n in result.notices]
    return lines


def analytics_html(result: AnalyticsResult) -> str:
    summary = Section("Summary", [paragraph(line, "bad" if line.startswith(("DAMAGE", "NOTICE")) else "")
                                  for line in analytics_summary(result)])
    per_topic: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for topic, minute, records in _rows(result, "throughput", "topic", "minute", "records"):
        per_topic[topic][_ms(minute)] += records
    lag_series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for group, topic, partition, minute, lag in _rows(
        result, "lag", "group", "topic", "partition", "minute", "lag"
    ):
        lag_series[f"{group} {topic}-{partition}"].append((_ms(minute), lag))
    stats = _rows(
        result,
        "partition_stats",
        "topic",
        "partition",
        "records",
        "bytes",
        "first_offset",
        "last_offset",
        "producer_ids",
        "distinct_keys",
    )
    sections = [
        summary,
        Section(
            "Throughput per topic (records per minute)",
            [line_chart({t: sorted(m.items()) for t, m in per_topic.items()}, " rec/min")],
        ),
        Section(
            "Records per partition",
            [
                bar_chart([(f"{r[0]}-{r[1]}", r[2]) for r in stats]),
                table(
                    [
                        "topic",
                        "partition",
                        "records",
                        "bytes",
                        "first offset",
                        "last offset",
                        "producer ids",
                        "distinct keys",
                    ],
                    stats,
                ),
            ],
        ),
        Section(
            "Consumer lag per group (records)",
            [
                line_chart(dict(lag_series), " records"),
                table(
                    ["group", "topic", "partition", "committed", "log end", "lag"],
                    _rows(
                        result,
                        "group_lag",
                        "group",
                        "topic",
                        "partition",
                        "committed_offset",
                        "log_end_offset",
                        "lag",
                    ),
                ),
            ],
        ),
        Section(
            "Hottest keys",
            [
                table(
                    ["topic", "rank", "key", "count", "share"],
                    [
                        (t, rank, k.decode("utf-8", "replace") if k is not None else None, c, f"{s:.1%}")
                        for t, rank, k, c, s in _rows(
                            result, "hot_keys", "topic", "rank", "key", "count", "share"
                        )
                    ],
                )
            ],
        ),
        Section(
            "Producers",
            [
                table(
                    ["topic", "partition", "producer id", "records", "first offset", "last offset"],
                    _rows(
                        result,
                        "producers",
                        "topic",
                        "partition",
                        "producer_id",
                        "records",
                        "first_offset",
                        "last_offset",
                    ),
                )
            ],
        ),
    ]
    return page("kanal analytics", sections)
