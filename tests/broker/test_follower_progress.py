"""FollowerProgress: Kafka's caught-up rule."""

from __future__ import annotations

from kanal.broker.follower_progress import FollowerProgress

LAG_MS = 10_000


def test_fetch_at_the_leader_end_is_caught_up_now():
    p = FollowerProgress(2)
    p.on_fetch(100, leader_log_end_offset=100, now_ms=5_000)
    assert p.log_end_offset == 100 and p.last_caught_up_ms == 5_000


def test_reaching_the_previous_fetch_leader_end_counts_as_caught_up_at_the_previous_fetch():
    p = FollowerProgress(2)
    p.on_fetch(90, leader_log_end_offset=100, now_ms=1_000)  # behind
    assert p.last_caught_up_ms is None
    p.on_fetch(100, leader_log_end_offset=120, now_ms=1_500)  # has what the leader had at 1_000
    assert p.last_caught_up_ms == 1_000
    p.on_fetch(110, leader_log_end_offset=130, now_ms=2_000)  # short of 120: no credit
    assert p.last_caught_up_ms == 1_000


def test_busy_partition_follower_that_keeps_pace_stays_in_sync():
    p = FollowerProgress(2)
    leader_leo = 0
    p.on_fetch(0, leader_log_end_offset=0, now_ms=0)
    for step in range(1, 100):
        now = step * 1_000
        p.on_fetch(leader_leo, leader_log_end_offset=leader_leo + 10, now_ms=now)  # never exactly at the end
        leader_leo += 10
        assert p.is_caught_up(leader_leo, now, LAG_MS)


def test_a_follower_stuck_behind_falls_out_after_the_lag():
    p = FollowerProgress(2)
    p.on_fetch(100, leader_log_end_offset=100, now_ms=0)
    for now in range(1_000, 20_001, 1_000):
        p.on_fetch(100, leader_log_end_offset=200, now_ms=now)  # stuck at 100 while the leader is at 200
    assert p.last_caught_up_ms == 0
    assert p.is_caught_up(200, LAG_MS, LAG_MS)
    assert not p.is_caught_up(200, LAG_MS + 1, LAG_MS)


def test_a_follower_at_the_leader_end_is_in_sync_without_fetching():
    p = FollowerProgress(2)
    p.on_fetch(50, leader_log_end_offset=50, now_ms=0)
    assert p.is_caught_up(50, 10 * LAG_MS, LAG_MS)  # idle partition
    assert not p.is_caught_up(51, 10 * LAG_MS, LAG_MS)


def test_caught_up_time_never_moves_back():
    p = FollowerProgress(2)
    p.on_fetch(10, leader_log_end_offset=10, now_ms=5_000)
    p.on_fetch(10, leader_log_end_offset=20, now_ms=6_000)  # credit for 5_000 again, not less
    assert p.last_caught_up_ms == 5_000
    assert p.lag_ms(7_000) == 2_000
