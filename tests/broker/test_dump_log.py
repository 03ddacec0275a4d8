"""`kanal dump-log`: a partition written by the broker's own Log, read back offline — batches, records,
both indexes, and damage named with exit 1 — through the `kanal` entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.v1 import records_pb2
from kanal.v1.batch import NewRecord, build_batch

NOW = 1_700_000_000_000


def kanal(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from kanal.deploy.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          check=False)


def json_lines(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture
def partition(tmp_path: Path) -> Path:
    """Several segments: 30 batches of 2 records, one gzip batch, a producer id, a non-UTF-8 key, headers."""
    directory = tmp_path / "orders-0"
    log = Log.open(
        directory, LogConfig(segment_bytes_max=1024, batch_bytes_max=512, index_interval_bytes=128)
    )
    for i in range(30):
        records = [NewRecord(key=f"k{i}".encode(), value=f"v{i}-{j}".encode(), timestamp_ms=NOW + i * 10 + j)
                   for j in range(2)]
        log.append(build_batch(records, producer_id=77, producer_epoch=1, base_sequence=2 * i),
                   leader_epoch=3, now_ms=NOW)
    odd = NewRecord(key=b"\xff\x00", value=None, timestamp_ms=NOW + 500, headers=[("h", b"x")])
    log.append(build_batch([odd], codec=records_pb2.COMPRESSION_GZIP), leader_epoch=4, now_ms=NOW)
    log.close()
    return directory


def test_a_partition_directory_lists_every_batch_record_and_index_entry(partition):
    result = kanal("dump-log", str(partition), "--print-data", "--output", "json")
    assert result.returncode == 0, result.stderr
    rows = json_lines(result)
    entries = [r for r in rows if r["type"] == "entry"]
    assert [(e["base_offset"], e["last_offset"]) for e in entries] == [
        (2 * i, 2 * i + 1) for i in range(30)
    ] + [(60, 60)]
    assert {e["crc"] for e in entries} == {"ok"}
    assert (
        entries[0]["producer_id"] == 77
        and entries[0]["producer_epoch"] == 1
        and entries[4]["base_sequence"] == 8
    )
    assert (
        entries[0]["leader_epoch"] == 3
        and entries[-1]["leader_epoch"] == 4
        and entries[-1]["codec"] == "gzip"
    )
    records = [r for r in rows if r["type"] == "record"]
    assert [r["offset"] for r in records] == list(range(61))
    assert records[5]["value"] == "v2-1" and records[5]["timestamp_ms"] == NOW + 21
    last = records[-1]
    assert last["key"] == "/wA=" and last["key_encoding"] == "base64" and last["value"] is None
    assert last["headers"] == [{"key": "h", "value": "x"}]
    files = [Path(r["path"]).name for r in rows if r["type"] == "file"]
    assert len(files) > 3 and files[:3] == ["00000000000000000000.log", "00000000000000000000.index",
                                            "00000000000000000000.timeindex"]
    index = [r for r in rows if r["type"] in ("index", "timeindex")]
    assert index and {r["check"] for r in index} == {"ok"}
    assert not [r for r in rows if r["type"] == "damage"]


def test_text_output_names_the_fields(partition):
    segment = min(partition.glob("*.log"))
    result = kanal("dump-log", str(segment), "--print-data")
    assert result.returncode == 0, result.stderr
    assert "base_offset: 0 last_offset: 1 record_count: 2 leader_epoch: 3 producer_id: 77" in result.stdout
    assert "| offset: 1 timestamp_ms: 1700000000001 key: k0 value: v0-1" in result.stdout


def test_a_flipped_byte_is_reported_with_its_position_and_exit_1(partition):
    segment = min(partition.glob("*.log"))
    data = bytearray(segment.read_bytes())
    intact = json_lines(kanal("dump-log", str(segment), "--output", "json"))
    second = [r for r in intact if r["type"] == "entry"][1]
    # A byte of the second entry's record payload (before the batch's CRC and last_offset_delta fields,
    # 10 bytes, and the 19-byte broker suffix): the frame still parses, the CRCs no longer match.
    data[second["position"] + second["size_bytes"] - 19 - 10 - 3] ^= 0xFF
    segment.write_bytes(bytes(data))
    result = kanal("dump-log", str(segment), "--output", "json")
    assert result.returncode == 1
    rows = json_lines(result)
    assert len([r for r in rows if r["type"] == "entry"]) == 1
    damage = [r for r in rows if r["type"] == "damage"]
    assert len(damage) == 1 and damage[0]["position"] == second["position"] and "CRC" in damage[0]["reason"]


def test_an_index_entry_that_points_elsewhere_is_a_mismatch(partition):
    index = min(partition.glob("*.index"))
    data = bytearray(index.read_bytes())
    assert len(data) >= 16, "the fixture must index more than the first batch"
    data[12:16] = (int.from_bytes(data[12:16], "big") + 1).to_bytes(4, "big")  # 2nd entry's position + 1
    index.write_bytes(bytes(data))
    result = kanal("dump-log", str(index), "--output", "json")
    assert result.returncode == 1
    checks = [r["check"] for r in json_lines(result) if r["type"] == "index"]
    assert checks[0] == "ok" and checks[1] == "MISMATCH"


@pytest.mark.parametrize("bad", ["missing-dir", "notes.txt"])
def test_a_path_that_is_not_a_segment_is_a_usage_error(tmp_path, bad):
    if bad == "notes.txt":
        (tmp_path / bad).write_text("hello")
    result = kanal("dump-log", str(tmp_path / bad))
    assert result.returncode == 2
    assert result.stderr.startswith("kanal dump-log: error:") and "Traceback" not in result.stderr


def _remote_segment(partition: Path, root: Path, *, chunk_damage: bool = False) -> str:
    """The partition's first segment stored as a remote segment's two objects under a file:// root (the
    uploader's key layout and .meta), and the .log object's URL."""
    from kanal.broker.storage.remote_keys import segment_keys
    from kanal.broker.storage.remote_segment_index import describe_segment_bytes
    from kanal.broker.storage.remote_segment_meta import RemoteSegmentMeta, encode_meta

    data = (partition / "00000000000000000000.log").read_bytes()
    contents = describe_segment_bytes(data, 0, 128)
    log_key, meta_key = segment_keys("cluster", "topicid", 0, 0, contents.end_offset, 3)
    meta = RemoteSegmentMeta("orders", 0, contents.end_offset, contents.epochs, contents.offset_index,
                             contents.time_index, b"", b"")
    (root / log_key).parent.mkdir(parents=True)
    (root / log_key).write_bytes(data)
    (root / meta_key).write_bytes(encode_meta(meta))
    return f"{root.as_uri()}/{log_key}"


def test_a_remote_segment_by_url_is_walked_and_its_meta_indexes_checked(partition, tmp_path):
    url = _remote_segment(partition, tmp_path / "remote")
    local = json_lines(kanal("dump-log", str(partition / "00000000000000000000.log"), "--print-data",
                             "--output", "json"))
    result = kanal("dump-log", url, "--print-data", "--output", "json")
    assert result.returncode == 0, result.stderr
    rows = json_lines(result)
    # The same entries and records as the local file gives, byte position for byte position.
    strip = lambda rs: [{k: v for k, v in r.items() if k != "path"} for r in rs if r["type"] != "file"]
    assert strip([r for r in rows if r["type"] in ("entry", "record")]) == strip(local)
    checks = [r for r in rows if r["type"] in ("index", "timeindex")]
    assert checks and {r["check"] for r in checks} == {"ok"}


def test_a_damaged_remote_segment_is_exit_1_and_a_bad_url_exit_2(partition, tmp_path):
    url = _remote_segment(partition, tmp_path / "remote")
    path = Path(url.removeprefix("file://"))
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    path.write_bytes(bytes(data))
    result = kanal("dump-log", url, "--output", "json")
    assert result.returncode == 1, result.stdout
    assert any(r["type"] == "damage" for r in json_lines(result))
    assert kanal("dump-log", url.replace(".log", ".meta")).returncode == 2
    assert kanal("dump-log", "ftp://host/00000000000000000000-00000000000000000010-e1.log").returncode == 2
