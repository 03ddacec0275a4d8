"""Follower fetching (KIP-392): the leader's choice of a read replica (read_replica.py), and a follower
serving consumers below its own high-water mark (partition.py).

Two real Partitions over logs in temp dirs, broker 0 leading and broker 1 following; the follower is fed
the leader's own replica-fetch replies, as its fetcher would. Wake-ups are Events checked with is_set()."""

from __future__ import annotations

import threading
from functools import partial

import pytest

from kanal.broker.partition import Assignment, Partition
from kanal.broker.read_replica import FollowerView, choose_read_replica
from kanal.broker.storage.log_config import LogConfig
from kanal.v1 import broker_pb2
from kanal.v1.batch import ATTR_TRANSACTIONAL, NewRecord, build_batch
from kanal.v1.error import ErrorCode, KanalError

from .test_partition_waiters import FakeManager

RACKS = {0: "a", 1: "b", 2: "c", 3: "b"}
BOTH_IN_SYNC = Assignment("id", (0, 1), (0, 1), 0, 1, 1)


@pytest.mark.parametrize(("selector", "client_rack", "followers", "offset", "expected"), [
    ("leader", "b", [FollowerView(1, True, 10)], 0, 0),  # Kafka's default: never redirect
    ("rack-aware", "", [FollowerView(1, True, 10)], 0, 0),  # a consumer without a rack
    ("rack-aware", "a", [FollowerView(1, True, 10)], 0, 0),  # the leader is in the consumer's rack
    ("rack-aware", "b", [FollowerView(1, True, 10)], 5, 1),
    ("rack-aware", "b", [FollowerView(1, False, 10)], 5, 0),  # out of the ISR: may be far behind
    ("rack-aware", "b", [FollowerView(1, True, 4)], 5, 0),  # has not fetched past the offset yet
    ("rack-aware", "b", [FollowerView(1, True, None)], 0, 0),  # has not fetched at all since we lead
    ("rack-aware", "c", [FollowerView(1, True, 10)], 5, 0),  # nobody in rack c
    ("rack-aware", "c", [FollowerView(1, True, 10), FollowerView(2, True, 6)], 5, 2),
    ("rack-aware", "b", [FollowerView(1, True, 6), FollowerView(3, True, 9)], 5, 3),  # furthest ahead
    ("rack-aware", "b", [FollowerView(3, True, 9), FollowerView(1, True, 9)], 5, 1),  # tie: lowest id
    ("rack-aware", "z", [FollowerView(5, True, 9)], 5, 0),  # a broker with no registered rack
])
def test_the_replica_selector_table(selector, client_rack, followers, offset, expected) -> None:
    assert choose_read_replica(selector, client_rack, 0, RACKS, followers, offset) == expected


def test_an_unknown_selector_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown replica selector"):
        choose_read_replica("nearest", "b", 0, RACKS, [FollowerView(1, True, 1)], 0)


@pytest.fixture
def pair(tmp_path):
    leader = Partition("t", 0, tmp_path / "leader" / "t-0", LogConfig(), 0, 1, FakeManager())
    leader.become_leader(BOTH_IN_SYNC, set(), 10_000)
    follower = Partition("t", 0, tmp_path / "follower" / "t-0", LogConfig(), 1, 1, FakeManager())
    follower.become_follower(BOTH_IN_SYNC)
    yield leader, follower
    leader.close()
    follower.close()


def produce(leader: Partition, values: list[bytes]) -> None:
    leader.append_as_leader([build_batch([NewRecord(v) for v in values])], 1, 0,
                            broker_pb2.ProduceResponse.PartitionResult())


def replicate(leader: Partition, follower: Partition) -> None:
    """One fetch of the follower from the leader, applied: the follower's fetcher in one step."""
    offset, epoch, last_epoch = follower.fetch_position()
    preq = broker_pb2.FetchRequest.PartitionRequest(partition=0, fetch_offset=offset,
                                                    current_leader_epoch=epoch, last_fetched_epoch=last_epoch)
    reply = broker_pb2.FetchResponse.PartitionData(partition=0, diverging_epoch=-1)
    leader.read_for_follower(1, preq, 1 << 20, reply)
    follower.apply_fetched(0, reply)


def consumer_read(part: Partition, offset: int, *, epoch: int = -1, waiter: threading.Event | None = None,
                  from_follower: bool = True, choose=None,
                  read_committed: bool = False) -> broker_pb2.FetchResponse.PartitionData:
    preq = broker_pb2.FetchRequest.PartitionRequest(partition=0, fetch_offset=offset,
                                                    current_leader_epoch=epoch)
    out = broker_pb2.FetchResponse.PartitionData(partition=0)
    part.read_for_consumer(preq, 1 << 20, out, waiter, read_committed=read_committed,
                           from_follower=from_follower, choose_replica=choose)
    return out


def test_a_follower_serves_a_consumer_only_below_its_high_watermark(pair) -> None:
    leader, follower = pair
    produce(leader, [b"a", b"b", b"c"])
    replicate(leader, follower)  # the follower has 0..2, the HW it heard is still 0
    assert follower.log.log_end_offset == 3 and follower.high_watermark == 0
    woken = threading.Event()
    out = consumer_read(follower, 0, waiter=woken)
    assert out.records == b"" and out.high_watermark == 0, "records above the follower's HW were served"
    replicate(leader, follower)  # its fetch at 3 moves the leader's HW; the reply carries it
    assert follower.high_watermark == 3
    assert woken.is_set(), "a consumer's long poll on the follower was not woken by its HW moving"
    out = consumer_read(follower, 0)
    assert out.error == ErrorCode.NONE and out.records and out.high_watermark == 3
    assert out.records == consumer_read(leader, 0, from_follower=False).records  # the same stored bytes


def test_a_follower_refuses_a_consumer_that_did_not_ask_for_follower_fetching(pair) -> None:
    leader, follower = pair
    produce(leader, [b"a"])
    replicate(leader, follower)
    with pytest.raises(KanalError) as refused:
        consumer_read(follower, 0, from_follower=False)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_follower_out_of_the_isr_sends_consumers_back_to_the_leader(pair) -> None:
    _, follower = pair
    follower.become_follower(Assignment("id", (0, 1), (0,), 0, 1, 2))
    with pytest.raises(KanalError) as refused:
        consumer_read(follower, 0)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert "not an in-sync replica" in refused.value.message


@pytest.mark.parametrize(("epoch", "code"), [(0, ErrorCode.FENCED_LEADER_EPOCH),
                                             (2, ErrorCode.UNKNOWN_LEADER_EPOCH)])
def test_a_follower_checks_the_consumers_leader_epoch(pair, epoch, code) -> None:
    _, follower = pair
    with pytest.raises(KanalError) as refused:
        consumer_read(follower, 0, epoch=epoch)
    assert refused.value.code == code
    assert consumer_read(follower, 0, epoch=1).error == ErrorCode.NONE  # the current epoch is served


def test_the_leader_sends_a_consumer_to_an_in_sync_follower_in_its_rack(pair) -> None:
    leader, follower = pair
    in_rack_b = partial(choose_read_replica, "rack-aware", "b", 0, RACKS)
    produce(leader, [b"a", b"b", b"c"])
    out = consumer_read(leader, 0, choose=in_rack_b)
    assert not out.HasField("preferred_read_replica"), "sent to a follower that has not fetched yet"
    replicate(leader, follower)
    replicate(leader, follower)
    out = consumer_read(leader, 1, choose=in_rack_b)
    assert out.HasField("preferred_read_replica") and out.preferred_read_replica == 1
    assert out.records == b"", "a redirect carries no records"
    assert out.high_watermark == 3
    out = consumer_read(leader, 1, choose=partial(choose_read_replica, "rack-aware", "a", 0, RACKS))
    assert not out.HasField("preferred_read_replica") and out.records  # rack a: the leader's own


def test_a_read_committed_consumer_stops_at_the_followers_last_stable_offset(pair) -> None:
    leader, follower = pair
    produce(leader, [b"plain"])
    txn = build_batch([NewRecord(b"open")], producer_id=7, producer_epoch=0, base_sequence=0,
                      attributes=ATTR_TRANSACTIONAL)
    leader.append_as_leader([txn], 1, 0, broker_pb2.ProduceResponse.PartitionResult())
    replicate(leader, follower)
    replicate(leader, follower)
    assert follower.high_watermark == 2
    out = consumer_read(follower, 0, read_committed=True)
    assert out.last_stable_offset == 1
    uncommitted = consumer_read(follower, 0)
    assert len(out.records) < len(uncommitted.records), "a read_committed read went past the open transaction"
