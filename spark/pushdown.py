"""Pushed filters: the predicates a JVM table (spark/jvm/KanalSource.java) hands the planner and the
reader, to read less. They never decide which rows a query returns: the table gives every filter back to
Spark, which evaluates it on the rows read, so a filter only has to keep every row it would pass.

What is pushed (JSON from the JVM, one object per predicate; conjunctions are split there):

    {"column": "topic" | "partition" | "offset" | "timestamp", "op": "=" | "<" | "<=" | ">" | ">=" | "in",
     "value": v} or {..., "op": "in", "values": [v, ...]}        timestamps in microseconds since the epoch

and what each narrows (`kanal-metadata` pushes only `offset`):

- topic and partition: partitions that cannot match are not planned (files) or fetched (bootstrap).
- offset: from files, the segments wholly outside the offsets wanted are not read. Whole segments, so each
  segment read is walked exactly as without the filter: the same records and the same notices (a read
  starting mid-segment would name damage before it at another offset). Not under read_committed, whose
  transaction views are built from the items read (transactions.py).
- timestamp (a lower bound): a stored batch whose max_timestamp_ms (validated against its records when
  produced) is below it is passed over without decoding its records. Batches, not segments: the time
  index holds an entry only where an index entry falls, so it cannot say a segment's largest timestamp.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from kanal.spark.copy_plan import ReadPlan
from kanal.spark.log_rows import OFFSET_END
from kanal.spark.range_reader import Clipped
from kanal.v1.batch import scan_batch

_OPS = ("=", "<", "<=", ">", ">=", "in")
T = TypeVar("T")  # what a read yields: Clipped entries pass the bound or not, anything else passes


@dataclass(frozen=True, slots=True)
class Pushed:
    """The predicates' bounds, intersected; None: no bound."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_lo: int = 0
    partition_hi: int = 1 << 31  # exclusive
    offset_lo: int = 0
    offset_hi: int = OFFSET_END  # exclusive
    timestamp_lo_us: int | None = None

    @classmethod
    def parse(cls, filters: Iterable[dict[str, Any]] | None) -> Pushed:
        """Bounds from the JVM's predicates; ValueError on a predicate this module does not know (the JVM
        pushes only what it can send here, so that is a bug, not a user's error)."""
        p = cls()
        for f in filters or ():
            column, op = f.get("column"), f.get("op")
            if op not in _OPS:
                raise ValueError(f"pushed filter with unknown op: {f}")
            values = list(f["values"]) if op == "in" else [f["value"]]
            if column == "topic":
                if op not in ("=", "in"):
                    continue  # a range of names narrows nothing worth planning for
                p = dataclasses.replace(p, topics=_meet(p.topics, frozenset(str(v) for v in values)))
            elif column == "partition":
                if op in ("=", "in"):
                    wanted = frozenset(int(v) for v in values)
                    p = dataclasses.replace(p, partitions=_meet(p.partitions, wanted))
                else:
                    lo, hi = _range(op, int(values[0]))
                    p = dataclasses.replace(p, partition_lo=max(p.partition_lo, lo),
                                            partition_hi=min(p.partition_hi, hi))
            elif column == "offset":
                if op == "in":
                    lo, hi = min(int(v) for v in values), max(int(v) for v in values) + 1
                else:
                    lo, hi = _range(op, int(values[0]))
                p = dataclasses.replace(p, offset_lo=max(p.offset_lo, lo), offset_hi=min(p.offset_hi, hi))
            elif column == "timestamp":
                if op in ("=", ">="):
                    lo = int(values[0])
                elif op == ">":
                    lo = int(values[0]) + 1
                elif op == "in":
                    lo = min(int(v) for v in values)
                else:
                    continue  # an upper bound: a batch's first timestamp is not its least (deltas may be < 0)
                p = dataclasses.replace(p, timestamp_lo_us=max(lo, p.timestamp_lo_us or lo))
            else:
                raise ValueError(f"pushed filter on a column this source does not narrow: {f}")
        return p

    def wants(self, topic: str, partition: int) -> bool:
        return ((self.topics is None or topic in self.topics)
                and (self.partitions is None or partition in self.partitions)
                and self.partition_lo <= partition < self.partition_hi)

    def prune(self, plan: ReadPlan, *, offsets: bool = True) -> ReadPlan:
        """The plan without the partitions no row of which can match, and (with `offsets`) each partition's
        read narrowed to the segments holding offsets in [offset_lo, offset_hi). A partition's notes stay."""
        plans = []
        for p in plan.plans:
            if not self.wants(p.topic, p.partition):
                continue
            copy = plan.copy(p.primary)
            if offsets and copy is not None and (self.offset_lo > 0 or self.offset_hi < OFFSET_END):
                bases = [s.base_offset for s in copy.segments]
                first = max((b for b in bases if b <= self.offset_lo), default=p.read_from)
                end = min((b for b in bases if b >= self.offset_hi), default=p.committed_end)
                p = dataclasses.replace(p, read_from=max(p.read_from, first),
                                        committed_end=max(min(p.committed_end, end), max(p.read_from, first)))
            plans.append(p)
        return dataclasses.replace(plan, plans=tuple(plans))

    def batches(self, items: Iterable[T]) -> Iterator[T]:
        """The items without the stored batches every record of which is older than the timestamp bound."""
        if self.timestamp_lo_us is None:
            yield from items
            return
        for item in items:
            if isinstance(item, Clipped):
                header = item.entry.header if item.entry.header is not None else scan_batch(item.entry.batch)
                if header.max_timestamp_ms * 1000 < self.timestamp_lo_us:
                    continue
            yield item


def _meet(a: frozenset | None, b: frozenset) -> frozenset:
    return b if a is None else a & b


def _range(op: str, v: int) -> tuple[int, int]:
    """[lo, hi) of the integers x with `x op v`."""
    return {"=": (v, v + 1), "<": (0, v), "<=": (0, v + 1), ">": (v + 1, OFFSET_END),
            ">=": (v, OFFSET_END)}[op]
