"""ReportRows: a DataFrame's rows for an HTML table, with every timestamp as ISO 8601 in UTC (`...Z`).

A collected Spark timestamp is a naive Python datetime in the driver's local zone, which prints with no
zone at all; the reports instead read timestamps as microseconds since the epoch and print them in UTC
with a `Z`, so a time in a report means the same instant wherever it is read.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType


def iso_utc(micros: int) -> str:
    """2023-11-14T22:13:20.123Z"""
    return (
        datetime.fromtimestamp(micros / 1_000_000, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def report_rows(df: DataFrame, *cols: str, rows_max: int | None = None) -> list[tuple]:
    """The named columns of every row (of the first `rows_max` + 1 with a limit: the driver never holds a
    whole large table), timestamps as iso_utc text (None stays None)."""
    types = {f.name: f.dataType for f in df.schema.fields}
    stamped = [c for c in cols if isinstance(types.get(c), TimestampType)]
    picked = df.select(*[F.unix_micros(F.col(c)).alias(c) if c in stamped else F.col(c) for c in cols])
    if rows_max is not None:
        picked = picked.limit(rows_max + 1)
    return [tuple(iso_utc(r[c]) if c in stamped and r[c] is not None else r[c] for c in cols)
            for r in picked.collect()]
