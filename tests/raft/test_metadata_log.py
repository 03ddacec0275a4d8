"""The metadata log's entry format and its exactly-once writer, against a real segment Log on disk."""

from __future__ import annotations

import pytest

from kanal.metadata.log_codec import LogBatch, encode_metadata_batch, encode_record_values, iter_batches
from kanal.raft.metadata_log import (
    MetadataLogGapError,
    MetadataLogWriter,
    WriteResult,
    read_all,
    record_values,
)
from kanal.v1 import metadata_pb2
from kanal.v1.batch import frame_entry, iter_entries, parse_batch, with_broker_suffix


def _records(n: int, t0: int = 1_000) -> list[metadata_pb2.MetadataRecord]:
    return [
        metadata_pb2.MetadataRecord(
            time_ms=t0 + i,
            principal="admin",
            request_id=f"req-{i}",
            topic=metadata_pb2.TopicRecord(name=f"t{i}", topic_id=f"id-{i}"),
        )
        for i in range(n)
    ]


def _log_batch(base: int, epoch: int, records: list[metadata_pb2.MetadataRecord]) -> LogBatch:
    batch = metadata_pb2.MetadataBatch(controller_epoch=epoch, records=records)
    values = record_values(batch.SerializeToString())
    return LogBatch(base, epoch, tuple(values), tuple(r.time_ms for r in records))


def test_record_values_are_the_records_bytes_exactly():
    records = _records(5)
    batch = metadata_pb2.MetadataBatch(controller_epoch=9, records=records)
    assert record_values(batch.SerializeToString()) == [r.SerializeToString() for r in records]
    assert record_values(metadata_pb2.MetadataBatch(controller_epoch=9).SerializeToString()) == []


def test_a_batch_built_from_messages_is_the_bytes_the_controllers_write():
    """Tools and tests write with encode_metadata_batch (from messages); controllers write the values sliced
    out of the Raft entry. One codec: both give the same bytes, and the reader gets the batch back."""
    records = _records(4, t0=7_000)
    batch = metadata_pb2.MetadataBatch(controller_epoch=3, records=records)
    from_entry = _log_batch(0, 3, records)
    producer_bytes = encode_metadata_batch(batch)
    assert producer_bytes == encode_record_values(from_entry.values, from_entry.timestamps_ms)
    [read_back] = iter_batches(frame_entry(with_broker_suffix(producer_bytes, 40, 3)))
    assert (read_back.base_offset, read_back.end_offset, read_back.controller_epoch) == (40, 44, 3)
    assert read_back.metadata_batch() == batch


def test_one_record_batch_per_metadata_batch_with_epoch_timestamps_and_values(tmp_path, log_factory):
    log = log_factory(tmp_path / "m")
    writer = MetadataLogWriter(log)
    first = _log_batch(0, 2, _records(3))
    second = _log_batch(3, 5, _records(2, t0=5_000))
    assert writer.write(first) is WriteResult.APPENDED
    assert writer.write(second) is WriteResult.APPENDED
    assert log.log_end_offset == 5
    entries = list(iter_entries(log.read(0, 1 << 20).data))
    assert len(entries) == 2
    stored = parse_batch(entries[1].batch)
    assert stored.base_offset == 3
    assert stored.partition_leader_epoch == 5
    assert stored.record_count == 2
    assert read_all(log) == [first, second]
    # A replayer rebuilds the MetadataBatch the controller applied.
    assert read_all(log)[1].metadata_batch() == metadata_pb2.MetadataBatch(
        controller_epoch=5, records=_records(2, t0=5_000)
    )


def test_replayed_batch_is_skipped_and_the_log_is_unchanged(tmp_path, log_factory):
    log = log_factory(tmp_path / "m")
    writer = MetadataLogWriter(log)
    batches = [_log_batch(0, 1, _records(2)), _log_batch(2, 1, _records(1, t0=9_000))]
    for b in batches:
        writer.write(b)
    size = log.size_bytes
    log.close()
    reopened = log_factory(tmp_path / "m")  # a restart: pysyncobj replays its journal from the start
    replaying = MetadataLogWriter(reopened)
    assert [replaying.write(b) for b in batches] == [WriteResult.ALREADY_WRITTEN] * 2
    assert reopened.size_bytes == size
    third = _log_batch(3, 2, _records(1, t0=10_000))
    assert replaying.write(third) is WriteResult.APPENDED
    assert read_all(reopened) == [*batches, third]


def test_a_different_batch_at_a_written_offset_replaces_the_unconfirmed_tail(tmp_path, log_factory):
    # Issue 18: the log holds batches from a Raft history lost in a power cut; Raft now commits another
    # batch at offset 2. The writer cuts the log there and writes the committed batch instead of stopping.
    log = log_factory(tmp_path / "m")
    writer = MetadataLogWriter(log)
    first, lost_a, lost_b = (
        _log_batch(0, 1, _records(2)),
        _log_batch(2, 1, _records(3)),
        _log_batch(5, 1, _records(1)),
    )
    for b in (first, lost_a, lost_b):
        writer.write(b)
    committed = _log_batch(2, 2, _records(2, t0=77))  # same offset, other content, a newer epoch
    assert writer.write(committed) is WriteResult.REPLACED
    assert read_all(log) == [first, committed]
    nxt = _log_batch(4, 2, _records(1, t0=90))
    assert writer.write(nxt) is WriteResult.APPENDED
    log.close()
    reopened = log_factory(tmp_path / "m")
    assert read_all(reopened) == [first, committed, nxt]
    reopened.close()


def test_a_committed_batch_straddling_a_stored_one_is_a_broken_invariant(tmp_path, log_factory):
    log = log_factory(tmp_path / "m")
    writer = MetadataLogWriter(log)
    writer.write(_log_batch(0, 1, _records(2)))
    with pytest.raises(MetadataLogGapError, match="line up"):
        writer.write(_log_batch(1, 1, _records(1)))  # does not start at a batch boundary
    assert log.log_end_offset == 2  # nothing was cut


def test_a_gap_is_a_broken_invariant_and_writes_nothing(tmp_path, log_factory):
    log = log_factory(tmp_path / "m")
    writer = MetadataLogWriter(log)
    writer.write(_log_batch(0, 1, _records(2)))
    with pytest.raises(MetadataLogGapError, match="missing"):
        writer.write(_log_batch(5, 1, _records(1)))
    assert log.log_end_offset == 2


def test_two_controllers_writing_the_same_batches_have_identical_files(tmp_path, log_factory):
    batches = [
        _log_batch(0, 1, _records(3)),
        _log_batch(3, 2, _records(4, t0=50)),
        _log_batch(7, 2, _records(1)),
    ]
    for name in ("a", "b"):
        log = log_factory(tmp_path / name)
        writer = MetadataLogWriter(log)
        for b in batches:
            writer.write(b)
        log.close()
    files_a = sorted(p.name for p in (tmp_path / "a").glob("*.log"))
    assert files_a == sorted(p.name for p in (tmp_path / "b").glob("*.log"))
    for name in files_a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
