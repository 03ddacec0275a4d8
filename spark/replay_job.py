"""The metadata log replayed in Spark, chunk after chunk: no part of the log comes to the driver.

    out = replay_in_spark(spark, rows, start, log_bytes, staging, chunk_bytes=..., progress=print)

A replay is a state machine, so it is sequential: each chunk of the log is one Spark task (mapInArrow over
the chunk's rows in one partition, sorted by offset) that feeds the rows to a `replay.Replayer` and emits
the events and intervals it produces; Spark keeps them on the executors' disks (DISK_ONLY), where the
tables are built from. What the driver keeps is the replayer itself (two images, the open intervals,
counters: the size of the cluster, not of its log), pickled into the task that runs the next chunk and
emitted by it as the chunk's last row. So a 10-million-record log replays in the driver memory a small
one needs, and the progress line moves chunk by chunk.

Chunks hold whole batches (a batch is applied at once). A log of at most `chunk_bytes` of segment files
is one chunk read straight from the source. A longer one is first staged as Parquet under `staging` (the
replay's columns and `batch_key`, a row's batch base offset), and each chunk reads one range of batch
keys of it; Parquet's row-group statistics let a chunk skip the rest, where re-reading the log per chunk
would not.

A chunk's rows (HISTORY_TABLE) are of four kinds (`_row`): `event` (an events-table row; `seq` orders
the events of one offset), `interval` (a closed interval), `flag` (a row of the log that is not a record:
`corrupt` and whether a record was `lost`, for the damage and notices lists) and `state` (the pickled
ChunkState, one per chunk). Intervals still open at the log's end come from the final state
(`Replayer.finish`, on the driver).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import reduce
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kanal.spark.columns import Column, Table
from kanal.spark.replay import Event, History, Interval, Replayer, ReplayRow
from kanal.spark.replay_start import ReplayStart
from kanal.spark.replay_tables import EVENTS_TABLE, INTERVALS_TABLE

# Segment bytes per chunk: about 250,000 metadata records, so the progress line moves every half minute
# or so; each chunk costs one Spark job and the replayer's pickle.
CHUNK_BYTES_DEFAULT = 16 * 1024 * 1024
# Events and intervals per output batch of a chunk task: bounds the task's memory, not the driver's.
OUTPUT_ROWS_MAX = 10_000

_EVENT_NAMES = EVENTS_TABLE.names()
_INTERVAL_ONLY = tuple(c for c in INTERVALS_TABLE.columns if c.name not in _EVENT_NAMES)
HISTORY_TABLE = Table((
    Column("_row", "string", pa.string(), ""),
    Column("seq", "bigint", pa.int64(), ""),
    *EVENTS_TABLE.columns,
    *_INTERVAL_ONLY,
    Column("corrupt", "string", pa.string(), ""),
    Column("lost", "boolean", pa.bool_(), ""),
    Column("state", "binary", pa.binary(), ""),
))
_INTERVAL_TIMES = {"start": "start_ms", "end": "end_ms"}


@dataclass(slots=True)
class ChunkState:
    """What one chunk hands the next: the replayer, the records read so far, the next event's seq, and
    the events so far per (event, of an internal topic)."""

    replayer: Replayer
    records_read: int = 0
    seq: int = 0
    event_counts: dict[tuple[str, bool], int] = field(default_factory=dict)


@dataclass(slots=True)
class ReplayOutput:
    """The replay's result on the driver: its summary (`history`: final image, counters, stop; its lists
    hold only the intervals still open at the end) and the tables it wrote."""

    history: History
    records_read: int
    flags: list[tuple[str, bool | None]]  # (corrupt, lost) of each row that is not a record, in offset order
    event_counts: dict[tuple[str, bool], int]  # events per (event, of an internal topic: `__` name)
    events: DataFrame  # EVENTS_TABLE's columns, ordered as the replay produced them
    intervals: DataFrame  # INTERVALS_TABLE's columns, closed and open


def replay_in_spark(spark: SparkSession, rows: DataFrame, start: ReplayStart | None, log_bytes: int,
                    staging: Callable[[], Path], *, chunk_bytes: int = CHUNK_BYTES_DEFAULT,
                    progress: Callable[[str], None] | None = None) -> ReplayOutput:
    """Replay `rows` (REPLAY_COLUMNS, from the kanal-metadata source) chunk by chunk in Spark; `log_bytes`
    (the segment files' size) decides the number of chunks; `staging()` gives an empty directory the
    executors can write (shared storage on a cluster), asked for only when the log is staged."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, not {chunk_bytes}")
    say = progress or (lambda _text: None)
    keyed = rows.withColumn("batch_key", F.coalesce(F.col("batch_offset"), F.col("offset")))
    chunks_wanted = max(1, -(-log_bytes // chunk_bytes))
    if chunks_wanted == 1:
        inputs = [keyed]
    else:
        say(f"staging the metadata log's records for the replay ({log_bytes:,} bytes of segments)")
        staged_at = str(staging() / "rows")
        keyed.write.mode("overwrite").parquet(staged_at)
        staged = spark.read.parquet(staged_at)
        lo, hi = staged.agg(F.min("batch_key"), F.max("batch_key")).first() or (None, None)
        inputs = [staged.where((F.col("batch_key") >= a) & (F.col("batch_key") < b))
                  for a, b in key_ranges(lo, hi, chunks_wanted)]
    replayer = Replayer(start)
    replayer.begin()
    state = ChunkState(replayer)
    # What begin() produced (a snapshot's event, or why nothing can be replayed) is the first output.
    begun = list(_output(state, *replayer.take_output()))
    outputs = [spark.createDataFrame(pa.Table.from_batches(begun), HISTORY_TABLE.ddl())] if begun else []
    last_offset = None
    flags: list[tuple[int, int, str, bool | None]] = []
    for n, chunk in enumerate(inputs):
        say(f"replaying the metadata log in Spark: chunk {n + 1} of {len(inputs)}"
            + (f", from offset {last_offset + 1:,}" if last_offset is not None else ""))
        # coalesce, not repartition: the chunk's rows come to one task without a shuffle, sorted there.
        # Kept on the executors' disks (DISK_ONLY: the driver's memory stays the same whatever the log's
        # size); the tables read it from there.
        out = (chunk.coalesce(1).sortWithinPartitions("offset")
               .mapInArrow(replay_chunk(pickle.dumps(state)), HISTORY_TABLE.ddl())
               .persist(StorageLevel.DISK_ONLY))
        outputs.append(out)
        for r in (out.where(F.col("_row").isin("state", "flag"))
                  .select("_row", "offset", "seq", "corrupt", "lost", "state").collect()):
            if r["_row"] == "flag":
                flags.append((r["offset"], r["seq"], r["corrupt"], r["lost"]))
            else:
                state = pickle.loads(r["state"])
                last_offset = r["offset"]
        # A chunk without rows may not run its task at all: then nothing changed.
    history = state.replayer.finish()  # what is still open ends at the last record's time
    written = reduce(DataFrame.unionByName, outputs)
    # Sorted once and kept (on disk): every events table is a filter of it.
    events = (written.where(F.col("_row") == "event").orderBy("offset", "seq").select(*_EVENT_NAMES)
              .persist(StorageLevel.DISK_ONLY))
    open_intervals = spark.createDataFrame(pa.Table.from_batches([intervals_batch(history.intervals)]),
                                           INTERVALS_TABLE.ddl())
    intervals = (written.where(F.col("_row") == "interval").select(*INTERVALS_TABLE.names())
                 .unionByName(open_intervals))
    flags.sort(key=lambda f: (f[0] if f[0] is not None else -1, f[1]))
    return ReplayOutput(history, state.records_read, [(f[2], f[3]) for f in flags], state.event_counts,
                        events, intervals)

def key_ranges(lo: int | None, hi: int | None, count: int) -> list[tuple[int, int]]:
    """`count` ranges [a, b) of about equal width covering lo..hi (batch base offsets), at least one."""
    if lo is None or hi is None:
        return [(0, 1)]
    width = hi + 1 - lo
    count = max(1, min(count, width))
    bounds = [lo + width * i // count for i in range(count)] + [hi + 1]
    return list(pairwise(bounds))


def replay_chunk(state_bytes: bytes) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task of one chunk: its rows in offset order in, the replay's rows out (module docstring)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        state: ChunkState = pickle.loads(state_bytes)
        replayer = state.replayer
        last_offset = None
        for batch in batches:
            rows, flags = replay_rows(batch)
            state.records_read += batch.num_rows - len(flags)
            if batch.num_rows:
                last_offset = batch.column("offset")[batch.num_rows - 1].as_py()
            replayer.feed(rows)
            if flags:
                yield _flags_batch(flags, state)
            yield from _output(state, *replayer.take_output())
        replayer.flush()  # a chunk holds whole batches: the last one is complete
        yield from _output(state, *replayer.take_output())
        yield HISTORY_TABLE.batch(_columns(1, _row=["state"], offset=[last_offset],
                                           state=[pickle.dumps(state)]))

    return run


def replay_rows(batch: pa.RecordBatch) -> tuple[list[ReplayRow], list[tuple[int, str, bool | None]]]:
    """A batch of the source's rows as replay rows, and the rows that are not records: (offset, corrupt,
    lost). A row another copy made good (`_lost` false) is a notice, not a record: it is not replayed."""
    cols = [batch.column(n).to_pylist() for n in
            ("offset", "batch_offset", "controller_epoch", "time_ms", "record", "_corrupt")]
    rows: list[ReplayRow] = []
    flags: list[tuple[int, str, bool | None]] = []
    for values, lost in zip(zip(*cols), batch.column("_lost").to_pylist()):
        if values[5] is not None:
            flags.append((values[0], values[5], lost))
        if lost is False:
            continue
        rows.append(ReplayRow(*values))
    return rows, flags


def _columns(n: int, **given: list) -> dict[str, list]:
    return {c: given.get(c, [None] * n) for c in HISTORY_TABLE.names()}


def _flags_batch(flags: list[tuple[int, str, bool | None]], state: ChunkState) -> pa.RecordBatch:
    n = len(flags)
    seqs = list(range(state.seq, state.seq + n))
    state.seq += n
    return HISTORY_TABLE.batch(_columns(n, _row=["flag"] * n, seq=seqs, offset=[f[0] for f in flags],
                                        corrupt=[f[1] for f in flags], lost=[f[2] for f in flags]))


def _output(state: ChunkState, events: list[Event], intervals: list[Interval]) -> Iterator[pa.RecordBatch]:
    for i in range(0, len(events), OUTPUT_ROWS_MAX):
        part = events[i:i + OUTPUT_ROWS_MAX]
        for e in part:
            key = (e.event, (e.topic or "").startswith("__"))
            state.event_counts[key] = state.event_counts.get(key, 0) + 1
        values = event_columns(part)
        values["seq"] = list(range(state.seq, state.seq + len(part)))
        state.seq += len(part)
        values["_row"] = ["event"] * len(part)
        yield HISTORY_TABLE.batch(_columns(len(part), **values))
    for i in range(0, len(intervals), OUTPUT_ROWS_MAX):
        closed = intervals[i:i + OUTPUT_ROWS_MAX]
        values = interval_columns(closed)
        values["_row"] = ["interval"] * len(closed)
        yield HISTORY_TABLE.batch(_columns(len(closed), **values))


def event_columns(events: list[Event]) -> dict[str, list]:
    """EVENTS_TABLE's columns of `events` (timestamps in ms, as Table.batch takes them)."""
    # Attribute by attribute: dataclasses.asdict deep-copies every event, the replay's costliest step here.
    return {c: [getattr(e, "time_ms" if c == "time" else c) for e in events] for c in _EVENT_NAMES}


def interval_columns(intervals: list[Interval]) -> dict[str, list]:
    """INTERVALS_TABLE's columns of `intervals`."""
    return {c: [getattr(i, _INTERVAL_TIMES.get(c, c)) for i in intervals] for c in INTERVALS_TABLE.names()}


def intervals_batch(intervals: list[Interval]) -> pa.RecordBatch:
    return INTERVALS_TABLE.batch(interval_columns(intervals))
