"""LeaderState against a model cluster: random follower fetches, leader appends, clock ticks, ISR
proposals, controller decisions (with fencing, leader-epoch bumps, lost answers and metadata delivered
late), and acks=all produces.

The model holds the truth the leader cannot see: each follower's real log end, and the controller's
committed ISR (which may be ahead of what the leader has heard). The model controller decides like
metadata/alter_partition.py: leader epoch, then partition epoch (INVALID_UPDATE_VERSION), then eligibility
(INELIGIBLE_REPLICA); a success bumps the partition epoch and queues a metadata record.

Invariants, after every step:
- the HW never decreases and never exceeds the leader's LEO;
- HW <= the real LEO of every member of the leader's committed ISR, and of the controller's committed ISR
  (the KIP-497 property: a member the controller added before the leader heard of it is covered too);
- the leader is in its ISR, in the maximal ISR, and in every proposal; at most one proposal is in flight;
- an acks=all produce completes exactly once; with NONE or NOT_ENOUGH_REPLICAS_AFTER_APPEND only when
  the HW has reached its offset and every replica of the controller's ISR really holds it; with NONE only
  when at least min.insync.replicas replicas really hold it; REQUEST_TIMED_OUT only at or after its deadline.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kanal.broker.leader_state import IsrProposal, LeaderState, ReplicationConfig, ReplicationEffects
from kanal.v1.error import ErrorCode

LAG_MS = 1_000
LEADER = 1


@dataclass
class Answer:
    proposal: IsrProposal
    error: int
    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int


class LeaderModel(RuleBasedStateMachine):
    """The ISR protocol alone: appends, fetches, the shrink timer, the controller, answers, metadata."""

    @initialize(
        n=st.integers(min_value=2, max_value=4),
        isr_mask=st.integers(min_value=0, max_value=7),
        leo=st.integers(min_value=0, max_value=50),
        hw_back=st.integers(min_value=0, max_value=50),
        leo_fracs=st.lists(st.floats(min_value=0, max_value=1), min_size=3, max_size=3),
    )
    def setup(self, n, isr_mask, leo, hw_back, leo_fracs):
        self.replicas = tuple(range(1, n + 1))
        followers = self.replicas[1:]
        isr = (LEADER,) + tuple(f for i, f in enumerate(followers) if isr_mask >> i & 1)
        hw = max(0, leo - hw_back)
        self.now = 0
        # Real follower logs: ISR members hold at least the committed HW; others anything up to the LEO.
        self.true_leo = {}
        for i, f in enumerate(followers):
            low = hw if f in isr else 0
            self.true_leo[f] = low + int((leo - low) * leo_fracs[i])
        self.leader_leo = leo
        self.ctrl_isr = isr
        self.ctrl_leader_epoch = 3
        self.ctrl_pepoch = 7
        self.fenced: set[int] = set()
        self.metadata: list[tuple[tuple[int, ...], int, int]] = []  # (isr, leader epoch, partition epoch)
        self.outbox: list[IsrProposal] = []
        self.answers: list[Answer] = []
        self.waiting: dict[int, tuple[int, int, int]] = {}  # request id -> (required, min isr, deadline)
        self.next_request = 0
        self.state = LeaderState(topic="t", partition=0, leader_id=LEADER, replicas=self.replicas, isr=isr,
                                 leader_epoch=3, partition_epoch=7, log_end_offset=leo, high_watermark=hw,
                                 now_ms=0, config=ReplicationConfig(replica_lag_ms_max=LAG_MS,
                                                                    pending_produces_max=50))
        self.last_hw = self.state.high_watermark

    # ---- effects ----

    def handle(self, effects: ReplicationEffects) -> None:
        if effects.high_watermark is not None:
            assert effects.high_watermark == self.state.high_watermark
        if effects.alter_partition is not None:
            assert LEADER in effects.alter_partition.new_isr
            self.outbox.append(effects.alter_partition)
        for done in effects.completed:
            required, min_isr, deadline = self.waiting.pop(done.request_id)
            assert done.required_offset == required
            if done.error == ErrorCode.REQUEST_TIMED_OUT:
                assert self.now >= deadline
                continue
            assert done.error in (ErrorCode.NONE, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND), done
            assert self.state.high_watermark >= required
            for b in self.ctrl_isr:
                assert self.real_leo(b) >= required, (b, required)
            if done.error == ErrorCode.NONE:
                holders = sum(1 for b in self.replicas if self.real_leo(b) >= required)
                assert holders >= min_isr, (holders, min_isr)

    def real_leo(self, broker: int) -> int:
        return self.leader_leo if broker == LEADER else self.true_leo[broker]

    # ---- the leader's world ----

    @rule(n=st.integers(min_value=1, max_value=20))
    def leader_append(self, n):
        self.leader_leo += n
        self.handle(self.state.on_leader_append(self.leader_leo, self.now))

    # A fetch usually brings a follower all the way to the leader's LEO: make that a common draw.
    @rule(
        i=st.integers(min_value=0, max_value=2),
        frac=st.one_of(st.just(1.0), st.floats(min_value=0, max_value=1)),
    )
    def follower_fetch(self, i, frac):
        f = self.replicas[1:][i % (len(self.replicas) - 1)]
        # The follower asks from its real log end, then copies part of what the leader has.
        self.handle(self.state.on_follower_fetch(f, self.true_leo[f], self.now))
        self.true_leo[f] += int((self.leader_leo - self.true_leo[f]) * frac)

    @rule(dt=st.integers(min_value=0, max_value=2 * LAG_MS))
    def tick(self, dt):
        self.now += dt
        self.handle(self.state.expire(self.now))

    @rule()
    def shrink_timer(self):
        self.handle(self.state.maybe_shrink_isr(self.now))

    # ---- the controller's world ----

    # No preconditions: with Hypothesis' rule swarming they abort many runs; an idle rule is a no-op.
    @rule()
    def controller_decides(self):
        """The controller decides the oldest request; its answer travels separately (deliver_answer)."""
        if self.outbox:
            self.answers.append(self.decide(self.outbox.pop(0)))

    @rule(lose=st.booleans())
    def controller_round_trip(self, lose):
        """Decide and answer in one step, the common case; a lost answer still had its effect."""
        if self.outbox:
            self.deliver(self.decide(self.outbox.pop(0)), lose)

    @rule()
    def controller_applies_but_the_answer_is_lost(self):
        """The unknown-outcome path in one step: the proposal is committed, its answer lost, the resend
        meets the new partition epoch (INVALID_UPDATE_VERSION). The leader must keep counting the new
        members until the metadata record arrives."""
        if not self.outbox:
            return
        first = self.decide(self.outbox.pop(0))
        self.deliver(first, lose=True)
        if self.outbox and self.outbox[-1] is first.proposal:
            self.deliver(self.decide(self.outbox.pop()), lose=False)

    def decide(self, p: IsrProposal) -> Answer:
        if p.leader_epoch != self.ctrl_leader_epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        elif p.partition_epoch != self.ctrl_pepoch:
            error = ErrorCode.INVALID_UPDATE_VERSION
        elif any(b in self.fenced for b in p.new_isr):
            error = ErrorCode.INELIGIBLE_REPLICA
        else:
            error = ErrorCode.NONE
            if p.new_isr != self.ctrl_isr:
                self.commit(p.new_isr)
        return Answer(p, error, self.ctrl_isr, self.ctrl_leader_epoch, self.ctrl_pepoch)

    def commit(self, isr, bump_leader_epoch=False):
        self.ctrl_isr = tuple(isr)
        self.ctrl_pepoch += 1
        if bump_leader_epoch:
            self.ctrl_leader_epoch += 1
        self.metadata.append((self.ctrl_isr, self.ctrl_leader_epoch, self.ctrl_pepoch))

    @rule(i=st.integers(min_value=0, max_value=5), lose=st.booleans())
    def deliver_answer(self, i, lose):
        if self.answers:
            self.deliver(self.answers.pop(i % len(self.answers)), lose)

    def deliver(self, a: Answer, lose: bool) -> None:
        if lose:  # the answer never arrives: the shell's RPC fails with a timeout
            effects = self.state.on_alter_partition_response(a.proposal, error=ErrorCode.REQUEST_TIMED_OUT,
                                                             now_ms=self.now)
        else:
            effects = self.state.on_alter_partition_response(
                a.proposal, error=a.error, isr=a.isr, leader_epoch=a.leader_epoch,
                partition_epoch=a.partition_epoch, now_ms=self.now)
        self.handle(effects)

    @rule()
    def deliver_metadata(self):
        if not self.metadata:
            return
        isr, leader_epoch, pepoch = self.metadata.pop(0)
        self.handle(self.state.on_partition_change(replicas=self.replicas, isr=isr, leader=LEADER,
                                                   leader_epoch=leader_epoch, partition_epoch=pepoch,
                                                   now_ms=self.now))

    # ---- invariants ----

    @invariant()
    def high_watermark_rules(self):
        hw = self.state.high_watermark
        assert hw >= self.last_hw, "the HW moved back"
        self.last_hw = hw
        assert hw <= self.state.log_end_offset == self.leader_leo
        for b in self.state.isr:
            assert hw <= self.real_leo(b), f"HW {hw} above committed ISR member {b}"
        for b in self.ctrl_isr:
            assert hw <= self.real_leo(b), f"HW {hw} above controller ISR member {b} (KIP-497)"

    @invariant()
    def leader_always_in_sync(self):
        assert LEADER in self.state.isr and LEADER in self.state.maximal_isr
        inflight = self.state.alter_partition_in_flight
        assert inflight is None or LEADER in inflight.new_isr
        assert set(self.state.isr) <= set(self.state.maximal_isr)

    @invariant()
    def waiting_requests_agree(self):
        assert self.state.pending_produces == len(self.waiting)
        for required, _, _ in self.waiting.values():
            assert required > self.state.high_watermark



class FullLeaderModel(LeaderModel):
    """Plus acks=all produces, fencing (INELIGIBLE_REPLICA), the leader learning the fenced set, and
    leader-epoch bumps. The core machine alone finds ISR-protocol bugs in far fewer examples."""

    @rule(frac=st.floats(min_value=0, max_value=1), min_isr=st.integers(min_value=1, max_value=4),
          timeout=st.integers(min_value=0, max_value=3 * LAG_MS))
    def produce_acks_all(self, frac, min_isr, timeout):
        if self.leader_leo == 0 or self.state.pending_produces >= 50:
            return
        required = 1 + int((self.leader_leo - 1) * frac)
        self.next_request += 1
        self.waiting[self.next_request] = (required, min_isr, self.now + timeout)
        self.handle(self.state.add_pending_produce(self.next_request, required, min_isr, timeout, self.now))

    @rule(i=st.integers(min_value=0, max_value=2))
    def fence_follower(self, i):
        f = self.replicas[1:][i % (len(self.replicas) - 1)]
        self.fenced.add(f)
        if f in self.ctrl_isr:
            self.commit([b for b in self.ctrl_isr if b != f])

    @rule(i=st.integers(min_value=0, max_value=2))
    def unfence_follower(self, i):
        self.fenced.discard(self.replicas[1:][i % (len(self.replicas) - 1)])

    @rule()
    def leader_learns_fenced_set(self):
        self.state.set_ineligible_replicas(self.fenced, self.now)

    @rule()
    def controller_bumps_leader_epoch(self):
        self.commit(self.ctrl_isr, bump_leader_epoch=True)


_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much]
LeaderModel.TestCase.settings = settings(max_examples=500, stateful_step_count=40, deadline=None,
                                         suppress_health_check=_HEALTH)
FullLeaderModel.TestCase.settings = settings(max_examples=500, stateful_step_count=40, deadline=None,
                                             suppress_health_check=_HEALTH)
TestLeaderModel = LeaderModel.TestCase
TestFullLeaderModel = FullLeaderModel.TestCase
