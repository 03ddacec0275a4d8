"""LeaderState scenarios: the high-water mark, ISR shrink and expand with the AlterPartition guard, leader
changes, and acks=all completion."""

from __future__ import annotations

import pytest

from kanal.broker.leader_state import LeaderState, ReplicationConfig
from kanal.v1.error import ErrorCode, KanalError

LAG = 10_000


def make(
    replicas=(1, 2, 3), isr=(1, 2, 3), leo=100, hw=100, now=0, lag=LAG, epoch=5, pepoch=9, pending_max=100
):
    return LeaderState(
        topic="orders",
        partition=3,
        leader_id=1,
        replicas=replicas,
        isr=isr,
        leader_epoch=epoch,
        partition_epoch=pepoch,
        log_end_offset=leo,
        high_watermark=hw,
        now_ms=now,
        config=ReplicationConfig(replica_lag_ms_max=lag, pending_produces_max=pending_max),
    )


def fetch_all(state: LeaderState, offset: int, now: int, followers=(2, 3)):
    for f in followers:
        state.on_follower_fetch(f, offset, now)


# ---- high-water mark ----

def test_single_member_isr_commits_the_whole_log_at_once():
    s = make(replicas=(1,), isr=(1,), leo=50, hw=10)
    assert s.high_watermark == 50
    e = s.on_leader_append(60, now_ms=1)
    assert e.high_watermark == 60


def test_new_leader_keeps_its_follower_high_watermark_until_every_isr_member_fetched():
    s = make(leo=100, hw=80)
    assert s.high_watermark == 80 and not s.high_watermark_established
    assert s.on_follower_fetch(2, 100, now_ms=1).high_watermark is None  # 3 not heard from yet
    e = s.on_follower_fetch(3, 95, now_ms=2)
    assert e.high_watermark == 95
    assert not s.high_watermark_established  # below the epoch start (100)
    assert s.on_follower_fetch(3, 100, now_ms=3).high_watermark == 100
    assert s.high_watermark_established


def test_high_watermark_above_the_log_end_is_clamped():
    s = make(leo=40, hw=70)
    assert s.high_watermark == 40


def test_high_watermark_is_the_minimum_over_the_isr_and_never_moves_back():
    s = make(leo=100, hw=100)
    fetch_all(s, 100, now=1)
    s.on_leader_append(110, now_ms=2)
    assert s.on_follower_fetch(2, 110, now_ms=3).high_watermark is None  # 3 is still at 100
    assert s.on_follower_fetch(3, 105, now_ms=4).high_watermark == 105
    # 3 comes back with a lower offset (it lost an unflushed tail): recorded, but the HW stays
    assert s.on_follower_fetch(3, 101, now_ms=5).high_watermark is None
    assert s.high_watermark == 105 and s.follower(3).log_end_offset == 101


def test_fetch_errors_change_nothing():
    s = make()
    with pytest.raises(KanalError) as exc:
        s.on_follower_fetch(9, 100, now_ms=1)
    assert exc.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KanalError) as exc:
        s.on_follower_fetch(1, 100, now_ms=1)  # the leader itself is no follower
    assert exc.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KanalError) as exc:
        s.on_follower_fetch(2, 101, now_ms=1)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert s.follower(2).log_end_offset is None


def test_leader_log_end_and_clock_must_not_go_back():
    s = make(now=100)
    with pytest.raises(ValueError):
        s.on_leader_append(99, now_ms=100)
    with pytest.raises(ValueError):
        s.on_leader_append(101, now_ms=99)


# ---- ISR shrink ----

def test_a_lagging_follower_is_proposed_out_and_the_leader_never_is():
    s = make(leo=100, hw=100)
    fetch_all(s, 100, now=0)
    s.on_leader_append(120, now_ms=1)
    s.on_follower_fetch(2, 120, now_ms=2)
    assert s.maybe_shrink_isr(now_ms=LAG).empty  # 3 last caught up at 0: exactly at the limit
    e = s.maybe_shrink_isr(now_ms=LAG + 1)
    p = e.alter_partition
    assert p is not None and p.kind == "shrink" and p.new_isr == (1, 2)
    assert (p.leader_epoch, p.partition_epoch) == (5, 9)
    assert "3" in p.reason and s.alter_partition_in_flight is p
    assert s.maybe_shrink_isr(now_ms=LAG + 2).empty  # one proposal at a time


def test_shrink_is_not_blocked_by_min_insync_and_never_empties_the_isr():
    s = make(replicas=(1, 2), isr=(1, 2), leo=10, hw=10)
    e = s.maybe_shrink_isr(now_ms=LAG + 1)  # 2 never fetched in this leadership
    assert e.alter_partition.new_isr == (1,)


def test_idle_partition_followers_at_the_leader_end_stay_in_sync():
    s = make(leo=100, hw=100)
    fetch_all(s, 100, now=0)
    assert s.maybe_shrink_isr(now_ms=100 * LAG).empty


def test_hw_waits_for_a_member_being_removed_until_the_shrink_commits():
    s = make(leo=100, hw=100)
    fetch_all(s, 100, now=0)
    s.on_leader_append(150, now_ms=1)
    s.on_follower_fetch(2, 150, now_ms=2)
    assert s.check_acks_all(2) is None
    assert s.add_pending_produce(request_id=1, required_offset=150, min_insync_replicas=2, timeout_ms=60_000,
                                 now_ms=2).empty
    assert s.add_pending_produce(request_id=2, required_offset=150, min_insync_replicas=3, timeout_ms=60_000,
                                 now_ms=2).empty
    p = s.maybe_shrink_isr(now_ms=LAG + 1).alter_partition
    assert p.new_isr == (1, 2)
    assert s.high_watermark == 100  # 3 still counts while the shrink is in flight
    e = s.on_alter_partition_response(p, error=ErrorCode.NONE, isr=[1, 2], leader_epoch=5, partition_epoch=10,
                                      now_ms=LAG + 2)
    assert e.isr == (1, 2) and e.high_watermark == 150
    assert {(c.request_id, c.error) for c in e.completed} == {
        (1, ErrorCode.NONE), (2, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)}
    assert s.partition_epoch == 10 and s.alter_partition_in_flight is None
    with pytest.raises(KanalError) as exc:
        s.check_acks_all(3)
    assert exc.value.code == ErrorCode.NOT_ENOUGH_REPLICAS


# ---- ISR expand ----

def test_a_caught_up_follower_is_proposed_back_and_counts_for_the_hw_before_commit():
    s = make(isr=(1, 2), leo=100, hw=100)
    s.on_follower_fetch(2, 100, now_ms=1)
    assert s.on_follower_fetch(3, 90, now_ms=2).alter_partition is None  # below the HW
    e = s.on_follower_fetch(3, 100, now_ms=3)
    p = e.alter_partition
    assert p is not None and p.kind == "expand" and p.new_isr == (1, 2, 3)
    assert s.maximal_isr == (1, 2, 3) and s.isr == (1, 2)
    s.on_leader_append(200, now_ms=4)
    assert s.on_follower_fetch(2, 200, now_ms=5).high_watermark is None  # 3 (pending) holds it: KIP-497
    assert s.high_watermark == 100
    assert s.on_follower_fetch(3, 180, now_ms=6).high_watermark == 180
    e = s.on_alter_partition_response(
        p, error=ErrorCode.NONE, isr=[1, 2, 3], leader_epoch=5, partition_epoch=10, now_ms=7
    )
    assert e.isr == (1, 2, 3) and s.isr == (1, 2, 3)


def test_expansion_needs_the_leader_epoch_start_and_eligibility():
    s = make(isr=(1, 2), leo=100, hw=60)
    s.on_follower_fetch(2, 100, now_ms=1)  # hw -> 100
    s = make(isr=(1, 2), leo=100, hw=60)
    s.on_follower_fetch(2, 80, now_ms=1)  # hw -> 80, epoch start is 100
    assert s.high_watermark == 80
    assert s.on_follower_fetch(3, 90, now_ms=2).alter_partition is None  # >= hw but < epoch start
    s.set_ineligible_replicas([3], now_ms=3)
    assert s.on_follower_fetch(3, 100, now_ms=4).alter_partition is None  # fenced broker
    s.set_ineligible_replicas([], now_ms=5)
    assert s.on_follower_fetch(3, 100, now_ms=6).alter_partition is not None


# ---- AlterPartition answers ----

def _expanding() -> tuple[LeaderState, object]:
    s = make(isr=(1, 2), leo=100, hw=100)
    s.on_follower_fetch(2, 100, now_ms=1)
    p = s.on_follower_fetch(3, 100, now_ms=2).alter_partition
    assert p is not None
    return s, p


@pytest.mark.parametrize("error", [ErrorCode.NOT_CONTROLLER, ErrorCode.CONTROLLER_NOT_AVAILABLE,
                                   ErrorCode.REQUEST_TIMED_OUT])
def test_transport_errors_ask_for_a_resend_of_the_same_proposal(error):
    s, p = _expanding()
    e = s.on_alter_partition_response(p, error=error, now_ms=3)
    assert e.alter_partition is p and s.alter_partition_in_flight is p


def test_ineligible_replica_resets_to_the_committed_isr_and_pauses_until_metadata():
    s, p = _expanding()
    e = s.on_alter_partition_response(p, error=ErrorCode.INELIGIBLE_REPLICA, isr=[1, 2], leader_epoch=5,
                                      partition_epoch=9, now_ms=3)
    assert e.alter_partition is None and s.alter_partition_in_flight is None and s.maximal_isr == (1, 2)
    assert s.on_follower_fetch(3, 100, now_ms=4).alter_partition is None  # no hot loop
    s.on_partition_change(
        replicas=[1, 2, 3], isr=[1, 2], leader=1, leader_epoch=5, partition_epoch=10, now_ms=5
    )
    assert s.on_follower_fetch(3, 100, now_ms=6).alter_partition is not None


def test_unknown_outcome_keeps_the_maximal_isr_until_the_metadata_says():
    s, p = _expanding()
    # the first attempt was committed but its answer lost; the retry meets a newer partition epoch
    e = s.on_alter_partition_response(
        p, error=ErrorCode.INVALID_UPDATE_VERSION, isr=[1, 2, 3], leader_epoch=5, partition_epoch=10, now_ms=3
    )
    assert e.empty and s.alter_partition_in_flight is p and s.maximal_isr == (1, 2, 3)
    s.on_leader_append(150, now_ms=4)
    s.on_follower_fetch(2, 150, now_ms=5)
    assert s.high_watermark == 100  # 3 may be in the committed ISR: the HW still waits for it
    e = s.on_partition_change(replicas=[1, 2, 3], isr=[1, 2, 3], leader=1, leader_epoch=5, partition_epoch=10,
                              now_ms=6)
    assert e.isr == (1, 2, 3) and s.alter_partition_in_flight is None


def test_answers_to_superseded_or_stale_proposals_are_ignored():
    s, p = _expanding()
    s.on_partition_change(
        replicas=[1, 2, 3], isr=[1, 2], leader=1, leader_epoch=5, partition_epoch=10, now_ms=3
    )
    assert s.on_alter_partition_response(p, error=ErrorCode.NONE, isr=[1, 2, 3], leader_epoch=5,
                                         partition_epoch=10, now_ms=4).empty
    assert s.isr == (1, 2)
    p2 = s.on_follower_fetch(3, 100, now_ms=5).alter_partition
    assert p2 is not None and p2.partition_epoch == 10
    # a success naming another leader epoch, or an older partition epoch, is not ours to apply
    assert s.on_alter_partition_response(p2, error=ErrorCode.NONE, isr=[1, 2, 3], leader_epoch=6,
                                         partition_epoch=11, now_ms=6).empty
    assert s.on_alter_partition_response(p2, error=ErrorCode.NONE, isr=[1, 2, 3], leader_epoch=5,
                                         partition_epoch=9, now_ms=6).empty
    assert s.alter_partition_in_flight is p2


# ---- metadata changes and leadership ----

def test_stale_partition_changes_are_ignored_and_a_leader_change_must_resign():
    s = make()
    assert s.on_partition_change(replicas=[1, 2], isr=[1], leader=1, leader_epoch=5, partition_epoch=9,
                                 now_ms=1).empty
    assert s.on_partition_change(replicas=[1, 2], isr=[1], leader=1, leader_epoch=4, partition_epoch=20,
                                 now_ms=1).empty
    assert s.isr == (1, 2, 3)
    with pytest.raises(ValueError):
        s.on_partition_change(
            replicas=[1, 2, 3], isr=[2, 3], leader=2, leader_epoch=6, partition_epoch=10, now_ms=1
        )
    with pytest.raises(ValueError):
        s.on_partition_change(
            replicas=[1, 2, 3], isr=[2, 3], leader=1, leader_epoch=5, partition_epoch=10, now_ms=1
        )


def test_controller_removing_a_follower_lets_the_hw_advance():
    s = make(leo=100, hw=100)
    fetch_all(s, 100, now=0)
    s.on_leader_append(130, now_ms=1)
    s.on_follower_fetch(2, 130, now_ms=2)
    assert s.add_pending_produce(1, 130, 2, 10_000, now_ms=2).empty
    e = s.on_partition_change(
        replicas=[1, 2, 3], isr=[1, 2], leader=1, leader_epoch=5, partition_epoch=10, now_ms=3
    )
    assert e.isr == (1, 2) and e.high_watermark == 130
    assert [(c.request_id, c.error) for c in e.completed] == [(1, ErrorCode.NONE)]


def test_reassignment_adds_and_drops_followers():
    s = make(replicas=(1, 2, 3), isr=(1, 2, 3))
    s.on_partition_change(
        replicas=[1, 2, 4], isr=[1, 2], leader=1, leader_epoch=5, partition_epoch=10, now_ms=1
    )
    with pytest.raises(KanalError):
        s.on_follower_fetch(3, 100, now_ms=2)
    assert s.on_follower_fetch(4, 100, now_ms=2).alter_partition is not None


def test_new_leader_epoch_for_the_same_leader_restarts_follower_tracking_and_keeps_waiting_produces():
    s = make(leo=100, hw=100)
    fetch_all(s, 100, now=0)
    s.on_leader_append(120, now_ms=1)
    s.add_pending_produce(1, 120, 1, 10_000, now_ms=1)
    s.on_partition_change(
        replicas=[1, 2, 3], isr=[1, 2, 3], leader=1, leader_epoch=6, partition_epoch=10, now_ms=2
    )
    assert s.leader_epoch == 6 and s.leader_epoch_start_offset == 120
    assert s.follower(2).log_end_offset is None
    assert s.on_follower_fetch(2, 120, now_ms=3).high_watermark is None
    e = s.on_follower_fetch(3, 120, now_ms=4)
    assert e.high_watermark == 120 and [c.request_id for c in e.completed] == [1]


def test_resign_fails_waiting_produces_and_kills_the_state():
    s = make(leo=100, hw=90)
    s.add_pending_produce(1, 100, 1, 10_000, now_ms=0)
    e = s.resign(now_ms=1)
    assert [(c.request_id, c.error) for c in e.completed] == [(1, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert not s.active
    with pytest.raises(ValueError):
        s.on_leader_append(101, now_ms=2)


def test_check_leader_epoch():
    s = make(epoch=5)
    s.check_leader_epoch(-1)
    s.check_leader_epoch(5)
    with pytest.raises(KanalError) as exc:
        s.check_leader_epoch(4)
    assert exc.value.code == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(KanalError) as exc:
        s.check_leader_epoch(6)
    assert exc.value.code == ErrorCode.UNKNOWN_LEADER_EPOCH


# ---- acks=all ----

def test_acks_all_completes_immediately_when_already_committed_and_times_out_otherwise():
    s = make(replicas=(1, 2), isr=(1, 2), leo=100, hw=100)
    e = s.add_pending_produce(1, 100, 2, 1_000, now_ms=0)
    assert [(c.request_id, c.error) for c in e.completed] == [(1, ErrorCode.NONE)]
    s.on_leader_append(110, now_ms=1)
    assert s.add_pending_produce(2, 110, 2, 1_000, now_ms=1).empty
    assert s.next_deadline_ms == 1_001
    assert s.expire(now_ms=1_000).empty
    e = s.expire(now_ms=1_001)
    assert [(c.request_id, c.error) for c in e.completed] == [(2, ErrorCode.REQUEST_TIMED_OUT)]
    with pytest.raises(ValueError):
        s.add_pending_produce(3, 111, 2, 1_000, now_ms=2)  # not appended yet


def test_isr_that_shrinks_and_grows_back_before_completion_gives_success():
    s = make(leo=100, hw=100)
    fetch_all(s, 100, now=0)
    s.on_leader_append(110, now_ms=1)
    s.add_pending_produce(1, 110, 3, 60_000, now_ms=1)
    s.on_partition_change(
        replicas=[1, 2, 3], isr=[1, 2], leader=1, leader_epoch=5, partition_epoch=10, now_ms=2
    )
    s.on_follower_fetch(2, 105, now_ms=3)
    p = s.on_follower_fetch(3, 110, now_ms=4).alter_partition
    s.on_alter_partition_response(p, error=ErrorCode.NONE, isr=[1, 2, 3], leader_epoch=5, partition_epoch=11,
                                  now_ms=5)
    e = s.on_follower_fetch(2, 110, now_ms=6)
    assert e.high_watermark == 110 and [(c.request_id, c.error) for c in e.completed] == [(1, ErrorCode.NONE)]


def test_pending_limit_refuses_before_the_append():
    s = make(replicas=(1, 2), isr=(1, 2), leo=100, hw=0, pending_max=1)
    s.add_pending_produce(1, 100, 1, 1_000, now_ms=0)
    with pytest.raises(KanalError) as exc:
        s.check_acks_all(1)
    assert exc.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and exc.value.retriable


def test_repr_is_one_line_with_the_essentials():
    s, _ = _expanding()
    text = repr(s)
    assert "\n" not in text
    assert text.startswith("<LeaderState orders-3 leader=1 epoch=5 pepoch=9 leo=100 hw=100 isr=[1, 2]")
    assert "inflight=expand[1, 2, 3]" in text


# ---- broker epochs (KIP-903) ----

def test_proposals_carry_the_epoch_each_member_fetched_at_and_a_new_incarnation_starts_over():
    s = make(isr=(1, 2), leo=100, hw=100)
    s.on_follower_fetch(2, 100, now_ms=1, broker_epoch=40)
    e = s.on_follower_fetch(3, 100, now_ms=2, broker_epoch=41)
    assert e.alter_partition is not None and e.alter_partition.kind == "expand"
    assert e.alter_partition.new_isr == (1, 2, 3) and e.alter_partition.broker_epochs == (-1, 40, 41)
    s.on_alter_partition_response(e.alter_partition, error=ErrorCode.INELIGIBLE_REPLICA, isr=(1, 2),
                                  leader_epoch=5, partition_epoch=9, now_ms=3)
    # Broker 3 restarts (a new registration, epoch 77) with a short log: what epoch 41 reached is gone.
    s.on_follower_fetch(3, 10, now_ms=4, broker_epoch=77)
    progress = s.follower(3)
    assert (progress.broker_epoch, progress.log_end_offset, progress.last_caught_up_ms) == (77, 10, None)
