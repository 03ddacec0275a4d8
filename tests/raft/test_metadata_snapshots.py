"""Metadata snapshots: the file format, atomic writing, loading the newest valid one, the snapshot and
retention rules, and the store moving its log start past 0 (issue 18, finding 2)."""

from __future__ import annotations

import pytest

from kanal.broker.storage.log import Log
from kanal.metadata import MetadataImage, apply_batch, image_from_snapshot
from kanal.metadata.snapshot_file import (
    SnapshotFileError,
    decode_snapshot_file,
    encode_snapshot_file,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from kanal.raft.metadata_log import BelowLogStartError, metadata_log_config, read_all
from kanal.raft.metadata_snapshots import (
    MetadataSnapshots,
    SegmentSpan,
    SnapshotSettings,
    retained_log_start,
    snapshot_due,
)
from kanal.raft.metadata_store import MetadataStore
from kanal.v1.error import ErrorCode, KanalError

# Small segments (4 KiB, batches up to 2 KiB) so a few hundred registrations roll many of them.
SEGMENT_BYTES = 4096
SETTINGS = SnapshotSettings(interval_bytes=2048, interval_ms=60_000, retained=2, retention_ms=0,
                            retention_bytes=None)
NOW_MS = 1_700_000_000_000


def _open(directory) -> Log:
    return Log.open(directory, metadata_log_config(1024, SEGMENT_BYTES))


def _store(directory, settings: SnapshotSettings = SETTINGS) -> MetadataStore:
    return MetadataStore(_open(directory), settings)


def _fill(store: MetadataStore, chain, brokers: range) -> list[bytes]:
    commands = [chain.register(b, 1) for b in brokers]
    for c in commands:
        store.apply(c)
    store.flush()
    return commands


def _take_snapshot(store: MetadataStore) -> int:
    """What RaftNode does on a pysyncobj compaction: snapshot, file, publish."""
    metadata, _ = store.snapshot()
    offset = store.write_snapshot_file(metadata, NOW_MS)
    store.publish_snapshot(offset)
    return offset


# -- the file format -------------------------------------------------------------------------------


def test_snapshot_file_round_trip_and_name(chain):
    chain.noop(3)
    for b in range(1, 4):
        chain.register(b, 3)
    from kanal.metadata import image_to_snapshot

    snapshot = image_to_snapshot(chain.image)
    name = snapshot_file_name(snapshot.next_offset, snapshot.controller_epoch)
    assert name == "00000000000000000004-0000000003.checkpoint"
    assert parse_snapshot_file_name(name) == (4, 3)
    assert parse_snapshot_file_name("00000000000000000004.log") is None
    decoded = decode_snapshot_file(encode_snapshot_file(snapshot, 1234), name)
    assert decoded.snapshot == snapshot and decoded.written_ms == 1234
    assert image_from_snapshot(decoded.snapshot) == chain.image


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic", "name"])
def test_damaged_snapshot_file_is_refused_whole(chain, damage):
    chain.noop(1)
    chain.register(1, 1)
    from kanal.metadata import image_to_snapshot

    snapshot = image_to_snapshot(chain.image)
    data = bytearray(encode_snapshot_file(snapshot, 1))
    name = snapshot_file_name(snapshot.next_offset, snapshot.controller_epoch)
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "truncate":
        del data[-7:]
    elif damage == "magic":
        data[0:4] = b"XXXX"
    else:
        name = snapshot_file_name(snapshot.next_offset + 1, snapshot.controller_epoch)
    with pytest.raises(SnapshotFileError):
        decode_snapshot_file(bytes(data), name)


def test_write_is_atomic_and_newest_valid_skips_a_damaged_file(tmp_path, chain):
    from kanal.metadata import image_to_snapshot

    files = MetadataSnapshots(tmp_path)
    chain.noop(1)
    older = image_to_snapshot(chain.image)
    files.write(older, 1)
    chain.register(1, 1)
    newer_path = files.write(image_to_snapshot(chain.image), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        snapshot_file_name(1, 1), snapshot_file_name(2, 1)]  # no temp file left behind
    assert files.newest_valid().next_offset == 2
    data = bytearray(newer_path.read_bytes())
    data[-1] ^= 1
    newer_path.write_bytes(bytes(data))
    loaded = files.newest_valid()
    assert loaded is not None and loaded.snapshot == older  # the damaged newest one is skipped
    assert not files.has_valid(2) and files.has_valid(1)


# -- the pure rules --------------------------------------------------------------------------------


def test_snapshot_due_by_bytes_or_time_only_with_new_records():
    s = SnapshotSettings(interval_bytes=100, interval_ms=1000)
    assert snapshot_due(s, bytes_since=100, records_since=1, ms_since=0)
    assert snapshot_due(s, bytes_since=1, records_since=1, ms_since=1000)
    assert not snapshot_due(s, bytes_since=99, records_since=5, ms_since=999)
    assert not snapshot_due(s, bytes_since=0, records_since=0, ms_since=10**9)


def test_retention_deletes_only_old_segments_wholly_below_the_snapshot():
    day = 24 * 3_600_000
    segs = [SegmentSpan(0, 10, 100, NOW_MS - 9 * day), SegmentSpan(10, 20, 100, NOW_MS - 8 * day),
            SegmentSpan(20, 30, 100, NOW_MS - 1 * day), SegmentSpan(30, 35, 50, NOW_MS)]
    week = SnapshotSettings(retention_ms=7 * day, retention_bytes=None)
    assert retained_log_start(segs, 35, NOW_MS, week) == 20  # the third is too young
    assert retained_log_start(segs, 15, NOW_MS, week) == 10  # the second is not wholly below 15
    assert retained_log_start(segs, 9, NOW_MS, week) is None
    assert retained_log_start(segs, 20, NOW_MS + 10 * day, SnapshotSettings(retention_ms=0)) == 20
    # Size: delete while the log is larger than the limit, young or not; never the active segment.
    by_size = SnapshotSettings(retention_ms=10**12, retention_bytes=200)  # 350 -> 250 -> 150
    assert retained_log_start(segs, 35, NOW_MS, by_size) == 20
    assert (
        retained_log_start(segs, 35, NOW_MS, SnapshotSettings(retention_ms=10**12, retention_bytes=0)) == 30
    )


# -- the store -------------------------------------------------------------------------------------


def test_log_start_moves_past_zero_and_the_snapshot_continues_the_log(tmp_path, chain):
    """The regression test of the store: on main nothing ever moved the metadata log start."""
    store = _store(tmp_path / "m")
    store.apply(chain.noop(1))
    _fill(store, chain, range(1, 150))
    assert store.maintain(NOW_MS) is True  # far more than interval_bytes came in
    first = _take_snapshot(store)
    _fill(store, chain, range(150, 300))
    newest = _take_snapshot(store)
    assert store.maintain(NOW_MS) is False  # nothing new since the last snapshot
    log = store._log
    start = log.log_start_offset
    assert 0 < start <= newest
    assert all(seg.base_offset >= start for seg in log.segments)
    # Below the start: OFFSET_OUT_OF_RANGE (a broker loads a snapshot); at the start: the log.
    with pytest.raises(KanalError) as err:
        store.fetch(0, 1 << 20, 0)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert store.fetch(start, 1 << 20, 0).entries
    # Snapshot files kept: the 2 newest (retained=2), and never one that cannot be continued.
    offsets = [o for o, _, _ in store.snapshots.list()]
    assert newest in offsets and offsets == sorted(offsets)
    assert first in offsets  # one of the two newest
    # The newest snapshot + the log after it rebuild the image exactly.
    loaded = store.snapshots.newest_valid()
    image = image_from_snapshot(loaded.snapshot)
    for batch in read_all(log):
        if batch.base_offset >= image.next_offset:
            assert batch.base_offset == image.next_offset  # the log continues exactly at the snapshot
            apply_batch(image, batch.metadata_batch(), batch.base_offset)
    assert image == chain.image


def test_no_retention_before_a_snapshot_is_published(tmp_path, chain):
    store = _store(tmp_path / "m")
    store.apply(chain.noop(1))
    _fill(store, chain, range(1, 200))
    metadata, _ = store.snapshot()
    store.write_snapshot_file(metadata, NOW_MS)  # written, not published (the dump is not in place yet)
    store.maintain(NOW_MS)
    assert store._log.log_start_offset == 0


def test_retention_time_keeps_young_segments(tmp_path, chain):
    store = _store(tmp_path / "m", SnapshotSettings(interval_bytes=2048, retention_ms=3_600_000,
                                                    retention_bytes=None))
    store.apply(chain.noop(1))
    _fill(store, chain, range(1, 200))  # record times ~1 s after 1970: old
    _take_snapshot(store)
    store.maintain(2_000)  # a clock at 2 s: every record is younger than an hour
    assert store._log.log_start_offset == 0
    store.maintain(NOW_MS)
    assert store._log.log_start_offset > 0


def test_prune_keeps_the_newest_and_the_oldest_usable(tmp_path, chain):
    from kanal.metadata import image_to_snapshot

    files = MetadataSnapshots(tmp_path)
    chain.noop(1)
    files.write(image_to_snapshot(chain.image), 0)
    for b in range(1, 6):
        chain.register(b, 1)
        files.write(image_to_snapshot(chain.image), b)
    assert files.prune(2, log_start=3) == [1, 2, 4]
    assert [o for o, _, _ in files.list()] == [3, 5, 6]


def test_restart_installs_the_snapshot_and_replays_only_the_log_after_it(tmp_path, chain):
    store = _store(tmp_path / "m")
    store.apply(chain.noop(1))
    _fill(store, chain, range(1, 200))
    snap_offset = _take_snapshot(store)
    store.maintain(NOW_MS)
    start = store._log.log_start_offset
    assert start > 0
    store.close()
    # Restart: pysyncobj loads its dump (the same image as the newest snapshot file), then replays the
    # entries after it; the log after the snapshot is checked batch by batch, nothing below is needed.
    reopened = _store(tmp_path / "m")
    assert reopened._log.log_start_offset == start
    loaded = reopened.snapshots.newest_valid()
    assert loaded.next_offset == snap_offset
    last_proposal = chain.last
    reopened.install(loaded.snapshot, last_proposal, lambda a, b: iter(()), NOW_MS)
    assert reopened.copy_image()[0] == chain.image
    more = chain.register(500, 1)
    reopened.apply(more)
    assert reopened.flush() == chain.image.next_offset
    assert reopened.copy_image()[0] == chain.image


def test_install_below_every_peers_log_start_restarts_the_log_at_the_snapshot(tmp_path, chain):
    """A controller away for longer than the others' retention: the batches it misses are gone
    everywhere, so its log restarts at the snapshot it was sent (Kafka: a follower after FetchSnapshot)."""
    store = _store(tmp_path / "lagging")
    chain.noop(1)
    for b in range(1, 100):
        chain.register(b, 1)
    from kanal.metadata import image_to_snapshot

    snapshot = image_to_snapshot(chain.image)

    def peers_deleted_it(start, end):
        raise BelowLogStartError(f"every other controller's metadata log starts past offset {start}")
        yield  # pragma: no cover

    store.install(snapshot, chain.last, peers_deleted_it, NOW_MS)
    assert store._log.log_start_offset == store._log.log_end_offset == snapshot.next_offset
    assert store.durable_end_offset == snapshot.next_offset
    assert store.snapshots.has_valid(snapshot.next_offset)  # brokers below the start can be served
    store.apply(chain.register(200, 1))
    assert store.flush() == chain.image.next_offset
    assert MetadataImage() != store.copy_image()[0] == chain.image
