"""The group coordinator's loader over a real __consumer_offsets partition: a Log written to a temp dir,
opened by a real Partition in a real ReplicaManager, loaded by a real GroupCoordinator on its runtime's
loader thread (coordinator_runtime.py; its own rules are tested in test_coordinator_runtime.py). No
sockets. The ticker is not running: each test calls `reconcile()` itself where the ticker would, and
waits for conditions with a bound, never for time. The process is stopped through a recording hook."""

from __future__ import annotations

import logging

import pytest

from kanal.broker.config import BrokerConfig
from kanal.broker.group import GroupLimits
from kanal.broker.group_coordinator import GroupCoordinator
from kanal.broker.group_records import batch_of, offset_record, txn_batch_of
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.partition import Assignment, Partition
from kanal.broker.replica_manager import ReplicaManager
from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.metadata import MetadataImage
from kanal.metadata.cleanup_policy import COMPACT
from kanal.metadata.image import PartitionState, TopicImage
from kanal.v1 import broker_pb2, groups_pb2
from kanal.v1.batch import NewRecord, build_batch, encode_batch
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import CONSUMER_OFFSETS_TOPIC
from tests.broker.coordinator_broker import InjectedBug, StopRecorder
from tests.harness.waiting import wait_until as _wait_until

LIMITS = GroupLimits(session_timeout_ms_min=100, session_timeout_ms_max=60_000, initial_rebalance_delay_ms=0)
LEADER_EPOCH = 1
NOW_MS = 1_700_000_000_000
LOADER = "kanal.broker.group_coordinator"
RUNTIME = "kanal.broker.coordinator_runtime"


def commit(group_id: str, offset: int, partition: int = 0):
    return offset_record(group_id, "t", partition, groups_pb2.OffsetCommitValue(offset=offset))


def write_offsets_log(data_dir, batches: list[bytes]) -> None:
    """__consumer_offsets-0 as a previous leader left it on disk (epoch 0)."""
    log = Log.open(data_dir / f"{CONSUMER_OFFSETS_TOPIC}-0", LogConfig(cleanup_policy=COMPACT))
    for batch in batches:
        log.append(batch, leader_epoch=0, now_ms=NOW_MS)
    log.close()


def offsets_image() -> MetadataImage:
    """__consumer_offsets with one partition, led here (broker 0) at LEADER_EPOCH, and topic t."""
    image = MetadataImage()
    for name in (CONSUMER_OFFSETS_TOPIC, "t"):
        image.topics[name] = TopicImage(
            name, f"id-{name}", [PartitionState(0, (0,), (0,), 0, LEADER_EPOCH, 1)]
        )
    return image


class Broker:
    """A replica manager, the partition led here (once `host_partition` ran) and the coordinator."""

    def __init__(self, data_dir, replicas=None) -> None:
        self.data_dir = data_dir
        self.closed = False
        config = BrokerConfig(
            broker_id=0, listen="127.0.0.1:1", controllers=("127.0.0.1:2",), data_dir=data_dir
        )
        self.metrics = BrokerMetrics()
        self.rm = ReplicaManager(config, controllers=None, metrics=self.metrics, broker_epoch=lambda: 1)
        self.image = offsets_image()
        self.stop = StopRecorder()
        self.coordinator = GroupCoordinator(
            broker_id=0, replicas=replicas(self.rm) if replicas else self.rm, image=lambda: self.image,
            controllers=None, metrics=self.metrics, limits=LIMITS, offsets_partitions=1,
            offsets_replication_factor=1, write_timeout_ms=5_000, stop_process=self.stop)

    def host_partition(self) -> None:
        part = Partition(CONSUMER_OFFSETS_TOPIC, 0, self.data_dir / f"{CONSUMER_OFFSETS_TOPIC}-0",
                         LogConfig(cleanup_policy=COMPACT), 0, 1, self.rm)
        part.become_leader(
            Assignment(f"id-{CONSUMER_OFFSETS_TOPIC}", (0,), (0,), 0, LEADER_EPOCH, 1), set(), 10_000
        )
        self.rm._partitions[(CONSUMER_OFFSETS_TOPIC, 0)] = part

    def fetch(self, group_id: str) -> dict[int, int]:
        request = broker_pb2.OffsetFetchRequest(group_id=group_id)
        return {o.partition: o.offset for o in self.coordinator.fetch_offsets(request).offsets}

    def loaded(self) -> bool:
        """The partition is served; reconciles first, as the ticker does on each tick."""
        self.coordinator.reconcile()
        try:
            self.fetch("a")
        except KanalError as exc:
            if exc.code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise
            return False
        return True

    def sample(self, name: str, labels: dict | None = None) -> float:
        return self.metrics.registry.get_sample_value(name, labels or {}) or 0.0

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.coordinator.close()
        self.rm.close()


@pytest.fixture
def broker(tmp_path):
    made: list[Broker] = []

    def make(**kw) -> Broker:
        made.append(Broker(tmp_path, **kw))
        return made[-1]

    yield make
    for b in made:
        b.close()


def wait_until(check, what: str) -> None:
    """The tests' one wait (tests.harness.waiting), polled every 0.005 s."""
    _wait_until(check, 10, what, interval_s=0.005)


def test_a_bad_record_is_skipped_logged_and_counted_and_the_groups_load(tmp_path, broker, caplog):
    garbage_records = encode_batch(b"\xff\xffnot a record list", record_count=1, last_offset_delta=0,
                                   first_timestamp_ms=NOW_MS, max_timestamp_ms=NOW_MS)
    write_offsets_log(tmp_path, [
        batch_of([commit("a", 42), commit("b", 5)], NOW_MS),  # offsets 0, 1
        build_batch([NewRecord(b"garbage", b"\xff\xff", NOW_MS)]),  # 2: the injected record of the issue
        garbage_records,  # 3: a batch whose records do not decode
        batch_of([commit("a", 43, partition=1), commit("b", 6)], NOW_MS),  # 4, 5: after the bad ones
    ])
    b = broker()
    b.host_partition()
    with caplog.at_level(logging.WARNING, logger=LOADER):
        b.coordinator.reconcile(b.image)  # as the metadata follower does once the replica exists
        wait_until(b.loaded, "the groups to load")
    assert b.fetch("a") == {0: 42, 1: 43}
    assert b.fetch("b") == {0: 6}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"{CONSUMER_OFFSETS_TOPIC}-0" in m and "offset 2:" in m and "does not parse as GroupRecordKey" in m
        for m in warnings
    ), warnings
    assert any("offset 3:" in m and "batch does not decode" in m for m in warnings), warnings
    assert b.sample("kanal_group_coordinator_bad_records_total") == 2
    assert b.sample("kanal_group_coordinator_load_failures_total", {"cause": "unexpected"}) == 0


class FailingFirst:
    """The real replica manager, except that its first `failures` partition() calls raise as a bug in the
    loader's path would (fault injection: everything else is the real thing)."""

    def __init__(self, rm: ReplicaManager, failures: int) -> None:
        self._rm = rm
        self.failures_left = failures

    def partition(self, topic: str, partition_id: int):
        if self.failures_left > 0:
            self.failures_left -= 1
            raise InjectedBug("injected fault in the loader")
        return self._rm.partition(topic, partition_id)

    def __getattr__(self, name: str):
        return getattr(self._rm, name)


def test_an_unexpected_load_failure_is_counted_and_stops_the_process(tmp_path, broker):
    """A bug is not retried for ever behind COORDINATOR_LOAD_IN_PROGRESS: the process stops (exit 70 in
    production, kanal.server.fatal) and the partition's next leader loads it."""
    write_offsets_log(tmp_path, [batch_of([commit("a", 42)], NOW_MS)])
    b = broker(replicas=lambda rm: FailingFirst(rm, failures=1))
    b.host_partition()
    b.coordinator.reconcile(b.image)
    assert b.stop.called.wait(10), "the failed load did not stop the process"
    [(reason, exc)] = b.stop.calls
    assert isinstance(exc, InjectedBug) and f"loading {CONSUMER_OFFSETS_TOPIC}-0" in reason, reason
    assert b.sample("kanal_group_coordinator_load_failures_total", {"cause": "unexpected"}) == 1
    with pytest.raises(KanalError) as err:
        b.fetch("a")
    assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_a_load_before_the_replica_exists_is_retried_once_it_does(tmp_path, broker, caplog):
    write_offsets_log(tmp_path, [batch_of([commit("a", 42)], NOW_MS)])
    b = broker()
    with caplog.at_level(logging.WARNING, logger=RUNTIME):
        b.coordinator.reconcile(b.image)
        wait_until(lambda: any("could not load" in r.getMessage() and "retrying" in r.getMessage()
                               for r in caplog.records), "a failed load's warning (logged last)")
    assert b.sample("kanal_group_coordinator_load_failures_total",
                    {"cause": "UNKNOWN_TOPIC_OR_PARTITION"}) >= 1
    b.host_partition()
    wait_until(b.loaded, "the retried load")
    assert b.fetch("a") == {0: 42}


def test_damaged_log_framing_fails_the_load_at_error_and_keeps_retrying(tmp_path, broker, caplog):
    write_offsets_log(tmp_path, [batch_of([commit("a", 42)], NOW_MS)])
    segment = tmp_path / f"{CONSUMER_OFFSETS_TOPIC}-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[5] ^= 0xFF  # the first entry's CRC; the log was closed cleanly, so opening it does not recover it
    segment.write_bytes(bytes(data))
    b = broker()
    b.host_partition()
    with caplog.at_level(logging.WARNING, logger=RUNTIME):
        b.coordinator.reconcile(b.image)
        wait_until(lambda: b.loaded() or b.sample("kanal_group_coordinator_load_failures_total",
                                                  {"cause": "CORRUPT_MESSAGE"}) >= 2, "two failed loads")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and all("entry CRC does not match" in r.getMessage() and r.exc_info for r in errors)
    with pytest.raises(KanalError) as err:
        b.fetch("a")
    assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and "tries failed" in err.value.message


class CountingControllers:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def call(self, method: str, request):
        from kanal.v1 import admin_pb2

        self.calls.append(method)
        return admin_pb2.CreateTopicsResponse(
            results=[admin_pb2.CreateTopicResult(name=CONSUMER_OFFSETS_TOPIC)]
        )


def test_the_offsets_topic_is_not_created_with_fewer_live_brokers_than_its_replication_factor(tmp_path):
    """The first FindCoordinator used to create __consumer_offsets with RF capped at the live brokers: a
    group that came before the second broker left the cluster's offsets on one replica for ever."""
    from kanal.metadata.image import BrokerRegistration

    config = BrokerConfig(broker_id=0, listen="127.0.0.1:1", controllers=("127.0.0.1:2",), data_dir=tmp_path)
    metrics = BrokerMetrics()
    rm = ReplicaManager(config, controllers=None, metrics=metrics, broker_epoch=lambda: 1)
    image = MetadataImage()
    controllers = CountingControllers()
    coordinator = GroupCoordinator(
        broker_id=0,
        replicas=rm,
        image=lambda: image,
        controllers=controllers,
        metrics=metrics,
        limits=LIMITS,
        offsets_partitions=1,
        offsets_replication_factor=3,
        write_timeout_ms=5_000,
    )
    try:
        for b in (0, 1):
            image.brokers[b] = BrokerRegistration(b, f"inc-{b}", 1, f"127.0.0.1:{9000 + b}", "", False)
        with pytest.raises(KanalError) as err:
            coordinator.find_coordinator(broker_pb2.FindCoordinatorRequest(key="g"))
        assert (
            err.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            and "needs 3 live brokers" in err.value.message
        )
        assert controllers.calls == []
        image.brokers[2] = BrokerRegistration(2, "inc-2", 1, "127.0.0.1:9002", "", False)
        with pytest.raises(KanalError) as err:
            coordinator.find_coordinator(broker_pb2.FindCoordinatorRequest(key="g"))
        assert err.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "creating" in err.value.message
        assert controllers.calls == ["CreateTopics"]
    finally:
        coordinator.close()
        rm.close()


def recreated(image: MetadataImage, name: str, topic_id: str) -> MetadataImage:
    """`image` after topic `name` was deleted and created again under the same name with a new id."""
    new = image.copy()
    new.topics[name] = TopicImage(name, topic_id, [PartitionState(0, (0,), (0,), 0, 0, 1)])
    return new


def test_offsets_of_a_deleted_topic_never_apply_to_a_topic_recreated_under_its_name(tmp_path, broker):
    b = broker()
    b.host_partition()
    b.coordinator.reconcile(b.image)
    wait_until(b.loaded, "the groups to load")
    request = broker_pb2.OffsetCommitRequest(group_id="g", generation_id=-1)
    request.topics.add(topic="t").partitions.add(partition=0, offset=42, leader_epoch=-1)
    assert b.coordinator.commit(request).topics[0].partitions[0].error == ErrorCode.NONE
    assert b.fetch("g") == {0: 42}
    b.image = recreated(b.image, "t", "id-t-recreated")
    # In memory, before the retention check has deleted it: not a position in the new topic.
    assert b.fetch("g") == {}
    asked = broker_pb2.OffsetFetchRequest(group_id="g")
    asked.topics.add(topic="t", partitions=[0])
    assert [(o.partition, o.offset) for o in b.coordinator.fetch_offsets(asked).offsets] == [(0, -1)]
    described = b.coordinator.describe(broker_pb2.DescribeGroupsRequest(group_ids=["g"])).groups[0]
    assert [(o.topic, o.committed_offset) for o in described.offsets] == []
    b.close()

    # A coordinator that loads the log (the commit record names the old id) agrees, and deletes it.
    b2 = broker()
    b2.image = recreated(b2.image, "t", "id-t-recreated")
    b2.host_partition()
    b2.coordinator.reconcile(b2.image)
    wait_until(b2.loaded, "the groups to reload")
    assert b2.fetch("g") == {}
    assert b2.coordinator.expire_offsets(NOW_MS) == 1
    assert b2.fetch("g") == {}
    # A commit to the new topic is its position.
    assert b2.coordinator.commit(request).topics[0].partitions[0].error == ErrorCode.NONE
    assert b2.fetch("g") == {0: 42}


def test_offset_fetch_require_stable_answers_unstable_while_transactional_offsets_await_their_marker(
    tmp_path, broker
):
    """KIP-447: offsets committed in a decided transaction whose marker is not stored yet make the
    partition UNSTABLE_OFFSET_COMMIT for a require_stable OffsetFetch (the loader rebuilt them as pending);
    without require_stable the older offset is answered; the COMMIT marker makes the new one the answer."""
    write_offsets_log(tmp_path, [
        batch_of([commit("a", 10), commit("a", 20, partition=1)], NOW_MS),
        txn_batch_of([commit("a", 11)], NOW_MS, 7, 0),  # producer 7's transaction: partition 0 only
    ])
    b = broker()
    b.host_partition()
    b.coordinator.reconcile(b.image)
    wait_until(b.loaded, "the groups to load")

    def stable() -> dict[int, tuple[int, int]]:
        request = broker_pb2.OffsetFetchRequest(group_id="a", require_stable=True)
        request.topics.add(topic="t", partitions=[0, 1])
        return {o.partition: (o.offset, o.error) for o in b.coordinator.fetch_offsets(request).offsets}

    assert stable() == {0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), 1: (20, ErrorCode.NONE)}
    assert b.fetch("a") == {0: 10, 1: 20}, "without require_stable: the committed offset as it is"
    b.coordinator.on_txn_marker(0, 7, commit=True)
    assert stable() == {0: (11, ErrorCode.NONE), 1: (20, ErrorCode.NONE)}
