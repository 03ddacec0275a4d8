"""AuditReport: an AuditResult as a self-contained HTML page and a short text summary."""

from __future__ import annotations

from kanal.spark.audit import AuditResult
from kanal.spark.html_report import TABLE_ROWS_MAX, Section, bar_chart, page, paragraph, table
from kanal.spark.report_rows import report_rows


def _rows(result: AuditResult, name: str, *cols: str) -> list[tuple]:
    return report_rows(result.tables[name], *cols)


def _user(result: AuditResult, event: str) -> int:
    return result.event_counts.get((event, False), 0)


def _internal(result: AuditResult, event: str) -> int:
    return result.event_counts.get((event, True), 0)


def _count(result: AuditResult, *events: str) -> int:
    return sum(n for (event, _internal_topic), n in result.event_counts.items() if event in events)


SETTING_EVENTS = ("registry_config_set", "registry_config_removed", "registry_mode_set",
                  "registry_mode_removed")
_PRODUCER_LINES_MAX = 20  # the summary is for a terminal; the table holds every id


def audit_summary(result: AuditResult) -> list[str]:
    h = result.history
    lines = [
        (f"metadata log: {result.records_read} records, {h.batches_applied} batches applied, "
        f"{h.batches_fenced} fenced batches skipped, image at offset {h.image.next_offset}"),
        (f"user topics created {_user(result, 'topic_created')}, partition increases "
         f"{_user(result, 'partitions_increased')}, deleted {_user(result, 'topic_deleted')} (internal "
         f"topics: created {_internal(result, 'topic_created')}); leader changes "
         f"{_count(result, 'leader_change')}; broker fencings {_count(result, 'broker_fenced')}, unfencings "
         f"{_count(result, 'broker_unfenced')}; config changes "
         f"{_count(result, 'config_set', 'config_removed', 'quota_set', 'quota_removed')}"
         f"; ACL entries added {_count(result, 'acl_added')}, removed {_count(result, 'acl_removed')}"),
        (f"schema registry: versions registered {_count(result, 'schema_registered')}, restored "
         f"{_count(result, 'schema_restored')}, soft-deleted {_count(result, 'schema_soft_deleted')}, "
         f"hard-deleted {_count(result, 'schema_hard_deleted')}; config and mode changes "
         f"{_count(result, *SETTING_EVENTS)}"),
    ]
    producers = result.tables.get("transactional_producers")
    if producers is not None:
        shown = producers.limit(_PRODUCER_LINES_MAX + 1).collect()
        lines.append(f"transactional producers: {producers.count()}")
        for r in shown[:_PRODUCER_LINES_MAX]:
            lines.append(f"  transactional id {r['transactional_id']}: producer {r['producer_id']} epoch "
                         f"{r['producer_epoch']}, {r['state']}, {r['commits']} commits, {r['aborts']} aborts")
        if len(shown) > _PRODUCER_LINES_MAX:
            lines.append("  ... (the transactional_producers table has them all)")
    start = result.start
    if start is not None and start.snapshot is not None:
        lines.append(
            f"the metadata log starts at offset {start.log_start_offset}: replayed from the snapshot at "
            f"offset {start.snapshot.next_offset} ({start.snapshot_path}); the history before it is not "
            f"available"
        )
    if h.stopped:
        lines.append(f"REPLAY STOPPED EARLY at {h.stopped}")
    for d in result.damage:
        lines.append(f"DAMAGE: {d}")
    for n in result.notices:
        lines.append(f"NOTICE: {n}")
    if not result.checks:
        lines.append("image check: no controller endpoints given (use --controllers or a running kanal dev)")
    for c in result.checks:
        if not c.reachable:
            lines.append(f"image check {c.endpoint}: unreachable ({c.error})")
        elif c.equal:
            memory = ", memory too" if c.in_memory_compared else ""
            lines.append(f"image check {c.endpoint}: replayed image EQUALS the controller's (log at offset "
                         f"{c.compared_at_offset}{memory})")
        else:
            lines.append(
                f"image check {c.endpoint}: DIFFERS ({c.error or ''} {len(c.differences)} differences)"
            )
            lines += [f"  {d}" for d in c.differences[:10]]
    return lines


def _topic_label(topic: str | None, topic_id: str | None, deleted: bool) -> str:
    """`name (id…)`, `deleted` when the id is gone: a name re-created is another topic, another row."""
    short = (topic_id or "?")[:8]
    return f"{topic or '?'} ({short}{', deleted' if deleted else ''})"


def audit_html(result: AuditResult) -> str:
    summary = Section(
        "Summary",
        [
            paragraph(
                line, "bad" if any(w in line for w in ("DIFFERS", "DAMAGE", "STOPPED", "NOTICE")) else ""
            )
            for line in audit_summary(result)
        ],
    )
    stats = [
        (_topic_label(t, tid, deleted), *rest)
        for t, tid, deleted, *rest in _rows(
            result,
            "partition_summary",
            "topic",
            "topic_id",
            "deleted",
            "partition",
            "leader_changes",
            "last_leader_epoch",
            "isr_shrinks",
            "isr_expands",
            "under_replicated_ms",
            "offline_ms",
        )
    ]
    label = lambda r: f"{r[0]}-{r[1]}"
    charts = Section(
        "Partitions",
        [
            "<h3>Leader changes per partition</h3>",
            bar_chart([(label(r), r[2]) for r in stats if r[2]]),
            "<h3>Time under-replicated per partition</h3>",
            bar_chart([(label(r), r[6] / 1000) for r in stats if r[6]], " s"),
            "<h3>Time offline per partition</h3>",
            bar_chart([(label(r), r[7] / 1000) for r in stats if r[7]], " s"),
            table(
                [
                    "topic (id)",
                    "partition",
                    "leader changes",
                    "last leader epoch",
                    "ISR shrinks",
                    "ISR expands",
                    "under-replicated ms",
                    "offline ms",
                ],
                stats,
            ),
        ],
    )
    sections = [summary, charts]
    for title, name, cols in (
        (
            "Topic lifecycle",
            "topic_lifecycle",
            ("time", "event", "topic", "topic_id", "principal", "request_id", "detail"),
        ),
        (
            "Leader changes",
            "leader_changes",
            (
                "time",
                "topic",
                "partition",
                "leader_before",
                "leader_after",
                "leader_epoch",
                "cause",
                "reason",
            ),
        ),
        (
            "ISR changes",
            "isr_changes",
            ("time", "topic", "partition", "isr_change", "isr_before", "isr_after", "cause"),
        ),
        (
            "Brokers",
            "broker_events",
            ("time", "event", "broker_id", "broker_epoch", "reason", "duration_ms", "principal"),
        ),
        (
            "Broker fencing",
            "broker_fencing",
            ("broker_id", "start", "end", "duration_ms", "start_reason", "end_reason", "open"),
        ),
        (
            "Partition trouble",
            "partition_health",
            (
                "topic",
                "partition",
                "kind",
                "start",
                "end",
                "duration_ms",
                "start_reason",
                "end_reason",
                "open",
            ),
        ),
        (
            "Config and quota changes",
            "config_changes",
            ("time", "event", "resource_type", "resource", "key", "value_before", "value_after", "principal"),
        ),
        (
            "ACL changes",
            "acl_changes",
            ("time", "event", "resource_type", "resource", "key", "value_before", "value_after", "principal"),
        ),
        (
            "Schema registry changes",
            "schema_changes",
            ("time", "event", "subject", "version", "schema_id", "schema_type", "value_before", "value_after",
             "principal"),
        ),
        (
            "Remote uploads (tiered storage)",
            "remote_uploads",
            ("time", "topic", "partition", "base_offset", "end_offset", "size_bytes", "leader_epoch",
             "broker_id"),
        ),
        (
            "Remote deletions (tiered storage)",
            "remote_deletions",
            ("time", "topic", "partition", "log_start_offset", "reason", "bytes_dropped", "detail"),
        ),
    ):
        rows = report_rows(result.tables[name], *cols, rows_max=TABLE_ROWS_MAX)
        # The events tables grow with the log: count them in Spark only when the HTML shows a part.
        total = result.tables[name].count() if len(rows) > TABLE_ROWS_MAX else None
        sections.append(Section(title, [table(cols, rows, total=total)]))
    return page("kanal audit", sections)
