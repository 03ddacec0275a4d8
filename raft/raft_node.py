"""RaftNode: pysyncobj wired the safe way for the controller quorum.

- `useFork=False`: the controller runs a gRPC server, which must never be forked.
- Commands are bytes (command.py: a conditional MetadataBatch). pysyncobj wraps them in its own pickled
  `(method id, (bytes,))` envelope on the wire and in its journal; nothing of kanal's is pickled, and the
  replicated method refuses anything but bytes.
- Snapshots ("full dumps") use raft_snapshot.py's format through pysyncobj's custom serializer hooks.
  Every dump is also written as a metadata snapshot file of the same image (metadata_snapshots.py), and
  the store's snapshot policy (bytes / time since the last one) forces a compaction when one is due: one
  image, two files — pysyncobj's dump with its Raft bookkeeping (what a restart loads) and the snapshot
  file in the metadata log's directory (what retention, brokers' and Spark's readers rely on).
- `password` = the cluster secret: Raft traffic is encrypted and authenticated (Fernet; needs the
  `cryptography` package), so a process without the secret can neither read the log nor send pysyncobj
  a pickle to load.
- `leaderFallbackTimeout` = three maximal election timeouts (pysyncobj's default is 30 s): a leader cut
  off from the majority steps down quickly, so writes sent to it fail fast.
- `commandsWaitLeader=False`: a proposal with no leader fails at once instead of waiting in a queue.
- `dynamicMembershipChange=True`: the quorum's voters change one at a time (raft/quorum_change.py) with
  pysyncobj's own membership entries (applied by every node when appended, undone if truncated, replayed
  from the journal after a restart); the dump records the membership (raft_snapshot.py's KRS2), which
  pysyncobj restores when it loads one. `members()` is the membership as of the last tick.
- `appendEntriesUseBatch=False`: entries are sent as soon as they are proposed, not on the next
  heartbeat; `appendEntriesBatchSizeBytes` is above any entry, so a big entry is never split (pysyncobj's
  split path mislabels the last chunk for some sizes).

- Durability (raft_durability.py, raft_journal.py): pysyncobj's mmap journal is replaced by
  DurableJournal, and the journal is fsynced (one fdatasync per group of entries) before this node
  acknowledges entries, asks for or grants a vote, or, as leader, counts its own log towards a commit.

Threads: pysyncobj's tick thread runs the Raft protocol and calls the replicated method for each
committed entry, which only queues it for the Applier (applier.py). The snapshot hooks also run on the
tick thread; they drain the Applier first so the image matches pysyncobj's last applied entry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

from kanal.metadata.log_codec import LogBatch
from kanal.raft.applier import Applier
from kanal.raft.controller_config import ControllerConfig
from kanal.raft.metadata_store import MetadataStore
from kanal.raft.quorum_status import QuorumStatus, from_status
from kanal.raft.raft_durability import DurableAcks, injected_journal
from kanal.raft.raft_journal import JOURNAL_FILE_NAME, DurableJournal
from kanal.raft.raft_snapshot import (
    RaftSnapshot,
    read_snapshot_file,
    sync_file_and_directory,
    write_snapshot_file,
)
from kanal.raft.raft_vote_file import fsync_directory
from kanal.raft.voter_roster import VoterRoster
from kanal.server.clock import Clock
from kanal.server.fatal import stop_process

_log = logging.getLogger("kanal.raft.node")

# pysyncobj failures after which the command is certainly not in any Raft log: it never reached a leader,
# or its log slot was taken by another entry. (LEADER_CHANGED and UNKNOWN_OUTCOME leave the fate open.)
DEFINITE_FAILURES = frozenset(
    {
        FAIL_REASON.QUEUE_FULL,
        FAIL_REASON.MISSING_LEADER,
        FAIL_REASON.DISCARDED,
        FAIL_REASON.NOT_LEADER,
        FAIL_REASON.REQUEST_DENIED,
    }
)
# How long the snapshot hooks wait for the Applier to catch up before giving up.
_DRAIN_TIMEOUT_S = 60.0


class RaftNode(SyncObj):
    def __init__(
        self,
        config: ControllerConfig,
        store: MetadataStore,
        applier: Applier,
        *,
        fetch_missing: Callable[[int, int], Iterable[LogBatch]],
        on_snapshot_loaded: Callable[[], None],
        on_state_changed: Callable[[], None],
        roster: VoterRoster | None = None,
    ) -> None:
        # Set before SyncObj.__init__: its tick thread starts inside it and may load a snapshot at once.
        self._kanal_config = config
        # Who the voters are now (DescribeQuorum's list); the configured ones when not given.
        self._kanal_roster: VoterRoster | ControllerConfig = roster if roster is not None else config
        self._kanal_store = store
        self._kanal_applier = applier
        self._kanal_fetch_missing = fetch_missing
        self._kanal_on_snapshot_loaded = on_snapshot_loaded
        self._kanal_on_state_changed = on_state_changed
        # pysyncobj's getStatus() as of the end of the last tick, written by the tick thread only (status()).
        self._kanal_status: dict | None = None
        # Raft addresses of every voter (this one included) as of the end of the last tick (tick thread only).
        self._kanal_members: frozenset[str] = frozenset(str(v.raft) for v in config.voters)
        self._kanal_clock = Clock()
        # The offset of a snapshot file written with a dump pysyncobj has not renamed into place yet.
        self._kanal_pending_snapshot: int | None = None
        self._kanal_hand_off = threading.Event()
        config.raft_dir.mkdir(parents=True, exist_ok=True)
        self._kanal_journal = DurableJournal(config.raft_dir, fatal=stop_process)
        self._kanal_acks = DurableAcks(self._kanal_journal)
        election_s = config.election_timeout_ms / 1000
        entry_bytes_max = 4 * config.metadata_batch_bytes_max
        conf = SyncObjConf(
            password=config.cluster_secret,
            autoTick=True,
            autoTickPeriod=max(0.002, config.raft_heartbeat_interval_ms / 5000),
            raftMinTimeout=election_s,
            raftMaxTimeout=config.election_timeout_ms_max / 1000,
            appendEntriesPeriod=config.raft_heartbeat_interval_ms / 1000,
            connectionTimeout=2 * config.election_timeout_ms_max / 1000,
            connectionRetryTime=election_s / 2,
            leaderFallbackTimeout=config.leader_fallback_timeout_ms / 1000,
            appendEntriesUseBatch=False,
            appendEntriesBatchSizeBytes=entry_bytes_max,
            sendBufferSize=1 << 20,
            recvBufferSize=1 << 20,
            logCompactionMinEntries=config.raft_compaction_entries,
            logCompactionMinTime=config.raft_compaction_interval_ms / 1000,
            logCompactionBatchSize=1 << 20,
            # Bind exactly the configured address (pysyncobj would bind 0.0.0.0), and give up after a few
            # seconds when it is taken instead of retrying forever.
            bindAddress=str(config.raft_bind),
            bindRetryTime=0.3,
            maxBindRetries=10,
            journalFile=str(config.raft_dir / JOURNAL_FILE_NAME),  # opened by kanal: DurableJournal
            fullDumpFile=str(config.raft_dir / "dump"),
            useFork=False,
            serializer=self._write_snapshot,
            deserializer=self._read_snapshot,
            commandsWaitLeader=False,
            dynamicMembershipChange=True,
            onStateChanged=lambda old, new: self._kanal_on_state_changed(),
        )
        with injected_journal(self._kanal_journal):
            super().__init__(
                str(config.raft),
                [str(v.raft) for v in config.others],
                conf,
                transportClass=self._kanal_acks.transport_class(),
            )
        if getattr(self, "_SyncObj__raftLog", None) is not self._kanal_journal:
            raise RuntimeError("pysyncobj did not take kanal's durable journal (its constructor changed?)")
        # pysyncobj runs its tick callbacks last in a tick, just before it waits on its sockets: the
        # entries this leader appended in the tick (and sent to the followers without waiting) are
        # synced there, while the followers write and sync them, instead of at the start of the tick the
        # followers' acknowledgements wake — which put the leader's fsync after theirs on every commit.
        self.addOnTickCallback(self._kanal_acks.flush)

    def __repr__(self) -> str:
        return (
            f"<RaftNode {self._kanal_config.raft} leader={self.leader_address()} term={self.raftCurrentTerm}>"
        )

    # -- the replicated state machine --------------------------------------------------------------

    @replicated
    def apply_metadata_command(self, command: bytes) -> None:
        # Committed entry, in Raft order, on pysyncobj's tick thread: hand it to the Applier.
        if not isinstance(command, bytes):
            stop_process(f"a committed Raft entry carries {type(command).__name__}, not a metadata command")
        self._kanal_applier.submit(command)

    def propose(
        self,
        command: bytes,
        on_definite_failure: Callable[[int], None],
        on_committed: Callable[[], None] | None = None,
    ) -> None:
        """Hand a command to pysyncobj. Its fate comes back through the Applier; `on_definite_failure`
        (called on pysyncobj's thread) reports the cases where it certainly never entered the log, and
        `on_committed` (pysyncobj's thread) that it is committed and queued for the Applier."""

        def callback(_result: Any, error: int) -> None:
            if error == FAIL_REASON.SUCCESS:
                if on_committed is not None:
                    on_committed()
            elif error in DEFINITE_FAILURES:
                on_definite_failure(error)

        self.apply_metadata_command(command, callback=callback)

    def members(self) -> frozenset[str]:
        """Raft addresses of the voters (this one included) as pysyncobj had them at the end of the last
        tick: a membership entry counts from when it is appended, not committed (Raft's rule)."""
        return self._kanal_members

    def change_membership(self, *, add: str | None = None, remove: str | None = None,
                          on_done: Callable[[bool], None]) -> None:
        """Propose one pysyncobj membership entry (add or remove one voter's Raft address); `on_done(ok)`
        on pysyncobj's thread: committed, or refused / lost (pysyncobj allows one change at a time, and
        only once this leader's first entry applied)."""

        def callback(_result: Any, error: int) -> None:
            on_done(error == FAIL_REASON.SUCCESS)

        if add is not None:
            self.addNodeToCluster(add, callback=callback)
        elif remove is not None:
            self.removeNodeFromCluster(remove, callback=callback)

    def hand_off_leadership(self) -> None:
        """Ask for Raft leadership to move to the most caught-up connected voter (Raft's TimeoutNow,
        pysyncobj's transferLeadership), on the next tick: pysyncobj's state is only touched on its tick
        thread. Best effort: pysyncobj refuses while no voter has the whole log (call again once it has caught
        up), and success only means the message was sent; `is_leader()` turning false is the proof."""
        self._kanal_hand_off.set()

    def _onTick(self, timeToWait: float = 0.0) -> None:
        # One journal sync, then the acks held back since the last tick; the leader counts its own log
        # towards the commit index during the tick, after this sync (raft_durability.py). The tick's
        # last step (the callback above) synced what the leader appended in the previous tick, so on a
        # leader this sync finds nothing new unless entries came in while it waited (a follower's
        # appends, received during the wait, are synced here before their acknowledgements go).
        self._kanal_acks.flush()
        self._publish_snapshot()
        if self._kanal_hand_off.is_set():
            self._kanal_hand_off.clear()
            self.transferLeadership()
        super()._onTick(timeToWait)
        self._kanal_status = self.getStatus()
        self._kanal_members = frozenset(
            {str(self.selfNode.address), *(str(n.address) for n in self.otherNodes)}
        )

    def _publish_snapshot(self) -> None:
        """Make the snapshot file written with the last dump a base for metadata log retention, once
        pysyncobj has renamed the dump into place (it does so right after the serializer returns, in the
        tick before this one) and the rename is durable: retention then never deletes batches that a
        restart from the dump would still need to compare."""
        offset = self._kanal_pending_snapshot
        if offset is None:
            return
        self._kanal_pending_snapshot = None
        try:
            fsync_directory(self._kanal_config.raft_dir)
            self._kanal_store.publish_snapshot(offset)
        except BaseException as exc:  # noqa: BLE001 - pysyncobj's tick thread would log it and carry on: stop
            stop_process(f"publishing the metadata snapshot at {offset} failed: {exc}", exc)

    def request_snapshot(self) -> None:
        """Ask pysyncobj to compact now (any thread): its dump and a metadata snapshot file are written
        together on the tick thread (`_write_snapshot`)."""
        self.forceLogCompaction()

    @property
    def journal(self) -> DurableJournal:
        return self._kanal_journal

    # -- snapshots ---------------------------------------------------------------------------------

    def _write_snapshot(self, path: str, raft_data: tuple[Any, ...]) -> None:
        # pysyncobj catches exceptions here and retries later; log them so they are not lost.
        try:
            last_entry, previous_entry = raft_data[0], raft_data[1]
            if not self._kanal_applier.drain(_DRAIN_TIMEOUT_S):
                raise TimeoutError("the applier did not catch up for a snapshot")
            metadata, last_proposal = self._kanal_store.snapshot()
            members = tuple(sorted(str(n.address) for n in raft_data[2])) if len(raft_data) > 2 else None
            snapshot = RaftSnapshot(
                tuple(last_entry), tuple(previous_entry), last_proposal, metadata, members
            )
            write_snapshot_file(Path(path), snapshot)
            _log.info("wrote %r", snapshot)
            # The same image as a metadata snapshot file (what brokers' and Spark's readers of the metadata
            # log start from); a base for retention from the next tick on, once the dump is in place.
            if metadata.next_offset > 0:
                self._kanal_pending_snapshot = self._kanal_store.write_snapshot_file(
                    metadata, self._kanal_clock.now_ms())
        except Exception:
            _log.exception("writing a Raft snapshot failed; pysyncobj keeps its journal and retries")
            raise

    def _read_snapshot(self, path: str) -> tuple[Any, ...]:
        # pysyncobj would log and carry on with a half-loaded state: any failure stops the process.
        try:
            snapshot = read_snapshot_file(Path(path))
            # A dump received from the leader was written without fsync; the journal rewrite that
            # follows this load relies on it, so make it durable first.
            sync_file_and_directory(Path(path))
            if not self._kanal_applier.drain(_DRAIN_TIMEOUT_S):
                raise TimeoutError("the applier did not catch up before a snapshot load")
            self._kanal_store.install(snapshot.metadata, snapshot.last_proposal, self._kanal_fetch_missing,
                                      self._kanal_clock.now_ms())
            _log.info("loaded %r", snapshot)
            self._kanal_on_snapshot_loaded()
            # pysyncobj replaces its membership with this set (a dump from before quorum changes has none
            # recorded: the configured voters).
            members = (
                snapshot.members
                if snapshot.members
                else tuple(str(v.raft) for v in self._kanal_config.voters)
            )
            # pysyncobj drops this node from the set by comparing each entry with its own Node object, and a
            # string never equals one: left in, this node would count itself as a second voter that never
            # answers (a lone controller restarted from a snapshot never won an election).
            return (snapshot.last_entry, snapshot.previous_entry, others_than(members, self.selfNode))
        except BaseException as exc:  # noqa: BLE001 - pysyncobj's hook: it would carry on half-loaded, so stop
            stop_process(f"loading the Raft snapshot {path} failed: {exc}", exc)
        raise RuntimeError("stop_process returned")  # unreachable: stop_process exits

    # -- what the rest of the controller asks ------------------------------------------------------

    def is_leader(self) -> bool:
        return self._isLeader()

    def term(self) -> int:
        return self.raftCurrentTerm

    def leader_address(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else leader.address

    def status(self) -> QuorumStatus:
        """The quorum as of the end of the last tick. Read on the tick thread, never here: pysyncobj changes
        its fields one by one (a vote request for a higher term sets the term, fsyncs it, and only then
        drops the leader), so a read from another thread could pair a deposed leader's claim with the new
        term: two "active controllers" in one epoch, which the chaos checker caught (DescribeQuorum)."""
        published = self._kanal_status
        # Before the first tick: no leader is known yet, so a live read cannot pair a claim with a term.
        return from_status(published if published is not None else self.getStatus(), self._kanal_roster)


def others_than(members: tuple[str, ...], self_node: Any) -> tuple[str, ...]:
    """The members' Raft addresses without `self_node`'s (matched by its address and by its id)."""
    own = {str(getattr(self_node, "address", self_node)), str(getattr(self_node, "id", self_node))}
    return tuple(m for m in members if m not in own)
