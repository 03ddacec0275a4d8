"""Divergence: where a follower must truncate its log after leader changes (KIP-101, KIP-279).

Every batch carries the leader epoch it was appended in, and each replica keeps its epoch cache: the
list of (epoch, start offset), both strictly increasing (`LeaderEpochCache.entries()`). Two logs that
hold the same epoch at the same offset are identical up to there (a leader appends one history per
epoch), so comparing epoch caches is enough to find where two logs part.

Two halves, pure functions over epoch-cache entries:

- the **leader**, on every follower fetch carrying `last_fetched_epoch` (the epoch of the follower's
  last batch): `diverging_epoch(leader_entries, leader_leo, last_fetched_epoch, fetch_offset)` gives
  the (epoch, end offset) to put in FetchResponse.diverging_epoch / diverging_end_offset, or None (-1 in
  the response) when the follower's log is a prefix of the leader's. The shell checks this *before* the
  offset range (a diverging follower may fetch past the leader's LEO) and answers a diverging follower
  without records. A leader with an empty log (kanal records an epoch at the first append) reports a
  follower holding offsets past its log end as diverging at (the follower's epoch, its log end).
- the **follower**, given such an answer: `truncation_step(follower_entries, follower_leo,
  follower_hw, answer)`:
    * the follower knows the answer's epoch E: truncate to min(its own end of E, the leader's end of E,
      its LEO). Done.
    * it does not know E (its largest epoch <= E is some F < E): everything from the end of F in its
      log is in epochs the leader never had below E; truncate there, then fetch (or ask) again with F as
      the last epoch: the leader's answer for F settles it. This repeats at most once per epoch.
    * it knows no epoch <= E: all its epoch-tagged data is in epochs the leader does not have there;
      truncate to min(its first epoch's start, the leader's end, its LEO).
    * no answer at all (`None`: the leader knows no epoch <= the one asked, as `Log.end_offset_for_epoch`
      answers below its first epoch): truncate to the follower's HW, which is committed and so on the
      leader; a later fetch below the leader's log start then gets OFFSET_OUT_OF_RANGE and the follower
      restarts its log at the leader's log start.
  A truncation below the follower's HW means an unclean election lost committed records; the step says
  so (`below_high_watermark`) and the shell must pass the lower value as the HW to `Log.truncate_to`.
- `plan_truncation` runs the steps against a function answering for the leader (an OffsetsForLeaderEpoch
  round trip, or a test's model) and returns the final offset.

Why the leader answers (asked epoch, its first epoch's start) when asked about an epoch older than its
first one (Kafka's LeaderEpochFileCache does the same): its log no longer holds that epoch, but every
offset from its first epoch's start on belongs to newer epochs, so a follower batch in the older epoch
at or past that start diverges. `Log.end_offset_for_epoch` answers None there; this module does not use
it for the leader side for that reason.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kanal.broker.storage.ids import LeaderEpoch, Offset

EpochEntries = Sequence[tuple[int, int]]  # (epoch, start offset), both strictly increasing

# Bound on the follower's ask-and-truncate loop; each round drops at least one epoch of the follower's
# cache, so a well-formed cache never needs more rounds than it has entries.
TRUNCATION_ROUNDS_MAX = 10_000


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """A leader's answer: the largest epoch it knows at or below the asked one, and where that ends."""

    epoch: LeaderEpoch
    end_offset: Offset


@dataclass(frozen=True, slots=True)
class TruncationStep:
    """Truncate the follower's log to `truncate_to`; when not `complete`, ask again for `next_epoch`."""

    truncate_to: Offset
    complete: bool
    next_epoch: LeaderEpoch | None
    below_high_watermark: bool  # an unclean election cost committed records; log it loudly
    reason: str


def check_entries(entries: EpochEntries) -> None:
    """Epochs and start offsets strictly increasing, nothing negative (what LeaderEpochCache keeps)."""
    prev_epoch, prev_start = -1, -1
    for epoch, start in entries:
        if epoch <= prev_epoch or start < prev_start or start < 0:
            raise ValueError(f"epoch entries {list(entries)} are not increasing")
        prev_epoch, prev_start = epoch, start


def end_offset_for_epoch(entries: EpochEntries, epoch: int, log_end_offset: int) -> EpochEndOffset | None:
    """The largest known epoch <= `epoch` and where it ends (the next epoch's start, or the log end for
    the latest); None when `epoch` is below every known epoch. Same as LeaderEpochCache.end_offset_for."""
    i = bisect_right([e for e, _ in entries], epoch)
    if i == 0:
        return None
    end = entries[i][1] if i < len(entries) else log_end_offset
    return EpochEndOffset(LeaderEpoch(entries[i - 1][0]), Offset(end))


def leader_end_offset_for_epoch(
    entries: EpochEntries, epoch: int, log_end_offset: int
) -> EpochEndOffset | None:
    """The leader's answer for `epoch`: `end_offset_for_epoch`, except that an epoch older than every
    known one answers (epoch, first known start) as in Kafka (module docstring). None only for an empty
    cache."""
    found = end_offset_for_epoch(entries, epoch, log_end_offset)
    if found is None and entries:
        return EpochEndOffset(LeaderEpoch(epoch), Offset(entries[0][1]))
    return found


def diverging_epoch(
    leader_entries: EpochEntries, leader_log_end_offset: int, last_fetched_epoch: int, fetch_offset: int
) -> EpochEndOffset | None:
    """Leader side of a follower fetch: the divergence to report, or None when the follower's log (up to
    `fetch_offset`, last batch in `last_fetched_epoch`) is a prefix of the leader's. A negative
    `last_fetched_epoch` (the follower's log is empty) never diverges."""
    if last_fetched_epoch < 0:
        return None
    answer = leader_end_offset_for_epoch(leader_entries, last_fetched_epoch, leader_log_end_offset)
    if answer is None:
        # The leader's log is empty (kanal records an epoch at its first append, not at the election):
        # whatever the follower holds past the leader's log end is in no history the leader has.
        if fetch_offset > leader_log_end_offset:
            return EpochEndOffset(LeaderEpoch(last_fetched_epoch), Offset(leader_log_end_offset))
        return None
    if answer.epoch < last_fetched_epoch or answer.end_offset < fetch_offset:
        return answer
    return None


def truncation_step(
    follower_entries: EpochEntries,
    follower_log_end_offset: int,
    follower_high_watermark: int,
    leader_answer: EpochEndOffset | None,
) -> TruncationStep:
    """Follower side: where to truncate given the leader's answer for the follower's last epoch (rules in
    the module docstring)."""
    check_entries(follower_entries)
    leo = follower_log_end_offset
    if leader_answer is None:
        target = min(follower_high_watermark, leo)
        return _step(target, True, None, follower_high_watermark,
                     "the leader knows no epoch at or below ours: back to our high-water mark")
    mine = end_offset_for_epoch(follower_entries, leader_answer.epoch, leo)
    if mine is None:
        first_start = follower_entries[0][1] if follower_entries else leo
        target = min(first_start, leader_answer.end_offset, leo)
        return _step(target, True, None, follower_high_watermark,
                     f"we hold no epoch at or below the leader's {leader_answer.epoch}: everything from our "
                     f"first epoch's start {first_start} diverges (leader's end {leader_answer.end_offset})")
    if mine.epoch == leader_answer.epoch:
        target = min(mine.end_offset, leader_answer.end_offset, leo)
        return _step(
            target,
            True,
            None,
            follower_high_watermark,
            f"epoch {mine.epoch} ends at {mine.end_offset} here and at {leader_answer.end_offset} on the "
            "leader",
        )
    target = min(mine.end_offset, leo)
    return _step(target, False, mine.epoch, follower_high_watermark,
                 f"we do not know the leader's epoch {leader_answer.epoch}; our epochs from {target} on are "
                 f"unknown to it; ask again for epoch {mine.epoch}")


def truncate_entries(entries: EpochEntries, offset: int) -> list[tuple[int, int]]:
    """The epoch cache after truncating the log to `offset` (LeaderEpochCache.truncate_from_end)."""
    return [(e, s) for e, s in entries if s < offset]


def plan_truncation(
    follower_entries: EpochEntries,
    follower_log_end_offset: int,
    follower_high_watermark: int,
    leader_answer_for: Callable[[int], EpochEndOffset | None],
) -> TruncationStep:
    """Run truncation steps until complete, asking `leader_answer_for(epoch)` each round (the leader's
    `leader_end_offset_for_epoch`, or `Log.end_offset_for_epoch` wrapped). Returns the final step, whose
    `truncate_to` is the lowest point reached; a follower with an empty cache needs no truncation."""
    entries = list(follower_entries)
    leo = follower_log_end_offset
    below_hw = False
    step = _step(leo, True, None, follower_high_watermark, "no epochs: nothing to compare")
    for _ in range(TRUNCATION_ROUNDS_MAX):
        if not entries:
            break
        step = truncation_step(entries, leo, follower_high_watermark, leader_answer_for(entries[-1][0]))
        below_hw = below_hw or step.below_high_watermark
        leo = min(leo, step.truncate_to)
        entries = truncate_entries(entries, leo)
        if step.complete:
            break
    else:
        raise ValueError(f"truncation did not settle within {TRUNCATION_ROUNDS_MAX} rounds")
    return TruncationStep(Offset(leo), True, None, below_hw, step.reason)


def _step(
    target: int, complete: bool, next_epoch: LeaderEpoch | None, hw: int, reason: str
) -> TruncationStep:
    return TruncationStep(Offset(target), complete, next_epoch, target < hw, reason)
