"""The pure rules of which copy holds the current history, where others diverge, and the committed end
(spark/replica_history.py), case by case without files."""

from __future__ import annotations

import pytest

from kanal.spark.replica_history import (
    CopyState,
    PartitionFacts,
    agreement_end,
    current_history,
    plan_partition,
)

pytestmark = pytest.mark.spark


def copy(name: str, epochs, end: int, broker: int | None = None, start: int = 0, exact: bool = True,
         topic_id: str | None = "t1", written_ns: int = 0) -> CopyState:
    return CopyState(name, tuple(epochs), start, end, exact, broker, topic_id, written_ns)


EX_LEADER = copy("b0", [(0, 0)], 600, broker=0)  # epoch 0 to the end: 500 records nobody kept
NEW_LEADER = copy("b1", [(0, 0), (1, 100)], 200, broker=1)
FOLLOWER = copy("b2", [(0, 0), (1, 100)], 180, broker=2)  # a little behind


def test_agreement_end():
    assert agreement_end(EX_LEADER, NEW_LEADER) == 100  # parts where epoch 1 began
    assert agreement_end(FOLLOWER, NEW_LEADER) == 180  # only behind
    assert agreement_end(copy("x", [(0, 0)], 80), NEW_LEADER) == 80  # behind, before the new epoch
    # Different epochs from the very first offset both hold.
    assert agreement_end(copy("y", [(2, 0)], 50), NEW_LEADER) == 0
    # Nothing in common (one starts past the other's end): no evidence, no divergence.
    assert agreement_end(copy("z", [(1, 300)], 400, start=300), NEW_LEADER) == 200


def test_current_history_is_the_latest_epoch_not_the_longest():
    assert current_history([EX_LEADER, NEW_LEADER, FOLLOWER]) is NEW_LEADER
    # Equal epochs: the longest; equal in everything: the ISR leader's copy, then the smallest name.
    assert current_history([FOLLOWER, NEW_LEADER]) is NEW_LEADER
    twin = copy("a", [(0, 0), (1, 100)], 200, broker=2)
    assert current_history([NEW_LEADER, twin], leader=1) is NEW_LEADER
    assert current_history([NEW_LEADER, twin]) is twin


def test_committed_end_is_the_isr_minimum_and_the_divergence_is_noted():
    plan = plan_partition("orders", 0, [EX_LEADER, NEW_LEADER, FOLLOWER], PartitionFacts("t1", (1, 2), 1, 1))
    assert plan.primary == "b1" and plan.committed_end == 180 and plan.divergent == ("b0",)
    assert [a.directory for a in plan.alternates] == ["b2", "b0"]
    assert [a.agree_end for a in plan.alternates] == [180, 100]
    texts = [t for _, t in plan.notes]
    assert any("DIVERGENT copy b0 (broker 0)" in t and "100..599" in t for t in texts)
    assert any("180..199" in t and "not committed" in t for t in texts)  # the leader's tail past the ISR


def test_an_isr_member_whose_end_is_unknown_does_not_cut_the_committed_end():
    damaged = copy("b2", [(0, 0), (1, 100)], 120, broker=2, exact=False)
    plan = plan_partition("orders", 0, [NEW_LEADER, damaged], PartitionFacts("t1", (1, 2), 1, 1))
    assert plan.committed_end == 200


def test_no_isr_member_here_reads_to_the_end_with_a_note():
    plan = plan_partition("orders", 0, [EX_LEADER, NEW_LEADER], PartitionFacts("t1", (5, 6), 5, 1))
    assert plan.committed_end == 200
    assert any("no copy of an in-sync replica" in t for _, t in plan.notes)


def test_incarnations():
    old = copy("old", [(0, 0)], 900, broker=0, topic_id="t0", written_ns=1)
    new = copy("new", [(0, 0)], 10, broker=1, topic_id="t1", written_ns=2)
    legacy = copy("legacy", [(0, 0)], 10, broker=2, topic_id=None)
    # With the image: its id; the other incarnation is left out with a note.
    plan = plan_partition("events", 0, [old, new, legacy], PartitionFacts("t1", (1, 2), 1, 0))
    assert (
        plan.primary == "new"
        and plan.committed_end == 10
        and "old" not in [a.directory for a in plan.alternates]
    )
    assert any("belongs to topic id t0" in t for _, t in plan.notes)
    # The image holds no such topic: deleted, nothing read.
    gone = plan_partition("events", 0, [old], PartitionFacts(None))
    assert gone.primary is None and any("deleted" in t for _, t in gone.notes)
    # No image: the newest partition.metadata's id, said in a note.
    guess = plan_partition("events", 0, [old, new], None)
    assert guess.primary == "new" and any("2 topic ids" in t for _, t in guess.notes)
