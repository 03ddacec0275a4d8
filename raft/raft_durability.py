"""Where pysyncobj is made to wait for the disk: the points at which DurableJournal.sync() runs.

Raft's rule: a node's log entries and its term/vote are on stable storage before any message that
depends on them leaves the node. pysyncobj has no such hook, so kanal adds three, all on pysyncobj's
tick thread, without patching pysyncobj's files:

1. `DurableAcks(journal).transport_class()`: a TCPTransport that holds back every acknowledgement of
   entries (`next_node_idx`) until `DurableAcks.flush()`, and syncs the journal before a message that
   asks for or grants a vote (`request_vote`, `response_vote`).
2. RaftNode._onTick calls `flush()` at the start of every tick: one sync of the journal, then the acks
   held back. A tick ends with pysyncobj polling its sockets, so every append_entries message a
   follower received in that poll shares one fdatasync (group commit on followers), and everything the
   leader appended is durable before it counts its own log towards the commit index in this tick.
   RaftNode also registers `flush()` as a pysyncobj tick callback, which runs last in a tick, just before
   the poll: the entries the leader appended in the tick are synced there, while the followers (to whom
   `append_entries` went without waiting) write and sync them, so the leader's own fsync is not added
   after theirs when their acknowledgements wake the next tick.
3. `injected_journal(journal)`: pysyncobj builds its journal with the module function
   `pysyncobj.syncobj.createJournal` inside SyncObj's constructor and offers no parameter for it; for
   the duration of the constructor (under a lock) that name returns kanal's DurableJournal.
   RaftNode checks afterwards that pysyncobj really uses it.

Term and vote need no hook: DurableJournal.setCurrentTerm writes them durably before returning, and
pysyncobj calls it before sending the vote request or grant.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pysyncobj.syncobj as _syncobj_module
from pysyncobj.transport import TCPTransport

from kanal.raft.raft_journal import DurableJournal

# pysyncobj messages that promise something about this node's durable state. Vote messages are sent
# at once after a sync (elections are rare); acknowledgements of entries wait for the next flush.
SYNC_BEFORE_SENDING = frozenset({"request_vote", "response_vote"})
ACK = "next_node_idx"

_INJECT_LOCK = threading.Lock()


class DurableAcks:
    """Holds acknowledgements of entries until the journal is synced (one sync per tick)."""

    def __init__(self, journal: DurableJournal) -> None:
        self.journal = journal
        self._held: list[tuple[TCPTransport, Any, Any]] = []
        self.flushes = 0

    def transport_class(self) -> type[TCPTransport]:
        acks = self

        class DurableTransport(TCPTransport):
            def send(self, node: Any, message: Any) -> bool:
                kind = message.get("type") if isinstance(message, dict) else None
                if kind == ACK:
                    acks._held.append((self, node, message))
                    return True
                if kind in SYNC_BEFORE_SENDING:
                    acks.journal.sync()
                return bool(super().send(node, message))

        return DurableTransport

    def flush(self) -> None:
        """Sync the journal, then send the acknowledgements held back (pysyncobj's tick thread)."""
        self.journal.sync()
        held, self._held = self._held, []
        if held:
            self.flushes += 1
        for transport, node, message in held:
            TCPTransport.send(transport, node, message)


@contextlib.contextmanager
def injected_journal(journal: DurableJournal) -> Iterator[None]:
    """While the block runs, pysyncobj's SyncObj constructor gets `journal` as its Raft journal."""
    with _INJECT_LOCK:
        original = _syncobj_module.createJournal

        def create_journal(journal_file: Any = None) -> DurableJournal:
            return journal

        _syncobj_module.createJournal = create_journal
        try:
            yield
        finally:
            _syncobj_module.createJournal = original
