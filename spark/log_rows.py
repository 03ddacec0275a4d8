"""LogRows: stored batches of a partition log turned into column lists for Arrow, a batch at a time.

Decoding is the project's own: kanal.v1.batch.parse_batch and decode_records (decompression included).
The entry walk has already checked both CRCs, so the batch is parsed without checking the producer CRC a
second time. Only the columns asked for are built (see columns.py); the per-record loop is the cost of a
scan, so each column is filled by its own comprehension over the decoded records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from kanal.spark.columns import Table
from kanal.spark.range_reader import Clipped, Notice
from kanal.spark.segment_reader import SegmentDamage, StoredEntry
from kanal.v1.batch import decode_records, parse_batch
from kanal.v1.error import KanalError

# Rows per Arrow batch handed to Spark: large enough that the per-batch overhead vanishes, small enough
# that a worker holds a few MiB at a time.
ROWS_PER_ARROW_BATCH_MAX = 65_536
OFFSET_END = 1 << 63  # no upper offset bound


class RowBuffer:
    """Column lists for one table, flushed into Arrow batches of at most ROWS_PER_ARROW_BATCH_MAX rows."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.names = table.names()
        # Each column's values: a list, or for the headers a HeaderColumn (Arrow's list-of-struct pieces).
        self.values: dict[str, Any] = self._empty()
        self.rows = 0

    def _empty(self) -> dict:
        return {n: HeaderColumn() if n == "headers" else [] for n in self.names}

    def full(self) -> bool:
        return self.rows >= ROWS_PER_ARROW_BATCH_MAX

    def flush(self) -> pa.RecordBatch | None:
        if not self.rows:
            return None
        out = self.table.batch(self.values)
        self.values = self._empty()
        self.rows = 0
        return out

    def add_nulls_except(self, count: int, given: dict[str, list]) -> None:
        """Append `count` rows: the given columns' values, nulls elsewhere."""
        for name in self.names:
            col = given.get(name)
            self.values[name].extend(col if col is not None else [None] * count)
        self.rows += count


def _add_headers(col: HeaderColumn, records) -> None:
    offsets, keys, values = col.offsets, col.keys, col.values
    end = offsets[-1]
    for r in records:
        if r.headers:  # most records have none: one truthiness test, no list built
            for h in r.headers:
                keys.append(h.key)
                values.append(h.value if h.HasField("value") else None)
            end += len(r.headers)
        offsets.append(end)


class HeaderColumn:
    """The headers column as Arrow builds a list array: one offset per row into flat key and value lists.
    A Python list of lists per row would cost more than every other column together."""

    def __init__(self) -> None:
        self.offsets = [0]
        self.keys: list[str] = []
        self.values: list[bytes | None] = []

    def extend(self, rows: list) -> None:
        """Rows given as lists of (key, value) pairs, or None (damage rows carry no headers)."""
        end = self.offsets[-1]
        for row in rows:
            for key, value in row or ():
                self.keys.append(key)
                self.values.append(value)
                end += 1
            self.offsets.append(end)

    def to_arrow(self, arrow_type: pa.DataType) -> pa.Array:
        item = arrow_type.value_type
        flat = pa.StructArray.from_arrays(
            [pa.array(self.keys, pa.string()), pa.array(self.values, pa.binary())], fields=list(item)
        )
        return pa.ListArray.from_arrays(pa.array(self.offsets, pa.int32()), flat, type=arrow_type)


def clipped_records(entry: StoredEntry, lo: int, hi: int):
    """The stored batch parsed, and its records with offsets in [lo, hi)."""
    batch = parse_batch(entry.batch, verify_crc=False)
    records = decode_records(batch)
    if entry.base_offset < lo or entry.last_offset >= hi:
        base = entry.base_offset
        records = [r for r in records if lo <= base + r.offset_delta < hi]
    return batch, records


def add_entry(buf: RowBuffer, topic: str | None, partition: int | None, entry: StoredEntry, lo: int = 0,
              hi: int = OFFSET_END) -> None:
    """Append the records of one intact stored batch that have offsets in [lo, hi)."""
    batch, records = clipped_records(entry, lo, hi)
    n = len(records)
    base = entry.base_offset
    v = buf.values
    for name in buf.names:
        col = v[name]
        if name == "offset":
            col.extend([base + r.offset_delta for r in records])
        elif name == "timestamp":
            first = batch.first_timestamp_ms
            col.extend([first + r.timestamp_delta_ms for r in records])
        elif name == "key":
            col.extend([r.key if r.HasField("key") else None for r in records])
        elif name == "value":
            col.extend([r.value if r.HasField("value") else None for r in records])
        elif name == "value_bytes":
            col.extend([len(r.value) for r in records])
        elif name == "headers":
            _add_headers(col, records)
        elif name == "topic":
            col.extend([topic] * n)
        elif name == "partition":
            col.extend([partition] * n)
        elif name == "producer_id":
            col.extend([batch.producer_id] * n)
        elif name == "producer_epoch":
            col.extend([batch.producer_epoch] * n)
        elif name == "leader_epoch":
            col.extend([entry.leader_epoch] * n)
        elif name == "batch_offset":
            col.extend([base] * n)
        elif name in ("_corrupt", "_lost"):
            col.extend([None] * n)
        else:
            raise ValueError(f"kanal-log has no column {name!r}")
    buf.rows += n


def add_notice(buf: RowBuffer, topic: str | None, partition: int | None, notice: Notice) -> None:
    """One row that is not a record: `_corrupt` says what, `_lost` whether offsets are missing."""
    buf.add_nulls_except(1, {"topic": [topic], "partition": [partition], "offset": [notice.offset],
                             "_corrupt": [notice.text], "_lost": [notice.lost]})


def as_notice(damage: SegmentDamage) -> Notice:
    return Notice(damage.offset, damage.describe(), True)


def undecodable(path: str, entry: StoredEntry, exc: KanalError) -> Notice:
    """A batch whose entry is intact but whose records do not decode: lost, at its own position (every
    copy holds the same bytes, so no other copy can help)."""
    return as_notice(
        SegmentDamage(
            path,
            entry.position,
            entry.base_offset,
            len(entry.batch) + 8,
            f"batch [{entry.base_offset}, {entry.last_offset}] does not decode: {exc.message}",
        )
    )


def entry_rows(buf: RowBuffer, topic: str | None, partition: int | None, path: str,
               items: Iterable[Clipped | Notice | StoredEntry | SegmentDamage], fail_fast: bool,
               add: Callable[[RowBuffer, str | None, int | None, StoredEntry, int, int], None] = add_entry,
               ) -> Iterator[pa.RecordBatch]:
    """Fill `buf` from a read (range_reader.read_item, or a Fetch walk), yielding full Arrow batches.
    Notices become rows (`_corrupt` set); one saying offsets are lost raises instead in fail-fast mode."""
    for item in items:
        if isinstance(item, SegmentDamage):
            item = as_notice(item)
        elif isinstance(item, StoredEntry):
            item = Clipped(item, 0, OFFSET_END)
        if isinstance(item, Clipped):
            try:
                add(buf, topic, partition, item.entry, item.lo, item.hi)
            except KanalError as exc:
                # Records are decoded before any column grows, so a failure leaves the buffer whole.
                item = undecodable(path, item.entry, exc)
        if isinstance(item, Notice):
            if fail_fast and item.lost:
                raise item.error()
            add_notice(buf, topic, partition, item)
        if buf.full():
            out = buf.flush()
            if out is not None:
                yield out
