"""LogRows: stored batches of a partition log turned into column lists for Arrow, a batch at a time.

Decoding is the project's own: kanal.v1.batch.parse_batch and decode_records (decompression included).
The entry walk has already checked both CRCs, so the batch is parsed without checking the producer CRC a
second time. Only the columns asked for are built (see columns.py); the per-record loop is the cost of a
scan, so each column is filled by its own comprehension over the decoded records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from kanal.spark.columns import Table
from kanal.spark.segment_reader import SegmentDamage, StoredEntry
from kanal.v1.batch import decode_records, parse_batch
from kanal.v1.error import KanalError

# Rows per Arrow batch handed to Spark: large enough that the per-batch overhead vanishes, small enough
# that a worker holds a few MiB at a time.
ROWS_PER_ARROW_BATCH_MAX = 65_536


class RowBuffer:
    """Column lists for one table, flushed into Arrow batches of at most ROWS_PER_ARROW_BATCH_MAX rows."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.names = table.names()
        self.values: dict[str, list] = self._empty()
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
        flat = pa.StructArray.from_arrays([pa.array(self.keys, pa.string()), pa.array(self.values, pa.binary())],
                                          fields=list(item))
        return pa.ListArray.from_arrays(pa.array(self.offsets, pa.int32()), flat, type=arrow_type)


def add_entry(buf: RowBuffer, topic: str, partition: int, entry: StoredEntry) -> None:
    """Append the records of one intact stored batch."""
    batch = parse_batch(entry.batch, verify_crc=False)
    records = decode_records(batch)
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
        elif name == "_corrupt":
            col.extend([None] * n)
        else:
            raise ValueError(f"kanal-log has no column {name!r}")
    buf.rows += n


def add_damage(buf: RowBuffer, topic: str, partition: int, damage: SegmentDamage) -> None:
    buf.add_nulls_except(1, {"topic": [topic], "partition": [partition], "offset": [damage.offset],
                             "_corrupt": [damage.describe()]})


def entry_rows(buf: RowBuffer, topic: str, partition: int, path: str,
               items: Iterable[StoredEntry | SegmentDamage], fail_fast: bool) -> Iterator[pa.RecordBatch]:
    """Fill `buf` from a segment walk, yielding full Arrow batches. Damage becomes a `_corrupt` row, or
    raises in fail-fast mode; a batch whose records do not decode is damage at its own position."""
    for item in items:
        if isinstance(item, StoredEntry):
            try:
                add_entry(buf, topic, partition, item)
            except KanalError as exc:
                # Records are decoded before any column grows, so a failure leaves the buffer whole.
                item = SegmentDamage(path, item.position, item.base_offset, len(item.batch) + 8,
                                     f"batch [{item.base_offset}, {item.last_offset}] does not decode: {exc.message}")
        if isinstance(item, SegmentDamage):
            if fail_fast:
                raise item.error()
            add_damage(buf, topic, partition, item)
        if buf.full():
            out = buf.flush()
            if out is not None:
                yield out
