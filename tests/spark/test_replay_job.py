"""The audit's replay runs in Spark chunk by chunk (replay_job.py): cut into several chunks, with the
replayer carried from one task to the next, it gives exactly the tables of a replay in one chunk and the
events of the pure replay core over a plain reading of the files; the progress line moves chunk by
chunk; damage stops a chunked replay where it stops an unchunked one."""

from __future__ import annotations

import shutil
from itertools import pairwise
from pathlib import Path

import pytest

from kanal.metadata.log_codec import decode_entry
from kanal.spark.audit import run_audit
from kanal.spark.copy_plan import metadata_copy
from kanal.spark.replay import ReplayRow, replay
from kanal.spark.replay_job import event_columns, key_ranges
from kanal.spark.report_rows import report_rows
from kanal.spark.segment_reader import StoredEntry, read_segment

from .cluster_files import failover_cluster
from .log_files import segment_paths

pytestmark = pytest.mark.spark

CHUNKS = 3


def plain_rows(root: Path) -> list[ReplayRow]:
    """The metadata log's records read in plain Python, in offset order."""
    rows = []
    for seg in metadata_copy(root).segments:
        for item in read_segment(seg.path, seg.base_offset):
            if isinstance(item, StoredEntry):
                batch = decode_entry(item.batch)
                for i, (value, ts) in enumerate(zip(batch.values, batch.timestamps_ms)):
                    rows.append(ReplayRow(batch.base_offset + i, batch.base_offset, batch.controller_epoch,
                                          ts, value))
    return rows


def table_rows(result, name: str) -> list[tuple]:
    df = result.tables[name]
    return report_rows(df, *df.columns)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("replay-job")
    return failover_cluster(root / "cluster").root


def chunk_bytes(root: Path) -> int:
    """The chunk size that cuts the log into CHUNKS chunks."""
    return -(-sum(s.size_bytes for s in metadata_copy(root).segments) // CHUNKS)


def test_chunked_replay_equals_one_chunk_and_the_pure_replay(spark, cluster):
    said: list[str] = []
    # No output directory: the tables are compared as DataFrames, not written.
    whole = run_audit(spark, cluster)
    chunked = run_audit(spark, cluster, chunk_bytes=chunk_bytes(cluster), progress=said.append)
    # The progress line moved chunk by chunk, every chunk in turn.
    chunk_lines = [s for s in said if "replaying the metadata log in Spark" in s]
    assert [line.split("chunk ")[1].split(",")[0] for line in chunk_lines] == [
        f"{n} of {CHUNKS}" for n in range(1, CHUNKS + 1)]
    assert any("staging" in s for s in said)
    # The chunks' starting offsets grow: each chunk began where the previous one ended.
    starts = [int(line.rsplit("from offset ", 1)[1].replace(",", "")) for line in chunk_lines[1:]]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    for name in whole.tables:
        assert table_rows(chunked, name) == table_rows(whole, name), name
    assert chunked.history.image == whole.history.image
    assert (chunked.records_read, chunked.history.batches_applied, chunked.history.stopped) == (
        whole.records_read, whole.history.batches_applied, None)
    assert chunked.event_counts == whole.event_counts
    # Against the pure core over a plain reading: the same events, in the same order.
    pure = replay(plain_rows(cluster))
    expected = event_columns(pure.events)
    got = whole.tables["events"].collect()
    assert len(got) == len(pure.events) > 0
    for column, values in expected.items():
        if column == "time":
            assert [int(r["time"].timestamp() * 1000) for r in got] == values
        else:
            assert [r[column] for r in got] == values, column
    assert whole.history.image == pure.image
    # Open and closed intervals alike: the same intervals as the pure replay's.
    partition_health = table_rows(whole, "partition_health")
    assert len(partition_health) + len(table_rows(whole, "broker_fencing")) == len(pure.intervals) > 0


def test_damage_stops_a_chunked_replay_where_it_stops_one_chunk(spark, cluster, tmp_path):
    root = tmp_path / "damaged"
    shutil.copytree(cluster, root)
    # Every controller's copy damaged at the same batch: no copy can make it good, so the replay stops.
    for c in range(3):
        paths = segment_paths(root / f"controller-{c}" / "__cluster_metadata-0")
        target = paths[len(paths) // 2]
        entries = [e for e in read_segment(str(target), int(target.name[:-4])) if isinstance(e, StoredEntry)]
        data = bytearray(target.read_bytes())
        data[entries[0].position + 40] ^= 0xFF
        target.write_bytes(bytes(data))
    whole = run_audit(spark, root)
    chunked = run_audit(spark, root, chunk_bytes=chunk_bytes(root))
    assert whole.history.stopped is not None and whole.damage
    assert chunked.history.stopped == whole.history.stopped
    assert chunked.damage == whole.damage
    assert chunked.history.image == whole.history.image
    for name in ("events", "partition_health", "broker_fencing"):
        assert table_rows(chunked, name) == table_rows(whole, name), name


def test_key_ranges_cover_every_batch_key_once():
    assert key_ranges(None, None, 4) == [(0, 1)]  # an empty log: one empty chunk
    assert key_ranges(0, 0, 4) == [(0, 1)]
    ranges = key_ranges(10, 109, 3)
    assert ranges[0][0] == 10 and ranges[-1][1] == 110 and len(ranges) == 3
    assert all(a < b for a, b in ranges) and all(x[1] == y[0] for x, y in pairwise(ranges))
    assert len(key_ranges(5, 7, 10)) == 3  # never more chunks than keys
