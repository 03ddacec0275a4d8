"""Producer-state snapshot files: byte layout round trip, damage detection, and recovery through a real Log
(snapshot + replay of the tail equals a replay of the whole log; a damaged snapshot falls back)."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from kanal.broker.producer_snapshot import (
    MAGIC,
    SnapshotDamaged,
    decode_snapshot,
    delete_snapshots_above,
    delete_snapshots_below,
    delete_stray_files,
    encode_snapshot,
    list_snapshots,
    load_producer_state,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from kanal.broker.producer_state import (
    APPEND,
    SEQUENCE_MAX,
    Duplicate,
    ProducerBatch,
    ProducerStateTable,
    producer_batches_in,
)
from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.v1.batch import NewRecord, build_batch, scan_batch
from kanal.v1.error import ErrorCode


def sample_table() -> ProducerStateTable:
    batches = []
    offset = 0
    for pid, epoch, seqs in [(7, 0, [(0, 1), (2, 2)]), (3, 5, [(i, 1) for i in range(7)]),
                             (2**40, 1, [(SEQUENCE_MAX - 1, 3)])]:
        for first, count in seqs:
            batches.append(ProducerBatch(pid, epoch, first, offset, offset + count - 1, 1_000 + offset))
            offset += count
    batches.append(ProducerBatch(0, 0, 0, offset, offset + 4, 0))  # not idempotent
    return ProducerStateTable.rebuild(batches)


def test_round_trip_is_the_identity(tmp_path: Path):
    table = sample_table()
    path = write_snapshot(tmp_path, table, table.next_offset)
    assert path.name == f"{table.next_offset:020d}.snapshot"
    loaded = read_snapshot(path)
    assert loaded == table
    assert len(loaded.entry(3).batches) == 5  # the window survives, not the whole history
    assert loaded.entry(2**40).batches[0].last_sequence == 0  # a wrapped batch keeps its wrapped last seq


def test_empty_table_round_trips():
    offset, table = decode_snapshot(encode_snapshot(ProducerStateTable(), 0))
    assert offset == 0 and table == ProducerStateTable()


def test_byte_layout_matches_the_documented_format():
    table = ProducerStateTable.rebuild([ProducerBatch(9, 2, 0, 0, 1, 123),
                                        ProducerBatch(9, 2, 0, 2, 2, 124, control=True, coordinator_epoch=4)])
    data = encode_snapshot(table, 5)
    assert data[:4] == MAGIC
    assert struct.unpack(">HHqI", data[4:20]) == (2, 0, 5, 1)
    assert struct.unpack(">qiqiB", data[20:45]) == (9, 2, 123, 4, 1)
    assert struct.unpack(">iiqq", data[45:69]) == (0, 1, 0, 1)
    assert len(data) == 73
    assert struct.unpack(">I", data[69:])[0] == crc32c.crc32c(data[:69])


def test_a_version_1_file_is_still_read_without_coordinator_epochs():
    body = struct.pack(">4sHHqI", MAGIC, 1, 0, 5, 1) + struct.pack(">qiqB", 9, 2, 123, 1) \
        + struct.pack(">iiqq", 0, 1, 0, 1)
    offset, table = decode_snapshot(_with_crc(body))
    assert (
        offset == 5 and table.entry(9).coordinator_epoch == -1 and table.entry(9).batches[0].last_offset == 1
    )


def test_a_marker_only_producer_round_trips_with_its_coordinator_epoch():
    table = ProducerStateTable.rebuild([ProducerBatch(9, 3, 0, 0, 0, 7, control=True, coordinator_epoch=2)])
    _, loaded = decode_snapshot(encode_snapshot(table, 1))
    assert loaded == table and loaded.entry(9).coordinator_epoch == 2 and not loaded.entry(9).batches


def test_snapshot_offset_below_what_the_table_covers_is_refused():
    table = sample_table()
    with pytest.raises(ValueError):
        encode_snapshot(table, table.next_offset - 1)


def test_every_single_byte_flip_and_every_truncation_is_detected():
    table = sample_table()
    data = encode_snapshot(table, table.next_offset)
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x5A
        with pytest.raises(SnapshotDamaged):
            decode_snapshot(bytes(damaged))
    for cut in range(len(data)):
        with pytest.raises(SnapshotDamaged):
            decode_snapshot(data[:cut])
    with pytest.raises(SnapshotDamaged):
        decode_snapshot(data + b"\x00")


def _with_crc(body: bytes) -> bytes:
    return body + struct.pack(">I", crc32c.crc32c(body))


_HEADER_ONE = struct.pack(">4sHHqI", MAGIC, 1, 0, 10, 1)
_PRODUCER_ONE = struct.pack(">qiqB", 5, 0, 0, 1)
_INCONSISTENT = {
    "version 3": struct.pack(">4sHHqI", MAGIC, 3, 0, 10, 0),
    "reserved set": struct.pack(">4sHHqI", MAGIC, 1, 1, 10, 0),
    "huge count": struct.pack(">4sHHqI", MAGIC, 1, 0, 10, 2**32 - 1),
    "zero batches": _HEADER_ONE + struct.pack(">qiqB", 5, 0, 0, 0),
    "six batches": _HEADER_ONE + struct.pack(">qiqB", 5, 0, 0, 6) + struct.pack(">iiqq", 0, 0, 0, 0) * 6,
    "batch past the snapshot offset": _HEADER_ONE + _PRODUCER_ONE + struct.pack(">iiqq", 0, 0, 9, 10),
    "batch ends before it starts": _HEADER_ONE + _PRODUCER_ONE + struct.pack(">iiqq", 0, 0, 5, 4),
    "negative sequence": _HEADER_ONE + _PRODUCER_ONE + struct.pack(">iiqq", -1, 0, 0, 0),
    "negative epoch": _HEADER_ONE + struct.pack(">qiqB", 5, -1, 0, 1) + struct.pack(">iiqq", 0, 0, 0, 0),
    "producer id 0": _HEADER_ONE + struct.pack(">qiqB", 0, 0, 0, 1) + struct.pack(">iiqq", 0, 0, 0, 0),
    "ids not increasing": struct.pack(">4sHHqI", MAGIC, 1, 0, 10, 2)
    + (_PRODUCER_ONE + struct.pack(">iiqq", 0, 0, 0, 0)) * 2,
    "batches not increasing": _HEADER_ONE
    + struct.pack(">qiqB", 5, 0, 0, 2)
    + struct.pack(">iiqq", 0, 0, 3, 3)
    + struct.pack(">iiqq", 1, 1, 2, 2),
    "v2 zero batches without a marker": struct.pack(">4sHHqI", MAGIC, 2, 0, 10, 1)
    + struct.pack(">qiqiB", 5, 0, 0, -1, 0),
    "v2 coordinator epoch below -1": struct.pack(">4sHHqI", MAGIC, 2, 0, 10, 1)
    + struct.pack(">qiqiB", 5, 0, 0, -2, 1)
    + struct.pack(">iiqq", 0, 0, 0, 0),
}


@pytest.mark.parametrize("body", list(_INCONSISTENT.values()), ids=list(_INCONSISTENT))
def test_well_checksummed_but_inconsistent_content_is_rejected(body: bytes):
    with pytest.raises(SnapshotDamaged):
        decode_snapshot(_with_crc(body))


def test_the_inconsistent_cases_differ_from_a_valid_file_only_in_the_broken_field():
    # guards the cases above against failing for a reason other than the one they name
    valid = _HEADER_ONE + _PRODUCER_ONE + struct.pack(">iiqq", 0, 0, 2, 3)
    offset, table = decode_snapshot(_with_crc(valid))
    assert offset == 10 and table.entry(5).batches[0].base_offset == 2


def test_file_name_must_match_the_stored_offset(tmp_path: Path):
    table = sample_table()
    data = encode_snapshot(table, table.next_offset)
    wrong = snapshot_path(tmp_path, table.next_offset + 1)
    wrong.write_bytes(data)
    with pytest.raises(SnapshotDamaged) as exc:
        read_snapshot(wrong)
    assert exc.value.code == ErrorCode.CORRUPT_MESSAGE


def test_listing_and_deleting(tmp_path: Path):
    table = ProducerStateTable()
    for offset in (0, 10, 20, 30):
        write_snapshot(tmp_path, table, offset)
    (tmp_path / "00000000000000000040.snapshot.tmp").write_bytes(b"partial")
    (tmp_path / "notes.snapshot").write_bytes(b"ignored")
    assert [o for o, _ in list_snapshots(tmp_path)] == [0, 10, 20, 30]
    delete_stray_files(tmp_path)
    assert not (tmp_path / "00000000000000000040.snapshot.tmp").exists()
    assert [p.name[:20] for p in delete_snapshots_above(tmp_path, 20)] == ["00000000000000000030"]
    assert [o for o, _ in list_snapshots(tmp_path)] == [0, 10, 20]
    delete_snapshots_below(tmp_path, 100)  # keeps the newest, whatever the offset
    assert [o for o, _ in list_snapshots(tmp_path)] == [20]


# ---- recovery with a real log ----

def _append(log: Log, table: ProducerStateTable, pid: int, epoch: int, seq: int, n: int, now_ms: int):
    batch = build_batch([NewRecord(b"v%d" % i, timestamp_ms=now_ms) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    header = scan_batch(batch)
    verdict = table.validate_header(header)
    if verdict == APPEND:
        info = log.append(batch, leader_epoch=0, now_ms=now_ms)
        table.record(ProducerBatch.from_header(header, info.base_offset))
    return verdict


def _replay(log: Log, start: ProducerStateTable, from_offset: int) -> ProducerStateTable:
    batches = []
    offset = from_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        for batch in producer_batches_in(data):
            if batch.base_offset >= offset:
                batches.append(batch)
        offset = batches[-1].last_offset + 1
    return ProducerStateTable.rebuild(batches, start=start)


def _fill(tmp_path: Path) -> tuple[Log, ProducerStateTable]:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes_max=1 << 22, retention_ms=None))
    table = ProducerStateTable()
    seqs = {1: 0, 2: 0, 3: 0}
    for i in range(40):
        pid = 1 + i % 3
        assert _append(log, table, pid, 0, seqs[pid], 2, now_ms=1_000 + i) == APPEND
        seqs[pid] += 2
        if i % 9 == 8:  # the shell snapshots at segment roll: emulate with explicit rolls
            log.roll()
            write_snapshot(log.directory, table, log.log_end_offset)
    assert _append(log, table, 0, 0, 0, 1, now_ms=2_000) == APPEND  # a non-idempotent tail batch
    return log, table


def test_snapshot_plus_tail_replay_equals_full_replay_and_the_live_table(tmp_path: Path):
    log, table = _fill(tmp_path)
    assert len(list_snapshots(log.directory)) == 4
    loaded = load_producer_state(log.directory, log.log_start_offset, log.log_end_offset)
    assert loaded.damaged == ()
    assert loaded.replay_from_offset == list_snapshots(log.directory)[-1][0]
    recovered = _replay(log, loaded.table, loaded.replay_from_offset)
    assert recovered == table
    assert _replay(log, ProducerStateTable(), 0) == table
    # and the recovered table deduplicates a retry of the last idempotent batch
    last = recovered.entry(3).batches[-1]
    assert recovered.validate(3, 0, last.first_sequence, 1) == Duplicate(last.base_offset, last.last_offset)


def test_damaged_newest_snapshot_falls_back_to_an_older_one_then_to_the_log(tmp_path: Path):
    log, table = _fill(tmp_path)
    snaps = list_snapshots(log.directory)
    newest = snaps[-1][1]
    raw = bytearray(newest.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    newest.write_bytes(bytes(raw))
    loaded = load_producer_state(log.directory, log.log_start_offset, log.log_end_offset)
    assert [d.path for d in loaded.damaged] == [newest]
    assert loaded.replay_from_offset == snaps[-2][0]
    assert _replay(log, loaded.table, loaded.replay_from_offset) == table
    for _, path in snaps:
        path.write_bytes(b"garbage")
    loaded = load_producer_state(log.directory, log.log_start_offset, log.log_end_offset)
    assert len(loaded.damaged) == len(snaps)
    assert loaded.replay_from_offset == 0
    assert _replay(log, loaded.table, 0) == table


def test_after_truncation_snapshots_above_the_new_end_are_skipped_and_the_state_is_rebuilt(tmp_path: Path):
    log, _ = _fill(tmp_path)
    snaps = list_snapshots(log.directory)
    cut = snaps[1][0] + 3
    log.truncate_to(cut, high_watermark=0)
    loaded = load_producer_state(log.directory, log.log_start_offset, log.log_end_offset)
    assert loaded.replay_from_offset == snaps[1][0]
    recovered = _replay(log, loaded.table, loaded.replay_from_offset)
    assert recovered == _replay(log, ProducerStateTable(), 0)
    assert recovered.next_offset == log.log_end_offset
    assert len(delete_snapshots_above(log.directory, log.log_end_offset)) == 2
