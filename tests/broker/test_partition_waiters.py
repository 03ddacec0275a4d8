"""Long-poll wake-ups on one partition: followers wake on appends, consumers on HW moves (partition.py).

A Partition over a real log in a temp dir; the replica manager is a stand-in that records what the
partition asks of it. Wake-ups are Events: tests check `is_set()`, they never wait on time."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Counter

from kanal.broker.partition import Assignment, Partition
from kanal.broker.storage.log_config import LogConfig
from kanal.v1 import broker_pb2
from kanal.v1.batch import NewRecord, build_batch


class FakeManager:
    def __init__(self) -> None:
        r = CollectorRegistry()
        self.metrics = SimpleNamespace(**{name: Counter(name, name, registry=r) for name in (
            "messages_in", "bytes_in", "isr_shrinks", "isr_expands")})
        self.proposals = []

    def send_alter_partition(self, part, proposal, *, resend: bool = False) -> None:
        self.proposals.append(proposal)


@pytest.fixture
def leader(tmp_path):
    """Broker 0 leads a partition with replicas 0 and 1, both in the ISR."""
    part = Partition("t", 0, tmp_path / "t-0", LogConfig(), 0, 1, FakeManager())
    part.become_leader(Assignment("id", (0, 1), (0, 1), 0, 1, 1), set(), 10_000)
    yield part
    part.close()


def produce(part: Partition, n: int = 1) -> None:
    part.append_as_leader(
        [build_batch([NewRecord(b"v")] * n)], 1, 0, broker_pb2.ProduceResponse.PartitionResult()
    )


def consumer_read(part: Partition, offset: int, waiter: threading.Event) -> int:
    preq = broker_pb2.FetchRequest.PartitionRequest(partition=0, fetch_offset=offset, current_leader_epoch=-1)
    return part.read_for_consumer(preq, 1 << 20, broker_pb2.FetchResponse.PartitionData(), waiter)


def follower_read(part: Partition, offset: int, waiter: threading.Event | None) -> int:
    preq = broker_pb2.FetchRequest.PartitionRequest(partition=0, fetch_offset=offset, current_leader_epoch=1,
                                                    last_fetched_epoch=1 if offset else -1)
    return part.read_for_follower(1, preq, 1 << 20, broker_pb2.FetchResponse.PartitionData(), waiter)


def test_an_append_wakes_follower_polls_but_not_consumer_polls(leader):
    follower, consumer = threading.Event(), threading.Event()
    assert follower_read(leader, 0, follower) == 0
    assert consumer_read(leader, 0, consumer) == 0
    produce(leader, 3)
    assert follower.is_set(), "the follower can read the new batch now"
    assert not consumer.is_set(), "the HW has not moved: a consumer poll would only read nothing again"
    assert leader.high_watermark == 0


def test_a_high_watermark_move_wakes_consumer_polls(leader):
    consumer = threading.Event()
    produce(leader, 3)
    assert consumer_read(leader, 0, consumer) == 0
    follower_read(leader, 3, None)  # the follower reports it has offsets 0..2: the HW moves to 3
    assert leader.high_watermark == 3
    assert consumer.is_set()
    consumer.clear()
    assert consumer_read(leader, 0, consumer) > 0


def test_a_removed_waiter_is_not_woken(leader):
    follower = threading.Event()
    follower_read(leader, 0, follower)
    leader.remove_waiter(follower)
    produce(leader)
    assert not follower.is_set()


def test_a_role_change_wakes_every_poll(leader):
    follower, consumer = threading.Event(), threading.Event()
    follower_read(leader, 0, follower)
    consumer_read(leader, 0, consumer)
    leader.become_follower(Assignment("id", (0, 1), (0, 1), 1, 2, 2))
    assert follower.is_set() and consumer.is_set(), "polls must re-read to see NOT_LEADER_OR_FOLLOWER at once"
