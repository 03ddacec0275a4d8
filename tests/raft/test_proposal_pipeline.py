"""ProposalPipeline: every proposal's fate follows from what the committed chain does."""

from __future__ import annotations

from kanal.raft.command import ProposalId, ProposalIdSource, Verdict
from kanal.raft.metadata_store import AppliedEntry
from kanal.raft.proposal_pipeline import Fate, ProposalPipeline


def _ids(n):
    source = ProposalIdSource(b"\x05" * 8)
    return [source.next() for _ in range(n)]


def fates(settled):
    return {s.proposal: s.fate for s in settled}


def test_pipelined_proposals_settle_applied_in_order():
    head, p1, p2, p3 = _ids(4)
    pipe = ProposalPipeline()
    pipe.add(p1, head)
    pipe.add(p2, p1)
    pipe.add(p3, p2)
    settled = pipe.on_applied([AppliedEntry(p1, Verdict.APPLY, 5), AppliedEntry(p2, Verdict.APPLY, 6)], head)
    assert fates(settled) == {p1: Fate.APPLIED, p2: Fate.APPLIED}
    assert [s.end_offset for s in settled] == [5, 6]
    assert len(pipe) == 1
    assert fates(pipe.on_applied([AppliedEntry(p3, Verdict.APPLY, 7)], p2)) == {p3: Fate.APPLIED}
    assert len(pipe) == 0


def test_when_the_chain_moves_on_without_a_proposal_it_and_its_descendants_are_rejected():
    head, foreign, p1, p2, p3 = _ids(5)
    pipe = ProposalPipeline()
    pipe.add(p1, head)
    pipe.add(p2, p1)
    pipe.add(p3, p2)
    # Another batch for the same parent got in first: p1 can never apply, nor anything chained to it.
    settled = pipe.on_applied([AppliedEntry(foreign, Verdict.APPLY, 9)], head)
    assert fates(settled) == {p1: Fate.REJECTED, p2: Fate.REJECTED, p3: Fate.REJECTED}
    assert len(pipe) == 0


def test_a_judged_and_skipped_proposal_is_rejected_with_its_descendants():
    head, p1, p2 = _ids(3)
    pipe = ProposalPipeline()
    pipe.add(p1, head)
    pipe.add(p2, p1)
    settled = pipe.on_applied([AppliedEntry(p1, Verdict.STALE_EPOCH, 3)], head)
    assert fates(settled) == {p1: Fate.REJECTED, p2: Fate.REJECTED}


def test_unconditional_proposal_stays_alive_until_its_own_fate():
    head, foreign, noop, after = _ids(4)
    pipe = ProposalPipeline()
    pipe.add(noop, ProposalId.NONE)
    pipe.add(after, noop)
    assert pipe.on_applied([AppliedEntry(foreign, Verdict.APPLY, 2)], head) == []
    assert fates(pipe.on_applied([AppliedEntry(noop, Verdict.APPLY, 3)], foreign)) == {noop: Fate.APPLIED}
    assert after in pipe


def test_pysyncobj_dropping_a_proposal_rejects_its_descendants_only():
    head, p1, p2, other = _ids(4)
    pipe = ProposalPipeline()
    pipe.add(p1, head)
    pipe.add(p2, p1)
    pipe.add(other, ProposalId.NONE)
    assert fates(pipe.reject(p1, 4)) == {p1: Fate.REJECTED, p2: Fate.REJECTED}
    assert other in pipe
    assert pipe.reject(p1, 4) == []


def test_reset_and_reject_all():
    head, p1, new_head = _ids(3)
    pipe = ProposalPipeline()
    pipe.add(p1, head)
    assert pipe.on_reset(head, 1) == []
    assert fates(pipe.on_reset(new_head, 8)) == {p1: Fate.REJECTED}
    pipe.add(ProposalIdSource(b"\x06" * 8).next(), ProposalId.NONE)
    assert len(pipe.reject_all(9)) == 1 and len(pipe) == 0
