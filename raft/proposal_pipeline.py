"""ProposalPipeline: the active controller's proposals that are not applied yet, and their fates.

A proposal is a conditional command (command.py): it applies only right after its parent. So its fate
is decided, without any timeout, by what the committed chain does:

- it is applied: APPLIED;
- it is judged and skipped (stale parent or stale epoch), or pysyncobj says it never entered the log:
  REJECTED;
- the committed chain moves on without it: it can never apply any more (the last applied batch is not
  its parent, and no applied batch is ever applied again), so it is REJECTED too — and so is every
  proposal that was chained after it.

A proposal is alive while its parent is the last applied batch or another alive proposal; unconditional
proposals (the activation NoOp) are alive until applied or rejected. Only while nothing at all is
committed (no quorum) does a fate stay open; the writer's deadline ends the wait then, and the outcome is
unknown to the client (REQUEST_TIMED_OUT) until the chain moves again.

Pure: no threads, no clocks. The shell (active_controller.py) holds a lock around it and wakes waiters.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from kanal.raft.command import ProposalId, Verdict
from kanal.raft.metadata_store import AppliedEntry


class Fate(enum.Enum):
    APPLIED = "applied"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class Settled:
    proposal: ProposalId
    fate: Fate
    # Metadata log end after the batch (APPLIED), or when the fate was decided.
    end_offset: int


class ProposalPipeline:
    def __init__(self) -> None:
        # proposal -> parent (ProposalId.NONE: unconditional), in proposal order.
        self._pending: OrderedDict[ProposalId, ProposalId] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, proposal: object) -> bool:
        return proposal in self._pending

    def __repr__(self) -> str:
        return f"<ProposalPipeline pending={len(self._pending)}>"

    def add(self, proposal: ProposalId, parent: ProposalId) -> None:
        if proposal in self._pending or proposal.is_none:
            raise ValueError(f"{proposal!r} is already pending or is not an id")
        self._pending[proposal] = parent

    def on_applied(self, entries: Iterable[AppliedEntry], last_applied: ProposalId) -> list[Settled]:
        """Settle what a group of committed entries decided. `last_applied` is the committed chain's head
        before the group."""
        settled: list[Settled] = []
        for entry in entries:
            if entry.verdict is Verdict.APPLY:
                last_applied = entry.proposal
                if self._pending.pop(entry.proposal, None) is not None:
                    settled.append(Settled(entry.proposal, Fate.APPLIED, entry.end_offset))
            elif self._pending.pop(entry.proposal, None) is not None:
                settled.append(Settled(entry.proposal, Fate.REJECTED, entry.end_offset))
            settled.extend(self._settle_orphans(last_applied, entry.end_offset))
        return settled

    def on_reset(self, last_applied: ProposalId, end_offset: int) -> list[Settled]:
        """The committed head was replaced wholesale (a snapshot was loaded)."""
        return self._settle_orphans(last_applied, end_offset)

    def reject(self, proposal: ProposalId, end_offset: int) -> list[Settled]:
        """pysyncobj reports that `proposal` never entered (or was dropped from) the Raft log."""
        if self._pending.pop(proposal, None) is None:
            return []
        out = [Settled(proposal, Fate.REJECTED, end_offset)]
        out.extend(self._settle_descendants({proposal}, end_offset))
        return out

    def reject_all(self, end_offset: int) -> list[Settled]:
        """Every pending proposal is dead: this controller's activation NoOp was applied, and nothing
        proposed before it (by anyone) can apply after it (command.py)."""
        out = [Settled(p, Fate.REJECTED, end_offset) for p in self._pending]
        self._pending.clear()
        return out

    def _settle_orphans(self, last_applied: ProposalId, end_offset: int) -> list[Settled]:
        alive = {last_applied}
        dead: list[Settled] = []
        for proposal, parent in list(self._pending.items()):
            if parent.is_none or parent in alive:
                alive.add(proposal)
            else:
                del self._pending[proposal]
                dead.append(Settled(proposal, Fate.REJECTED, end_offset))
        return dead

    def _settle_descendants(self, dead_ids: set[ProposalId], end_offset: int) -> list[Settled]:
        out = []
        for proposal, parent in list(self._pending.items()):
            if parent in dead_ids:
                del self._pending[proposal]
                dead_ids.add(proposal)
                out.append(Settled(proposal, Fate.REJECTED, end_offset))
        return out
