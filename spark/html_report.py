"""HtmlReport: a self-contained HTML page with inline SVG charts — no scripts, no stylesheets, no network.

Pure: plain Python values in, one HTML string out. Charts are horizontal bar charts (a value per label,
e.g. leader changes per partition) and line charts (series of (time ms, value) points, e.g. records per
minute per topic, lag per group). Every text is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

_PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")
_BARS_MAX = 40  # bars drawn per chart; the rest are summed up in a note
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#111;max-width:1100px}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f3f4f6}.ok{color:#15803d}.bad{color:#b91c1c}.note{color:#555;font-size:.85em}
svg text{font-size:11px;font-family:system-ui,sans-serif}"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


@dataclass
class Section:
    title: str
    parts: list[str] = field(default_factory=list)


def bar_chart(items: Sequence[tuple[str, float]], unit: str = "", width: int = 760) -> str:
    """One horizontal bar per (label, value), largest first."""
    items = sorted(items, key=lambda kv: (-kv[1], kv[0]))
    hidden = items[_BARS_MAX:]
    items = items[:_BARS_MAX]
    if not items:
        return '<p class="note">nothing to chart</p>'
    label_w, row_h = 220, 18
    top = max(v for _, v in items) or 1
    height = row_h * len(items) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for i, (label, value) in enumerate(items):
        y = 5 + i * row_h
        w = (width - label_w - 90) * (value / top)
        out.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{_e(label)}</text>')
        out.append(
            f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" fill="{_PALETTE[0]}"/>'
        )
        out.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 12}">{_e(_num(value))}{_e(unit)}</text>')
    out.append("</svg>")
    if hidden:
        out.append(
            f'<p class="note">{len(hidden)} more not drawn (total '
            f'{_num(sum(v for _, v in hidden))}{_e(unit)})</p>'
        )
    return "".join(out)


def line_chart(series: dict[str, Sequence[tuple[int, float]]], unit: str = "", width: int = 760,
               height: int = 240) -> str:
    """One line per series of (time ms, value) points, on a shared time axis (UTC)."""
    series = {k: sorted(v) for k, v in series.items() if v}
    if not series:
        return '<p class="note">nothing to chart</p>'
    names = sorted(series)[: len(_PALETTE)]
    xs = [t for n in names for t, _ in series[n]]
    ys = [v for n in names for _, v in series[n]]
    x0, x1 = min(xs), max(xs)
    top = max(ys) or 1
    left, right, bottom, head = 60, 20, 30, 10
    plot_w, plot_h = width - left - right, height - head - bottom

    def px(t: int) -> float:
        return left + (plot_w * (t - x0) / (x1 - x0) if x1 > x0 else plot_w / 2)

    def py(v: float) -> float:
        return head + plot_h - plot_h * v / top

    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height + 18 * len(names)}" role="img">'
        ),
        f'<line x1="{left}" y1="{head + plot_h}" x2="{left + plot_w}" y2="{head + plot_h}" stroke="#999"/>',
        f'<line x1="{left}" y1="{head}" x2="{left}" y2="{head + plot_h}" stroke="#999"/>',
        f'<text x="{left - 4}" y="{head + 10}" text-anchor="end">{_e(_num(top))}</text>',
        f'<text x="{left - 4}" y="{head + plot_h}" text-anchor="end">0</text>',
        f'<text x="{left}" y="{head + plot_h + 16}">{_e(_time(x0))}</text>',
        f'<text x="{left + plot_w}" y="{head + plot_h + 16}" text-anchor="end">{_e(_time(x1))}</text>',
    ]
    for i, name in enumerate(names):
        color = _PALETTE[i % len(_PALETTE)]
        points = " ".join(f"{px(t):.1f},{py(v):.1f}" for t, v in series[name])
        if len(series[name]) == 1:
            t, v = series[name][0]
            out.append(f'<circle cx="{px(t):.1f}" cy="{py(v):.1f}" r="3" fill="{color}"/>')
        else:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}"/>')
        y = height + 18 * i + 4
        out.append(f'<rect x="{left}" y="{y}" width="10" height="10" fill="{color}"/>')
        out.append(
            f'<text x="{left + 14}" y="{y + 9}">{_e(name)} (max {_e(_num(max(v for _, v in series[name])))}'
            f"{_e(unit)})</text>"
        )
    out.append("</svg>")
    if len(series) > len(names):
        out.append(f'<p class="note">{len(series) - len(names)} more series not drawn</p>')
    return "".join(out)


# Rows an HTML table shows; the Parquet table has them all.
TABLE_ROWS_MAX = 200


def table(header: Sequence[str], rows: Sequence[Sequence[object]], rows_max: int = TABLE_ROWS_MAX,
          total: int | None = None) -> str:
    """An HTML table of the first `rows_max` rows; `total` is the table's size when `rows` is only its
    start (report_rows with a limit), else len(rows)."""
    total = len(rows) if total is None else total
    body = "".join("<tr>" + "".join(f"<td>{_e('' if v is None else v)}</td>" for v in row) + "</tr>"
                   for row in rows[:rows_max])
    more = (
        f'<p class="note">{total - rows_max} more rows in the Parquet table</p>'
        if total > rows_max
        else ""
    )
    return f"<table><tr>{''.join(f'<th>{_e(h)}</th>' for h in header)}</tr>{body}</table>{more}"


def paragraph(text: str, css: str = "") -> str:
    return f'<p class="{css}">{_e(text)}</p>' if css else f"<p>{_e(text)}</p>"


def page(title: str, sections: Sequence[Section]) -> str:
    body = "".join(f"<h2>{_e(s.title)}</h2>{''.join(s.parts)}" for s in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{_e(title)}</h1>{body}</body></html>")


def _num(value: float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
