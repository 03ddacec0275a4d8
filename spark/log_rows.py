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
        self.values: dict[str, list] = {n: [] for n in self.names}
        self.rows = 0

    def full(self) -> bool:
        return self.rows >= ROWS_PER_ARROW_BATCH_MAX

    def flush(self) -> pa.RecordBatch | None:
        if not self.rows:
            return None
        out = self.table.batch(self.values)
        self.values = {n: [] for n in self.names}
        self.rows = 0
        return out

    def add_nulls_except(self, count: int, given: dict[str, list]) -> None:
        """Append `count` rows: the given columns' values, nulls elsewhere."""
        for name in self.names:
            col = given.get(name)
            self.values[name].extend(col if col is not None else [None] * count)
        self.rows += count


def _header_list(record) -> list:
    if not record.headers:
        return []
    return [(h.key, h.value if h.HasField("value") else None) for h in record.headers]


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
            col.extend([_header_list(r) for r in records])
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
