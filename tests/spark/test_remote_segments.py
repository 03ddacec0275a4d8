"""A remote segment's object (tiered storage) read through range reads gives exactly the entries of the
local file it was uploaded from, whatever the chunk size; damage and a missing object are SegmentDamage."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.remote_segment_walk import walk_remote_segment
from kanal.broker.storage.remote_storage import open_remote_storage
from kanal.spark.segment_files import RemoteSegmentFile, RemoteStore, SegmentFile
from kanal.spark.segment_reader import SegmentDamage, StoredEntry, read_segment_file
from kanal.v1.batch import NewRecord, build_batch

NOW = 1_700_000_000_000
KEY = "c/t/0/00000000000000000000-00000000000000000040-e1.log"


@pytest.fixture
def segment(tmp_path: Path) -> tuple[Path, Path]:
    """A local segment of 20 batches of various sizes, and a file:// store holding its bytes under KEY."""
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes_max=1 << 20, batch_bytes_max=1 << 16))
    for i in range(20):
        log.append(build_batch([NewRecord(key=b"k", value=bytes([i]) * (50 + 97 * i), timestamp_ms=NOW + i)
                                for _ in range(2)]), leader_epoch=1, now_ms=NOW)
    log.close()
    local = tmp_path / "t-0" / "00000000000000000000.log"
    root = tmp_path / "remote"
    (root / KEY).parent.mkdir(parents=True)
    (root / KEY).write_bytes(local.read_bytes())
    return local, root


def _entries(got) -> list[tuple[int, int, bytes]]:
    return [(e.position, e.base_offset, bytes(e.batch)) for e in got if isinstance(e, StoredEntry)]


@pytest.mark.parametrize("chunk_bytes", [64, 1000, 4096, 1 << 20])
def test_range_reads_give_the_local_files_entries_at_any_chunk_size(segment, chunk_bytes) -> None:
    local, root = segment
    storage = open_remote_storage(root.as_uri())
    size = local.stat().st_size
    walked = [(e.position, e.suffix.base_offset, bytes(e.batch))
              for e in walk_remote_segment(storage, KEY, size, 0, chunk_bytes=chunk_bytes)]
    expected = _entries(read_segment_file(SegmentFile("t", 0, 0, str(local), size)))
    assert walked == expected and len(expected) == 20


def test_the_spark_reader_reads_a_remote_segment_as_a_file(segment) -> None:
    local, root = segment
    size = local.stat().st_size
    remote = RemoteSegmentFile("t", 0, 0, KEY, size, RemoteStore(root.as_uri()))
    expected = _entries(read_segment_file(SegmentFile("t", 0, 0, str(local), size)))
    assert _entries(read_segment_file(remote)) == expected


def test_damage_and_a_missing_object_are_segment_damage(segment) -> None:
    local, root = segment
    size = local.stat().st_size
    data = bytearray((root / KEY).read_bytes())
    data[size // 2] ^= 0xFF
    (root / KEY).write_bytes(bytes(data))
    got = list(read_segment_file(RemoteSegmentFile("t", 0, 0, KEY, size, RemoteStore(root.as_uri()))))
    assert isinstance(got[-1], SegmentDamage) and 0 < got[-1].position <= size // 2
    assert got[-1].path.endswith(KEY) and 0 < len(got) - 1 < 20
    gone = list(read_segment_file(RemoteSegmentFile("t", 0, 0, KEY.replace("e1", "e2"), size,
                                                    RemoteStore(root.as_uri()))))
    assert len(gone) == 1 and isinstance(gone[0], SegmentDamage) and "gone" in gone[0].reason
