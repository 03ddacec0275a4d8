"""Broker liveness over gRPC, with test code playing the brokers: a broker that stops heartbeating is
fenced within its session timeout and its partitions get new leaders from the ISR; when it heartbeats
again it is unfenced."""

from __future__ import annotations

import threading

import pytest

from kanal.v1 import admin_pb2

pytestmark = pytest.mark.cluster


def _fenced(q, i):
    cluster = q.stub(i).DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=5)
    return {b.broker_id: b.fenced for b in cluster.brokers}


def test_silent_broker_is_fenced_its_leaderships_move_and_it_is_unfenced_when_back(
    quorum_factory, fake_brokers_factory, replay_log, wait
):
    q = quorum_factory(extra_args=["--session-timeout-ms", "1500", "--session-check-interval-ms", "50",
                                         "--election-timeout-ms", "200"])
    active = q.wait_active()
    brokers = fake_brokers_factory(q)
    brokers.register_live([1, 2, 3])
    silent: set[int] = set()
    stop = threading.Event()
    errors: list[str] = []

    def heartbeats():
        for _ in range(3_000):  # bounded; every 100 ms, well inside the 1.5 s session
            if stop.is_set():
                return
            for b in (1, 2, 3):
                if b not in silent:
                    reply = brokers.heartbeat(b)
                    if reply.error:
                        errors.append(f"broker {b}: {reply.error_message}")
            stop.wait(0.1)

    thread = threading.Thread(target=heartbeats, name="fake-broker-heartbeats")
    thread.start()
    try:
        reply = q.stub(active).CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[admin_pb2.CreatableTopic(name="orders", partitions=6, replication_factor=3)]
            ),
            timeout=10,
        )
        assert reply.results[0].error == 0
        before = replay_log(q.fetch_all(active)).topics["orders"].partitions
        led_by_1 = [p for p in before if p.leader == 1]
        assert led_by_1 and all(set(p.isr) == {1, 2, 3} for p in before)

        silent.add(1)
        wait(lambda: _fenced(q, active).get(1) is True, 20, "broker 1 to be fenced")
        assert _fenced(q, active) == {1: True, 2: False, 3: False}
        image = replay_log(q.fetch_all(active))
        after = {p.partition_id: p for p in image.topics["orders"].partitions}
        for p in led_by_1:
            moved = after[p.partition_id]
            assert moved.leader in (2, 3) and moved.leader in p.isr
            assert moved.leader_epoch == p.leader_epoch + 1
        assert all(1 not in p.isr for p in after.values())
        fence_reasons = [
            r.broker_registration_change.reason
            for b in q.fetch_all(active)
            for r in b.metadata_batch().records
            if r.WhichOneof("record") == "broker_registration_change" and r.broker_registration_change.fenced
        ]
        assert any("session timeout" in reason for reason in fence_reasons)

        silent.discard(1)
        wait(lambda: _fenced(q, active).get(1) is False, 20, "broker 1 to be unfenced")
        changes = [
            r
            for b in q.fetch_all(active)
            for r in b.metadata_batch().records
            if r.WhichOneof("record") == "broker_registration_change"
            and r.broker_registration_change.broker_id == 1
        ]
        assert [c.broker_registration_change.fenced for c in changes[-2:]] == [True, False]
        assert changes[-1].principal == "broker-1"
        assert changes[-2].principal == "controller"
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors[:3]
