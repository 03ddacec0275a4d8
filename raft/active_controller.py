"""ActiveController: the Raft leader's job — deciding, proposing, and watching broker sessions.

Becoming active. The controller epoch is the Raft term. When pysyncobj makes this node leader in term T,
the loop thread proposes an unconditional NoOp batch with epoch T and waits for it to apply: from then on
every older proposal of any controller is rejected (command.py), and the committed image is complete.
It then copies the committed image as its *speculative image*, starts every registered broker's session
at that moment (broker_sessions.py) and becomes active. Leadership lost or a new term: it deactivates.

Deciding. Every decision runs under one lock (decisions are serialized) against the speculative image:
the committed image plus every batch this controller has proposed and not yet seen applied — so each
decision sees the effect of all earlier ones, as kanal.metadata requires. Its records become one batch,
a conditional command whose parent is the previous proposal (or the committed head), applied to the
speculative image at once and put in the **outbox**.

Group commit of decisions. Up to `inflight_proposals_max` Raft entries may be in flight (proposed, and
neither committed — pysyncobj's success callback — nor settled). When fewer are, the outbox is proposed
at once as one Raft entry; otherwise it fills until an entry leaves the pipeline, and then everything in
it goes as one entry (command.py: a group, judged command by command). So under load one Raft entry — one
pickling, encryption, journal record and acknowledgement in pysyncobj, one fsync share — carries every
decision taken while the previous entries were in flight, and the rate grows with the number of callers
instead of being capped at `inflight_proposals_max` / (commit latency). The outbox holds at most about one
batch of `metadata_batch_bytes_max`: a decision waits (before deciding, under the lock) while it is that full.
Nothing else changes: each decision keeps its own parent and fate and its own batch in the metadata
log, and is acknowledged only once applied and fsynced. The caller waits, without the lock, until the
proposal's fate is known (proposal_pipeline.py) and the batch is durable:

- applied: the decision's reply is sent;
- rejected (it can never apply: the chain moved on without it, its epoch is stale, or pysyncobj dropped
  it): the speculative image is rebuilt from the committed one and the request is decided again, as long
  as this controller is active and the deadline allows — so a failover is never half-applied and
  rarely visible;
- no fate by the deadline (no quorum): REQUEST_TIMED_OUT; the batch may still be applied later.

A decision that writes nothing (a heartbeat that changes nothing, a validate-only request, a refused
item) may still rest on batches in flight ("already exists" because the create is proposed): its reply
waits for the last proposal the speculative image includes, with the same three outcomes.

Correctness never rests on "am I leader?": a decision taken by a deposed controller on a stale image
cannot apply, because its parent is not the committed head. The leader check only avoids useless work.

Stalls. A loop thread that did not run for more than an election timeout beyond its interval (the
process was SIGSTOPped or starved) deactivates before anything else (`note_stall`): another controller
may have taken over, and the brokers' silence meanwhile proves nothing. Still the Raft leader, it takes
over again at the next step with fresh sessions.

Operations. Each step also completes reassignments whose target replicas are all in sync
(decide_reassignment_progress) and, every leader_imbalance_check_interval_ms when enabled, runs the
automatic leader rebalance (decide_auto_leader_rebalance). Both read only the image, so a new active
controller carries on where a failed one stopped.

Sessions. The loop thread also runs decide_session_expirations every `session_check_interval_ms` with the
clock's now_ms: a broker silent for longer than the session timeout is fenced and its leaderships move
(kanal.metadata's rules). Heartbeats update the times; one that shows a fenced broker caught up unfences
it (decide_broker_heartbeat). Heartbeats go through Raft only when they change a broker's state.

Failures. A KanalError in a loop step (a proposal with no fate by its deadline, Raft not attached yet) is
expected: logged, and the next step tries again. Any other error in the step or its hook stops the process
(`fatal`, kanal.server.fatal): it may have left the speculative image or the pipeline half-changed, and a
loop that kept failing would leave a Raft leader that never fences a silent broker again. Stopped, it
hands the quorum to another controller, and rebuilds its state from its log when it is restarted.

Locks, in the order they may be taken: the decision lock, then the store's lock or the pipeline
condition, then (for a proposal's definite failure) the store's lock. The pipeline condition also guards
the outbox and the entries in flight; proposals are handed to Raft under it, so entries enter Raft's
queue in chain order whichever thread sends them (a decider, the Applier thread settling an entry,
pysyncobj's thread reporting a failure). It is re-entrant: a Raft that reports a failure (or, in tests,
commits) inside `propose` comes back into it on the same thread. The Applier thread and pysyncobj's
thread take only the pipeline condition (and the store's lock inside it).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar

from kanal.metadata import (
    Decision,
    MetadataImage,
    MetadataInvariantError,
    apply_batch,
    decide_auto_leader_rebalance,
    decide_broker_heartbeat,
    decide_cluster_identity,
    decide_reassignment_progress,
    decide_register_broker,
    decide_session_expirations,
)
from kanal.metadata.ids import BrokerId
from kanal.raft.broker_sessions import BrokerSessions
from kanal.raft.command import (
    UNCONDITIONAL_OFFSET,
    ProposalId,
    ProposalIdSource,
    Verdict,
    encode_command,
    encode_entry,
)
from kanal.raft.controller_config import ControllerConfig
from kanal.raft.metadata_store import AppliedEntry, MetadataStore
from kanal.raft.proposal_pipeline import Fate, ProposalPipeline, Settled
from kanal.raft.voter_roster import VoterRoster
from kanal.server.clock import Clock
from kanal.server.fatal import stop_process
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

_log = logging.getLogger("kanal.raft.controller")
R = TypeVar("R")

CONTROLLER_PRINCIPAL = "controller"
# Decisions re-taken after their proposal was rejected, at most, per request.
DECISION_ATTEMPTS_MAX = 4


class Raft(Protocol):
    """What the active controller needs from the Raft node (raft_node.RaftNode; tests use fakes)."""

    def propose(
        self,
        command: bytes,
        on_definite_failure: Callable[[int], None],
        on_committed: Callable[[], None] | None = None,
    ) -> None: ...
    def is_leader(self) -> bool: ...
    def term(self) -> int: ...
    def leader_address(self) -> str | None: ...


class _Waiter:
    """A caller waiting for one proposal's fate."""

    __slots__ = ("_event", "end_offset", "fate")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.fate: Fate | None = None
        self.end_offset = -1

    def settle(self, settled: Settled) -> None:
        self.fate = settled.fate
        self.end_offset = settled.end_offset
        self._event.set()

    def wait(self, timeout_s: float) -> Fate | None:
        self._event.wait(max(0.0, timeout_s))
        return self.fate


class ActiveController:
    def __init__(
        self,
        config: ControllerConfig,
        store: MetadataStore,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        ids: ProposalIdSource | None = None,
        on_write_s: Callable[[float], None] | None = None,
        roster: VoterRoster | None = None,
        fatal: Callable[[str, BaseException], object] = stop_process,
    ) -> None:
        """`on_write_s` gets the seconds each write that succeeded took, decision to durable (the
        write-latency metric); `roster` names the current voters (the configured ones when not given);
        `fatal` stops the process when the loop thread fails unexpectedly (a recorder in tests)."""
        self._config = config
        self._fatal = fatal
        self._voters: VoterRoster | ControllerConfig = roster if roster is not None else config
        self._on_write_s = on_write_s or (lambda _s: None)
        self._store = store
        self._clock = clock or Clock()
        self._rng = rng or random.Random()
        self._ids = ids or ProposalIdSource()
        self._raft: Raft | None = None
        # Decision lock: the speculative image, its head, the epoch and the sessions.
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._spec: MetadataImage | None = None
        self._spec_last = ProposalId.NONE
        self._spec_stale = False
        self._sessions = BrokerSessions()
        # When the next automatic leader rebalance is due (clock ms); set at each activation.
        self._next_rebalance_ms = 0
        # Pipeline condition (re-entrant): proposals in flight, their waiters, the committed head, the
        # outbox (decided, not yet handed to Raft) and the Raft entries in flight.
        self._pipeline_cond = threading.Condition(threading.RLock())
        self._pipeline = ProposalPipeline()
        self._waiters: dict[ProposalId, list[_Waiter]] = {}
        self._committed_head = ProposalId.NONE
        self._outbox: list[tuple[ProposalId, bytes]] = []
        self._outbox_bytes = 0
        self._entry_of: dict[ProposalId, int] = {}  # proposal -> the Raft entry (a number) carrying it
        self._entry_pending: dict[int, int] = {}  # entry -> its commands not yet settled
        self._entries_in_flight: set[int] = set()  # proposed, neither committed nor wholly settled
        self._next_entry = 0
        # Activation state changes, for callers waiting for this controller to become active.
        self._state_cond = threading.Condition()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._on_step: Callable[[], None] = lambda: None
        self._thread = threading.Thread(target=self._run, name="active-controller", daemon=True)

    def __repr__(self) -> str:
        state = f"active epoch={self._epoch}" if self._epoch is not None else "standby"
        return f"<ActiveController {self._config.controller_id} {state} inflight={len(self._pipeline)}>"

    # -- life cycle --------------------------------------------------------------------------------

    def attach(self, raft: Raft, on_step: Callable[[], None] | None = None) -> None:
        """Connect the Raft node. `on_step` runs after every loop step (the server updates health)."""
        self._raft = raft
        if on_step is not None:
            self._on_step = on_step

    def start(self) -> None:
        """Start the loop thread (after `attach`)."""
        self._require_raft()
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def wake(self) -> None:
        """Raft state changed (pysyncobj's thread): look at it now rather than at the next tick."""
        self._wake.set()

    # -- what the service asks ---------------------------------------------------------------------

    @property
    def epoch(self) -> int | None:
        return self._epoch

    def is_active(self) -> bool:
        raft = self._require_raft()
        epoch = self._epoch
        return epoch is not None and raft.is_leader() and raft.term() == epoch

    def active_hint(self) -> controller_pb2.ControllerHint:
        """Where the active controller is, as far as this one knows (-1 and "" when unknown)."""
        address = self._require_raft().leader_address()
        voter = self._voters.voter_by_raft(address) if address else None
        if voter is None:
            return controller_pb2.ControllerHint(controller_id=-1, endpoint="")
        return controller_pb2.ControllerHint(controller_id=voter.controller_id, endpoint=str(voter.grpc))

    def not_active_error(self) -> KanalError:
        """NOT_CONTROLLER naming the active controller, or CONTROLLER_NOT_AVAILABLE when none is known."""
        raft = self._require_raft()
        hint = self.active_hint()
        if raft.is_leader():
            return KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE, "this controller is still becoming active")
        if hint.controller_id < 0 or hint.controller_id == self._config.controller_id:
            return KanalError(
                ErrorCode.CONTROLLER_NOT_AVAILABLE,
                "no active controller: an election is in progress or no quorum of controllers is reachable",
            )
        return KanalError(
            ErrorCode.NOT_CONTROLLER,
            f"controller {hint.controller_id} at {hint.endpoint} is the active controller",
        )

    def write(
        self, decide: Callable[[MetadataImage, int], Decision[R]], *, deadline_s: float,
        wait_if_unchanged: bool = True,
    ) -> tuple[R, int]:
        """Decide against the speculative image, propose the records, wait until they are applied and
        durable. Returns the reply and the durable metadata end offset after it. `deadline_s` is a
        time.monotonic() value. KanalError: NOT_CONTROLLER / CONTROLLER_NOT_AVAILABLE when this
        controller is not active, REQUEST_TIMED_OUT when no fate came in time (outcome unknown),
        INVALID_REQUEST when the batch would be too large, UNKNOWN_SERVER_ERROR for a bad decision.
        `wait_if_unchanged=False`: a decision without records returns at once instead of waiting for the
        batches in flight (the loop's housekeeping, whose empty replies say nothing to anybody)."""
        reply: R
        started_s = time.monotonic()
        for _ in range(DECISION_ATTEMPTS_MAX):
            self._await_activation(deadline_s)
            waiter, reply = self._decide_and_propose(decide, deadline_s, wait_if_unchanged)
            if waiter is None:
                self._on_write_s(time.monotonic() - started_s)
                return reply, self._store.durable_end_offset
            fate = waiter.wait(deadline_s - time.monotonic())
            if fate is Fate.APPLIED:
                self._on_write_s(time.monotonic() - started_s)
                return reply, max(waiter.end_offset, self._store.durable_end_offset)
            if fate is None:
                self._spec_stale = True
                raise KanalError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    "the write was proposed but not committed in time (no quorum?); it may still be applied",
                )
            if time.monotonic() >= deadline_s:
                break
            # Rejected: certainly not applied. Decide again on a fresh image if still active.
        if not self.is_active():
            raise self.not_active_error()
        raise KanalError(
            ErrorCode.REQUEST_TIMED_OUT, "the write was rejected by newer decisions until its deadline"
        )

    def _broker_decider(self, decide_fn, request, request_id: str):
        """A decision for a broker's own request (registration, heartbeat): stamped with the broker as
        principal, and a successful one restarts the broker's session clock."""
        principal = f"broker-{request.broker_id}"

        def decide(image: MetadataImage, now_ms: int) -> Decision:
            decision = decide_fn(image, request, now_ms=now_ms, principal=principal, request_id=request_id)
            if decision.reply.error == ErrorCode.NONE:
                self._sessions.touch(request.broker_id, now_ms)
            return decision

        return decide

    def register_broker(
        self, request: controller_pb2.RegisterBrokerRequest, *, request_id: str, deadline_s: float
    ) -> controller_pb2.RegisterBrokerResponse:
        reply: controller_pb2.RegisterBrokerResponse
        timeout_ms = self._config.session_timeout_ms

        def decide_register(image: MetadataImage, request, *, now_ms: int, principal: str, request_id: str):
            # The old incarnation's session decides whether a new one may take the id (one live
            # process per broker id); the times are this active controller's (broker_sessions.py).
            return decide_register_broker(
                image,
                request,
                now_ms=now_ms,
                principal=principal,
                request_id=request_id,
                last_heartbeat_ms=self._sessions.last_heartbeat_ms,
                session_timeout_ms=timeout_ms,
            )

        cluster_id = ""

        def decide_register_in_cluster(image: MetadataImage, request, **kwargs):
            nonlocal cluster_id
            if not image.cluster_id:
                # The brokers check the cluster id against their disks before they trust any image: none
                # registers before the log names its cluster (the activation records it right away).
                raise KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE,
                                 "the controller quorum has not recorded its cluster id yet")
            cluster_id = image.cluster_id
            return decide_register(image, request, **kwargs)

        reply, _ = self.write(
            self._broker_decider(decide_register_in_cluster, request, request_id), deadline_s=deadline_s
        )
        if reply.error == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
            reply.session_timeout_ms = timeout_ms  # the broker bounds its wait by it (broker/lifecycle.py)
        if reply.error == ErrorCode.NONE:
            reply.session_timeout_ms = self._config.session_timeout_ms
            reply.cluster_id = cluster_id
            reply.controller_id = self._config.controller_id
        return reply

    def broker_heartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest, *, request_id: str, deadline_s: float
    ) -> controller_pb2.BrokerHeartbeatResponse:
        reply: controller_pb2.BrokerHeartbeatResponse

        def decide_heartbeat(
            image: MetadataImage, request: controller_pb2.BrokerHeartbeatRequest, *, now_ms: int,
            principal: str, request_id: str,
        ) -> Decision[controller_pb2.BrokerHeartbeatResponse]:
            decision = decide_broker_heartbeat(image, request, now_ms=now_ms, principal=principal,
                                               request_id=request_id, log_end_reports=self._sessions.log_ends)
            if decision.reply.error == ErrorCode.NONE:
                self._sessions.report_log_ends(request.broker_id, request.broker_epoch,
                                               request.recovery_log_ends)
            return decision

        reply, end = self.write(self._broker_decider(decide_heartbeat, request, request_id),
                                deadline_s=deadline_s)
        # The decision's offsets count in-flight batches; brokers need the committed, durable end.
        reply.metadata_end_offset = end
        reply.controller_epoch = self._epoch if self._epoch is not None else reply.controller_epoch
        if reply.error == ErrorCode.NONE:
            reply.controller_id = self._config.controller_id
        return reply

    def decide_with(
        self,
        decide: Callable[..., Decision[R]],
        request: object,
        *,
        principal: str,
        request_id: str,
        deadline_s: float,
        with_rng: bool = False,
    ) -> R:  # type: ignore[type-var]  # R is bound by `decide`; mypy cannot see kanal.metadata's types
        """A write for one of kanal.metadata's decide_* functions taking (image, request, now_ms=,
        principal=, request_id= [, rng=])."""

        def run(image: MetadataImage, now_ms: int) -> Decision[R]:
            extra = {"rng": self._rng} if with_rng else {}
            return decide(image, request, now_ms=now_ms, principal=principal, request_id=request_id, **extra)

        reply: R
        reply, _ = self.write(run, deadline_s=deadline_s)
        return reply

    # -- completion (Applier thread, pysyncobj thread) ---------------------------------------------

    def on_applied(self, entries: list[AppliedEntry]) -> None:
        """A durable group of committed entries (Applier thread): settle the proposals they decide."""
        with self._pipeline_cond:
            settled = self._pipeline.on_applied(entries, self._committed_head)
            for entry in entries:
                if entry.verdict is Verdict.APPLY:
                    self._committed_head = entry.proposal
            self._finish(settled)

    def on_snapshot_loaded(self) -> None:
        """The store's image was replaced by a snapshot (pysyncobj's thread)."""
        head = self._store.last_proposal
        end = self._store.durable_end_offset
        with self._pipeline_cond:
            self._committed_head = head
            self._finish(self._pipeline.on_reset(head, end))
        self._spec_stale = True

    def _on_definite_failure(self, proposals: list[ProposalId], reason: int) -> None:
        """pysyncobj reports that an entry certainly never entered the Raft log: every command in it."""
        _log.debug("pysyncobj dropped an entry of %d proposals, first %r (reason %d)", len(proposals),
                   proposals[0], reason)
        with self._pipeline_cond:
            end = self._store.durable_end_offset
            self._finish([s for proposal in proposals for s in self._pipeline.reject(proposal, end)])

    def _finish(self, settled: list[Settled]) -> None:
        # Called with the pipeline condition held.
        unsent: set[ProposalId] = set()
        for s in settled:
            for waiter in self._waiters.pop(s.proposal, ()):
                waiter.settle(s)
            if s.fate is Fate.REJECTED:
                self._spec_stale = True
            entry = self._entry_of.pop(s.proposal, None)
            if entry is None:
                unsent.add(s.proposal)  # in the outbox (rejected with its parent), or the activation NoOp
            elif self._entry_pending[entry] > 1:
                self._entry_pending[entry] -= 1
            else:
                del self._entry_pending[entry]
                self._entries_in_flight.discard(entry)  # wholly settled (if not committed before): room
        if unsent and self._outbox:
            # Never sent, and now certainly dead: it would only be judged stale.
            self._outbox = [(p, c) for p, c in self._outbox if p not in unsent]
            self._outbox_bytes = sum(len(c) for _, c in self._outbox)
        if settled:
            self._send_outbox()
            self._pipeline_cond.notify_all()

    def _on_entry_committed(self, entry: int) -> None:
        """pysyncobj committed an entry (its thread): the entry leaves the Raft pipeline — it is queued for
        the Applier, whose fsync need not hold back the next entry — and the outbox may go."""
        with self._pipeline_cond:
            if entry in self._entries_in_flight:
                self._entries_in_flight.discard(entry)
                self._send_outbox()

    def _send_outbox(self) -> None:
        """Hand the outbox to Raft as one entry if fewer than `inflight_proposals_max` entries are in
        flight (proposed and neither committed nor settled). Called with the pipeline condition held, so
        entries enter Raft's queue in chain order."""
        if not self._outbox or len(self._entries_in_flight) >= self._config.inflight_proposals_max:
            return
        group, self._outbox, self._outbox_bytes = self._outbox, [], 0
        entry = self._next_entry
        self._next_entry += 1
        proposals = [proposal for proposal, _ in group]
        for proposal in proposals:
            self._entry_of[proposal] = entry
        self._entry_pending[entry] = len(group)
        self._entries_in_flight.add(entry)
        # Bookkeeping first: a Raft that fails (or commits) inside propose settles the entry at once.
        self._require_raft().propose(
            encode_entry([command for _, command in group]),
            lambda reason: self._on_definite_failure(proposals, reason),
            on_committed=lambda: self._on_entry_committed(entry),
        )

    # -- deciding and proposing --------------------------------------------------------------------

    def _require_raft(self) -> Raft:
        if self._raft is None:
            # gRPC is up before pysyncobj (peers may fetch from a controller that is still starting).
            raise KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE, "this controller is still starting")
        return self._raft

    def _await_activation(self, deadline_s: float) -> None:
        raft = self._require_raft()
        with self._state_cond:
            while not self.is_active():
                # Only a controller that Raft made leader is worth waiting for: it is activating.
                left = deadline_s - time.monotonic()
                if not raft.is_leader() or left <= 0:
                    raise self.not_active_error()
                self._state_cond.wait(min(left, 0.05))

    def _decide_and_propose(
        self, decide: Callable[[MetadataImage, int], Decision[R]], deadline_s: float,
        wait_if_unchanged: bool = True,
    ) -> tuple[_Waiter | None, R]:
        with self._lock:
            epoch = self._epoch
            if epoch is None or self._spec is None or not self.is_active():
                raise self.not_active_error()
            self._wait_for_room(deadline_s)
            if self._spec_stale:
                self._resync(deadline_s)
            decision = decide(self._spec, self._clock.now_ms())
            if not decision.records:
                # The reply may rest on batches still in flight (a topic "already exists" because its
                # create is not committed yet): it waits for the last of them, like a write would.
                return (self._watch(self._spec_last) if wait_if_unchanged else None), decision.reply
            return self._propose(decision.records, epoch), decision.reply

    def _wait_for_room(self, deadline_s: float) -> None:
        """Until the outbox has room for another decision: it is below one batch's bytes (so one entry
        stays below twice `metadata_batch_bytes_max`, within pysyncobj's unsplit entry size)."""
        with self._pipeline_cond:
            while self._outbox_bytes >= self._config.metadata_batch_bytes_max:
                left = deadline_s - time.monotonic()
                if left <= 0:
                    raise KanalError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"{len(self._entries_in_flight)} Raft entries are in flight, a full one waits, and "
                        "none was committed in time",
                    )
                self._pipeline_cond.wait(left)

    def _resync(self, deadline_s: float) -> None:
        """Rebuild the speculative image from the committed one, after a proposal failed. Waits (within
        the deadline) for the proposals in flight to settle, so the next decision does not race them;
        if they do not, deciding anyway is still safe (conditional commands)."""
        wait_until = min(deadline_s, time.monotonic() + self._config.election_timeout_ms_max / 1000)
        with self._pipeline_cond:
            while len(self._pipeline) and time.monotonic() < wait_until:
                self._pipeline_cond.wait(max(0.0, min(wait_until - time.monotonic(), 0.05)))
        self._spec_stale = False
        self._spec, self._spec_last = self._store.copy_image()
        _log.info("rebuilt the speculative image from the committed one at offset %d", self._spec.next_offset)

    def _propose(self, records: list[metadata_pb2.MetadataRecord], epoch: int) -> _Waiter:
        # Called with the decision lock held, self._spec set.
        spec = self._spec
        if spec is None:
            raise RuntimeError("proposing without a speculative image")
        batch = metadata_pb2.MetadataBatch(controller_epoch=epoch, records=records)
        batch_bytes = batch.SerializeToString()
        if len(batch_bytes) > self._config.metadata_batch_bytes_max:
            raise KanalError(
                ErrorCode.INVALID_REQUEST,
                f"the request needs a metadata batch of {len(batch_bytes)} bytes, above the limit of "
                f"{self._config.metadata_batch_bytes_max}; split it into smaller requests",
            )
        base = spec.next_offset
        proposal = self._ids.next()
        parent = self._spec_last
        command = encode_command(proposal, parent, base, batch_bytes)
        try:
            applied = apply_batch(spec, batch, base)
        except MetadataInvariantError as exc:
            # A decision whose records do not fit the image it was decided on: a bug in the decision,
            # caught before anything reached the log (apply_batch left the image unchanged).
            _log.error("decision does not apply to the speculative image: %s", exc, exc_info=exc)
            self._spec_stale = True
            raise KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, f"internal error: {exc}") from exc
        if not applied:
            self._spec_stale = True
            raise KanalError(ErrorCode.NOT_CONTROLLER, f"epoch {epoch} is older than the image's")
        self._spec_last = proposal
        with self._pipeline_cond:
            waiter = self._register(proposal, parent)
            self._outbox.append((proposal, command))
            self._outbox_bytes += len(command)
            self._send_outbox()
        return waiter

    def _register(self, proposal: ProposalId, parent: ProposalId) -> _Waiter:
        waiter = _Waiter()
        with self._pipeline_cond:
            self._pipeline.add(proposal, parent)
            self._waiters[proposal] = [waiter]
        return waiter

    def _watch(self, proposal: ProposalId) -> _Waiter | None:
        """A waiter for a proposal still in flight; None when it is settled (or not ours)."""
        with self._pipeline_cond:
            if proposal not in self._pipeline:
                return None
            waiter = _Waiter()
            self._waiters.setdefault(proposal, []).append(waiter)
            return waiter

    # -- the loop thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        interval_ms = self._config.session_check_interval_ms
        idle_since_ms = self._clock.now_ms()
        while not self._stopping.is_set():
            self._wake.wait(interval_ms / 1000)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                # Time this thread waited beyond its interval: the process was stopped or starved.
                self.note_stall(self._clock.now_ms() - idle_since_ms - interval_ms)
                self.step()
            except KanalError as exc:
                _log.warning("active-controller step: %s", exc)
            except Exception as exc:  # noqa: BLE001 - the loop thread's top: a bug stops the process (Failures)
                self._fatal("the active controller's step failed", exc)
                return
            try:
                self._on_step()
            except Exception as exc:  # noqa: BLE001 - the loop thread's top: a bug stops the process (Failures)
                self._fatal("the active controller's step hook (health, quorum change) failed", exc)
                return
            idle_since_ms = self._clock.now_ms()

    def note_stall(self, stall_ms: int) -> None:
        """The loop thread did not run for `stall_ms` beyond its interval (SIGSTOP, a VM pause, a starved
        machine). Longer than an election timeout, and this controller may no longer be the Raft leader
        (pysyncobj notices only at its next tick), and no broker heartbeat could reach it meanwhile, so
        its session times prove nothing: it deactivates. If it is still the leader, the next step takes
        over again (NoOp) and gives every broker a full session from then; if not, it stays a standby.
        Without this a resumed old controller would first try to fence every broker (a proposal that
        could not apply, but should not be made)."""
        if stall_ms > self._config.election_timeout_ms and self._epoch is not None:
            self._deactivate(f"this controller did not run for {stall_ms} ms, more than an election timeout")

    def step(self) -> None:
        """One loop step: follow Raft leadership (activate, deactivate), then expire sessions. The loop
        thread calls it every session_check_interval_ms and on Raft state changes; tests call it."""
        raft = self._require_raft()
        leader, term = raft.is_leader(), raft.term()
        if self._epoch is not None and (not leader or term != self._epoch):
            self._deactivate(f"Raft leadership lost (leader={leader}, term={term})")
        if leader and self._epoch is None:
            self._activate(term)
        if self._epoch is not None:
            self._expire_sessions()
            self._progress_reassignments()
            self._rebalance_leaders()

    def _activate(self, term: int) -> None:
        raft = self._require_raft()
        now_ms = self._clock.now_ms()
        noop = metadata_pb2.MetadataRecord(
            time_ms=now_ms,
            principal=CONTROLLER_PRINCIPAL,
            request_id=f"activate-{self._config.controller_id}-{term}",
            no_op=metadata_pb2.NoOpRecord(),
        )
        batch = metadata_pb2.MetadataBatch(controller_epoch=term, records=[noop])
        proposal = self._ids.next()
        waiter = self._register(proposal, ProposalId.NONE)
        raft.propose(
            encode_command(proposal, ProposalId.NONE, UNCONDITIONAL_OFFSET, batch),
            lambda reason: self._on_definite_failure([proposal], reason),
        )
        deadline_s = time.monotonic() + self._config.request_timeout_ms / 1000
        fate = None
        while fate is None and not self._stopping.is_set() and time.monotonic() < deadline_s:
            fate = waiter.wait(min(0.1, deadline_s - time.monotonic()))
        if fate is not Fate.APPLIED or not raft.is_leader() or raft.term() != term:
            _log.warning("activation at epoch %d did not complete (NoOp %s)", term, fate)
            return
        with self._lock:
            spec, head = self._store.copy_image()
            if spec.controller_epoch != term:
                _log.warning("activation at epoch %d overtaken by epoch %d", term, spec.controller_epoch)
                return
            self._spec, self._spec_last, self._spec_stale = spec, head, False
            self._sessions.start_all(spec.brokers, self._clock.now_ms())
            self._next_rebalance_ms = self._clock.now_ms() + self._config.leader_imbalance_check_interval_ms
            with self._pipeline_cond:
                self._finish(self._pipeline.reject_all(spec.next_offset))
            self._spec_stale = False
            self._epoch = term
        with self._state_cond:
            self._state_cond.notify_all()
        _log.info(
            "active controller at epoch %d: metadata offset %d, %d brokers' sessions started",
            term,
            spec.next_offset,
            len(spec.brokers),
        )
        self._record_cluster_identity()

    def _record_cluster_identity(self) -> None:
        """A log without a cluster id gets one now, before any broker registers (register_broker refuses
        until then): kanal.metadata.cluster_identity."""

        def decide(image: MetadataImage, now_ms: int) -> Decision[str]:
            decision = decide_cluster_identity(
                image, configured=self._config.cluster_id, rng=self._rng, now_ms=now_ms,
                principal=CONTROLLER_PRINCIPAL, request_id=f"cluster-identity-{uuid.uuid4().hex[:16]}")
            if decision.records:
                _log.info("this metadata log has no cluster id yet: recording cluster id %s", decision.reply)
            return decision

        self.write(decide, deadline_s=time.monotonic() + self._config.request_timeout_ms / 1000,
                   wait_if_unchanged=False)

    def _deactivate(self, why: str) -> None:
        with self._lock:
            epoch, self._epoch = self._epoch, None
            self._spec = None
            self._spec_last = ProposalId.NONE
            self._sessions.clear()
            with self._pipeline_cond:
                # Decisions never handed to Raft are certainly not applied: their callers learn it now.
                end = self._store.durable_end_offset
                self._finish(
                    [s for proposal, _ in list(self._outbox) for s in self._pipeline.reject(proposal, end)]
                )
        with self._state_cond:
            self._state_cond.notify_all()
        _log.info("no longer the active controller (epoch %s): %s", epoch, why)

    def _progress_reassignments(self) -> None:
        """Complete the reassignments whose target replicas have all joined the ISR (every step: an O(P)
        scan of the speculative image, a few ms for 10,000 partitions, and usually no records)."""

        def decide(image: MetadataImage, now_ms: int) -> Decision[list[tuple[str, int]]]:
            decision = decide_reassignment_progress(
                image, now_ms=now_ms, principal=CONTROLLER_PRINCIPAL,
                request_id=f"reassignment-{uuid.uuid4().hex[:16]}")
            if decision.reply:
                _log.info("reassignment complete for %s: every target replica is in sync", decision.reply)
            return decision

        self.write(decide, deadline_s=time.monotonic() + self._config.request_timeout_ms / 1000,
                   wait_if_unchanged=False)

    def _rebalance_leaders(self) -> None:
        """Every leader_imbalance_check_interval_ms (from activation), when enabled: preferred elections
        for brokers above the imbalance threshold."""
        config = self._config
        now_ms = self._clock.now_ms()
        if not config.auto_leader_rebalance_enable or now_ms < self._next_rebalance_ms:
            return
        self._next_rebalance_ms = now_ms + config.leader_imbalance_check_interval_ms

        def decide(image: MetadataImage, now_ms: int) -> Decision[list[tuple[str, int]]]:
            decision = decide_auto_leader_rebalance(
                image, imbalance_percentage_max=config.leader_imbalance_per_broker_percentage, now_ms=now_ms,
                principal=CONTROLLER_PRINCIPAL, request_id=f"leader-rebalance-{uuid.uuid4().hex[:16]}")
            if decision.reply:
                _log.info("leader rebalance: preferred replicas lead %s again (imbalance above %d%%)",
                          decision.reply, config.leader_imbalance_per_broker_percentage)
            return decision

        self.write(
            decide, deadline_s=time.monotonic() + config.request_timeout_ms / 1000, wait_if_unchanged=False
        )

    def _expire_sessions(self) -> None:
        timeout_ms = self._config.session_timeout_ms

        def decide(image: MetadataImage, now_ms: int) -> Decision[list[BrokerId]]:
            self._sessions.ensure(image.live_brokers(), now_ms)
            decision = decide_session_expirations(
                image,
                self._sessions.last_heartbeat_ms,
                now_ms=now_ms,
                session_timeout_ms=timeout_ms,
                principal=CONTROLLER_PRINCIPAL,
                request_id=f"session-expiry-{uuid.uuid4().hex[:16]}",
            )
            if decision.reply:
                _log.info("fencing brokers %s: no heartbeat for more than %d ms", decision.reply, timeout_ms)
            return decision

        deadline_s = time.monotonic() + self._config.request_timeout_ms / 1000
        self.write(decide, deadline_s=deadline_s)
