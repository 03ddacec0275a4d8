"""Reading committed records from files (issue 26): after a failover that left a dead ex-leader holding
records nobody acknowledged with acks=all, the readers take the current history up to the committed
end, never the longest copy, and report the divergence; copies of a deleted topic of the same name are
not mixed in; a damaged copy is made good from the other replicas (partition logs and the controllers'
metadata logs), and only offsets no copy holds count as missing."""

from __future__ import annotations

import shutil

import pytest

from kanal.spark.copy_plan import read_items
from kanal.spark.log_source import file_plan
from kanal.spark.range_reader import Clipped, Notice, read_item
from kanal.spark.segment_reader import StoredEntry, read_segment

from .cluster_files import EVENTS_OLD_ID, failover_cluster, metadata_batches
from .log_files import segment_paths

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def failover(tmp_path_factory):
    return failover_cluster(tmp_path_factory.mktemp("failover"))


def _read(root, **plan_args) -> tuple[dict[tuple[str, int], dict[int, int]], list[Notice]]:
    """Without Spark: (topic, partition) -> offset -> times read, and the notices."""
    seen: dict[tuple[str, int], dict[int, int]] = {}
    notices = []
    for item in read_items(file_plan(root, **plan_args), 1 << 30):
        for got in read_item(item):
            if isinstance(got, Notice):
                notices.append(got)
                continue
            offsets = seen.setdefault((item.topic, item.partition), {})
            for o in range(max(got.entry.base_offset, got.lo), min(got.entry.last_offset + 1, got.hi)):
                offsets[o] = offsets.get(o, 0) + 1
    return seen, notices


def _flip(path, entry_index: int) -> StoredEntry:
    """Flip one byte inside the entry_index-th entry of a segment file; returns that entry."""
    entries = [e for e in read_segment(str(path), int(path.name[:-4])) if isinstance(e, StoredEntry)]
    entry = entries[entry_index]
    data = bytearray(path.read_bytes())
    data[entry.position + 40] ^= 0xFF
    path.write_bytes(bytes(data))
    return entry


def test_plan_takes_the_current_history_to_the_committed_end(failover):
    seen, notices = _read(failover.root)
    assert set(seen[("orders", 0)]) == set(failover.committed)  # 0..199: not broker 0's 600
    assert all(n == 1 for n in seen[("orders", 0)].values())
    assert set(seen[("events", 0)]) == set(failover.events)
    texts = [n.text for n in notices]
    divergent = [t for t in texts if "DIVERGENT" in t]
    assert len(divergent) == 1 and "broker-0/orders-0" in divergent[0] and "at offset 100" in divergent[0]
    assert "100..599" in divergent[0]
    assert any("broker-0/events-0" in t and EVENTS_OLD_ID in t for t in texts)
    assert not any(n.lost for n in notices)


def test_without_the_metadata_log_the_latest_epoch_still_wins(failover, tmp_path):
    for b in range(3):
        shutil.copytree(failover.root / f"broker-{b}", tmp_path / f"broker-{b}")
    seen, notices = _read(tmp_path)
    assert set(seen[("orders", 0)]) == set(failover.committed)
    assert any("DIVERGENT" in n.text and "at offset 100" in n.text for n in notices)
    # Two incarnations and no image: the newest partition.metadata's is read, and that is said.
    assert set(seen[("events", 0)]) == set(failover.events)
    assert any("2 topic ids" in n.text for n in notices)


@pytest.mark.parametrize("fmt", ["kanal-log", "kanal-log-python"])
def test_kanal_log_reads_exactly_the_committed_records(spark, failover, fmt):
    """Rows are records (issue 42, item 7): the dead ex-leader's divergent copy and the deleted topic's
    leftovers cost no committed record, so they are no rows, and count() is the number of committed
    records, what a consumer of the surviving leaders reads (orders-0 to its committed end, events-0 of
    the re-created topic) — from the JVM table and the Python source alike."""
    df = spark.read.format(fmt).load(str(failover.root))
    assert df.count() == len(failover.committed) + len(failover.events)
    assert df.where("_corrupt is not null").count() == 0
    orders = {r["offset"]: r["value"] for r in df.where("topic = 'orders'").collect()}
    assert orders == failover.committed and df.where("topic = 'orders'").count() == len(failover.committed)
    events = {r["offset"]: r["value"] for r in df.where("topic = 'events'").collect()}
    assert events == failover.events


def test_analytics_command_counts_committed_records_and_warns(spark, failover, tmp_path, capsys):
    from kanal.spark import analytics_cli

    code = analytics_cli.main(["--data-dir", str(failover.root), "--out", str(tmp_path), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured
    warnings = [line for line in captured.err.splitlines() if "WARNING" in line and "DIVERGENT" in line]
    assert len(warnings) == 1 and "broker-0/orders-0" in warnings[0]
    stats = {
        r["topic"]: (r["records"], r["last_offset"])
        for r in spark.read.parquet(str(tmp_path / "partition_stats")).collect()
    }
    assert stats == {"orders": (200, 199), "events": (50, 49)}
    notices = [(r["topic"], r["partition"], r["offset"], r["notice"])
               for r in spark.read.parquet(str(tmp_path / "notices")).collect()]
    assert [(t, p, o) for t, p, o, n in notices if "DIVERGENT" in n] == [("orders", 0, 100)]
    assert spark.read.parquet(str(tmp_path / "damage")).count() == 0


def test_a_damaged_replica_is_made_good_from_another(failover, tmp_path):
    root = tmp_path / "cluster"
    shutil.copytree(failover.root, root)
    first = segment_paths(root / "broker-1" / "orders-0")[0]  # the current copy
    flipped = _flip(first, 2)
    seen, notices = _read(root)
    assert set(seen[("orders", 0)]) == set(failover.committed)
    assert all(n == 1 for n in seen[("orders", 0)].values())
    good = [n for n in notices if "made good" in n.text]
    assert len(good) == 1 and not good[0].lost and good[0].offset == flipped.base_offset
    assert "broker-2/orders-0" in good[0].text
    # The same batch damaged in the other replica of the current history too: broker 0 agrees with it
    # below offset 100, so it stands in; nothing is lost.
    _flip(segment_paths(root / "broker-2" / "orders-0")[0], 2)
    seen, notices = _read(root)
    assert set(seen[("orders", 0)]) == set(failover.committed)
    assert "broker-0/orders-0" in next(n.text for n in notices if "made good" in n.text)
    # And in broker 0's: no copy holds that batch any more. Exactly its offsets are missing.
    _flip(segment_paths(root / "broker-0" / "orders-0")[0], 2)
    seen, notices = _read(root)
    lost = [n for n in notices if n.lost]
    assert len(lost) == 1 and lost[0].offset == flipped.base_offset and "in no readable copy" in lost[0].text
    assert set(failover.committed) - set(seen[("orders", 0)]) >= set(range(flipped.base_offset,
                                                                              flipped.last_offset + 1))


def test_one_flipped_byte_loses_nothing_through_spark(spark, failover, tmp_path, capsys):
    """Damage another copy made good is found inside a task: it is no row (count() is the committed
    records, JVM table and Python source alike), and `kanal analytics` lists it in its notices table,
    from the tasks of its transactions pass, beside the driver's planning notes."""
    from kanal.spark import analytics_cli

    root = tmp_path / "cluster"
    shutil.copytree(failover.root, root)
    flipped = _flip(segment_paths(root / "broker-1" / "orders-0")[0], 3)
    for fmt in ("kanal-log", "kanal-log-python"):
        df = spark.read.format(fmt).option("topics", "orders").load(str(root))
        orders = {r["offset"]: r["value"] for r in df.collect()}
        assert orders == failover.committed and df.count() == len(failover.committed)
        assert df.where("_corrupt is not null").count() == 0
    code = analytics_cli.main(["--data-dir", str(root), "--out", str(tmp_path / "out"), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured
    notices = [(r["topic"], r["partition"], r["offset"], r["notice"])
               for r in spark.read.parquet(str(tmp_path / "out" / "notices")).collect()]
    good = [(t, p, o) for t, p, o, n in notices if "made good" in n]
    assert good == [("orders", 0, flipped.base_offset)]
    assert any("DIVERGENT" in n for *_, n in notices)
    assert any("WARNING" in line and "made good" in line for line in captured.err.splitlines())
    stats = {r["topic"]: r["records"] for r in spark.read.parquet(str(tmp_path / "out" / "partition_stats"))
             .collect()}
    assert stats["orders"] == len(failover.committed)


def test_offsets_no_copy_holds_stay_a_lost_row(spark, failover, tmp_path):
    """Real damage is still a row in PERMISSIVE mode: the same batch flipped in every copy that could
    stand in is one `_lost` row at its offset, beside every record the copies still hold."""
    root = tmp_path / "cluster"
    shutil.copytree(failover.root, root)
    flipped = _flip(segment_paths(root / "broker-1" / "orders-0")[0], 2)
    for broker in (0, 2):
        _flip(segment_paths(root / f"broker-{broker}" / "orders-0")[0], 2)
    missing = set(range(flipped.base_offset, flipped.last_offset + 1))
    for fmt in ("kanal-log", "kanal-log-python"):
        df = spark.read.format(fmt).option("topics", "orders").load(str(root))
        lost = df.where("_corrupt is not null").collect()
        assert [(r["offset"], r["_lost"]) for r in lost] == [(flipped.base_offset, True)]
        assert "in no readable copy" in lost[0]["_corrupt"]
        records = {r["offset"] for r in df.where("_corrupt is null").collect()}
        # The walk of each copy's file ends at its first bad entry, so the loss is that batch at least.
        assert records <= set(failover.committed) - missing
        assert all(o > flipped.last_offset for o in set(failover.committed) - records - missing)
        assert df.count() == len(records) + 1


def test_audit_is_complete_from_the_other_controllers(spark, failover, tmp_path, capsys):
    from kanal.spark import audit_cli

    root = tmp_path / "cluster"
    shutil.copytree(failover.root, root)
    _flip(segment_paths(root / "controller-0" / "__cluster_metadata-0")[0], 1)  # the copy read first
    code = audit_cli.main(["--data-dir", str(root), "--out", str(tmp_path / "out"), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured
    records = sum(len(b.records) for b in metadata_batches())
    assert f"metadata log: {records} records" in captured.out
    assert "REPLAY STOPPED" not in captured.out and "DAMAGE" not in captured.out
    assert "NOTICE" in captured.out and "made good" in captured.out
    assert any("WARNING" in line and "controller-0" in line for line in captured.err.splitlines())
    lifecycle = spark.read.parquet(str(tmp_path / "out" / "topic_lifecycle")).collect()
    assert [r["event"] for r in lifecycle if r["topic"] == "events"] == ["topic_created", "topic_deleted",
                                                                         "topic_created"]


def test_metadata_damaged_in_every_controller_is_missing_data(failover, tmp_path):
    from kanal.spark.copy_plan import metadata_plan

    root = tmp_path / "cluster"
    shutil.copytree(failover.root, root)
    for c in range(3):
        _flip(segment_paths(root / f"controller-{c}" / "__cluster_metadata-0")[0], 1)
    got = [g for item in read_items(metadata_plan(root), 1 << 30) for g in read_item(item)]
    lost = [g for g in got if isinstance(g, Notice) and g.lost]
    assert len(lost) == 1 and "in no readable copy" in lost[0].text
    assert all(f"controller-{c}" in lost[0].text for c in range(3))
    assert any(isinstance(g, Clipped) for g in got)  # what is intact is still read


def test_audit_report_keeps_topic_incarnations_apart(spark, failover, tmp_path, capsys):
    """A deleted and a re-created topic of one name are separate rows (topic id, `deleted`); a partition
    increase is in the lifecycle; internal topics are not counted as user topics; times carry a zone."""
    from kanal.spark import audit_cli

    from .cluster_files import EVENTS_NEW_ID, ORDERS_ID

    out = tmp_path / "out"
    code = audit_cli.main(["--data-dir", str(failover.root), "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured
    assert (
        "user topics created 3, partition increases 1, deleted 1 (internal topics: created 1)" in captured.out
    )
    lifecycle = [(r["event"], r["topic"], r["topic_id"], r["detail"], r["internal"])
                 for r in spark.read.parquet(str(out / "topic_lifecycle")).orderBy("offset").collect()]
    assert ("partitions_increased", "orders", ORDERS_ID, "1 -> 2 partitions", False) in lifecycle
    assert [(e, tid) for e, t, tid, _, _ in lifecycle if t == "events"] == [
        ("topic_created", EVENTS_OLD_ID), ("topic_deleted", EVENTS_OLD_ID), ("topic_created", EVENTS_NEW_ID)]
    assert ("topic_created", "__consumer_offsets") in [
        (e, t) for e, t, _, _, internal in lifecycle if internal
    ]
    summary = {
        (r["topic_id"], r["partition"]): r["deleted"]
        for r in spark.read.parquet(str(out / "partition_summary")).where("topic = 'events'").collect()
    }
    assert summary == {(EVENTS_OLD_ID, 0): True, (EVENTS_NEW_ID, 0): False}
    report = (out / "report.html").read_text()
    assert f"events ({EVENTS_OLD_ID[:8]}, deleted)" in report and f"events ({EVENTS_NEW_ID[:8]})" in report
    assert "2023-11-14T22:13:20.000Z" in report  # T0 in the lifecycle table, ISO 8601 in UTC
    assert "partitions_increased" in report
