"""LogColumns: stored batches of a partition log walked straight into Arrow column buffers.

The C walk (spark/_record_columns.c) reads each batch's decompressed RecordList once and appends every
wanted column to growing buffers: fixed-width values, and keys, values, topic names and headers as binary
arrays (end offsets + the bytes copied out of the decompressed batch), never one Python object per
record. The batch is located by the scan the segment walk already made (StoredEntry.header: where the
`records` payload lies, codec, first timestamp, producer fields), so the batch is not parsed again.

`ColumnBuffer` has RowBuffer's interface (log_rows.py), so `entry_rows` drives both: records go to the C
columns; a notice row (damage, a divergent copy) ends the run of records before it, so rows stay in the
order they were read. Without the C module (no compiler at install), `new_buffer` gives the Python
RowBuffer and `add_entry`, which produce the same rows (tests/spark/test_fast_columns.py).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pyarrow as pa

from kanal.spark.columns import TIMESTAMP, Table
from kanal.spark.log_rows import OFFSET_END, ROWS_PER_ARROW_BATCH_MAX, RowBuffer, add_entry
from kanal.spark.segment_reader import StoredEntry
from kanal.v1 import codecs
from kanal.v1.batch import scan_batch

_native: ModuleType | None
try:  # through importlib: the type checker sees no stub for the C module, only where it is imported
    _native = importlib.import_module("kanal.spark._record_columns")
except ImportError as exc:  # built optionally (setup.py)
    _native = None
    NATIVE_IMPORT_ERROR: str | None = str(exc)
else:
    NATIVE_IMPORT_ERROR = None
NATIVE = _native is not None

# Bytes held before a flush: keeps a worker's memory bounded when values are large (the row bound alone
# would let 65,536 values of 1 MiB accumulate) and the binary columns far from Arrow's 2 GiB offsets.
COLUMN_BYTES_MAX = 64 << 20

_INT64_MAX = (1 << 63) - 1  # the C walk's offsets are int64: OFFSET_END (no bound) becomes this

_FIXED = {"offset": pa.int64(), "producer_id": pa.int64(), "batch_offset": pa.int64(), "timestamp": TIMESTAMP,
          "partition": pa.int32(), "producer_epoch": pa.int32(), "leader_epoch": pa.int32(),
          "value_bytes": pa.int32()}
_BINARY = {"key": pa.binary(), "value": pa.binary(), "topic": pa.string()}


def _want(names: tuple[str, ...]) -> int:
    flags = 0
    for name in names:
        if name in ("_corrupt", "_lost"):
            continue
        flag = getattr(_native, f"WANT_{name.upper()}", None)
        if flag is None:
            raise ValueError(f"kanal-log has no column {name!r}")
        flags |= flag
    return flags


def _binary(arrow_type: pa.DataType, rows: int, buffers: tuple) -> pa.Array:
    bitmap, offsets, data = buffers
    return pa.Array.from_buffers(arrow_type, rows, [None if bitmap is None else pa.py_buffer(bitmap),
                                                   pa.py_buffer(offsets), pa.py_buffer(data)])


class ColumnRuns:
    """RowBuffer's interface over C columns (`self.columns`, made by the subclass, with `rows`, `bytes` and
    `take()`): runs of C rows, notice rows and other runs kept in read order, flushed as one batch."""

    columns: Any

    def __init__(self, table: Table) -> None:
        self.table = table
        self.names = table.names()
        self.notices = RowBuffer(table)  # notice rows, rare
        self.done: list[pa.RecordBatch] = []  # finished runs, in read order

    @property
    def rows(self) -> int:
        return self.columns.rows + self.notices.rows + sum(b.num_rows for b in self.done)

    def full(self) -> bool:
        return self.rows >= ROWS_PER_ARROW_BATCH_MAX or self.columns.bytes >= COLUMN_BYTES_MAX

    def add_nulls_except(self, count: int, given: dict[str, list]) -> None:
        self._end_run()
        self.notices.add_nulls_except(count, given)
        self.done.append(self.notices.flush())  # type: ignore[arg-type]

    def flush(self) -> pa.RecordBatch | None:
        self._end_run()
        done, self.done = self.done, []
        if not done:
            return None
        return done[0] if len(done) == 1 else pa.concat_batches(done)

    def _end_run(self) -> None:
        if self.columns.rows:
            self.done.append(self._records_batch())

    def _records_batch(self) -> pa.RecordBatch:
        raise NotImplementedError


class ColumnBuffer(ColumnRuns):
    """ColumnRuns over the log walk's C columns (module docstring)."""

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        self.columns = _native.Columns(_want(self.names))  # type: ignore[union-attr]
        self.topic_bytes: dict[str, bytes] = {}

    def _records_batch(self) -> pa.RecordBatch:
        rows, buffers = self.columns.take()
        arrays = []
        for column in self.table.columns:
            name = column.name
            if name in _FIXED:
                arrays.append(pa.Array.from_buffers(_FIXED[name], rows, [None, pa.py_buffer(buffers[name])]))
            elif name in _BINARY:
                arrays.append(_binary(_BINARY[name], rows, buffers[name]))
            elif name == "headers":
                offsets, keys, values, count = buffers[name]
                item = column.arrow_type.value_type
                flat = pa.StructArray.from_arrays(
                    [_binary(pa.string(), count, keys), _binary(pa.binary(), count, values)],
                    fields=list(item),
                )
                arrays.append(pa.ListArray.from_arrays(
                    pa.Array.from_buffers(pa.int32(), rows + 1, [None, pa.py_buffer(offsets)]), flat,
                    type=column.arrow_type))
            else:  # _corrupt, _lost: null for a record
                arrays.append(pa.nulls(rows, column.arrow_type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.table.arrow_schema())


def add_entry_columns(buf: ColumnBuffer, topic: str, partition: int, entry: StoredEntry, lo: int = 0,
                      hi: int = OFFSET_END) -> None:
    """Append the records of one intact stored batch with offsets in [lo, hi) to the C columns;
    KanalError (CORRUPT_MESSAGE) and the columns unchanged when its records do not decode."""
    header = entry.header if entry.header is not None else scan_batch(entry.batch)
    payload: bytes | memoryview = entry.batch[header.records_start:header.records_end]
    if header.codec:
        payload = codecs.decompress(header.codec, bytes(payload))
    name = buf.topic_bytes.get(topic)
    if name is None:
        name = buf.topic_bytes[topic] = topic.encode()
    buf.columns.add(payload, header.record_count, entry.base_offset, header.first_timestamp_ms, lo,
                    min(hi, _INT64_MAX), name,
                    partition, header.producer_id, header.producer_epoch, entry.leader_epoch)


def new_buffer(table: Table, native: bool = NATIVE):
    """The buffer and add function for a log table: the C columns when built, else the Python rows."""
    if native:
        return ColumnBuffer(table), add_entry_columns
    return RowBuffer(table), add_entry
