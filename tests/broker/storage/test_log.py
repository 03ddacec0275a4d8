"""The partition log's behaviours one at a time: bad input, rolls, retention, indexes, compaction, flushes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kanal.broker.storage.log import CLEAN_SHUTDOWN_FILE, Log
from kanal.broker.storage.log_config import LogConfig
from kanal.metadata.cleanup_policy import COMPACT, COMPACT_DELETE, DELETE
from kanal.v1 import records_pb2
from kanal.v1.batch import (
    NewRecord,
    build_batch,
    decode_records,
    frame_entry,
    iter_entries,
    parse_batch,
    with_broker_suffix,
)
from kanal.v1.error import ErrorCode, KanalError

NOW = 1_700_000_000_000


def batch(
    n: int = 3, *, ts: int = NOW, key: bytes | None = None, value: bytes | None = b"v", size: int = 0
) -> bytes:
    payload = value if not size else os.urandom(size)
    return build_batch([NewRecord(key=key, value=payload, timestamp_ms=ts + i) for i in range(n)])


def offsets_in(data: bytes) -> list[int]:
    out = []
    for entry in iter_entries(data):
        b = parse_batch(entry.batch)
        out += [b.base_offset + r.offset_delta for r in decode_records(b)]
    return out


def snapshot(log: Log) -> tuple:
    """Everything an error must leave unchanged: bounds, sizes and the bytes of every file."""
    return (log.log_start_offset, log.log_end_offset, log.size_bytes,
            {p.name: p.read_bytes() for p in sorted(log.directory.iterdir())})


@pytest.fixture
def log(tmp_path: Path):
    log = Log.open(tmp_path / "orders-0", LogConfig(segment_bytes_max=4096, batch_bytes_max=2048,
                                                    index_interval_bytes=256))
    yield log
    log.close()


def test_offsets_are_assigned_densely_from_zero(log):
    infos = [log.append(batch(3), leader_epoch=0, now_ms=NOW) for _ in range(4)]
    assert [(i.base_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert log.log_end_offset == 12
    assert offsets_in(log.read(0, 1 << 20).data) == list(range(12))


class TestBadInputChangesNothing:
    def test_wrong_crc(self, log):
        log.append(batch(), leader_epoch=0, now_ms=NOW)
        bad = parse_batch(batch())
        bad.crc ^= 0xFFFF
        before = snapshot(log)
        with pytest.raises(KanalError) as err:
            log.append(bad.SerializeToString(), leader_epoch=0, now_ms=NOW)
        assert err.value.code == ErrorCode.CORRUPT_MESSAGE
        assert snapshot(log) == before

    def test_garbage_bytes(self, log):
        before = snapshot(log)
        with pytest.raises(KanalError) as err:
            log.append(b"\xff\xff\xff garbage", leader_epoch=0, now_ms=NOW)
        assert err.value.code == ErrorCode.CORRUPT_MESSAGE
        assert snapshot(log) == before

    def test_batch_over_max_message_bytes(self, log):
        before = snapshot(log)
        with pytest.raises(KanalError) as err:
            log.append(batch(1, size=3000), leader_epoch=0, now_ms=NOW)
        assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert snapshot(log) == before

    def test_empty_batch(self, log):
        empty = records_pb2.RecordBatch(record_count=0, first_timestamp_ms=NOW, max_timestamp_ms=NOW)
        from kanal.v1.batch import producer_crc
        empty.crc = producer_crc(empty)
        before = snapshot(log)
        with pytest.raises(KanalError) as err:
            log.append(empty.SerializeToString(), leader_epoch=0, now_ms=NOW)
        assert err.value.code == ErrorCode.INVALID_RECORD
        assert snapshot(log) == before

    def test_stale_leader_epoch(self, log):
        log.append(batch(), leader_epoch=5, now_ms=NOW)
        before = snapshot(log)
        with pytest.raises(KanalError) as err:
            log.append(batch(), leader_epoch=4, now_ms=NOW)
        assert err.value.code == ErrorCode.FENCED_LEADER_EPOCH
        assert snapshot(log) == before

    def test_timestamp_too_far_from_now(self, tmp_path):
        log = Log.open(tmp_path / "t-0", LogConfig(timestamp_difference_ms_max=1000))
        with pytest.raises(KanalError) as err:
            log.append(batch(ts=NOW - 5000), leader_epoch=0, now_ms=NOW)
        assert err.value.code == ErrorCode.INVALID_TIMESTAMP
        assert log.log_end_offset == 0
        log.close()

    @pytest.mark.parametrize("offset", [-1, 7])
    def test_read_outside_the_log(self, log, offset):
        log.append(batch(), leader_epoch=0, now_ms=NOW)
        with pytest.raises(KanalError) as err:
            log.read(offset, 1000)
        assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE

    def test_read_below_the_log_start(self, log):
        for _ in range(3):
            log.append(batch(), leader_epoch=0, now_ms=NOW)
        log.advance_log_start(4)
        with pytest.raises(KanalError) as err:
            log.read(3, 1000)
        assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert offsets_in(log.read(4, 1000).data)[0] <= 4

    def test_truncation_below_the_high_watermark(self, log):
        for _ in range(3):
            log.append(batch(), leader_epoch=0, now_ms=NOW)
        before = snapshot(log)
        with pytest.raises(KanalError) as err:
            log.truncate_to(3, high_watermark=6)
        assert err.value.code == ErrorCode.INVALID_TRUNCATION
        assert snapshot(log) == before

    def test_replicated_entries_that_do_not_follow_the_end(self, log):
        log.append(batch(), leader_epoch=0, now_ms=NOW)
        stale = frame_entry(with_broker_suffix(batch(), 0, 0))  # offsets 0..2 again
        before = snapshot(log)
        with pytest.raises(KanalError) as err:
            log.append_replicated(stale, now_ms=NOW)
        assert err.value.code == ErrorCode.CORRUPT_MESSAGE
        assert snapshot(log) == before


def test_reading_at_the_end_or_at_the_limit_returns_nothing(log):
    log.append(batch(), leader_epoch=0, now_ms=NOW)
    log.append(batch(), leader_epoch=0, now_ms=NOW)
    assert log.read(6, 1000).data == b""
    assert offsets_in(log.read(0, 1 << 20, offset_limit=3).data) == [0, 1, 2]
    assert log.read(3, 1000, offset_limit=3).data == b""


def test_read_mid_batch_starts_at_the_batch_holding_the_offset(log):
    log.append(batch(5), leader_epoch=0, now_ms=NOW)
    log.append(batch(5), leader_epoch=0, now_ms=NOW)
    assert offsets_in(log.read(7, 1).data) == [5, 6, 7, 8, 9]  # one whole batch even past bytes_max


def test_segments_roll_by_size_and_reads_cross_them(log):
    for _ in range(40):
        log.append(batch(2, size=100), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 2
    assert all(seg.size <= 4096 for seg in log.segments)
    offset, seen = 0, []
    while offset < log.log_end_offset:
        got = offsets_in(log.read(offset, 500).data)
        seen += got
        offset = got[-1] + 1
    assert seen == list(range(80))


def test_segments_roll_by_age_of_the_records(tmp_path):
    # Age is read from the records (Kafka's rule): a batch whose timestamp is segment_age_ms_max past the
    # segment's first batch (max timestamp NOW + 2) starts a new segment, whatever the clock says.
    log = Log.open(tmp_path / "t-0", LogConfig(segment_age_ms_max=60_000))
    log.append(batch(ts=NOW), leader_epoch=0, now_ms=NOW)
    log.append(batch(ts=NOW + 59_000), leader_epoch=0, now_ms=NOW + 10**9)
    assert len(log.segments) == 1
    log.append(batch(ts=NOW + 60_000), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) == 2 and log.active_segment.base_offset == 6
    old = batch(ts=NOW - 10**12)  # stamped decades ago: no roll storm, one segment keeps taking them
    for _ in range(3):
        log.append(old, leader_epoch=0, now_ms=NOW)
    assert len(log.segments) == 2
    log.close()


def test_retention_by_time_keeps_the_active_segment(tmp_path):
    log = Log.open(
        tmp_path / "t-0", LogConfig(segment_bytes_max=2048, batch_bytes_max=1024, retention_ms=10_000)
    )
    for i in range(20):
        log.append(batch(2, ts=NOW + i * 1000, size=200), leader_epoch=0, now_ms=NOW + i * 1000)
    segments = len(log.segments)
    assert log.delete_old_segments(NOW + 20_000) > 0
    assert 0 < len(log.segments) < segments
    assert all(seg.max_timestamp_ms >= NOW + 10_000 for seg in log.segments[:-1])
    assert log.delete_old_segments(NOW + 10**9) > 0
    assert len(log.segments) == 1 and log.log_end_offset == 40  # the active segment always stays
    assert log.log_start_offset == log.active_segment.base_offset
    log.close()


def test_retention_by_size(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes_max=2048, batch_bytes_max=1024,
                                               retention_ms=None, retention_bytes=5000))
    for _ in range(30):
        log.append(batch(2, size=200), leader_epoch=0, now_ms=NOW)
    assert log.delete_old_segments(NOW) > 0
    # Kafka's rule: the oldest segments go while the log without them would still hold retention.bytes.
    assert log.size_bytes >= 5000
    assert log.size_bytes - log.segments[0].size < 5000
    log.close()


def test_offset_for_timestamp(log):
    for i in range(10):
        log.append(batch(2, ts=NOW + i * 100), leader_epoch=0, now_ms=NOW)
    assert log.offset_for_timestamp(NOW + 301) == (7, NOW + 301)
    assert log.offset_for_timestamp(NOW - 5) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 10**6) is None


def test_the_largest_timestamp_is_found_where_it_was_written_not_at_the_end(tmp_path):
    """ListOffsets' MAX_TIMESTAMP (-3): timestamps out of order across segments; the first offset holding
    the largest one, even when it is neither the last record nor in the last segment."""
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes_max=1024, batch_bytes_max=512))
    assert log.max_timestamp_offset() is None
    for ts in (NOW + 500, NOW + 900, NOW + 100):  # offsets 0-1, 2-3 (the largest: 901 at 3), 4-5
        log.append(batch(2, ts=ts), leader_epoch=0, now_ms=NOW)
    log.roll()
    for _ in range(20):  # later segments, older timestamps; one record again at the largest timestamp
        log.append(batch(2, ts=NOW, size=100), leader_epoch=0, now_ms=NOW)
    log.append(batch(1, ts=NOW + 901), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 2
    assert log.max_timestamp_offset() == (3, NOW + 901)
    log.close()


def test_compaction_keeps_the_latest_value_per_key_and_offsets(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes_max=1024, batch_bytes_max=512,
                                               cleanup_policy=COMPACT, delete_retention_ms=1000))
    for i in range(30):
        key = b"k%d" % (i % 3)
        log.append(build_batch([NewRecord(key=key, value=b"v%d" % i, timestamp_ms=NOW + i)]),
                   leader_epoch=0, now_ms=NOW)
    log.append(
        build_batch([NewRecord(key=b"k0", value=None, timestamp_ms=NOW + 30)]), leader_epoch=0, now_ms=NOW
    )
    log.roll()
    stats = log.compact(NOW + 31)
    assert stats.records_removed > 0
    left = []
    for entry in iter_entries(log.read(0, 1 << 20).data):
        b = parse_batch(entry.batch)
        left += [(b.base_offset + r.offset_delta, r.key, r.value if r.HasField("value") else None)
                 for r in decode_records(b)]
    assert left == [(28, b"k1", b"v28"), (29, b"k2", b"v29"), (30, b"k0", None)]
    # Once the tombstone is older than delete.retention.ms it goes too.
    log.compact(NOW + 31 + 1000)
    assert [o for o in offsets_in(log.read(0, 1 << 20).data)] == [28, 29]
    assert log.log_end_offset == 31  # offsets are never reused
    log.close()


def write_keyed_segments(directory: Path) -> None:
    """Six closed segments of five one-record batches, one a second from NOW (offset i at NOW + i s), and an
    active segment holding offset 30 (a key of its own). Offset 0 is the only record of key `once`; the
    others cycle k0, k1, k2; offset 29 is a tombstone of k2. Written with retention off and closed, so each
    test reopens the same layout under the policy it checks."""
    config = LogConfig(segment_bytes_max=1 << 20, batch_bytes_max=1 << 16, retention_ms=None)
    log = Log.open(directory, config)
    for i in range(30):
        key, value = (b"once", b"v0") if i == 0 else (b"k%d" % (i % 3), None if i == 29 else b"v%d" % i)
        log.append(build_batch([NewRecord(key=key, value=value, timestamp_ms=NOW + i * 1000)]),
                   leader_epoch=0, now_ms=NOW)
        if i % 5 == 4:
            log.roll()
    log.append(build_batch([NewRecord(key=b"tail", value=b"v30", timestamp_ms=NOW + 30_000)]),
               leader_epoch=0, now_ms=NOW)
    log.close()


def records_in(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from the log start, segment by segment."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        for entry in iter_entries(data):
            b = parse_batch(entry.batch)
            out += [(b.base_offset + r.offset_delta, r.key, r.value if r.HasField("value") else None)
                    for r in decode_records(b)]
            offset = entry.suffix.last_offset + 1
    return out


def maintain(log: Log, now_ms: int) -> None:
    """What Partition.maintenance does with a due compaction: retention, then compaction (each a no-op
    when the policy lacks it)."""
    log.delete_old_segments(now_ms)
    log.compact(now_ms)


# Retention by time at NOW + 40 s keeps 24.5 s: segments whose newest record is older than NOW + 15.5 s
# (offsets 0-14) go. The tombstone at 29 (NOW + 29 s) is older than delete.retention.ms (1 s) by then.
EXPIRED_BY_TIME = {"retention_ms": 24_500, "retention_bytes": None}
KEPT_AFTER_COMPACTION = [(27, b"k0", b"v27"), (28, b"k1", b"v28"), (30, b"tail", b"v30")]


@pytest.mark.parametrize("expiry", ["time", "size"])
def test_compact_delete_drops_expired_segments_and_keeps_the_latest_value_per_key_in_the_rest(
    tmp_path, expiry
):
    write_keyed_segments(tmp_path / "t-0")
    if expiry == "time":
        limits = EXPIRED_BY_TIME
    else:
        log = Log.open(tmp_path / "t-0", LogConfig())
        sizes = [seg.size for seg in log.segments]
        log.close()
        # The same three segments by size: keep what the last three closed segments and the active hold.
        limits = {"retention_ms": None, "retention_bytes": sum(sizes[3:])}
    log = Log.open(tmp_path / "t-0", LogConfig(cleanup_policy=COMPACT_DELETE, delete_retention_ms=1000,
                                               **limits))
    now_ms = NOW + 40_000
    assert log.delete_old_segments(now_ms) == 3
    assert log.log_start_offset == 15
    # Retention alone: offsets 15-30 all there, `once` (offset 0) gone with its segment.
    assert [r[0] for r in records_in(log)] == list(range(15, 31))
    stats = log.compact(now_ms)
    assert stats.records_removed == 13 and stats.tombstones_removed == 1
    assert records_in(log) == KEPT_AFTER_COMPACTION
    assert log.log_end_offset == 31, "offsets are never reused"
    maintain(log, now_ms)  # a second pass finds nothing more to do
    assert records_in(log) == KEPT_AFTER_COMPACTION and log.log_start_offset == 15
    # Compaction emptied the segments of 15-19 and 20-24: they go with the segment of 27 and 28 (newest
    # record at NOW + 28 s), never before it, so the log start does not pass offsets whose records are
    # within retention.
    assert [seg.size == 0 for seg in log.segments] == [True, True, False, False]
    if expiry == "time":
        assert log.delete_old_segments(NOW + 28_000 + 24_500) == 0
        assert log.delete_old_segments(NOW + 28_000 + 24_501) == 3
        assert log.log_start_offset == 30 and records_in(log) == [(30, b"tail", b"v30")]
    log.close()


def test_retention_deletes_an_empty_segment_only_with_the_next_non_empty_one(tmp_path):
    """By size too: an emptied segment at the front does not go while the segment after it stays."""
    write_keyed_segments(tmp_path / "t-0")
    log = Log.open(tmp_path / "t-0", LogConfig(cleanup_policy=COMPACT_DELETE, delete_retention_ms=1000,
                                               retention_ms=None, retention_bytes=None))
    log.compact(NOW + 40_000)
    sizes = [seg.size for seg in log.segments]
    assert [size == 0 for size in sizes] == [False, True, True, True, True, False, False]  # `once` stays
    log.close()
    # Keep the last closed segment and the active one: the first (`once`) goes, the empty ones stay with
    # the segment after them.
    log = Log.open(tmp_path / "t-0", LogConfig(cleanup_policy=COMPACT_DELETE, retention_ms=None,
                                               retention_bytes=sizes[-2] + sizes[-1]))
    assert log.delete_old_segments(NOW) == 1 and log.log_start_offset == 5
    assert records_in(log) == KEPT_AFTER_COMPACTION
    log.close()


@pytest.mark.parametrize(("policy", "start", "kept"), [
    (DELETE, 15, [(o, b"k%d" % (o % 3), None if o == 29 else b"v%d" % o) for o in range(15, 30)]
     + [(30, b"tail", b"v30")]),
    # Compaction alone keeps `once`, the only record of its key, however old.
    (COMPACT, 0, [(0, b"once", b"v0"), *KEPT_AFTER_COMPACTION]),
    (COMPACT_DELETE, 15, KEPT_AFTER_COMPACTION),
])
def test_each_policy_runs_its_own_cleanups(tmp_path, policy, start, kept):
    write_keyed_segments(tmp_path / "t-0")
    log = Log.open(tmp_path / "t-0", LogConfig(cleanup_policy=policy, delete_retention_ms=1000,
                                               **EXPIRED_BY_TIME))
    maintain(log, NOW + 40_000)
    assert log.log_start_offset == start and records_in(log) == kept
    log.close()


def test_a_cleanup_policy_must_be_typed():
    """LogConfig takes a CleanupPolicy; the text form (the type before compact,delete) is refused, not
    read as a policy that does neither."""
    combined = LogConfig.from_topic_configs({"cleanup.policy": "delete, compact"})
    assert combined.cleanup_policy == COMPACT_DELETE
    assert LogConfig().cleanup_policy == DELETE
    with pytest.raises(KanalError) as err:
        LogConfig(cleanup_policy="compact")  # type: ignore[arg-type]
    assert err.value.code == ErrorCode.INVALID_CONFIG


def test_the_cleaner_can_replace_only_a_closed_segment_and_only_by_one_of_its_base_offset(log):
    log.append(batch(3), leader_epoch=0, now_ms=NOW)
    log.roll()
    log.append(batch(3), leader_epoch=0, now_ms=NOW)
    closed, active = log.segments
    with pytest.raises(RuntimeError, match="cannot replace closed segment 1"):
        log.replace_segment(1, active)  # the active segment is never rewritten
    with pytest.raises(RuntimeError, match="segment 3 cannot replace closed segment 0"):
        log.replace_segment(0, active)  # a rewrite keeps its segment's offsets
    log.replace_segment(0, closed)
    assert log.segments == (closed, active)


@pytest.mark.parametrize("reopen", ["clean", "recovered"])
def test_a_segments_largest_timestamp_survives_a_restart(tmp_path, reopen):
    """A batch between offset index entries holding the segment's largest timestamp (a producer's clock
    ahead of the next ones): after a restart, time retention keeps the segment and ListOffsets by
    timestamp finds that batch, as before it."""
    config = LogConfig(segment_bytes_max=1 << 20, batch_bytes_max=1 << 16, index_interval_bytes=300,
                       retention_ms=1000, timestamp_difference_ms_max=None)
    log = Log.open(tmp_path / "t-0", config)
    for ts in (100, 500, 200, 210, 220):  # 500 falls between index entries (batches of ~230 bytes)
        log.append(batch(1, ts=NOW + ts, size=200), leader_epoch=0, now_ms=NOW)
    log.roll()
    log.append(batch(1, ts=NOW + 230), leader_epoch=0, now_ms=NOW)
    assert log.offset_for_timestamp(NOW + 400) == (1, NOW + 500)
    if reopen == "clean":
        log.close()
    else:
        log.close_unclean()
    log = Log.open(tmp_path / "t-0", config)
    assert log.segments[0].max_timestamp_ms == NOW + 500
    assert log.offset_for_timestamp(NOW + 400) == (1, NOW + 500)
    assert log.delete_old_segments(now_ms=NOW + 500 + 1000) == 0  # its newest record is within retention
    assert log.delete_old_segments(now_ms=NOW + 500 + 1001) == 1
    log.close()


def test_damaged_index_is_rebuilt_on_open(tmp_path):
    config = LogConfig(segment_bytes_max=2048, batch_bytes_max=1024, index_interval_bytes=100)
    log = Log.open(tmp_path / "t-0", config)
    for _ in range(20):
        log.append(batch(2, size=100), leader_epoch=0, now_ms=NOW)
    log.close()
    first = log.segments[0]
    first.offset_index.path.write_bytes(first.offset_index.path.read_bytes()[:-3])  # torn entry
    log.segments[1].time_index.path.unlink()
    log = Log.open(tmp_path / "t-0", config)
    assert offsets_in(log.read(0, 1 << 20).data)[:4] == [0, 1, 2, 3]
    for offset in range(0, 40, 7):
        assert offsets_in(log.read(offset, 1).data)[0] <= offset
    assert len(log.segments[0].offset_index) > 1
    log.close()


def test_clean_close_skips_recovery_and_unclean_close_recovers_a_torn_tail(tmp_path):
    config = LogConfig()
    log = Log.open(tmp_path / "t-0", config)
    for _ in range(5):
        log.append(batch(), leader_epoch=0, now_ms=NOW)
    log.close()
    assert (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()
    log = Log.open(tmp_path / "t-0", config)
    assert not (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
    log.close_unclean()
    path = log.active_segment.log_path
    path.write_bytes(path.read_bytes()[:-10])
    log = Log.open(tmp_path / "t-0", config)
    assert log.recovered_bytes_cut > 0 and log.log_end_offset == 12
    assert offsets_in(log.read(0, 1 << 20).data) == list(range(12))
    info = log.append(batch(), leader_epoch=0, now_ms=NOW)  # appends continue where the valid log ends
    assert info.base_offset == 12
    log.close()


def test_bit_rot_in_a_flushed_segment_is_caught_by_the_consumer_crc(tmp_path):
    config = LogConfig(segment_bytes_max=1024, batch_bytes_max=512)
    log = Log.open(tmp_path / "t-0", config)
    for _ in range(10):
        log.append(batch(2, size=60), leader_epoch=0, now_ms=NOW)
    log.close()
    seg = log.segments[0]
    raw = bytearray(seg.log_path.read_bytes())
    raw[60] ^= 0x01  # inside the first batch's records payload
    seg.log_path.write_bytes(bytes(raw))
    log = Log.open(tmp_path / "t-0", config)  # clean open: flushed segments are trusted, not re-read
    data = log.read(0, 100).data
    with pytest.raises(KanalError) as err:
        list(iter_entries(data))
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    log.close()


def test_flush_policy_by_batch_count_and_by_age(tmp_path, monkeypatch):
    fsyncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (fsyncs.append(fd), real(fd)))
    log = Log.open(tmp_path / "a-0", LogConfig(flush_batches_max=3))
    for _ in range(7):
        log.append(batch(), leader_epoch=0, now_ms=NOW)
    assert len(fsyncs) == 2
    fsyncs.clear()
    log2 = Log.open(tmp_path / "b-0", LogConfig(flush_interval_ms=50))
    log2.append(batch(), leader_epoch=0, now_ms=NOW)
    log2.append(batch(), leader_epoch=0, now_ms=NOW + 10)
    assert not fsyncs
    assert log2.maybe_flush(NOW + 50) and len(fsyncs) == 1
    assert not log2.maybe_flush(NOW + 200)  # nothing new to flush
    log.close()
    log2.close()


def test_leader_epochs_are_tracked_and_truncated(log):
    log.append(batch(), leader_epoch=1, now_ms=NOW)  # 0..2
    log.append(batch(), leader_epoch=1, now_ms=NOW)  # 3..5
    log.append(batch(), leader_epoch=3, now_ms=NOW)  # 6..8
    assert log.epoch_cache.entries() == [(1, 0), (3, 6)]
    assert log.end_offset_for_epoch(1) == (1, 6)
    assert log.end_offset_for_epoch(2) == (1, 6)
    assert log.end_offset_for_epoch(3) == (3, 9)
    assert log.end_offset_for_epoch(0) is None
    log.truncate_to(6, high_watermark=0)
    assert log.epoch_cache.entries() == [(1, 0)] and log.log_end_offset == 6


def test_config_from_topic_configs_rejects_bad_values():
    config = LogConfig.from_topic_configs({"segment.bytes": "1048576", "retention.ms": "-1"})
    assert config.segment_bytes_max == 1048576 and config.retention_ms is None
    for bad in ({"segment.bytes": "12"}, {"cleanup.policy": "shred"}, {"cleanup.policy": "compact,foo"},
                {"no.such.key": "1"}):
        with pytest.raises(KanalError) as err:
            LogConfig.from_topic_configs(bad)
        assert err.value.code == ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_lost_leader_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path, damage):
    """Without the checkpoint the cache came back empty after a clean shutdown, which switched divergence
    detection off for the replica: a follower could keep a tail a new leader never had."""
    config = LogConfig(segment_bytes_max=2048, batch_bytes_max=1024)
    log = Log.open(tmp_path / "t-0", config)
    for epoch in (0, 0, 2, 2, 2, 5):
        log.append(batch(2, size=200), leader_epoch=epoch, now_ms=NOW)
    expected = log.epoch_cache.entries()
    assert expected == [(0, 0), (2, 4), (5, 10)] and len(log.segments) > 1
    log.close()
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    if damage == "missing":
        checkpoint.unlink()
    else:
        checkpoint.write_text("0\n3\nnot numbers\n")
    reopened = Log.open(tmp_path / "t-0", config)
    try:
        assert reopened.epoch_cache.entries() == expected
        assert reopened.log_end_offset == 12
        assert reopened.end_offset_for_epoch(2) == (2, 10)
    finally:
        reopened.close()


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: a real filesystem that fills up (root only, as the suite runs). Unmounted in
    teardown whatever happened (lazily, should a failed test have left a file open on it)."""
    mountpoint = tmp_path / "small-disk"
    mountpoint.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "kanal-test-full", str(mountpoint)], check=True
    )
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=True)


def test_a_full_disk_is_storage_error_and_leaves_the_log_as_it_was(small_disk):
    config = LogConfig(segment_bytes_max=64 * 1024, batch_bytes_max=16 * 1024, index_interval_bytes=4096)
    log = Log.open(small_disk / "orders-0", config)
    stored = 0
    try:
        with pytest.raises(KanalError) as err:
            for _ in range(1000):  # 256 KiB cannot hold 1000 batches of ~8 KiB
                log.append(batch(1, size=8000), leader_epoch=0, now_ms=NOW)
                stored += 1
        assert err.value.code == ErrorCode.STORAGE_ERROR and "refused a write" in err.value.message
        assert 0 < stored < 1000 and log.log_end_offset == stored
        read: list[int] = []
        while len(read) < stored:
            read += offsets_in(log.read(len(read), 1 << 20).data)
        assert read == list(range(stored))  # every stored batch whole and readable, nothing half written
    finally:
        log.close_unclean()  # as a crash would
    # The operator makes room; the reopened log recovers to exactly the batches that were acknowledged.
    subprocess.run(["mount", "-o", "remount,size=2m", str(small_disk)], check=True)
    reopened = Log.open(small_disk / "orders-0", config)
    try:
        assert reopened.log_end_offset == stored
        reopened.append(batch(1), leader_epoch=0, now_ms=NOW)
        assert reopened.log_end_offset == stored + 1
    finally:
        reopened.close()


def tiered_log(tmp_path: Path) -> Log:
    config = LogConfig(segment_bytes_max=2048, batch_bytes_max=1024, retention_ms=None)
    log = Log.open(tmp_path / "t-0", config)
    for i in range(30):
        epoch = 0 if i < 10 else 3
        log.append(batch(2, ts=NOW + i * 1000, size=200), leader_epoch=epoch, now_ms=NOW + i * 1000)
    return log


def test_local_retention_drops_only_what_remote_storage_holds(tmp_path):
    log = tiered_log(tmp_path)
    segments = log.segments
    assert len(segments) >= 5
    epochs = log.epoch_cache.entries()
    upload_end = segments[3].base_offset  # segments 0..2 are uploaded and recorded
    # Everything is far past any local retention: still only the uploaded segments go.
    assert log.delete_uploaded_segments(NOW + 10**9, upload_end, local_retention_ms=0,
                                        local_retention_bytes=0) == 3
    assert log.log_start_offset == upload_end
    assert log.epoch_cache.entries() == epochs, "the epochs of the remote part were dropped"
    assert log.delete_uploaded_segments(NOW + 10**9, upload_end, local_retention_ms=0,
                                        local_retention_bytes=0) == 0
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes_max=2048, batch_bytes_max=1024))
    assert reopened.log_start_offset == upload_end and reopened.epoch_cache.entries() == epochs
    reopened.close()


def test_local_retention_by_time_and_by_size(tmp_path):
    log = tiered_log(tmp_path)
    everything = log.active_segment.base_offset  # every closed segment uploaded
    newest_first_segment = log.segments[0].max_timestamp_ms
    assert log.delete_uploaded_segments(newest_first_segment, everything, local_retention_ms=0,
                                        local_retention_bytes=None) == 0  # not older than the bound yet
    assert log.delete_uploaded_segments(newest_first_segment + 1, everything, local_retention_ms=0,
                                        local_retention_bytes=None) == 1
    assert log.delete_uploaded_segments(NOW, everything, local_retention_ms=None,
                                        local_retention_bytes=None) == 0  # no bound: kept
    bound = log.size_bytes - log.segments[0].size - 1
    assert log.delete_uploaded_segments(NOW, everything, local_retention_ms=None,
                                        local_retention_bytes=bound) == 1
    assert log.size_bytes >= bound  # as retention.bytes: the log keeps at least the bound
    log.close()
