"""acks=all waits (partition.py, produce_call.py): registered with the append, answered by the leadership
that appended, never by a later one. A Partition over a real log in a temp dir; no sockets, no threads."""

from __future__ import annotations

import pytest

from kanal.broker.partition import Assignment, Partition
from kanal.broker.storage.log_config import LogConfig
from kanal.v1 import broker_pb2
from kanal.v1.batch import NewRecord, build_batch
from kanal.v1.error import ErrorCode

from .test_partition_waiters import FakeManager, follower_read


@pytest.fixture
def leader(tmp_path):
    """Broker 0 leads a partition with replicas 0 and 1, both in the ISR (epoch 1)."""
    part = Partition("t", 0, tmp_path / "t-0", LogConfig(), 0, 1, FakeManager())
    part.become_leader(Assignment("id", (0, 1), (0, 1), 0, 1, 1), set(), 10_000)
    yield part
    part.close()


def acks_all(part: Partition, answers: list[int], value: bytes = b"v") -> int | None:
    out = broker_pb2.ProduceResponse.PartitionResult()
    refused, request_id = part.append_as_leader(
        [build_batch([NewRecord(value)])], -1, 0, out, timeout_ms=60_000, on_replicated=answers.append
    )
    assert refused is None
    return request_id


def test_the_wait_is_answered_when_the_follower_has_the_batch(leader):
    answers: list[int] = []
    assert acks_all(leader, answers) is not None
    assert answers == []
    follower_read(leader, 1, None)  # the follower fetches from 1: it has offset 0
    assert answers == [ErrorCode.NONE]


def test_a_wait_of_a_leadership_that_ended_is_never_acknowledged_by_a_later_one(leader):
    """Leader (epoch 1) appends and waits; it becomes a follower (and would truncate), then leader again
    in epoch 3. The old wait is answered NOT_LEADER_OR_FOLLOWER when leadership ends: the offsets it was
    for may hold other records by the time the new leadership's HW passes them."""
    answers: list[int] = []
    acks_all(leader, answers, b"old")
    leader.become_follower(Assignment("id", (0, 1), (0, 1), 1, 2, 2))
    assert answers == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    leader.become_leader(Assignment("id", (0, 1), (0, 1), 0, 3, 3), set(), 10_000)
    follower_read_epoch3 = broker_pb2.FetchRequest.PartitionRequest(
        partition=0, fetch_offset=1, current_leader_epoch=3, last_fetched_epoch=1
    )
    leader.read_for_follower(1, follower_read_epoch3, 1 << 20, broker_pb2.FetchResponse.PartitionData())
    assert answers == [ErrorCode.NOT_LEADER_OR_FOLLOWER]  # answered once, never NONE


def test_a_timed_out_wait_is_answered_once(leader):
    answers: list[int] = []
    request_id = acks_all(leader, answers)
    leader.time_out_produce(request_id)
    leader.time_out_produce(request_id)
    follower_read(leader, 1, None)
    assert answers == [ErrorCode.REQUEST_TIMED_OUT]
