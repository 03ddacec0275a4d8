"""One broker without sockets for the coordinators' tests: a real ReplicaManager on a temp directory hosting
__consumer_offsets-0, __transaction_state-0 and t-0, all led here, under a GroupCoordinator and a
TransactionCoordinator that read one fake clock and stop through one injected hook. The ticker is driven
by the tests (`tick()`, or `run` on a thread the test starts), never by waiting for time.

`run_a_timer_bug_in_a_process` runs a coordinator's ticker into a bug with the real stop_process, in a
process of its own (exit 70 expected).
"""

from __future__ import annotations

import itertools
import logging
import subprocess
import sys
import threading
from pathlib import Path

from kanal.broker.config import BrokerConfig
from kanal.broker.group import GroupLimits
from kanal.broker.group_coordinator import GroupCoordinator
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.partition import Assignment, Partition
from kanal.broker.replica_manager import ReplicaManager
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.transaction import TxnState
from kanal.broker.transaction_coordinator import TransactionCoordinator
from kanal.metadata import MetadataImage
from kanal.metadata.cleanup_policy import COMPACT, DELETE
from kanal.metadata.image import BrokerRegistration, PartitionState, TopicImage
from kanal.server.fatal import EXIT_BROKEN_INVARIANT, stop_process
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode
from kanal.v1.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tests.harness.waiting import wait_until

NOW_MS = 1_700_000_000_000
LEADER_EPOCH = 1
SESSION_TIMEOUT_MS = 10_000
TXN_TIMEOUT_MS = 20_000
LIMITS = GroupLimits(session_timeout_ms_min=100, session_timeout_ms_max=60_000, initial_rebalance_delay_ms=0)
WAIT_S = 10
REPO = Path(__file__).resolve().parents[2]


class FakeClock:
    """The coordinators' one clock (anything with `now_ms()`), moved only by the test."""

    def __init__(self, now_ms: int = NOW_MS) -> None:
        self.ms = now_ms

    def now_ms(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


class StopRecorder:
    """An injected stop_process: records (reason, exception) and returns (the real one exits 70)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, BaseException | None]] = []
        self.called = threading.Event()

    def __call__(self, reason: str, exc: BaseException | None = None) -> None:
        self.calls.append((reason, exc))
        self.called.set()


class InjectedBug(Exception):
    """What a bug raises: not a KanalError."""


class FaultyReplicas:
    """The real replica manager, except that once `write_fault` is set every Produce (the coordinators'
    own writes) raises it, and once `markers_fault` is set every WriteTxnMarkers does (fault injection)."""

    def __init__(self, rm: ReplicaManager) -> None:
        self._rm = rm
        self.write_fault: BaseException | None = None
        self.markers_fault: BaseException | None = None

    def produce(self, request, **kw):
        if self.write_fault is not None:
            raise self.write_fault
        return self._rm.produce(request, **kw)

    def write_txn_markers(self, request):
        if self.markers_fault is not None:
            raise self.markers_fault
        return self._rm.write_txn_markers(request)

    def __getattr__(self, name: str):
        return getattr(self._rm, name)


def image_led_here() -> MetadataImage:
    image = MetadataImage()
    image.brokers[0] = BrokerRegistration(0, "inc-0", 1, "127.0.0.1:1", "", False)
    for name in (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, "t"):
        image.topics[name] = TopicImage(
            name, f"id-{name}", [PartitionState(0, (0,), (0,), 0, LEADER_EPOCH, 1)]
        )
    return image


class CoordinatorBroker:
    def __init__(self, data_dir: Path, clock=None, stop=None) -> None:
        self.clock = clock or FakeClock()
        self.stop = stop if stop is not None else StopRecorder()
        config = BrokerConfig(
            broker_id=0, listen="127.0.0.1:1", controllers=("127.0.0.1:2",), data_dir=data_dir
        )
        self.metrics = BrokerMetrics()
        self.rm = ReplicaManager(config, controllers=None, metrics=self.metrics, broker_epoch=lambda: 1)
        self.replicas = FaultyReplicas(self.rm)
        self.image = image_led_here()
        for name in (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, "t"):
            policy = DELETE if name == "t" else COMPACT
            part = Partition(name, 0, data_dir / f"{name}-0", LogConfig(cleanup_policy=policy), 0, 1, self.rm)
            part.become_leader(Assignment(f"id-{name}", (0,), (0,), 0, LEADER_EPOCH, 1), set(), 10_000)
            self.rm._partitions[(name, 0)] = part
        producer_ids = itertools.count(1000)
        self.groups = GroupCoordinator(
            broker_id=0, replicas=self.replicas, image=lambda: self.image, controllers=None,
            metrics=self.metrics, limits=LIMITS, offsets_partitions=1, offsets_replication_factor=1,
            write_timeout_ms=5_000, clock=self.clock, stop_process=self.stop)
        self.transactions = TransactionCoordinator(
            broker_id=0, replicas=self.replicas, image=lambda: self.image, groups=self.groups,
            new_producer_id=lambda: next(producer_ids), partitions=1, replication_factor=1,
            write_timeout_ms=5_000, timeout_ms_max=900_000, clock=self.clock, stop_process=self.stop)
        self.groups.reconcile(self.image)
        self.transactions.reconcile(self.image)
        wait_until(self.loaded, WAIT_S, "both internal partitions to load", interval_s=0.005)

    def loaded(self) -> bool:
        groups = self.groups.describe(broker_pb2.DescribeGroupsRequest(group_ids=["g"])).groups[0].error
        txns = self.transactions.describe(broker_pb2.DescribeTransactionsRequest(transactional_ids=["tx"]))
        return (groups == ErrorCode.GROUP_ID_NOT_FOUND
                and txns.transactions[0].error == ErrorCode.INVALID_PRODUCER_ID_MAPPING)

    # ---- a group with one stable member ----

    def stable_member(self) -> str:
        """Group g with one static member, Stable at generation 1; returns its member id."""
        joined = self.groups.join(broker_pb2.JoinGroupRequest(
            group_id="g", session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=30_000,
            group_instance_id="i1", protocol_type="consumer", client_id="c",
            protocols=[broker_pb2.GroupProtocol(name="range", metadata=b"")]), "127.0.0.1")
        assert joined.error == ErrorCode.NONE and joined.leader == joined.member_id, joined
        synced = self.groups.sync(broker_pb2.SyncGroupRequest(
            group_id="g", generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id="i1",
            assignments=[broker_pb2.SyncGroupAssignment(member_id=joined.member_id, assignment=b"")]))
        assert synced.error == ErrorCode.NONE, synced
        assert self.group_state() == ("Stable", 1)
        return joined.member_id

    def group_state(self) -> tuple[str, int]:
        described = self.groups.describe(broker_pb2.DescribeGroupsRequest(group_ids=["g"])).groups[0]
        return described.state, len(described.members)

    # ---- a transaction open on t-0 ----

    def open_transaction(self) -> broker_pb2.TxnProducer:
        """Transactional id tx with a transaction ONGOING on t-0; returns its producer."""
        init = self.transactions.init_producer_id(
            broker_pb2.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=TXN_TIMEOUT_MS))
        assert init.error == ErrorCode.NONE, init
        producer = broker_pb2.TxnProducer(transactional_id="tx", producer_id=init.producer_id,
                                          producer_epoch=init.producer_epoch)
        request = broker_pb2.AddPartitionsToTxnRequest(producer=producer)
        request.topics.add(topic="t", partitions=[0])
        added = self.transactions.add_partitions(request)
        assert added.error == ErrorCode.NONE and all(r.error == ErrorCode.NONE for r in added.results), added
        assert self.transaction()[0] == TxnState.ONGOING
        return producer

    def transaction(self) -> tuple[TxnState, int]:
        """tx's state and producer epoch, as DescribeTransactions answers them."""
        request = broker_pb2.DescribeTransactionsRequest(transactional_ids=["tx"])
        state = self.transactions.describe(request).transactions[0].state
        return TxnState(state.state), state.producer_epoch

    def close(self) -> None:
        self.transactions.close()
        self.groups.close()
        self.rm.close()


def arm_a_timer_bug(broker: CoordinatorBroker, which: str) -> GroupCoordinator | TransactionCoordinator:
    """Give the coordinator `which` ("group" or "transaction") timer work that writes (a member whose
    session expired: a rebalance to persist; a transaction past its timeout: an abort to write), and make
    that write fail as a bug would (not a KanalError). Returns the coordinator."""
    if which == "group":
        broker.stable_member()
        broker.clock.advance(SESSION_TIMEOUT_MS + 1)
        coordinator: GroupCoordinator | TransactionCoordinator = broker.groups
    else:
        broker.open_transaction()
        broker.clock.advance(TXN_TIMEOUT_MS + 1)
        coordinator = broker.transactions
    broker.replicas.write_fault = InjectedBug(f"injected into the {which} coordinator's timer")
    return coordinator


def run_the_ticker_until_it_stops_the_process(run, stop: StopRecorder) -> None:
    """Run a ticker (`run(stop_event)`) on a thread until it calls the stop hook; check that the thread
    then ends (the real stop_process never returns; a ticker that went on would tick on a broken state)."""
    stop_event = threading.Event()
    ticker = threading.Thread(target=run, args=(stop_event,), name="test-ticker", daemon=True)
    ticker.start()
    try:
        assert stop.called.wait(WAIT_S), "the ticker never reported its failure"
        ticker.join(WAIT_S)
        assert not ticker.is_alive(), "the ticker went on after stopping the process"
    finally:
        stop_event.set()


def check_a_timer_bug_stops_the_process(broker: CoordinatorBroker, which: str, timer: str) -> None:
    """`arm_a_timer_bug`, one tick: the hook is called once, naming the coordinator and its timer, with
    the bug's exception (for the traceback)."""
    coordinator = arm_a_timer_bug(broker, which)
    assert broker.stop.calls == []
    coordinator.tick()
    [(reason, exc)] = broker.stop.calls
    assert isinstance(exc, InjectedBug)
    assert f"the {which} coordinator" in reason and timer in reason, reason


def check_the_ticker_thread_stops_the_process_and_ends(broker: CoordinatorBroker, which: str) -> None:
    run_the_ticker_until_it_stops_the_process(arm_a_timer_bug(broker, which).run, broker.stop)
    [(_, exc)] = broker.stop.calls
    assert isinstance(exc, InjectedBug)


def check_a_timer_bug_exits_a_real_process_with_70(which: str, data_dir: Path) -> None:
    done = run_a_timer_bug_in_a_process(which, data_dir)
    assert done.returncode == EXIT_BROKEN_INVARIANT, done.stderr
    assert f"stopping the process: the {which} coordinator" in done.stderr, done.stderr
    assert f"InjectedBug: injected into the {which} coordinator's timer" in done.stderr, (
        "the cause is logged with its traceback")


def fail_a_timer_for_real(which: str, data_dir: str) -> None:
    """In a process of its own: `arm_a_timer_bug` with the real stop_process, then the coordinator's
    ticker on this thread. The process must end with exit status 70 (kanal.server.fatal); a ticker that
    returned exits 0."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    broker = CoordinatorBroker(Path(data_dir), stop=stop_process)
    arm_a_timer_bug(broker, which).run(threading.Event())
    print("the ticker returned", file=sys.stderr)
    sys.exit(0)


def run_a_timer_bug_in_a_process(which: str, data_dir: Path) -> subprocess.CompletedProcess:
    """`fail_a_timer_for_real` in a child Python process (the checkout's root on its path)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from tests.broker.coordinator_broker import fail_a_timer_for_real; "
            "fail_a_timer_for_real(sys.argv[2], sys.argv[3])")
    return subprocess.run([sys.executable, "-c", code, str(REPO), which, str(data_dir)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
