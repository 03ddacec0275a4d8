"""Tiered storage housekeeping decisions (broker/remote_log_manager.py rules 6-8): remote retention, the
orphan choice, the stray-topic choice and the janitor. Pure functions: no storage, no clock."""

from __future__ import annotations

from kanal.broker.remote_log_manager import (
    image_keys,
    is_janitor,
    orphan_keys,
    remote_retention,
    segment_key_range,
    segment_keys,
    stray_topic_keys,
)
from kanal.broker.storage.remote_object import ObjectInfo
from kanal.metadata.ids import BrokerEpoch, BrokerId, LeaderEpoch
from kanal.metadata.image import BrokerRegistration, EpochStart, MetadataImage, RemoteLog, RemoteSegment

NOW_MS = 1_000_000_000
HOUR_MS = 3_600_000


def segment(base: int, end: int, size: int = 100, max_ts: int = NOW_MS, epoch: int = 0) -> RemoteSegment:
    return RemoteSegment(base, end, size, 10, max_ts, LeaderEpoch(epoch), BrokerId(1),
                         (EpochStart(LeaderEpoch(epoch), base),))


def remote_log(*segments: RemoteSegment, start: int | None = None) -> RemoteLog:
    return RemoteLog(segments, segments[0].base_offset if start is None else start)


# ---- remote retention ----

def test_nothing_goes_within_both_bounds() -> None:
    log = remote_log(segment(0, 10), segment(10, 20))
    assert remote_retention(log, 0, NOW_MS, HOUR_MS, 1000) is None
    assert remote_retention(log, 0, NOW_MS, None, None) is None


def test_expired_segments_go_oldest_first_and_stop_at_the_first_young_one() -> None:
    old = NOW_MS - 2 * HOUR_MS
    log = remote_log(segment(0, 10, max_ts=old), segment(10, 20, max_ts=old), segment(20, 30),
                     segment(30, 40, max_ts=old))
    decision = remote_retention(log, 0, NOW_MS, HOUR_MS, None)
    assert decision is not None
    assert decision.new_start == 20
    assert [s.base_offset for s in decision.dropped] == [0, 10]
    assert "retention.ms" in decision.reason


def test_a_segment_exactly_at_the_bound_stays() -> None:
    log = remote_log(segment(0, 10, max_ts=NOW_MS - HOUR_MS))
    assert remote_retention(log, 0, NOW_MS, HOUR_MS, None) is None


def test_retention_bytes_counts_the_local_bytes_above_the_remote_end() -> None:
    log = remote_log(segment(0, 10), segment(10, 20), segment(20, 30))  # 300 B remote
    # Without local bytes: 300 - 100 >= 200 drops one; 200 - 100 < 200 keeps the rest.
    decision = remote_retention(log, 0, NOW_MS, None, 200)
    assert decision is not None and decision.new_start == 10 and len(decision.dropped) == 1
    # 150 B local not uploaded: 450 -> 350 -> 250 drops two; 250 - 100 < 200 keeps the third.
    decision = remote_retention(log, 150, NOW_MS, None, 200)
    assert decision is not None and decision.new_start == 20 and len(decision.dropped) == 2
    assert "retention.bytes" in decision.reason


def test_every_segment_may_go_and_the_start_becomes_the_remote_end() -> None:
    log = remote_log(segment(0, 10), segment(10, 20))
    decision = remote_retention(log, 1000, NOW_MS, None, 500)
    assert decision is not None and decision.new_start == 20 and len(decision.dropped) == 2


def test_retention_zero_bytes_drops_everything_remote() -> None:
    log = remote_log(segment(5, 10), segment(10, 20), start=7)
    decision = remote_retention(log, 0, NOW_MS, None, 0)
    assert decision is not None and decision.new_start == 20


def test_time_then_size_both_named_in_the_reason() -> None:
    old = NOW_MS - 2 * HOUR_MS
    log = remote_log(segment(0, 10, max_ts=old), segment(10, 20), segment(20, 30))
    decision = remote_retention(log, 0, NOW_MS, HOUR_MS, 100)
    assert decision is not None and decision.new_start == 20
    assert decision.reason == f"retention.ms={HOUR_MS}, retention.bytes=100"


# ---- the orphan choice ----

CLUSTER, TOPIC = "c1", "t1"


def keys_of(base: int, end: int, epoch: int = 0) -> tuple[str, str]:
    return segment_keys(CLUSTER, TOPIC, 0, base, end, epoch)


def info(key: str, age_ms: int) -> ObjectInfo:
    return ObjectInfo(key, 10, NOW_MS - age_ms)


def test_segment_key_range_reads_the_offsets_back() -> None:
    log_key, meta_key = keys_of(12, 40, 3)
    assert segment_key_range(log_key) == (12, 40) == segment_key_range(meta_key)
    assert segment_key_range(f"{CLUSTER}/{TOPIC}/0/junk") is None


def test_named_and_in_flight_keys_stay_old_unnamed_ones_go() -> None:
    log = remote_log(segment(10, 20, epoch=1))
    named = image_keys(CLUSTER, TOPIC, 0, log)
    assert named == set(keys_of(10, 20, 1))
    uploading = set(keys_of(20, 30, 1))
    crashed = keys_of(20, 30, 0)  # an older leader's upload the controller refused
    listed = [info(k, HOUR_MS) for k in [*named, *uploading, *crashed]]
    assert sorted(orphan_keys(listed, named, uploading, NOW_MS, 60_000, 10)) == sorted(crashed)


def test_young_unnamed_keys_stay_until_the_grace_period_passes() -> None:
    junk = f"{CLUSTER}/{TOPIC}/0/whatever.bin"
    assert orphan_keys([info(junk, 59_999)], set(), set(), NOW_MS, 60_000, None) == []
    assert orphan_keys([info(junk, 60_001)], set(), set(), NOW_MS, 60_000, None) == [junk]


def test_keys_wholly_below_the_start_go_at_once() -> None:
    below, straddling = keys_of(0, 10)[0], keys_of(5, 15)[0]
    listed = [info(below, 0), info(straddling, 0)]
    assert orphan_keys(listed, set(), set(), NOW_MS, 60_000, 10) == [below]
    assert orphan_keys(listed, set(), set(), NOW_MS, 60_000, None) == []


def test_a_staging_object_counts_as_its_final_keys() -> None:
    final = keys_of(20, 30)[0]
    staging = f"{final}.0123456789abcdef.tmp"
    old = [info(staging, HOUR_MS)]
    assert orphan_keys(old, set(), {final}, NOW_MS, 60_000, None) == []
    assert orphan_keys(old, {final}, set(), NOW_MS, 60_000, None) == []
    assert orphan_keys(old, set(), set(), NOW_MS, 60_000, None) == [staging]


# ---- deleted topics ----

def test_stray_topic_keys_are_old_keys_of_topics_the_image_lacks() -> None:
    kept, gone, young = f"{CLUSTER}/t1/0/a.log", f"{CLUSTER}/t2/0/a.log", f"{CLUSTER}/t3/0/a.log"
    other_cluster = "c2/t2/0/a.log"
    listed = [info(kept, HOUR_MS), info(gone, HOUR_MS), info(young, 0), info(other_cluster, HOUR_MS)]
    assert stray_topic_keys(listed, CLUSTER, {"t1"}, NOW_MS, 60_000) == [gone]


def test_the_janitor_is_the_lowest_unfenced_broker() -> None:
    image = MetadataImage()
    assert not is_janitor(image, 1)
    for broker, fenced in ((1, True), (2, False), (3, False)):
        registration = BrokerRegistration(BrokerId(broker), "", BrokerEpoch(1), "", "", fenced)
        image.brokers[BrokerId(broker)] = registration
    assert [b for b in (1, 2, 3) if is_janitor(image, b)] == [2]
