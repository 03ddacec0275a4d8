"""A metadata log whose start is past 0 (issue 18, finding 2): the replay starts from the oldest snapshot
file at or past the log start, records it as the first event, opens the intervals already under way in
it, and ends at the same image as a replay of the whole log; damaged snapshots are skipped and reported,
and a log start with no snapshot stops the replay visibly. Pure: files written by the controllers' own
writers, rows read without Spark."""

from __future__ import annotations

from pathlib import Path

from kanal.broker.storage.log import Log
from kanal.metadata import MetadataImage, apply_batch, image_to_snapshot
from kanal.metadata.log_codec import LogBatch
from kanal.raft.metadata_log import METADATA_LOG_DIR_NAME, MetadataLogWriter, metadata_log_config, read_all
from kanal.raft.metadata_snapshots import MetadataSnapshots
from kanal.spark.copy_plan import metadata_copy
from kanal.spark.replay import ReplayRow, replay
from kanal.spark.replay_start import replay_start
from kanal.v1 import metadata_pb2 as m

T0 = 1_700_000_000_000


def rec(t: int, **body) -> m.MetadataRecord:
    return m.MetadataRecord(time_ms=T0 + t, principal="controller", request_id=f"r{t}", **body)


def batches() -> list[m.MetadataBatch]:
    out = [m.MetadataBatch(controller_epoch=1, records=[rec(0, no_op=m.NoOpRecord())])]
    for b in (0, 1):
        out.append(
            m.MetadataBatch(
                controller_epoch=1,
                records=[
                    rec(
                        1 + b,
                        register_broker=m.RegisterBrokerRecord(
                            broker_id=b,
                            incarnation_id=f"i{b}",
                            broker_epoch=1 + b,
                            endpoint=f"h:{b}",
                            fenced=(b == 1),
                        ),
                    )
                ],
            )
        )
    out.append(
        m.MetadataBatch(
            controller_epoch=1,
            records=[
                rec(10, topic=m.TopicRecord(name="t", topic_id="tid")),
                rec(
                    10,
                    partition=m.PartitionRecord(
                        topic_id="tid", partition_id=0, replicas=[0, 1], isr=[0], leader=0
                    ),
                ),
            ],
        )
    )
    for i in range(60):  # filler so that segments roll (4 KiB segments)
        out.append(m.MetadataBatch(controller_epoch=1, records=[rec(100 + i, client_quota=m.ClientQuotaRecord(
            entity_type="client-id", entity_name=f"c{i}", key="producer_byte_rate", value=1.0 + i))]))
    out.append(m.MetadataBatch(controller_epoch=1, records=[rec(9000, broker_registration_change=(
        m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2, fenced=False, reason="caught up")))]))
    return out


def write_cluster(root: Path, snapshot_every: int = 15) -> tuple[Path, MetadataImage, list[int]]:
    """A controller's metadata log with snapshot files every `snapshot_every` batches, and retention that
    deleted the segments below the newest snapshot. The log dir, the final image, the snapshot offsets."""
    directory = root / "controller-0" / METADATA_LOG_DIR_NAME
    log = Log.open(directory, metadata_log_config(1024, 4096))
    writer, files, image, offsets = MetadataLogWriter(log), MetadataSnapshots(directory), MetadataImage(), []
    for i, batch in enumerate(batches()):
        base = image.next_offset
        apply_batch(image, batch, base)
        writer.write(
            LogBatch(
                base,
                batch.controller_epoch,
                tuple(r.SerializeToString() for r in batch.records),
                tuple(r.time_ms for r in batch.records),
            )
        )
        if i and i % snapshot_every == 0:
            files.write(image_to_snapshot(image), T0 + i)
            offsets.append(image.next_offset)
    newest = offsets[-1]
    keep_from = max(seg.base_offset for seg in log.segments if seg.base_offset <= newest)
    log.advance_log_start(keep_from)
    log.close()
    return directory, image, offsets


def rows(directory: Path) -> list[ReplayRow]:
    log = Log.open(directory, metadata_log_config(1024, 4096))
    try:
        out = []
        for batch in read_all(log):
            for i, (value, ts) in enumerate(zip(batch.values, batch.timestamps_ms)):
                out.append(
                    ReplayRow(batch.base_offset + i, batch.base_offset, batch.controller_epoch, ts, value)
                )
        return out
    finally:
        log.close()


def test_replay_starts_at_the_oldest_snapshot_past_the_log_start(tmp_path):
    directory, image, offsets = write_cluster(tmp_path)
    copy = metadata_copy(tmp_path)
    start = replay_start(copy)
    assert start.log_start_offset > 0
    expected = min(o for o in offsets if o >= start.log_start_offset)
    assert start.snapshot is not None and start.snapshot.next_offset == expected
    history = replay(rows(directory), start)
    assert history.stopped is None
    assert history.image == image  # the same end as a replay of the whole log
    first = history.events[0]
    assert first.event == "snapshot_loaded" and first.offset == expected - 1
    assert all(e.offset >= expected for e in history.events[1:])  # nothing from before the snapshot
    # Broker 1 was fenced at the snapshot and unfenced later: an interval from the snapshot to then.
    [fenced] = [i for i in history.intervals if i.kind == "fenced"]
    assert fenced.broker_id == 1 and fenced.start_offset == expected - 1 and fenced.end_reason == "caught up"
    assert fenced.start_reason == "already at the snapshot"
    assert history.events[-1].event == "broker_unfenced"


def test_a_damaged_snapshot_is_skipped_and_reported(tmp_path):
    directory, image, _ = write_cluster(tmp_path)
    first = replay_start(metadata_copy(tmp_path))
    path = Path(first.snapshot_path)
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    start = replay_start(metadata_copy(tmp_path))
    assert start.damaged and path.name in start.damaged[0]
    assert start.snapshot is not None and start.snapshot.next_offset > first.snapshot.next_offset
    assert replay(rows(directory), start).image == image


def test_a_log_start_without_a_snapshot_stops_the_replay(tmp_path):
    directory, _, _ = write_cluster(tmp_path)
    for path in directory.glob("*.checkpoint"):
        path.unlink()
    start = replay_start(metadata_copy(tmp_path))
    assert start.snapshot is None and not start.replayable
    history = replay(rows(directory), start)
    assert history.stopped and "no readable snapshot" in history.stopped
    assert history.image.next_offset == 0


def test_a_log_from_zero_is_replayed_from_zero_snapshots_or_not(tmp_path):
    directory = tmp_path / METADATA_LOG_DIR_NAME
    log = Log.open(directory, metadata_log_config(1024, 4096))
    writer, image = MetadataLogWriter(log), MetadataImage()
    for batch in batches()[:5]:
        base = image.next_offset
        apply_batch(image, batch, base)
        writer.write(LogBatch(base, 1, tuple(r.SerializeToString() for r in batch.records),
                              tuple(r.time_ms for r in batch.records)))
    MetadataSnapshots(directory).write(image_to_snapshot(image), T0)
    log.close()
    start = replay_start(metadata_copy(tmp_path))
    assert start.log_start_offset == 0 and start.snapshot is None
    history = replay(rows(directory), start)
    assert history.image == image and history.events[0].event == "controller_activated"
