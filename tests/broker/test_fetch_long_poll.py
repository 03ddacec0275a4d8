"""ReplicaManager.fetch as a long poll: it returns when its partition changes or its call ends, not at the
timeout. One leader partition over a real log in a temp dir; no sockets. Other threads only run the
fetch; the test waits on their results with a bound, never on time."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from kanal.broker.config import BrokerConfig
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.partition import Assignment, Partition
from kanal.broker.replica_manager import ReplicaManager
from kanal.broker.storage.log_config import LogConfig
from kanal.v1 import broker_pb2
from kanal.v1.batch import NewRecord, build_batch
from tests.harness.waiting import wait_until as _wait_until

WAIT_MS = 30_000  # far longer than any test may take: a fetch that returns did not time out


@pytest.fixture
def manager(tmp_path):
    config = BrokerConfig(broker_id=0, listen="127.0.0.1:1", controllers=("127.0.0.1:2",), data_dir=tmp_path)
    rm = ReplicaManager(config, controllers=None, metrics=BrokerMetrics(), broker_epoch=lambda: 1)
    part = Partition("t", 0, tmp_path / "t-0", LogConfig(), 0, 1, rm)
    part.become_leader(Assignment("id", (0,), (0,), 0, 1, 1), set(), 10_000)
    rm._partitions[("t", 0)] = part
    yield rm, part
    rm.close()


def consumer_fetch(offset: int) -> broker_pb2.FetchRequest:
    request = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=WAIT_MS, min_bytes=1, max_bytes=1 << 20)
    request.topics.add(topic="t").partitions.add(partition=0, fetch_offset=offset, max_bytes=1 << 20,
                                                 current_leader_epoch=-1)
    return request


def produce(rm: ReplicaManager) -> None:
    request = broker_pb2.ProduceRequest(acks=1, timeout_ms=1000)
    request.topics.add(topic="t").partitions.add(partition=0, batches=[build_batch([NewRecord(b"v")])])
    assert rm.produce(request).topics[0].partitions[0].error == 0


def parked(rm: ReplicaManager) -> bool:
    """The fetch waits (the purgatory gauge counts it from just before its wait)."""
    return rm.metrics.registry.get_sample_value("kanal_fetch_purgatory_size", {"kind": "consumer"}) == 1


def wait_until(check, what: str) -> None:
    """The tests' one wait (tests.harness.waiting), polled every 0.001 s."""
    _wait_until(check, 10, what, interval_s=0.001)


def test_a_parked_consumer_fetch_returns_when_its_partition_commits_a_record(manager):
    rm, _ = manager
    with ThreadPoolExecutor(1) as pool:
        reply = pool.submit(rm.fetch, consumer_fetch(0))
        wait_until(lambda: parked(rm), "the fetch to park")
        produce(rm)  # RF=1: the HW moves with the append
        data = reply.result(timeout=10).topics[0].partitions[0]
    assert data.error == 0 and data.high_watermark == 1 and len(data.records) > 0


def test_a_parked_fetch_returns_when_its_call_ends(manager):
    rm, _ = manager
    ended = {}
    active = threading.Event()
    active.set()

    def on_call_end(callback) -> bool:
        ended["callback"] = callback
        return True

    with ThreadPoolExecutor(1) as pool:
        reply = pool.submit(rm.fetch, consumer_fetch(0), active.is_set, on_call_end)
        wait_until(lambda: parked(rm), "the fetch to park")
        active.clear()  # the client cancelled: gRPC marks the call inactive, then runs its callbacks
        ended["callback"]()
        data = reply.result(timeout=10).topics[0].partitions[0]
    assert data.error == 0 and len(data.records) == 0
