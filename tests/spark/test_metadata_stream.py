"""`spark.readStream.format("kanal-metadata")`: the metadata log as a stream. Every record arrives exactly
once, in micro-batches no larger than maxOffsetsPerTrigger, across a stop and a restart from the checkpoint
while the log grows; `latest` starts after what is there; the rows are the batch read's."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kanal.broker.storage.log import Log
from kanal.metadata.log_codec import encode_metadata_batch
from kanal.v1 import metadata_pb2 as m

from ..cluster.conftest import wait_until
from .cluster_files import METADATA_SEGMENTS, T0, metadata_batches, write_metadata_log

pytestmark = pytest.mark.spark

CAP = 4


def _append_configs(directory: Path, first: int, count: int) -> None:
    """More committed history: `count` config records, one batch each, as a controller appends them."""
    log = Log.open(directory, METADATA_SEGMENTS)
    for i in range(first, first + count):
        config = m.ConfigRecord(resource_type=m.CONFIG_RESOURCE_TOPIC, resource_name="orders",
                                key="retention.ms", value=str(i))
        record = m.MetadataRecord(config=config, time_ms=T0 + i, principal="User:ops")
        batch = encode_metadata_batch(m.MetadataBatch(controller_epoch=1, records=[record]))
        log.append(batch, leader_epoch=1, now_ms=T0)
    log.close()


class Collected:
    """What foreachBatch saw, per micro-batch id: (offsets, serialized records). foreachBatch is
    at-least-once: a micro-batch that ran but was not yet recorded as committed when the query stopped
    runs again on the restart, under the same id, and must bring the same records (an idempotent sink
    keys on the id)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: dict[int, tuple[list[int], list[bytes]]] = {}
        self.replayed: list[int] = []

    def __call__(self, df, batch_id: int) -> None:
        rows = df.select("offset", "record", "_corrupt").collect()
        assert all(r["_corrupt"] is None for r in rows)
        seen = ([r["offset"] for r in rows], [bytes(r["record"]) for r in rows])
        with self.lock:
            if batch_id in self.batches:
                assert self.batches[batch_id] == seen, f"micro-batch {batch_id} replayed with other records"
                self.replayed.append(batch_id)
            self.batches[batch_id] = seen

    def offsets(self) -> list[int]:
        with self.lock:
            return [o for _, (offsets, _) in sorted(self.batches.items()) for o in offsets]

    def settled(self, query, count: int) -> bool:
        """`count` offsets seen and the query's progress past the last micro-batch that brought some: that
        callback has returned. Stopping a query while its foreachBatch callback is still running left
        the stop waiting for a callback answer that never came (the suite hung once)."""
        with self.lock:
            last = max(self.batches, default=-1)
            enough = sum(len(offsets) for offsets, _ in self.batches.values()) >= count
        progress = query.lastProgress
        return enough and progress is not None and progress["batchId"] >= last


def _run_until(spark, root: Path, checkpoint: Path, collected: Collected, count: int, **options: str) -> None:
    reader = spark.readStream.format("kanal-metadata")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load(str(root)).writeStream.foreachBatch(collected)
             .option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: collected.settled(query, count) or query.exception() is not None, 180,
                   f"{count} metadata records through the stream")
        assert query.exception() is None, query.exception()
    finally:
        query.stop()


def test_metadata_stream_delivers_each_record_once_across_a_restart(spark, tmp_path):
    log_dir = tmp_path / "controller-0" / "__cluster_metadata-0"
    write_metadata_log(log_dir, metadata_batches())
    first = spark.read.format("kanal-metadata").load(str(tmp_path)).count()
    checkpoint, collected = tmp_path / "checkpoint", Collected()
    _run_until(spark, tmp_path, checkpoint, collected, first, maxOffsetsPerTrigger=str(CAP))
    # The log grows while no query runs; the restart goes on from the checkpoint.
    _append_configs(log_dir, first, 10)
    _run_until(spark, tmp_path, checkpoint, collected, first + 10, maxOffsetsPerTrigger=str(CAP))
    offsets = collected.offsets()
    assert offsets == list(range(first + 10)), offsets  # each once, in order, none skipped
    assert all(len(o) <= CAP for o, _ in collected.batches.values())
    rows = spark.read.format("kanal-metadata").load(str(tmp_path)).select("offset", "record").collect()
    batch = {r["offset"]: bytes(r["record"]) for r in rows}
    streamed = {o: rec for offs, recs in collected.batches.values()
                for o, rec in zip(offs, recs, strict=True)}
    assert streamed == batch
    assert m.MetadataRecord.FromString(streamed[first + 9]).config.value == str(first + 9)


def test_metadata_stream_from_latest_reads_only_what_is_appended(spark, tmp_path):
    log_dir = tmp_path / "controller-0" / "__cluster_metadata-0"
    write_metadata_log(log_dir, metadata_batches())
    existing = spark.read.format("kanal-metadata").load(str(tmp_path)).count()
    collected = Collected()
    reader = spark.readStream.format("kanal-metadata").option("startingOffsets", "latest")
    query = (reader.load(str(tmp_path)).writeStream.foreachBatch(collected)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: query.lastProgress is not None or query.exception() is not None, 180,
                   "the query's first micro-batch")
        _append_configs(log_dir, existing, 3)
        wait_until(lambda: collected.settled(query, 3) or query.exception() is not None, 180,
                   "the appended records")
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert collected.offsets() == [existing, existing + 1, existing + 2]


def test_bad_stream_options_are_refused(spark, tmp_path):
    write_metadata_log(tmp_path / "controller-0" / "__cluster_metadata-0", metadata_batches())
    for key, value, match in (("startingOffsets", "yesterday", "startingOffsets"),
                              ("maxOffsetsPerTrigger", "-1", "maxOffsetsPerTrigger"),
                              ("isolationLevel", "read_committed", "no transactions")):
        query = None
        with pytest.raises(Exception, match=match):
            query = (spark.readStream.format("kanal-metadata").option(key, value).load(str(tmp_path))
                     .writeStream.format("noop").option("checkpointLocation", str(tmp_path / f"cp-{key}"))
                     .start())
            query.awaitTermination(120)
        if query is not None:
            query.stop()
