"""LeaderState: the replication state of one partition on the broker that leads it.

It holds the assignment (replicas, ISR, leader epoch, partition epoch), the leader's log end offset (LEO),
each follower's progress (follower_progress.py), the high-water mark (HW), the one AlterPartition
proposal that may be in flight, and the acks=all produces waiting for the HW (pending_produce.py).
Every operation takes `now_ms` and returns a ReplicationEffects; nothing here does I/O, reads a clock
or starts a thread. The shell (broker/partition.py) owns the lock, the log, the RPCs and the timers.

Rules it keeps (and why):

- **HW = min LEO over the maximal ISR** (the leader's LEO included), and it never moves backwards. A
  follower's LEO is unknown (None) until its first fetch in this leadership; an unknown LEO holds the HW.
- **Maximal ISR (KIP-497).** While an AlterPartition is in flight, the HW is computed over the committed
  ISR *plus* the proposed additions: an expansion counts its new member for the HW at once (the
  controller may commit it before we hear back, and that member may then become leader: it must hold
  everything below the HW), and a shrink removes members only once it is committed (until then the HW
  still waits for them). Both directions can only hold the HW lower, never let it overtake a member of
  the ISR the controller may have committed. The acks=all admission check (min.insync.replicas) uses
  the committed ISR; completion uses the maximal ISR size, as in Kafka.
- **New leader's HW.** A new leader starts from the HW it had as a follower (learnt from its old leader,
  possibly behind the true one) clamped to its LEO, and raises it only once every ISR member has fetched
  (Kafka's rule: follower LEOs are unknown after an election). Until the HW reaches the start offset of
  the leader epoch, `high_watermark_established` is False: answer ListOffsets(latest) with
  OFFSET_NOT_AVAILABLE then, as Kafka does. A single-member ISR moves the HW to the LEO at once.
- **ISR shrink** (`maybe_shrink_isr`, on a timer): followers in the committed ISR that are not caught up
  (follower_progress.py: not at the leader's LEO and not caught up within `replica_lag_ms_max`) are
  proposed out. The leader is never removed, so a proposal never empties the ISR. min.insync.replicas
  does *not* block a shrink (in Kafka neither): it blocks acks=all produces instead.
- **ISR expand** (checked on every follower fetch): an assigned, eligible follower outside the ISR whose
  LEO >= HW and >= the leader epoch's start offset is proposed back (one at a time).
- **Broker epochs (KIP-903).** Each follower's progress belongs to the broker epoch its fetches carry; a
  fetch at a new epoch (the follower restarted) starts its progress over, and every proposal names the
  epoch each member fetched at, so the controller refuses to add an incarnation that is no longer the
  registered one (INELIGIBLE_REPLICA, handled as below).
- **One proposal at a time.** Proposals are made only when none is in flight. Answers:
  * success with our leader epoch and a partition epoch >= ours: the returned ISR is committed;
  * NOT_CONTROLLER, CONTROLLER_NOT_AVAILABLE, REQUEST_TIMED_OUT, BROKER_NOT_AVAILABLE,
    UNKNOWN_SERVER_ERROR: still in flight; the effect asks the shell to resend the same proposal;
  * INELIGIBLE_REPLICA, INVALID_REQUEST: certainly not applied (the controller checks the partition
    epoch first, so a matching epoch means no earlier attempt was applied): back to the committed ISR,
    and no new proposal until the metadata or the eligible set changes (else it would loop);
  * anything else (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH, ...) or a success that does not fit:
    the outcome is unknown (an earlier attempt may have been committed), so the proposal stays in
    flight, keeping the maximal ISR, until `on_partition_change` brings a newer partition epoch.
  A newer partition change from the metadata log always replaces the in-flight proposal.
- **acks=all.** `check_acks_all` before the append (NOT_ENOUGH_REPLICAS when the committed ISR is below
  min.insync.replicas), `add_pending_produce` after it; completions come back in effects when the HW
  passes their offset (NONE or NOT_ENOUGH_REPLICAS_AFTER_APPEND), from `expire` (REQUEST_TIMED_OUT), or
  from `resign` (NOT_LEADER_OR_FOLLOWER).

Threading model: none; one owner serialises calls (the partition lock). `now_ms` must not go backwards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kanal.broker.follower_progress import FollowerProgress
from kanal.broker.pending_produce import PendingProduces, ProduceCompletion, ProduceRequestId
from kanal.broker.storage.ids import Offset
from kanal.metadata.ids import BrokerId, LeaderEpoch, PartitionEpoch, PartitionId
from kanal.v1.error import ErrorCode, KanalError

# AlterPartition answers after which the same proposal is sent again (the controller did not decide).
RESEND_ERRORS = frozenset({
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.CONTROLLER_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_SERVER_ERROR,
})
# AlterPartition answers that prove the proposal was not applied.
NOT_APPLIED_ERRORS = frozenset({ErrorCode.INELIGIBLE_REPLICA, ErrorCode.INVALID_REQUEST})


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """Broker settings the replication core needs."""

    # replica.lag.time.max.ms: a follower not caught up for longer leaves the ISR. Kafka's default, 30 s.
    replica_lag_ms_max: int = 30_000
    # acks=all produces that may wait on one partition; more are refused before the append.
    pending_produces_max: int = 10_000

    def __post_init__(self) -> None:
        if self.replica_lag_ms_max < 1:
            raise ValueError(f"replica_lag_ms_max must be >= 1, got {self.replica_lag_ms_max}")
        if self.pending_produces_max < 1:
            raise ValueError(f"pending_produces_max must be >= 1, got {self.pending_produces_max}")


@dataclass(frozen=True, slots=True, eq=False)
class IsrProposal:
    """An AlterPartition item to send to the controller. Compared by identity: an answer is for the
    proposal object it was sent for."""

    topic: str
    partition: PartitionId
    leader_id: BrokerId
    leader_epoch: LeaderEpoch
    partition_epoch: PartitionEpoch  # the partition epoch the proposal is based on
    new_isr: tuple[BrokerId, ...]
    kind: str  # "shrink" or "expand"
    reason: str  # for the log line
    # KIP-903: per member of new_isr, the broker epoch it fetched at in this leadership (-1: unknown,
    # the leader itself or a member not heard from yet); the controller refuses an epoch not current.
    broker_epochs: tuple[int, ...] = ()

    def __repr__(self) -> str:
        return (f"<IsrProposal {self.topic}-{self.partition} {self.kind} isr={list(self.new_isr)} "
                f"epoch={self.leader_epoch} pepoch={self.partition_epoch}: {self.reason}>")


@dataclass(frozen=True, slots=True)
class ReplicationEffects:
    """What the shell must do after an operation."""

    # The HW advanced to this: wake fetches long-polling for data (consumers read below it).
    high_watermark: Offset | None = None
    # acks=all produces to answer now.
    completed: tuple[ProduceCompletion, ...] = ()
    # Send this AlterPartition item to the controller (a new proposal, or a resend after a transport error).
    alter_partition: IsrProposal | None = None
    # The committed ISR changed to this (metrics: ISR shrinks/expands; the broker's view of the partition).
    isr: tuple[BrokerId, ...] | None = None

    @property
    def empty(self) -> bool:
        return (
            self.high_watermark is None
            and not self.completed
            and self.alter_partition is None
            and self.isr is None
        )


NO_EFFECTS = ReplicationEffects()


def check_current_leader_epoch(requested_epoch: int, leader_epoch: int, partition_name: str) -> None:
    """A request's `current_leader_epoch` (-1: no check) against the partition's current `leader_epoch`
    (at its leader, or at a follower serving a consumer): FENCED_LEADER_EPOCH when older than ours,
    UNKNOWN_LEADER_EPOCH when newer (our metadata is behind)."""
    if requested_epoch < 0:
        return
    if requested_epoch < leader_epoch:
        raise KanalError(ErrorCode.FENCED_LEADER_EPOCH,
                         f"{partition_name}: epoch {requested_epoch} < {leader_epoch}")
    if requested_epoch > leader_epoch:
        raise KanalError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                         f"{partition_name}: epoch {requested_epoch} > {leader_epoch}")


class LeaderState:
    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        leader_id: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch: int,
        partition_epoch: int,
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
        config: ReplicationConfig | None = None,
    ) -> None:
        """Become leader: from the partition's registration in the metadata image, this replica's LEO and
        the HW it had as a follower (or from its checkpoint)."""
        self.topic = topic
        self.partition = PartitionId(partition)
        self.leader_id = BrokerId(leader_id)
        self.config = config or ReplicationConfig()
        replicas_t = tuple(BrokerId(b) for b in replicas)
        isr_t = tuple(BrokerId(b) for b in isr)
        self._check_assignment(replicas_t, isr_t)
        if leader_epoch < 0 or partition_epoch < 0 or log_end_offset < 0:
            raise ValueError(f"negative epoch or offset: leader_epoch={leader_epoch} "
                             f"partition_epoch={partition_epoch} log_end_offset={log_end_offset}")
        self._replicas = replicas_t
        self._isr = isr_t
        self._leader_epoch = LeaderEpoch(leader_epoch)
        self._partition_epoch = PartitionEpoch(partition_epoch)
        self._leo = Offset(log_end_offset)
        self._leader_epoch_start_offset = Offset(log_end_offset)
        # The follower-time HW may be past a log that lost an unflushed tail in a crash; an HW above the
        # LEO would expose offsets this log does not have.
        self._hw = Offset(max(0, min(high_watermark, log_end_offset)))
        self._now_ms = now_ms
        self._followers = {b: self._fresh_progress(b, now_ms) for b in replicas_t if b != self.leader_id}
        self._inflight: IsrProposal | None = None
        self._proposals_blocked = False
        self._ineligible: frozenset[BrokerId] = frozenset()
        self._pending = PendingProduces(self.config.pending_produces_max)
        self._active = True
        self._advance_high_watermark()  # a single-member ISR commits the whole log at once

    def __repr__(self) -> str:
        inflight = ""
        if self._inflight is not None:
            inflight = f" inflight={self._inflight.kind}{list(self._inflight.new_isr)}"
        return (
            f"<LeaderState {self.topic}-{self.partition} leader={self.leader_id} epoch={self._leader_epoch} "
            f"pepoch={self._partition_epoch} leo={self._leo} hw={self._hw} isr={list(self._isr)}{inflight} "
            f"pending={len(self._pending)}>"
        )

    # ---- reading ----

    @property
    def high_watermark(self) -> Offset:
        return self._hw

    @property
    def log_end_offset(self) -> Offset:
        return self._leo

    @property
    def leader_epoch(self) -> LeaderEpoch:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> PartitionEpoch:
        return self._partition_epoch

    @property
    def leader_epoch_start_offset(self) -> Offset:
        """The leader's LEO when this leader epoch began."""
        return self._leader_epoch_start_offset

    @property
    def replicas(self) -> tuple[BrokerId, ...]:
        return self._replicas

    @property
    def isr(self) -> tuple[BrokerId, ...]:
        """The committed ISR (what the metadata log says)."""
        return self._isr

    @property
    def maximal_isr(self) -> tuple[BrokerId, ...]:
        """The committed ISR plus the additions of the proposal in flight: what the HW waits for."""
        if self._inflight is None:
            return self._isr
        return self._isr + tuple(b for b in self._inflight.new_isr if b not in self._isr)

    @property
    def alter_partition_in_flight(self) -> IsrProposal | None:
        """The proposal awaiting the controller. Before resending a proposal, check it is still this one."""
        return self._inflight

    @property
    def high_watermark_established(self) -> bool:
        """Whether the HW has reached this leader epoch's start offset. Until then the HW may be behind
        the previous leader's: answer ListOffsets(latest) with OFFSET_NOT_AVAILABLE."""
        return self._hw >= self._leader_epoch_start_offset

    @property
    def under_replicated(self) -> bool:
        return len(self._isr) < len(self._replicas)

    @property
    def pending_produces(self) -> int:
        return len(self._pending)

    @property
    def next_deadline_ms(self) -> int | None:
        """When `expire` next has something to do (the shell's timer); None when nothing waits."""
        return self._pending.next_deadline_ms

    @property
    def active(self) -> bool:
        """False after `resign`: the object must not be used again."""
        return self._active

    def follower(self, broker_id: int) -> FollowerProgress:
        return self._followers[BrokerId(broker_id)]

    def check_leader_epoch(self, requested_epoch: int) -> None:
        check_current_leader_epoch(requested_epoch, self._leader_epoch, f"{self.topic}-{self.partition}")

    # ---- events ----

    def on_leader_append(self, log_end_offset: int, now_ms: int) -> ReplicationEffects:
        """The leader's log grew to `log_end_offset` (last offset + 1 of what was appended)."""
        self._enter(now_ms)
        if log_end_offset < self._leo:
            raise ValueError(f"{self!r}: a leader's log end cannot move back to {log_end_offset}")
        self._leo = Offset(log_end_offset)
        return self._effects_after_change()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                          broker_epoch: int = -1) -> ReplicationEffects:
        """A follower fetched from `fetch_offset`. Call after the diverging-epoch check (a diverging
        follower is answered without data and is not recorded) and before reading the log; answer with
        the HW as it is afterwards. NOT_LEADER_OR_FOLLOWER for a broker that is not an assigned follower,
        OFFSET_OUT_OF_RANGE past the leader's LEO; nothing changes then."""
        self._enter(now_ms)
        follower = BrokerId(replica_id)
        progress = self._followers.get(follower)
        if progress is None:
            raise KanalError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica_id} is not a follower of {self.topic}-{self.partition} "
                             f"(replicas {list(self._replicas)}, leader {self.leader_id})")
        if not 0 <= fetch_offset <= self._leo:
            raise KanalError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"follower {replica_id} fetches from {fetch_offset}, past the leader's LEO {self._leo}",
            )
        # A fetch from below the follower's last one means it lost part of its log (a crash before an
        # fsync); record the truth. The HW does not move back; the controller removes a restarted
        # broker from the ISR when it registers again, and the lag rule does otherwise.
        progress.on_fetch(Offset(fetch_offset), self._leo, now_ms, broker_epoch)
        proposal = self._maybe_expand(follower)
        effects = self._effects_after_change()
        if proposal is None:
            return effects
        return ReplicationEffects(effects.high_watermark, effects.completed, proposal, effects.isr)

    def maybe_shrink_isr(self, now_ms: int) -> ReplicationEffects:
        """Propose removing ISR followers that are not caught up. Call on a timer (Kafka: every
        replica_lag_ms_max / 2)."""
        self._enter(now_ms)
        if not self._may_propose():
            return NO_EFFECTS
        lagging = [b for b in self._isr if b != self.leader_id
                   and not self._followers[b].is_caught_up(self._leo, now_ms, self.config.replica_lag_ms_max)]
        if not lagging:
            return NO_EFFECTS
        details = ", ".join(f"{b} (leo={self._followers[b].log_end_offset}, "
                            f"last caught up {self._followers[b].lag_ms(now_ms)} ms ago)" for b in lagging)
        reason = (f"not caught up to leo {self._leo} within {self.config.replica_lag_ms_max} ms: {details}")
        new_isr = tuple(b for b in self._isr if b not in lagging)
        return ReplicationEffects(alter_partition=self._propose(new_isr, "shrink", reason))

    def on_alter_partition_response(
        self,
        proposal: IsrProposal,
        *,
        error: int,
        isr: Iterable[int] = (),
        leader_epoch: int = -1,
        partition_epoch: int = -1,
        now_ms: int,
    ) -> ReplicationEffects:
        """The controller's answer to `proposal` (the AlterPartitionResponse item, or a whole-request
        error / transport failure as `error`). See the module docstring for what each answer does."""
        self._enter(now_ms)
        if proposal is not self._inflight:
            return NO_EFFECTS  # superseded by a partition change, or answered already
        if error in RESEND_ERRORS:
            return ReplicationEffects(alter_partition=proposal)
        if error in NOT_APPLIED_ERRORS:
            self._inflight = None
            self._proposals_blocked = True
            return self._effects_after_change()  # dropping pending additions may let the HW move
        if error != ErrorCode.NONE:
            return NO_EFFECTS  # outcome unknown: keep the maximal ISR until the metadata says
        new_isr = tuple(BrokerId(b) for b in isr)
        if (leader_epoch != self._leader_epoch or partition_epoch < self._partition_epoch
                or any(b not in self._replicas for b in new_isr)):
            # An answer about a state we have not seen yet (or already left): wait for the metadata.
            return NO_EFFECTS
        self._check_assignment(self._replicas, new_isr)
        self._inflight = None
        self._partition_epoch = PartitionEpoch(partition_epoch)
        return self._commit_isr(new_isr, now_ms)

    def on_partition_change(
        self,
        *,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        now_ms: int,
    ) -> ReplicationEffects:
        """The metadata log changed the partition and this broker still leads it (otherwise call
        `resign`). Stale or already known changes are ignored. A newer leader epoch restarts follower
        tracking as for a new leader (their logs may be truncated against the new epoch); waiting
        produces stay, since their batches are in this leader's log."""
        self._enter(now_ms)
        if leader != self.leader_id:
            raise ValueError(f"{self!r}: broker {leader} leads now; call resign()")
        if leader_epoch < self._leader_epoch or (
            leader_epoch == self._leader_epoch and partition_epoch <= self._partition_epoch
        ):
            return NO_EFFECTS
        replicas_t = tuple(BrokerId(b) for b in replicas)
        isr_t = tuple(BrokerId(b) for b in isr)
        self._check_assignment(replicas_t, isr_t)
        if leader_epoch > self._leader_epoch:
            self._leader_epoch = LeaderEpoch(leader_epoch)
            self._leader_epoch_start_offset = self._leo
            self._followers = {
                b: self._fresh_progress(b, now_ms, isr_t) for b in replicas_t if b != self.leader_id
            }
        else:
            self._followers = {b: self._followers.get(b) or FollowerProgress(b)
                               for b in replicas_t if b != self.leader_id}
        self._replicas = replicas_t
        self._partition_epoch = PartitionEpoch(partition_epoch)
        self._inflight = None  # the controller's state moved on; an answer to it is ignored
        self._proposals_blocked = False
        return self._commit_isr(isr_t, now_ms)

    def set_ineligible_replicas(self, broker_ids: Iterable[int], now_ms: int) -> None:
        """Brokers that must not be proposed into the ISR (fenced or shutting down, from the metadata
        image). Also lifts the pause on proposals after a rejected one."""
        self._enter(now_ms)
        self._ineligible = frozenset(BrokerId(b) for b in broker_ids)
        self._proposals_blocked = False

    # ---- acks=all ----

    def check_acks_all(self, min_insync_replicas: int) -> None:
        """Before appending an acks=all batch: NOT_ENOUGH_REPLICAS when the committed ISR is smaller than
        min.insync.replicas; THROTTLING_QUOTA_EXCEEDED when `pending_produces_max` requests already wait
        (retriable; the client backs off). Nothing may be appended when this raises."""
        self._check_active()
        if min_insync_replicas < 1:
            raise ValueError(f"min_insync_replicas must be >= 1, got {min_insync_replicas}")
        if len(self._isr) < min_insync_replicas:
            raise KanalError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"{self.topic}-{self.partition}: ISR {list(self._isr)} has fewer than "
                             f"min.insync.replicas={min_insync_replicas} members")
        if self._pending.is_full:
            raise KanalError(
                ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                f"{self.topic}-{self.partition}: {len(self._pending)} acks=all produces already wait "
                f"(limit {self.config.pending_produces_max})",
            )

    def add_pending_produce(
        self,
        request_id: int,
        required_offset: int,
        min_insync_replicas: int,
        timeout_ms: int,
        now_ms: int,
    ) -> ReplicationEffects:
        """After appending an acks=all batch ending at `required_offset - 1`: wait until the HW reaches
        `required_offset` or `timeout_ms` passes. Completes at once when the HW is already there."""
        self._enter(now_ms)
        if not 0 < required_offset <= self._leo:
            raise ValueError(f"{self!r}: required offset {required_offset} is not in the log (append first)")
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms}")
        rid = ProduceRequestId(request_id)
        if self._hw >= required_offset:
            error = (ErrorCode.NONE if len(self.maximal_isr) >= min_insync_replicas
                     else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            return ReplicationEffects(completed=(ProduceCompletion(rid, error, Offset(required_offset)),))
        self._pending.add(rid, Offset(required_offset), min_insync_replicas, now_ms + timeout_ms)
        return NO_EFFECTS

    def expire(self, now_ms: int) -> ReplicationEffects:
        """Complete waiting produces whose timeout passed with REQUEST_TIMED_OUT."""
        self._enter(now_ms)
        done = self._pending.expire(now_ms)
        return ReplicationEffects(completed=tuple(done)) if done else NO_EFFECTS

    def resign(self, now_ms: int) -> ReplicationEffects:
        """This broker no longer leads the partition (a newer leader, a deletion, a shutdown): every
        waiting produce completes with NOT_LEADER_OR_FOLLOWER. The object is dead afterwards."""
        self._enter(now_ms)
        self._active = False
        self._inflight = None
        return ReplicationEffects(completed=tuple(self._pending.fail_all(ErrorCode.NOT_LEADER_OR_FOLLOWER)))

    # ---- internals ----

    def _enter(self, now_ms: int) -> None:
        self._check_active()
        if now_ms < self._now_ms:
            # Lag decisions compare times; a clock running backwards would make a lagging follower look
            # caught up. The shell must pass a monotonic clock.
            raise ValueError(f"{self!r}: now_ms went back from {self._now_ms} to {now_ms}")
        self._now_ms = now_ms

    def _check_active(self) -> None:
        if not self._active:
            raise ValueError(f"{self!r} resigned; it must not be used")

    def _check_assignment(self, replicas: tuple[BrokerId, ...], isr: tuple[BrokerId, ...]) -> None:
        # The metadata image guarantees all of this; a violation is a bug upstream, not a request error.
        if len(set(replicas)) != len(replicas) or len(set(isr)) != len(isr):
            raise ValueError(f"duplicate broker in replicas {list(replicas)} or ISR {list(isr)}")
        if self.leader_id not in replicas or self.leader_id not in isr:
            raise ValueError(
                f"leader {self.leader_id} must be in replicas {list(replicas)} and ISR {list(isr)}"
            )
        if not set(isr) <= set(replicas):
            raise ValueError(f"ISR {list(isr)} is not a subset of the replicas {list(replicas)}")

    def _fresh_progress(self, broker_id: BrokerId, now_ms: int,
                        isr: tuple[BrokerId, ...] | None = None) -> FollowerProgress:
        # Kafka's resetReplicaState: an ISR member gets a full lag window to fetch from the new leader;
        # an outsider has never been caught up in this leadership.
        in_isr = broker_id in (self._isr if isr is None else isr)
        return FollowerProgress(broker_id, last_caught_up_ms=now_ms if in_isr else None)

    def _may_propose(self) -> bool:
        return self._inflight is None and not self._proposals_blocked

    def _maybe_expand(self, follower: BrokerId) -> IsrProposal | None:
        if not self._may_propose() or follower in self._isr or follower in self._ineligible:
            return None
        leo = self._followers[follower].log_end_offset
        # >= HW: it has everything committed. >= epoch start: it has truncated against this leader epoch
        # and holds no tail of an older leader that this one does not have.
        if leo is None or leo < self._hw or leo < self._leader_epoch_start_offset:
            return None
        reason = (f"follower {follower} caught up: leo {leo} >= hw {self._hw} and >= epoch start "
                  f"{self._leader_epoch_start_offset}")
        return self._propose(self._isr + (follower,), "expand", reason)

    def _propose(self, new_isr: tuple[BrokerId, ...], kind: str, reason: str) -> IsrProposal:
        if self.leader_id not in new_isr:
            raise ValueError(f"{self!r}: a proposal must keep the leader, got {list(new_isr)}")
        epochs = tuple(self._followers[b].broker_epoch if b in self._followers else -1 for b in new_isr)
        self._inflight = IsrProposal(self.topic, self.partition, self.leader_id, self._leader_epoch,
                                     self._partition_epoch, new_isr, kind, reason, epochs)
        return self._inflight

    def _commit_isr(self, new_isr: tuple[BrokerId, ...], now_ms: int) -> ReplicationEffects:
        changed = new_isr != self._isr
        self._isr = new_isr
        for b in new_isr:
            progress = self._followers.get(b)
            if progress is not None and progress.last_caught_up_ms is None:
                # A member that joined without our tracking having seen it catch up (the metadata says so)
                # gets a full lag window before it can be proposed out.
                progress.last_caught_up_ms = now_ms
        effects = self._effects_after_change()
        if not changed:
            return effects
        return ReplicationEffects(effects.high_watermark, effects.completed, effects.alter_partition, new_isr)

    def _advance_high_watermark(self) -> Offset | None:
        candidate = self._leo
        for b in self.maximal_isr:
            if b == self.leader_id:
                continue
            leo = self._followers[b].log_end_offset
            if leo is None:
                return None  # an ISR member not heard from in this leadership holds the HW
            candidate = min(candidate, leo)
        if candidate <= self._hw:
            return None
        self._hw = Offset(candidate)
        return self._hw

    def _effects_after_change(self) -> ReplicationEffects:
        advanced = self._advance_high_watermark()
        if advanced is None:
            return NO_EFFECTS
        done = self._pending.complete_up_to(advanced, len(self.maximal_isr))
        return ReplicationEffects(high_watermark=advanced, completed=tuple(done))
