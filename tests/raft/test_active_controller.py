"""ActiveController against an in-process fake Raft: activation, decisions, conflicts, deposal, timeouts
and broker sessions — without sockets and without sleeping (the clock is a fake)."""

from __future__ import annotations

import random
import threading
import time

import pytest

from kanal.metadata import decide_create_topics
from kanal.raft.active_controller import ActiveController
from kanal.raft.command import (
    UNCONDITIONAL_OFFSET,
    ProposalId,
    ProposalIdSource,
    decode_entry,
    encode_command,
)
from kanal.raft.controller_config import parse_controller_args
from kanal.raft.metadata_log import read_all
from kanal.raft.metadata_store import MetadataStore
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

PEERS = "1=127.0.0.1:7001=127.0.0.1:6001,2=127.0.0.1:7002=127.0.0.1:6002,3=127.0.0.1:7003=127.0.0.1:6003"


class FakeRaft:
    """Commits every proposal at once (in the caller's thread), unless told to hold them."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.controller: ActiveController | None = None
        self.leader = True
        self.current_term = 1
        self.leader_at = "127.0.0.1:7001"
        self.hold = False
        self.held: list[bytes] = []
        self.before_next: list[bytes] = []  # foreign entries committed just before the next proposal
        self.after_next = None  # callable run after the next proposal is committed
        self.proposed: list[bytes] = []

    def propose(self, command, on_definite_failure, on_committed=None):
        self.proposed.append(command)
        if self.hold:
            self.held.append(command)
            return
        foreign, self.before_next = self.before_next, []
        for data in foreign:
            self.commit(data)
        self.commit(command)
        hook, self.after_next = self.after_next, None
        if hook is not None:
            hook()

    def commit(self, data: bytes) -> None:
        entries = self.store.apply_entry(data)
        self.store.flush()
        self.controller.on_applied(entries)

    def is_leader(self):
        return self.leader

    def term(self):
        return self.current_term

    def leader_address(self):
        return self.leader_at


def _config(tmp_path, *extra):
    return parse_controller_args(
        ["--id", "1", "--listen", "127.0.0.1:6001", "--raft", "127.0.0.1:7001", "--peers", PEERS,
         "--data-dir", str(tmp_path), "--request-timeout-ms", "2000", *extra]
    )


@pytest.fixture
def setup(tmp_path, log_factory, fake_clock):
    def make(*extra):
        store = MetadataStore(log_factory(tmp_path / "log"))
        controller = ActiveController(
            _config(tmp_path, *extra), store, clock=fake_clock, rng=random.Random(3)
        )
        raft = FakeRaft(store)
        raft.controller = controller
        controller.attach(raft)
        return store, controller, raft

    return make


def _deadline(s=5.0):
    return time.monotonic() + s


def _live_brokers(controller, ids=(1, 2, 3)):
    epochs = {}
    for b in ids:
        reply = controller.register_broker(
            controller_pb2.RegisterBrokerRequest(broker_id=b, incarnation_id=f"i{b}", endpoint=f"h:{b}"),
            request_id=f"reg-{b}", deadline_s=_deadline(),
        )
        assert reply.error == 0
        epochs[b] = reply.broker_epoch
    for b in ids:
        heartbeat(controller, b, epochs[b])
    return epochs


def heartbeat(controller, broker_id, epoch, offset=1 << 40):
    reply = controller.broker_heartbeat(
        controller_pb2.BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=epoch, metadata_offset=offset
        ),
        request_id="hb",
        deadline_s=_deadline(),
    )
    return reply


def _create(controller, name, partitions=1, rf=3):
    return controller.decide_with(
        decide_create_topics,
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name=name, partitions=partitions, replication_factor=rf)]
        ),
        principal="anonymous", request_id=f"create-{name}", deadline_s=_deadline(), with_rng=True,
    )


def test_activation_writes_a_noop_with_the_term_first(setup):
    store, controller, raft = setup()
    raft.current_term = 4
    assert not controller.is_active()
    controller.step()
    assert controller.is_active() and controller.epoch == 4
    batches = read_all(store._log)
    assert len(batches) == 2
    assert batches[0].controller_epoch == 4
    assert batches[0].metadata_batch().records[0].WhichOneof("record") == "no_op"
    # A new log gets its cluster id next (kanal.metadata.cluster_identity), before any broker registers.
    identity = batches[1].metadata_batch().records[0]
    assert identity.WhichOneof("record") == "cluster_identity"
    assert store.read(lambda image: image.cluster_id) == identity.cluster_identity.cluster_id
    # A later activation (a new term) keeps it: one cluster id per log.
    raft.current_term = 5
    controller.step()
    controller.step()
    assert controller.epoch == 5
    kinds = [b.metadata_batch().records[0].WhichOneof("record") for b in read_all(store._log)]
    assert kinds.count("cluster_identity") == 1


def test_a_broker_cannot_register_before_the_log_names_its_cluster(setup):
    store, controller, raft = setup()
    raft.current_term = 2
    controller.step()
    cluster_id = store.read(lambda image: image.cluster_id)
    assert len(cluster_id) == 32
    reply = controller.register_broker(
        controller_pb2.RegisterBrokerRequest(broker_id=7, incarnation_id="i7", endpoint="127.0.0.1:1"),
        request_id="r7", deadline_s=_deadline())
    assert reply.error == 0 and reply.cluster_id == cluster_id


def test_writes_reply_after_commit_and_heartbeats_report_the_durable_end(setup):
    store, controller, _ = setup()
    controller.step()
    epochs = _live_brokers(controller)
    reply = _create(controller, "orders", partitions=6)
    assert reply.results[0].error == 0 and reply.results[0].topic_id
    assert store.read(lambda image: len(image.topics["orders"].partitions)) == 6
    hb = heartbeat(controller, 1, epochs[1])
    assert hb.error == 0 and not hb.fenced
    assert hb.metadata_end_offset == store.durable_end_offset
    assert hb.controller_epoch == 1
    # A heartbeat that changes nothing is not written to the log.
    end = store.durable_end_offset
    heartbeat(controller, 2, epochs[2])
    assert store.durable_end_offset == end


def test_a_conflicting_batch_makes_the_write_decide_again(setup):
    store, controller, raft = setup()
    controller.step()
    _live_brokers(controller)
    image, head = store.copy_image()
    # Another batch for the same parent is committed first (say, a leftover of an earlier decision).
    foreign = metadata_pb2.MetadataBatch(
        controller_epoch=1,
        records=[
            metadata_pb2.MetadataRecord(
                time_ms=1, principal="x", request_id="x", no_op=metadata_pb2.NoOpRecord()
            )
        ],
    )
    raft.before_next = [encode_command(ProposalIdSource().next(), head, image.next_offset, foreign)]
    reply = _create(controller, "retry-me")
    assert reply.results[0].error == 0
    topic_batches = [
        b for b in read_all(store._log)
        if any(r.WhichOneof("record") == "topic" for r in b.metadata_batch().records)
    ]
    assert len(topic_batches) == 1  # decided twice, applied once
    assert len(raft.proposed) >= 2


def test_a_deposed_controller_write_is_never_applied(setup):
    store, controller, raft = setup()
    controller.step()
    _live_brokers(controller)
    end_before = store.durable_end_offset
    # A new controller (epoch 2) becomes active before our proposal is committed.
    newer = metadata_pb2.MetadataBatch(
        controller_epoch=2,
        records=[
            metadata_pb2.MetadataRecord(
                time_ms=1, principal="controller", request_id="a", no_op=metadata_pb2.NoOpRecord()
            )
        ],
    )
    raft.before_next = [
        encode_command(ProposalIdSource().next(), ProposalId.NONE, UNCONDITIONAL_OFFSET, newer)
    ]

    def deposed():
        raft.leader, raft.current_term, raft.leader_at = False, 2, "127.0.0.1:7002"

    raft.after_next = deposed
    with pytest.raises(KanalError) as info:
        _create(controller, "lost")
    assert info.value.code == ErrorCode.NOT_CONTROLLER
    assert "127.0.0.1:6002" in info.value.message
    assert store.read(lambda image: "lost" not in image.topics)
    assert store.durable_end_offset == end_before + 1  # only the new controller's NoOp
    controller.step()
    assert not controller.is_active()


def test_no_commit_in_time_is_request_timed_out_and_the_outcome_can_still_happen(setup):
    store, controller, raft = setup()
    controller.step()
    _live_brokers(controller)
    raft.hold = True  # the quorum is gone: nothing commits
    # A deadline that is already due: the write is proposed, and its fate is not awaited.
    with pytest.raises(KanalError) as info:
        controller.decide_with(
            decide_create_topics,
            admin_pb2.CreateTopicsRequest(
                topics=[admin_pb2.CreatableTopic(name="maybe", partitions=1, replication_factor=1)]
            ),
            principal="anonymous",
            request_id="r",
            deadline_s=time.monotonic(),
            with_rng=True,
        )
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert store.read(lambda image: "maybe" not in image.topics)
    # The quorum comes back and commits it after all: the outcome was unknown, now it is known.
    raft.hold = False
    for data in raft.held:
        raft.commit(data)
    assert store.read(lambda image: "maybe" in image.topics)
    # The controller goes on from the committed image.
    assert _create(controller, "after").results[0].error == 0
    again = _create(controller, "maybe")
    assert again.results[0].error == ErrorCode.TOPIC_ALREADY_EXISTS


def test_a_batch_above_the_limit_is_refused_before_anything_is_proposed(setup):
    _, controller, raft = setup("--metadata-batch-bytes-max", str(64 * 1024))
    controller.step()
    _live_brokers(controller)
    proposed = len(raft.proposed)
    with pytest.raises(KanalError) as info:
        _create(controller, "huge", partitions=5_000)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert len(raft.proposed) == proposed
    assert _create(controller, "small").results[0].error == 0


def test_a_standby_names_the_active_controller(setup):
    _, controller, raft = setup()
    raft.leader, raft.leader_at = False, "127.0.0.1:7003"
    controller.step()
    with pytest.raises(KanalError) as info:
        _create(controller, "x")
    assert info.value.code == ErrorCode.NOT_CONTROLLER
    hint = controller.active_hint()
    assert (hint.controller_id, hint.endpoint) == (3, "127.0.0.1:6003")
    raft.leader_at = None
    assert controller.not_active_error().code == ErrorCode.CONTROLLER_NOT_AVAILABLE


def test_silent_broker_is_fenced_after_the_session_timeout_and_unfenced_when_back(setup, fake_clock):
    store, controller, _ = setup("--session-timeout-ms", "9000")
    controller.step()
    epochs = _live_brokers(controller)
    assert _create(controller, "t", partitions=6).results[0].error == 0
    led_by_1 = store.read(
        lambda image: [p.partition_id for p in image.topics["t"].partitions if p.leader == 1]
    )
    assert led_by_1
    fake_clock.advance(5_000)
    heartbeat(controller, 2, epochs[2])
    heartbeat(controller, 3, epochs[3])
    controller.step()
    assert store.read(lambda image: image.is_live(1))  # 5 s of silence: still within the session
    fake_clock.advance(4_500)
    heartbeat(controller, 2, epochs[2])
    heartbeat(controller, 3, epochs[3])
    controller.step()
    assert store.read(lambda image: not image.is_live(1))  # 9.5 s: fenced

    def partitions(image):
        return {p.partition_id: p for p in image.topics["t"].partitions}

    after = store.read(partitions)
    for pid in led_by_1:
        assert after[pid].leader in (2, 3) and after[pid].leader_epoch == 1
    assert all(1 not in p.isr for p in after.values())
    reply = heartbeat(controller, 1, epochs[1])
    assert reply.error == 0 and not reply.fenced
    assert store.read(lambda image: image.is_live(1))


def test_activation_starts_every_session_at_its_own_time(setup, fake_clock):
    store, controller, raft = setup("--session-timeout-ms", "1000", "--election-timeout-ms", "150",
                                    "--raft-heartbeat-interval-ms", "40")
    controller.step()
    _live_brokers(controller)
    # Failover: a new term; the new controller heard no heartbeat yet, and must not fence anyone at once.
    fake_clock.advance(60_000)
    raft.current_term = 2
    controller.step()
    assert controller.epoch == 2
    assert store.read(lambda image: all(image.is_live(b) for b in (1, 2, 3)))
    fake_clock.advance(1_001)
    controller.step()
    assert store.read(lambda image: not any(image.is_live(b) for b in (1, 2, 3)))


def test_registration_reply_says_the_session_timeout(setup):
    _, controller, _ = setup("--session-timeout-ms", "9000")
    controller.step()
    reply = controller.register_broker(
        controller_pb2.RegisterBrokerRequest(broker_id=7, incarnation_id="i7", endpoint="h:7"),
        request_id="reg-7", deadline_s=_deadline(),
    )
    assert reply.error == 0 and reply.session_timeout_ms == 9000


def test_a_controller_active_again_gives_every_broker_a_full_session_from_its_new_takeover(setup, fake_clock):
    """Session times kept from an earlier term are forgotten: the brokers may have heartbeated another
    controller in between, which this one never heard."""
    store, controller, raft = setup("--session-timeout-ms", "1000", "--election-timeout-ms", "150",
                                    "--raft-heartbeat-interval-ms", "40")
    controller.step()
    _live_brokers(controller)
    fake_clock.advance(100)
    raft.leader, raft.leader_at = False, "127.0.0.1:7002"
    controller.step()
    assert controller.epoch is None
    fake_clock.advance(800)  # another controller was active meanwhile; brokers heartbeated it
    raft.leader, raft.leader_at, raft.current_term = True, "127.0.0.1:7001", 3
    controller.step()
    assert controller.epoch == 3
    fake_clock.advance(999)  # 1,899 ms after the brokers were last heard here; 999 ms after the takeover
    controller.step()
    assert store.read(lambda image: all(image.is_live(b) for b in (1, 2, 3)))
    fake_clock.advance(2)
    controller.step()
    assert store.read(lambda image: not any(image.is_live(b) for b in (1, 2, 3)))


def test_a_stalled_controller_steps_back_and_takes_over_again_with_fresh_sessions(setup, fake_clock):
    """A SIGSTOPped active controller, resumed, must not fence brokers it could not hear while stopped."""
    store, controller, _ = setup("--session-timeout-ms", "1000", "--election-timeout-ms", "150",
                                    "--raft-heartbeat-interval-ms", "40")
    controller.step()
    _live_brokers(controller)
    controller.note_stall(150)  # not more than an election timeout: nothing happens
    assert controller.epoch == 1
    fake_clock.advance(5_000)
    controller.note_stall(5_000)
    assert controller.epoch is None and not controller.is_active()
    controller.step()  # still the Raft leader: it takes over again
    assert controller.epoch == 1
    controller.step()
    assert store.read(lambda image: all(image.is_live(b) for b in (1, 2, 3)))
    fake_clock.advance(1_001)
    controller.step()
    assert store.read(lambda image: not any(image.is_live(b) for b in (1, 2, 3)))


def _creating(controller, names):
    """Writers on their own threads (as gRPC threads would be); their replies or errors by name."""
    outcomes: dict = {}

    def run(name):
        try:
            outcomes[name] = _create(controller, name)
        except KanalError as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=(name,)) for name in names]
    for t in threads:
        t.start()
    return outcomes, threads


def test_decisions_taken_while_an_entry_is_in_flight_go_together_as_the_next_entry(setup, wait):
    store, controller, raft = setup("--inflight-proposals-max", "1")
    controller.step()
    _live_brokers(controller)
    raft.hold = True
    outcomes, threads = _creating(controller, [f"t{i}" for i in range(5)])
    # One entry in flight (held); the other four decisions are taken at once, on the speculative image,
    # and wait in the outbox instead of waiting for room before deciding.
    wait(
        lambda: len(raft.held) == 1 and len(controller._pipeline) == 5,
        5,
        "one entry held, four decisions queued",
    )
    assert len(decode_entry(raft.held[0])) == 1
    proposed_before = len(raft.proposed)
    raft.hold = False
    raft.commit(raft.held.pop())  # settles the entry: the outbox goes as one group entry
    for t in threads:
        t.join(10)
    assert all(not isinstance(o, KanalError) and o.results[0].error == 0 for o in outcomes.values()), outcomes
    group = raft.proposed[proposed_before:]
    assert len(group) == 1 and len(decode_entry(group[0])) == 4
    # Each decision is still its own batch in the metadata log.
    topic_batches = [b for b in read_all(store._log)
                     if any(r.WhichOneof("record") == "topic" for r in b.metadata_batch().records)]
    assert len(topic_batches) == 5
    assert store.read(lambda image: sorted(n for n in image.topics if n.startswith("t"))) == [
        f"t{i}" for i in range(5)
    ]


def test_decisions_in_the_outbox_fail_at_once_when_the_controller_is_deposed(setup, wait):
    store, controller, raft = setup("--inflight-proposals-max", "1")
    controller.step()
    _live_brokers(controller)
    raft.hold = True
    first, first_threads = _creating(controller, ["first"])
    wait(lambda: len(raft.held) == 1, 5, "the first entry held")
    queued, queued_threads = _creating(controller, ["q1", "q2"])
    wait(lambda: len(controller._pipeline) == 3, 5, "two decisions queued")
    proposed_before = len(raft.proposed)
    raft.leader, raft.current_term, raft.leader_at = False, 2, "127.0.0.1:7002"
    controller.step()  # deposed: what was never handed to Raft is certainly not applied
    for t in queued_threads:
        t.join(10)
    assert {name: o.code for name, o in queued.items()} == {
        "q1": ErrorCode.NOT_CONTROLLER,
        "q2": ErrorCode.NOT_CONTROLLER,
    }
    assert len(raft.proposed) == proposed_before  # and it is not proposed later either
    raft.commit(raft.held.pop())  # the entry in flight may still commit: its writer hears it applied
    for t in first_threads:
        t.join(10)
    assert first["first"].results[0].error == 0
    assert store.read(
        lambda image: ("first" in image.topics, "q1" in image.topics, "q2" in image.topics)
    ) == (
        True,
        False,
        False,
    )


def _looping(tmp_path, log_factory, fake_clock, on_step=None):
    """A controller whose loop thread runs, with a recorder for `fatal`: (controller, raft, stops)."""
    store = MetadataStore(log_factory(tmp_path / "log"))
    stops: list[tuple[str, BaseException]] = []
    controller = ActiveController(_config(tmp_path), store, clock=fake_clock, rng=random.Random(3),
                                  fatal=lambda reason, exc: stops.append((reason, exc)))
    raft = FakeRaft(store)
    raft.controller = controller
    controller.attach(raft, on_step=on_step)
    return controller, raft, stops


def test_the_loop_retries_an_expected_error_and_stops_the_process_on_a_bug(tmp_path, log_factory, fake_clock,
                                                                          wait):
    """A KanalError in a step is expected (the next step tries again); anything else may have left the
    speculative image or the pipeline half-changed, and a loop that kept failing would be a Raft leader
    that never fences a broker again: the process stops and another controller takes over."""
    controller, raft, stops = _looping(tmp_path, log_factory, fake_clock)
    failures = [KanalError(ErrorCode.REQUEST_TIMED_OUT, "no quorum yet")]

    def is_leader():
        if failures:
            raise failures.pop(0)
        return True

    raft.is_leader = is_leader
    controller.start()
    try:
        wait(controller.is_active, 10, "activation after the step that timed out")
        assert stops == []
        failures.append(RuntimeError("a bug"))
        controller.wake()
        wait(lambda: stops, 10, "the process stopped")
    finally:
        controller.stop()
    [(reason, exc)] = stops
    assert reason == "the active controller's step failed" and isinstance(exc, RuntimeError)


def test_a_bug_in_the_loop_hook_stops_the_process(tmp_path, log_factory, fake_clock, wait):
    def hook():
        raise ValueError("a bug in the health update")

    controller, _, stops = _looping(tmp_path, log_factory, fake_clock, on_step=hook)
    controller.start()
    try:
        wait(lambda: stops, 10, "the process stopped")
    finally:
        controller.stop()
    [(reason, exc)] = stops
    assert "step hook" in reason and isinstance(exc, ValueError)
