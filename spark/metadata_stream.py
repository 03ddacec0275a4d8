"""`spark.readStream.format("kanal-metadata")`: the metadata log as a stream, for an audit kept up to date.

    spark.readStream.format("kanal-metadata").load("/path/to/cluster-dir")   # the controllers' data dirs

The stream's offset is the next metadata log offset to read, as JSON `{"offset": N}` in Spark's checkpoint.
Each micro-batch plans the log again (copy_plan.metadata_plan: the controllers' copies, the longest current
one read, the others standing in where it is damaged) and reads the records in [start, end), with the same
columns and `_corrupt` / `_lost` rows as the batch read (metadata_reader.py). The end of a micro-batch is the
log's end as the files show it: a controller appends a batch only once Raft committed and applied it, so
everything up to that end is committed. `startingOffsets` is `earliest` (the default: the log's first
offset) or `latest` (only what is appended after the query starts); `maxOffsetsPerTrigger` caps a batch.

Reading a range reads the segment files that hold it whole, so a micro-batch costs a plan over the
directory plus its own records: cheap for a metadata log, which stays small beside partition data.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from kanal.spark.columns import Table
from kanal.spark.copy_plan import metadata_plan
from kanal.spark.log_source import ItemGroup, plan_groups
from kanal.spark.metadata_reader import read_metadata_group
from kanal.spark.source_options import SourceOptions

STREAM_OPTIONS = {"startingoffsets", "maxoffsetspertrigger"}


@dataclasses.dataclass(frozen=True, slots=True)
class StreamOptions:
    """The stream's own options (the file options are SourceOptions')."""

    starting: str = "earliest"
    max_offsets_per_trigger: int = 0  # 0: no cap

    @classmethod
    def split(cls, options: dict[str, str]) -> tuple[StreamOptions, dict[str, str]]:
        """(the stream options, the rest for SourceOptions.parse); ValueError on a bad value."""
        own = {k.lower(): v for k, v in options.items() if k.lower() in STREAM_OPTIONS}
        rest = {k: v for k, v in options.items() if k.lower() not in STREAM_OPTIONS}
        starting = own.get("startingoffsets", "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f"startingOffsets must be earliest or latest, got {starting!r}")
        try:
            cap = int(own.get("maxoffsetspertrigger", "0"))
        except ValueError:
            raise ValueError(
                f"maxOffsetsPerTrigger must be an integer, got {own['maxoffsetspertrigger']!r}") from None
        if cap < 0:
            raise ValueError(f"maxOffsetsPerTrigger must be >= 0, got {cap}")
        return cls(starting, cap), rest


def clip_groups(groups: list[InputPartition], start: int, end: int) -> list[InputPartition]:
    """The planned groups cut to the offsets [start, end): items outside dropped, the others narrowed."""
    out: list[InputPartition] = []
    for group in groups:
        items = tuple(dataclasses.replace(i, lo=max(i.lo, start), hi=min(i.hi, end))
                      for i in group.items if i.hi > start and i.lo < end)  # type: ignore[attr-defined]
        if items:
            out.append(ItemGroup(items))
    return out or [ItemGroup(())]


class KanalMetadataStreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions, stream: StreamOptions, table: Table) -> None:
        self.options = options
        self.stream = stream
        self.table = table

    def _end(self) -> int:
        plan = metadata_plan(Path(self.options.path))
        return plan.plans[0].committed_end

    def initialOffset(self) -> dict:
        return {"offset": self._end() if self.stream.starting == "latest" else 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.stream.max_offsets_per_trigger
        return ReadMaxRows(cap) if cap else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The log's end, or `start` + the cap: Spark records this as the micro-batch's end, and the next one
        starts there, so a capped batch skips nothing."""
        end = self._end()
        if isinstance(limit, ReadMaxRows):
            end = min(end, _offset(start) + limit.max_rows)
        return {"offset": max(end, _offset(start))}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        groups = plan_groups(metadata_plan(Path(self.options.path)), self.options.bytes_per_partition)
        return clip_groups(groups, _offset(start), _offset(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_metadata_group(partition, self.table, self.options.fail_fast)

    def commit(self, end: dict) -> None:
        """Nothing to release: the files are read, never changed."""


def _offset(offset: dict | str) -> int:
    value = json.loads(offset) if isinstance(offset, str) else offset
    return int(value["offset"])
