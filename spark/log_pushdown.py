"""LogPushdown: the filters Spark pushes to `kanal-log`, turned into what a scan can skip.

Spark hands a Python data source the conjuncts of a query's WHERE clause (`DataSourceReader.pushFilters`,
Spark 4.1+, when `spark.sql.python.filterPushdown.enabled` is true; kanal_session sets it). The reader
uses them only to read less, never to decide which rows are right: every filter is handed back to Spark,
which evaluates it on what the reader yields, so the rows are exactly those of an unfiltered read with
the filter applied (tests/spark/test_fast_columns.py compares them).

What is skipped:
- `topic` = / IN: other topics' partitions are not planned;
- `partition` = / IN: other partitions are not planned;
- `offset` =, <, <=, >, >=: each task's offset range is narrowed (a batch crossing the edge keeps only the
  records inside, range_reader.Clipped), so files and batches outside are not read;
- `timestamp` >, >=, =: batches whose largest record timestamp (the batch header's max_timestamp_ms, which
  the leader checks) is older than the bound, less a day of margin for the time zone the filter value
  was converted in, are not decoded.
Notice rows (damage, divergent copies) carry topic, partition and offset, so Spark's own evaluation keeps
or drops them exactly as in an unfiltered read.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from pyspark.sql.datasource import EqualTo, Filter, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

from kanal.spark.range_reader import ReadItem

OFFSET_MAX = (1 << 63) - 1
# A pushed timestamp may have been turned into a naive datetime in some zone: skip only batches older
# than the bound by more than any zone offset.
TIMESTAMP_MARGIN_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class ScanBounds:
    """What a scan may skip; the defaults skip nothing."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    offset_lo: int = 0
    offset_hi: int = OFFSET_MAX  # exclusive
    timestamp_min_ms: int | None = None  # batches whose records are all older may be skipped

    def keeps(self, topic: str, partition: int) -> bool:
        return ((self.topics is None or topic in self.topics)
                and (self.partitions is None or partition in self.partitions))

    def narrow(self, item: ReadItem) -> ReadItem | None:
        """The item with its offset range narrowed; None when nothing of it can match (an item with
        planning notes is kept, its range maybe empty, so its notices still come out)."""
        if not self.keeps(item.topic, item.partition):
            return None
        lo, hi = max(item.lo, self.offset_lo), min(item.hi, self.offset_hi)
        if lo >= hi and not item.notes:
            return None
        return replace(item, lo=lo, hi=max(lo, hi))


def _ms(value: object) -> int | None:
    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1000)
    return None


def _intersect(current: frozenset | None, values: frozenset) -> frozenset:
    return values if current is None else current & values


def scan_bounds(filters: list[Filter]) -> ScanBounds:
    """The bounds the conjunction of `filters` implies (pure; unknown filters imply nothing)."""
    b = ScanBounds()
    for f in filters:
        column = f.attribute[0] if len(f.attribute) == 1 else None
        if column == "topic" and isinstance(f, (EqualTo, In)):
            values = frozenset([f.value] if isinstance(f, EqualTo) else f.value)
            if all(isinstance(v, str) for v in values):
                b = replace(b, topics=_intersect(b.topics, values))
        elif column == "partition" and isinstance(f, (EqualTo, In)):
            values = frozenset([f.value] if isinstance(f, EqualTo) else f.value)
            if all(isinstance(v, int) for v in values):
                b = replace(b, partitions=_intersect(b.partitions, values))
        elif column == "offset" and isinstance(f.value if hasattr(f, "value") else None, int):
            v = f.value
            if isinstance(f, EqualTo):
                b = replace(b, offset_lo=max(b.offset_lo, v), offset_hi=min(b.offset_hi, v + 1))
            elif isinstance(f, GreaterThan):
                b = replace(b, offset_lo=max(b.offset_lo, v + 1))
            elif isinstance(f, GreaterThanOrEqual):
                b = replace(b, offset_lo=max(b.offset_lo, v))
            elif isinstance(f, LessThan):
                b = replace(b, offset_hi=min(b.offset_hi, v))
            elif isinstance(f, LessThanOrEqual):
                b = replace(b, offset_hi=min(b.offset_hi, v + 1))
        elif column == "timestamp" and isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual)):
            ms = _ms(f.value)
            if ms is not None:
                bound = ms - TIMESTAMP_MARGIN_MS
                b = replace(b, timestamp_min_ms=bound if b.timestamp_min_ms is None else max(b.timestamp_min_ms, bound))
    return b


def skip_older(items, timestamp_min_ms: int | None):
    """A read (range_reader.read_item or a Fetch walk) without the intact batches whose records are all
    older than `timestamp_min_ms` (None: everything)."""
    if timestamp_min_ms is None:
        yield from items
        return
    for item in items:
        entry = getattr(item, "entry", item)  # a Clipped entry, or a StoredEntry of a Fetch walk
        header = getattr(entry, "header", None)
        if header is not None and header.max_timestamp_ms < timestamp_min_ms:
            continue
        yield item
