"""Preferred-leader election on demand and automatic (kanal.metadata.leader_balance), and decommissioning."""

from __future__ import annotations

import pytest

from kanal.metadata import (
    decide_auto_leader_rebalance,
    decide_decommission_broker,
    decide_elect_leaders,
    leader_imbalance,
)
from kanal.v1 import operations_pb2
from kanal.v1.error import ErrorCode
from tests.metadata.test_reassignment import set_isr


@pytest.fixture
def h(harness):
    harness.add_brokers(range(3))
    harness.create_topic("t", 6, 3)
    return harness


def restart(h, broker: int) -> None:
    """Fence `broker` (its leaderships move away), then bring it back into every ISR it left."""
    h.fence(broker)
    h.register(broker, incarnation=f"again-{broker}", directory=f"dir-{broker}")
    h.heartbeat(broker)
    for topic, p in h.image.iter_partitions():
        if broker in p.replicas and broker not in p.isr:
            set_isr(h, topic.name, p.partition_id, [*p.isr, broker])


def elect(h, *refs):
    request = operations_pb2.ElectLeadersRequest(
        partitions=[operations_pb2.TopicPartitionRef(topic=t, partition=p) for t, p in refs])
    return h.commit(decide_elect_leaders(h.image, request, **h.ctx()))


def test_restart_misleads_then_auto_rebalance_brings_leaders_back(h):
    restart(h, 0)
    share = leader_imbalance(h.image)
    assert share[0] == 1.0  # broker 0 leads none of its preferred partitions now
    moved = h.commit(decide_auto_leader_rebalance(h.image, imbalance_percentage_max=10, now_ms=h.now_ms,
                                                  request_id="rebalance"))
    assert moved and all(p.leader == p.preferred_leader for p in h.image.topics["t"].partitions)
    assert leader_imbalance(h.image)[0] == 0.0


def test_auto_rebalance_leaves_brokers_under_the_threshold_alone(h):
    restart(h, 0)
    decision = decide_auto_leader_rebalance(h.image, imbalance_percentage_max=100, now_ms=h.now_ms,
                                            request_id="rebalance")
    assert decision.records == []


def test_elect_on_demand_never_outside_the_isr(h):
    h.fence(0)
    (result,) = elect(h, ("t", next(p.partition_id for p in h.image.topics["t"].partitions
                                    if p.preferred_leader == 0))).results
    assert result.error == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE and "is not live" in result.error_message
    h.register(0, incarnation="back", directory="dir-0")
    h.heartbeat(0)
    # Live again but not yet back in the ISR: still refused.
    results = elect(h)
    assert results.results and all(
        r.error == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE for r in results.results
    )
    assert all("not in the ISR" in r.error_message for r in results.results)
    unknown = elect(h, ("t", 99), ("nope", 0)).results
    assert [r.error for r in unknown] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2


def test_elect_on_demand_moves_leadership_back(h):
    restart(h, 1)
    results = elect(h).results
    assert results and all(r.error == ErrorCode.NONE for r in results)
    assert all(p.leader == p.preferred_leader for p in h.image.topics["t"].partitions)
    assert elect(h).results == []  # nothing left to move


def test_decommission_refused_while_replicas_are_assigned(h):
    before = h.image.copy()
    reply = h.commit(decide_decommission_broker(h.image, operations_pb2.UnregisterBrokerRequest(broker_id=1),
                                                **h.ctx()))
    assert reply.error == ErrorCode.BROKER_HOLDS_REPLICAS
    assert reply.error_message.startswith("broker 1 still holds replicas of 6 partition(s): t-0, t-1, t-2")
    assert h.image == before
    missing = h.commit(
        decide_decommission_broker(h.image, operations_pb2.UnregisterBrokerRequest(broker_id=7), **h.ctx())
    )
    assert missing.error == ErrorCode.BROKER_NOT_AVAILABLE


def test_decommission_of_an_empty_broker(harness):
    harness.add_brokers(range(4))
    harness.create_topic("t", 1, 1)
    empty = next(b for b in range(4) if b not in harness.image.topics["t"].partitions[0].replicas)
    reply = harness.commit(decide_decommission_broker(
        harness.image, operations_pb2.UnregisterBrokerRequest(broker_id=empty), **harness.ctx()))
    assert reply.error == ErrorCode.NONE and empty not in harness.image.brokers
