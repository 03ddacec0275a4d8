"""Where pysyncobj is made to wait for the disk: the points at which DurableJournal.sync() runs.

Raft's rule: a node's log entries and its term/vote are on stable storage before any message that
depends on them leaves the node. pysyncobj has no such hook, so kanal adds three, all on pysyncobj's
tick thread, without patching pysyncobj's files:

1. `durable_transport_class(journal)`: a TCPTransport whose `send` syncs the journal before a message
   that acknowledges entries (`next_node_idx`) or asks for or grants a vote (`request_vote`,
   `response_vote`). Entries a follower received in one batch of messages share that one fdatasync.
2. RaftNode._onTick syncs at the start of every tick: the leader counts its own log towards the commit
   index in the tick, so the entries it appended in the previous tick (every proposal queued since, a
   group commit) are durable before they can count. The leader's `append_entries` go out without
   waiting: followers write and sync in parallel with the leader's own sync.
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

# pysyncobj messages that promise something about this node's durable state.
SYNC_BEFORE_SENDING = frozenset({"next_node_idx", "request_vote", "response_vote"})

_INJECT_LOCK = threading.Lock()


def durable_transport_class(journal: DurableJournal) -> type[TCPTransport]:
    class DurableTransport(TCPTransport):
        def send(self, node: Any, message: Any) -> bool:
            if isinstance(message, dict) and message.get("type") in SYNC_BEFORE_SENDING:
                journal.sync()
            return bool(super().send(node, message))

    return DurableTransport


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
