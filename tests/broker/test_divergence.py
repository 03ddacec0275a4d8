"""Follower divergence after leader changes: classic scenarios, agreement with LeaderEpochCache, and random
election histories in which every follower, after truncating, must hold a prefix of its leader's log."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kanal.broker.divergence import (
    EpochEndOffset,
    diverging_epoch,
    end_offset_for_epoch,
    leader_end_offset_for_epoch,
    plan_truncation,
    truncation_step,
)
from kanal.broker.storage.leader_epoch_cache import LeaderEpochCache


def leader(entries, leo):
    return lambda epoch: leader_end_offset_for_epoch(entries, epoch, leo)


def test_no_divergence_when_the_follower_is_a_prefix():
    leader_entries = [(0, 0), (2, 50)]
    assert diverging_epoch(leader_entries, 80, last_fetched_epoch=2, fetch_offset=60) is None
    assert diverging_epoch(leader_entries, 80, last_fetched_epoch=0, fetch_offset=50) is None
    assert diverging_epoch(leader_entries, 80, last_fetched_epoch=-1, fetch_offset=0) is None
    step = plan_truncation([(0, 0), (2, 50)], 60, 55, leader(leader_entries, 80))
    assert step.truncate_to == 60 and not step.below_high_watermark


def test_old_leader_with_an_unacknowledged_tail():
    # A led epoch 1 and wrote 0..9; only 0..7 reached B, which became leader in epoch 2 and wrote 8..11.
    b_entries, b_leo = [(1, 0), (2, 8)], 12
    a_entries, a_leo = [(1, 0)], 10
    d = diverging_epoch(b_entries, b_leo, last_fetched_epoch=1, fetch_offset=a_leo)
    assert d == EpochEndOffset(1, 8)
    step = truncation_step(a_entries, a_leo, 8, d)
    assert (step.truncate_to, step.complete) == (8, True)
    assert plan_truncation(a_entries, a_leo, 8, leader(b_entries, b_leo)).truncate_to == 8


def test_two_leader_changes_in_a_row():
    # epoch 1 (A): 0..9 everywhere. Epoch 2 (B): 10..13 only on B. Epoch 3 (C, elected without B's tail):
    # writes 10..19. A and B come back as followers of C.
    c_entries, c_leo = [(1, 0), (3, 10)], 20
    # B holds epoch 2 which C never had: C answers with epoch 1 ending at 10
    d = diverging_epoch(c_entries, c_leo, last_fetched_epoch=2, fetch_offset=14)
    assert d == EpochEndOffset(1, 10)
    step = truncation_step([(1, 0), (2, 10)], 14, 10, d)
    assert (step.truncate_to, step.complete) == (10, True)
    # A stopped at the end of epoch 1: nothing to cut
    assert diverging_epoch(c_entries, c_leo, last_fetched_epoch=1, fetch_offset=10) is None


def test_follower_knows_an_epoch_the_leader_never_had_two_rounds():
    # Leader: epoch 1 ends at 8, epoch 2 at 12, epoch 4 from 12. Follower: epoch 1 up to 10, epoch 3 from 10.
    leader_entries, leader_leo = [(1, 0), (2, 8), (4, 12)], 20
    follower_entries, follower_leo = [(1, 0), (3, 10)], 15
    d = diverging_epoch(leader_entries, leader_leo, last_fetched_epoch=3, fetch_offset=follower_leo)
    assert d == EpochEndOffset(2, 12)
    first = truncation_step(follower_entries, follower_leo, 0, d)
    assert (first.truncate_to, first.complete, first.next_epoch) == (10, False, 1)
    # the follower truncated to 10 (dropping epoch 3) and fetches again with last epoch 1
    d2 = diverging_epoch(leader_entries, leader_leo, last_fetched_epoch=1, fetch_offset=10)
    assert d2 == EpochEndOffset(1, 8)
    second = truncation_step([(1, 0)], 10, 0, d2)
    assert (second.truncate_to, second.complete) == (8, True)
    assert (
        plan_truncation(follower_entries, follower_leo, 0, leader(leader_entries, leader_leo)).truncate_to
        == 8
    )


def test_leader_whose_log_starts_after_the_followers_epoch():
    # The leader's retention removed epoch 1; its first epoch (3) starts at 40. A follower still in epoch 1 at
    # offset 50 diverges from 40 on (the leader's offsets from 40 are all epoch >= 3).
    d = diverging_epoch([(3, 40)], 60, last_fetched_epoch=1, fetch_offset=50)
    assert d == EpochEndOffset(1, 40)
    assert truncation_step([(1, 0)], 50, 30, d).truncate_to == 40
    # with Log.end_offset_for_epoch's answer (None below the first epoch) the follower falls back to its HW
    step = truncation_step([(1, 0)], 50, 30, None)
    assert (step.truncate_to, step.complete, step.below_high_watermark) == (30, True, False)


def test_leader_with_an_empty_log_cuts_what_the_follower_holds_past_its_end():
    # kanal records a leader epoch at the first append: a new leader with an empty log has no entries
    d = diverging_epoch([], 0, last_fetched_epoch=1, fetch_offset=1)
    assert d == EpochEndOffset(1, 0)
    assert truncation_step([(1, 0)], 1, 0, d).truncate_to == 0
    assert (
        diverging_epoch([], 30, last_fetched_epoch=1, fetch_offset=30) is None
    )  # at its end: nothing to cut


def test_follower_holding_only_epochs_newer_than_the_answer_truncates_to_its_first_epoch():
    # The follower's log starts at 20 in epoch 5; the leader says epoch 4 (largest it has <= 5) ends at 30.
    step = truncation_step([(5, 20)], 35, 0, EpochEndOffset(4, 30))
    assert (step.truncate_to, step.complete) == (20, True)


def test_unclean_election_below_the_high_watermark_is_flagged():
    step = truncation_step([(1, 0)], 50, 45, EpochEndOffset(1, 40))
    assert step.truncate_to == 40 and step.below_high_watermark


def test_bad_epoch_entries_are_refused():
    with pytest.raises(ValueError):
        truncation_step([(2, 0), (1, 5)], 10, 0, EpochEndOffset(1, 5))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 200)), max_size=8), st.integers(-1, 45),
       st.integers(0, 50))
def test_end_offset_for_epoch_agrees_with_leader_epoch_cache(raw, epoch, extra):
    entries = []
    for e, s in sorted(raw):
        if not entries or (e > entries[-1][0] and s >= entries[-1][1]):
            entries.append((e, s))
    leo = (entries[-1][1] if entries else 0) + extra
    cache = LeaderEpochCache(Path("/nonexistent"))  # end_offset_for never touches the file
    for e, s in entries:
        assert cache.assign(e, s)
    assert end_offset_for_epoch(entries, epoch, leo) == (
        None
        if cache.end_offset_for(epoch, leo) is None
        else EpochEndOffset(*cache.end_offset_for(epoch, leo))
    )


# ---- random histories ----

def epoch_entries(log: list[int]) -> list[tuple[int, int]]:
    """A log as a list of per-offset epochs -> its epoch cache."""
    out: list[tuple[int, int]] = []
    for offset, epoch in enumerate(log):
        if not out or out[-1][0] != epoch:
            out.append((epoch, offset))
    return out


def sync_by_fetch(follower: list[int], leader_log: list[int], hw: int) -> list[int]:
    """The fetch-based protocol: fetch with (LEO, last epoch); on divergence truncate and fetch again."""
    for _ in range(len(epoch_entries(follower)) + 2):
        entries = epoch_entries(follower)
        last_epoch = entries[-1][0] if entries else -1
        d = diverging_epoch(epoch_entries(leader_log), len(leader_log), last_epoch, len(follower))
        if d is None:
            return follower
        step = truncation_step(entries, len(follower), hw, d)
        assert step.truncate_to <= len(follower)
        follower = follower[: step.truncate_to]
    raise AssertionError("divergence did not settle within one round per epoch")


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("elect"), st.integers(0, 2)),
        st.tuples(st.just("append"), st.integers(1, 5)),
        st.tuples(st.just("replicate"), st.integers(0, 2), st.integers(0, 8)),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(OPS)
def test_after_truncation_every_follower_is_a_prefix_of_its_leader(ops):
    logs: list[list[int]] = [[], [], []]
    leader_id, epoch = 0, 0
    for op in ops:
        if op[0] == "elect":  # any replica, even one that is behind: an unclean election
            leader_id, epoch = op[1], epoch + 1
        elif op[0] == "append":
            logs[leader_id] += [epoch] * op[1]
        else:
            f, n = op[1], op[2]
            if f == leader_id:
                continue
            leader_log = logs[leader_id]
            follower = sync_by_fetch(logs[f], leader_log, hw=0)
            assert follower == leader_log[: len(follower)], (follower, leader_log)
            # truncation keeps every offset on which the two logs agree
            agree = 0
            while agree < min(len(logs[f]), len(leader_log)) and logs[f][agree] == leader_log[agree]:
                agree += 1
            assert len(follower) == agree
            planned = plan_truncation(epoch_entries(logs[f]), len(logs[f]), 0,
                                      leader(epoch_entries(leader_log), len(leader_log)))
            assert planned.truncate_to == agree
            logs[f] = follower + leader_log[len(follower): len(follower) + n]
