"""Offset syncs and translation (kanal.deploy.mirror.offset_sync): a group that moves to the target resumes
at or before where it stopped on the source, never after it."""

from __future__ import annotations

import random

import pytest

from kanal.deploy.mirror.offset_sync import (
    SYNCS_KEPT_MAX,
    OffsetSync,
    OffsetTranslator,
    PartitionSyncs,
    checkpoint_record,
    parse_checkpoint,
    parse_sync,
    sync_record,
    syncs_for,
)


def syncs_of(copied: list[tuple[int, int]], position: int, last: OffsetSync | None, *, offset_lag_max: int,
             end_due: bool) -> list[OffsetSync]:
    """syncs_for over (source offset, target offset) pairs."""
    downstreams = [d for _, d in copied]
    return syncs_for([u for u, _ in copied], downstreams.__getitem__, position, last, offset_lag_max,
                     end_due=end_due)


def model_syncs(copied: list[tuple[int, int]], position: int, last: OffsetSync | None, offset_lag_max: int,
                end_due: bool) -> list[OffsetSync]:
    """The rule record by record, every target offset known: what syncs_for must give."""
    out: list[OffsetSync] = []
    anchor = last.upstream if last else None
    downstream_next = last.downstream if last else None
    for upstream, downstream in copied:
        downstream_next = downstream + 1
        if anchor is None or upstream + 1 - anchor >= offset_lag_max:
            out.append(OffsetSync(upstream + 1, downstream_next))
            anchor = upstream + 1
    if downstream_next is not None and (anchor is None or (end_due and position > anchor)):
        out.append(OffsetSync(position, downstream_next))
    return out


def test_a_transaction_gives_a_sync_for_its_end_and_one_every_offset_lag_max():
    copied = [(u, u + 10) for u in range(250)]  # source offsets 0-249 land at 10-259
    syncs = syncs_of(copied, 250, None, offset_lag_max=100, end_due=True)
    assert syncs == [OffsetSync(1, 11), OffsetSync(101, 111), OffsetSync(201, 211), OffsetSync(250, 260)]
    # Without the end due, the lag rule alone: the last 49 offsets wait for the next sync.
    assert syncs_of(copied, 250, None, offset_lag_max=100, end_due=False) == syncs[:3]
    # The next transaction starts from the last sync: a sync every 100 source offsets after it.
    more = syncs_of([(250, 261), (251, 262)], 252, syncs[-1], offset_lag_max=100, end_due=True)
    assert more == [OffsetSync(252, 263)]
    assert syncs_of([(250, 261), (251, 262)], 252, syncs[-1], offset_lag_max=100, end_due=False) == []


def test_a_position_moved_past_skipped_records_gets_a_sync_at_the_last_copy():
    last = OffsetSync(10, 20)
    # Nothing copied (the loop rule dropped 10-14, or they were control records): position 15 maps to 20.
    assert syncs_of([], 15, last, offset_lag_max=100, end_due=True) == [OffsetSync(15, 20)]
    assert syncs_of([], 10, last, offset_lag_max=100, end_due=True) == []  # the position did not move
    assert syncs_of([], 15, None, offset_lag_max=100, end_due=True) == []  # no target offset known


def test_only_the_records_a_sync_names_are_waited_for():
    asked: list[int] = []

    def downstream_of(i: int) -> int:
        asked.append(i)
        return 1000 + i

    upstreams = list(range(0, 500, 2))  # every other offset: 250 records, the gaps skipped or compacted
    syncs = syncs_for(upstreams, downstream_of, 500, OffsetSync(0, 999), 100, end_due=True)
    assert syncs == [OffsetSync(101, 1051), OffsetSync(201, 1101), OffsetSync(301, 1151),
                     OffsetSync(401, 1201), OffsetSync(500, 1250)]
    assert asked == [50, 100, 150, 200, 249]  # the records at 100, 200, 300, 400 and the last (498)
    asked.clear()
    # No end sync due: the last record is not waited for either.
    assert syncs_for(upstreams, downstream_of, 500, OffsetSync(0, 999), 100, end_due=False) == syncs[:4]
    assert asked == [50, 100, 150, 200]


def test_syncs_match_the_record_by_record_rule():
    rng = random.Random(46)
    for _ in range(2000):
        lag = rng.choice([1, 2, 3, 10, 100])
        start = rng.randrange(0, 300)
        upstreams = sorted(rng.sample(range(start, start + 400), rng.randrange(0, 40)))
        copied = [(u, 5000 + 2 * i) for i, u in enumerate(upstreams)]
        position = (upstreams[-1] + 1 if upstreams else start) + rng.randrange(0, 3)
        last = rng.choice([None, OffsetSync(start - rng.randrange(0, 150), 4000)])
        end_due = rng.random() < 0.5
        assert syncs_of(copied, position, last, offset_lag_max=lag, end_due=end_due) == \
            model_syncs(copied, position, last, lag, end_due), (copied, position, last, lag, end_due)


def test_translation_takes_the_latest_sync_at_or_below_the_group_offset():
    syncs = PartitionSyncs()
    for sync in (OffsetSync(1, 11), OffsetSync(101, 113), OffsetSync(250, 262)):
        syncs.add(sync)
    assert syncs.translate(0) is None  # before any sync: no safe translation
    assert syncs.translate(1) == 11
    assert syncs.translate(100) == 11  # re-reads the copies of 1-99, misses nothing
    assert syncs.translate(101) == 113
    assert syncs.translate(10_000) == 262


def test_a_sync_going_back_starts_the_partition_over_and_an_old_one_is_ignored():
    syncs = PartitionSyncs()
    syncs.add(OffsetSync(100, 200))
    syncs.add(OffsetSync(50, 210))  # older position, later target offset: a replay, ignored
    assert syncs.syncs == [OffsetSync(100, 200)]
    syncs.add(OffsetSync(60, 5))  # the target partition was recreated
    assert syncs.syncs == [OffsetSync(60, 5)]


def test_thinning_keeps_translations_at_or_before_the_exact_ones():
    exact, thinned = {}, PartitionSyncs()
    for i in range(1, 3 * SYNCS_KEPT_MAX):
        sync = OffsetSync(i * 10, i * 11)
        exact[sync.upstream] = sync.downstream
        thinned.add(sync)
    assert len(thinned.syncs) <= SYNCS_KEPT_MAX
    rng = random.Random(7)
    for upstream in [rng.randrange(10, 30 * SYNCS_KEPT_MAX) for _ in range(2_000)]:
        best = max(u for u in exact if u <= upstream)
        got = thinned.translate(upstream)
        assert got is not None and got <= exact[best]
    # The newest half is exact.
    assert thinned.translate(10 * (3 * SYNCS_KEPT_MAX - 1)) == 11 * (3 * SYNCS_KEPT_MAX - 1)


def test_the_translator_keeps_partitions_apart():
    t = OffsetTranslator()
    t.add("A.orders", 0, OffsetSync(5, 7))
    t.add("A.orders", 1, OffsetSync(5, 9))
    assert t.translate("A.orders", 0, 6) == 7 and t.translate("A.orders", 1, 6) == 9
    assert t.translate("A.orders", 2, 6) is None and t.latest("A.other", 0) is None


def test_the_records_round_trip_and_garbage_is_refused():
    key, value = sync_record("A.t", 3, OffsetSync(10, 12))
    assert parse_sync(key, value) == ("A.t", 3, OffsetSync(10, 12))
    key, value = checkpoint_record("g", "A.t", 1, 40, 44)
    assert parse_checkpoint(key, value) == ("g", "A.t", 1, 40, 44)
    with pytest.raises((ValueError, KeyError)):
        parse_sync(b"{}", b"{}")
    with pytest.raises(ValueError):
        parse_sync(b"not json", None)
