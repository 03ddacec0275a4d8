"""A remote segment's contents found by one walk (remote_segment_index.py): the indexes equal the ones the
local log wrote for the same segment, a part of a segment from a batch boundary is indexed on its own,
and damaged bytes are never described."""

from __future__ import annotations

import pytest

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.remote_segment_index import describe_segment_bytes
from kanal.v1.batch import NewRecord, build_batch, iter_entries
from kanal.v1.error import ErrorCode, KanalError

NOW = 1_700_000_000_000
INTERVAL = 512


@pytest.fixture
def log(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes_max=4096, batch_bytes_max=2048,
                                               index_interval_bytes=INTERVAL, retention_ms=None))
    for i in range(60):
        epoch = 1 if i < 25 else 4 if i < 40 else 6
        ts = NOW + (i * 7919) % 50_000  # timestamps that go back and forth, as producers' clocks do
        log.append(build_batch([NewRecord(b"v" * 90, timestamp_ms=ts)] * (1 + i % 3)), leader_epoch=epoch,
                   now_ms=NOW)
    log.flush()
    yield log
    log.close()


def test_a_whole_segment_is_indexed_as_the_local_log_indexed_it(log) -> None:
    closed = log.segments[:-1]
    assert len(closed) >= 3
    for segment in closed:
        data = (log.directory / f"{segment.base_offset:020d}.log").read_bytes()
        contents = describe_segment_bytes(data, segment.base_offset, INTERVAL)
        assert contents.end_offset == segment.next_offset and contents.size_bytes == segment.size
        assert contents.max_timestamp_ms == segment.max_timestamp_ms
        assert contents.offset_index == (log.directory / f"{segment.base_offset:020d}.index").read_bytes()
        assert contents.time_index == (log.directory / f"{segment.base_offset:020d}.timeindex").read_bytes()
        cache = [(e, o) for e, o in log.epoch_cache.entries() if o < segment.next_offset]
        first = max(i for i, (_, o) in enumerate(cache) if o <= segment.base_offset)
        expected = [(cache[first][0], segment.base_offset)] + cache[first + 1:]
        assert list(contents.epochs) == expected


def test_the_part_of_a_segment_from_a_batch_boundary_is_indexed_on_its_own(log) -> None:
    segment = log.segments[1]
    data = (log.directory / f"{segment.base_offset:020d}.log").read_bytes()
    entries = list(iter_entries(data))
    middle = entries[len(entries) // 2]
    part = data[middle.position:]
    contents = describe_segment_bytes(part, middle.suffix.base_offset, INTERVAL)
    assert contents.base_offset == middle.suffix.base_offset and contents.end_offset == segment.next_offset
    assert contents.offset_index[:8] == bytes(8), "the first entry is relative offset 0 at position 0"


def test_damaged_or_misplaced_bytes_are_refused(log) -> None:
    segment = log.segments[0]
    data = bytearray((log.directory / f"{segment.base_offset:020d}.log").read_bytes())
    with pytest.raises(KanalError) as wrong_start:
        describe_segment_bytes(bytes(data), segment.base_offset + 1, INTERVAL)
    assert wrong_start.value.code == ErrorCode.CORRUPT_MESSAGE
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(KanalError) as damaged:
        describe_segment_bytes(bytes(data), segment.base_offset, INTERVAL)
    assert damaged.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KanalError):
        describe_segment_bytes(b"", segment.base_offset, INTERVAL)
