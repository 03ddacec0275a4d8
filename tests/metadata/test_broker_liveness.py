"""Broker registration, heartbeats, session expiry, and the elections fencing and unfencing cause."""

from __future__ import annotations

import pytest

from kanal.metadata import (
    NO_LEADER,
    decide_alter_partition,
    decide_broker_heartbeat,
    decide_preferred_leader_elections,
    decide_register_broker,
    decide_session_expirations,
    decide_unregister_broker,
    describe_brokers,
)
from kanal.v1 import controller_pb2
from kanal.v1 import metadata_pb2 as m
from kanal.v1.error import ErrorCode, KanalError


def changes(records):
    return [r.partition_change for r in records if r.WhichOneof("record") == "partition_change"]


def shrink_isr(h, topic_name: str, partition_id: int, new_isr: list[int]) -> None:
    topic = h.image.topics[topic_name]
    p = topic.partitions[partition_id]
    reply = h.commit(
        decide_alter_partition(
            h.image,
            controller_pb2.AlterPartitionRequest(
                broker_id=p.leader,
                broker_epoch=h.image.brokers[p.leader].broker_epoch,
                items=[
                    controller_pb2.AlterPartitionRequest.Item(
                        topic_id=topic.topic_id,
                        partition_id=partition_id,
                        leader_epoch=p.leader_epoch,
                        partition_epoch=p.partition_epoch,
                        new_isr=new_isr,
                    )
                ],
            ),
            **h.ctx(),
        )
    )
    assert reply.items[0].error == ErrorCode.NONE


# -- registration ----------------------------------------------------------------------------------------


def test_registration_epoch_is_the_record_offset_and_starts_fenced(harness) -> None:
    h = harness
    h.commit(
        decide_register_broker(
            h.image,
            controller_pb2.RegisterBrokerRequest(broker_id=4, incarnation_id="x", endpoint="h:1"),
            **h.ctx(),
        )
    )
    offset = h.image.next_offset
    decision = decide_register_broker(
        h.image,
        controller_pb2.RegisterBrokerRequest(
            broker_id=7, incarnation_id="abc", endpoint="b7:9092", rack="r1", metrics_endpoint="b7:9100"
        ),
        **h.ctx("broker-7"),
    )
    assert decision.reply.broker_epoch == offset == 1
    [record] = decision.records
    assert record.register_broker.fenced and record.register_broker.broker_epoch == offset
    assert record.principal == "broker-7"
    h.commit(decision)
    reg = h.image.brokers[7]
    assert (reg.broker_epoch, reg.fenced, reg.rack, reg.metrics_endpoint) == (1, True, "r1", "b7:9100")
    assert [(d.broker_id, d.fenced) for d in describe_brokers(h.image)] == [(4, True), (7, True)]


def test_same_incarnation_again_is_a_retry(cluster3) -> None:
    h = cluster3
    reg = h.image.brokers[1]
    decision = decide_register_broker(
        h.image,
        controller_pb2.RegisterBrokerRequest(
            broker_id=1,
            incarnation_id=reg.incarnation_id,
            endpoint=reg.endpoint,
            directory_id=reg.directory_id,
        ),
        **h.ctx(),
    )
    assert decision.records == [] and decision.reply.broker_epoch == reg.broker_epoch
    decision = decide_register_broker(
        h.image,
        controller_pb2.RegisterBrokerRequest(
            broker_id=1, incarnation_id=reg.incarnation_id, endpoint="elsewhere:1"
        ),
        **h.ctx(),
    )
    assert decision.records == [] and decision.reply.error == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        (controller_pb2.RegisterBrokerRequest(broker_id=-1, incarnation_id="i", endpoint="h:1"), ">= 0"),
        (controller_pb2.RegisterBrokerRequest(broker_id=1, endpoint="h:1"), "incarnation"),
        (controller_pb2.RegisterBrokerRequest(broker_id=1, incarnation_id="i"), "endpoint"),
    ],
)
def test_bad_registrations(harness, request_, fragment) -> None:
    decision = decide_register_broker(harness.image, request_, **harness.ctx())
    assert decision.records == [] and decision.reply.error == ErrorCode.INVALID_REQUEST
    assert fragment in decision.reply.error_message


def test_new_incarnation_replaces_a_live_registration(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 6, 3)
    old = h.image.brokers[1]
    led_by_1 = {p.partition_id for p in h.image.topics["t"].partitions if p.leader == 1}
    decision = decide_register_broker(
        h.image,
        controller_pb2.RegisterBrokerRequest(
            broker_id=1, incarnation_id="restarted", endpoint="broker1:9092"
        ),
        **h.ctx("broker-1"),
    )
    kinds = [r.WhichOneof("record") for r in decision.records]
    assert kinds[0] == "broker_registration_change" and kinds[-2:] == ["unregister_broker", "register_broker"]
    assert decision.reply.broker_epoch == h.image.next_offset + len(decision.records) - 1
    h.commit(decision)
    new = h.image.brokers[1]
    assert new.incarnation_id == "restarted" and new.fenced and new.broker_epoch > old.broker_epoch
    for p in h.image.topics["t"].partitions:
        assert p.leader != 1 and 1 not in p.isr
        assert p.leader_epoch == (1 if p.partition_id in led_by_1 else 0)
    # The old incarnation's heartbeats are now stale.
    stale = decide_broker_heartbeat(
        h.image,
        controller_pb2.BrokerHeartbeatRequest(
            broker_id=1, broker_epoch=old.broker_epoch, metadata_offset=h.image.next_offset
        ),
        **h.ctx(),
    )
    assert stale.records == [] and stale.reply.error == ErrorCode.STALE_BROKER_EPOCH


def test_new_incarnation_of_a_fenced_broker_does_not_fence_again(cluster3) -> None:
    h = cluster3
    h.fence(2)
    decision = decide_register_broker(
        h.image,
        controller_pb2.RegisterBrokerRequest(broker_id=2, incarnation_id="again", endpoint="broker2:9092"),
        **h.ctx(),
    )
    assert [r.WhichOneof("record") for r in decision.records] == ["unregister_broker", "register_broker"]
    h.commit(decision)


def test_unregister_fences_first(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 3, 3)
    h.commit(decide_unregister_broker(h.image, 0, **h.ctx()))
    assert 0 not in h.image.brokers
    assert all(p.leader != 0 and 0 not in p.isr for _, p in h.image.iter_partitions())
    with pytest.raises(KanalError) as info:
        decide_unregister_broker(h.image, 0, **h.ctx())
    assert info.value.code == ErrorCode.BROKER_NOT_AVAILABLE


# -- heartbeats ------------------------------------------------------------------------------------------


def test_fenced_broker_is_unfenced_once_caught_up(harness) -> None:
    h = harness
    epoch = h.register(5)
    not_yet = h.heartbeat(5, metadata_offset=epoch)
    assert not_yet.fenced and h.image.brokers[5].fenced
    reply = h.heartbeat(5, metadata_offset=epoch + 1)
    assert not reply.fenced and not h.image.brokers[5].fenced
    assert reply.metadata_end_offset == h.image.next_offset
    again = decide_broker_heartbeat(
        h.image,
        controller_pb2.BrokerHeartbeatRequest(broker_id=5, broker_epoch=epoch, metadata_offset=0),
        **h.ctx(),
    )
    assert again.records == [] and not again.reply.fenced


def test_catch_up_offset_can_be_raised_by_the_shell(harness) -> None:
    h = harness
    epoch = h.register(5)
    request = controller_pb2.BrokerHeartbeatRequest(
        broker_id=5, broker_epoch=epoch, metadata_offset=epoch + 1
    )
    held = decide_broker_heartbeat(h.image, request, catch_up_offset=epoch + 5, **h.ctx())
    assert held.records == [] and held.reply.fenced
    assert decide_broker_heartbeat(h.image, request, catch_up_offset=epoch + 1, **h.ctx()).records


def test_heartbeat_with_unknown_broker_or_stale_epoch(cluster3) -> None:
    h = cluster3
    for broker_id, epoch in ((9, 0), (1, h.image.brokers[1].broker_epoch - 1)):
        decision = decide_broker_heartbeat(
            h.image, controller_pb2.BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=epoch), **h.ctx()
        )
        assert decision.records == [] and decision.reply.error == ErrorCode.STALE_BROKER_EPOCH
        registered = h.image.brokers[broker_id].broker_epoch if broker_id in h.image.brokers else -1
        assert decision.reply.registered_broker_epoch == registered
        # Unknown: register again. Older than registered: another process has the id since; stop.
        advice = "register again" if registered < 0 else "stop"
        assert advice in decision.reply.error_message


def test_controlled_shutdown_moves_leadership_then_is_ready(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 9, 2)
    assert any(p.leader == 0 for p in h.image.topics["t"].partitions)
    reply = h.heartbeat(0, want_shutdown=True)
    assert reply.fenced and reply.shutdown_ready
    assert h.image.brokers[0].fenced
    assert all(p.leader not in (0, NO_LEADER) and 0 not in p.isr for p in h.image.topics["t"].partitions)
    # Further shutdown heartbeats change nothing.
    decision = decide_broker_heartbeat(
        h.image,
        controller_pb2.BrokerHeartbeatRequest(
            broker_id=0,
            broker_epoch=h.image.brokers[0].broker_epoch,
            want_shutdown=True,
            metadata_offset=h.image.next_offset,
        ),
        **h.ctx(),
    )
    assert decision.records == [] and decision.reply.shutdown_ready


# -- session expiry and elections -----------------------------------------------------------------------


def test_session_expiry_fences_only_expired_brokers(cluster3) -> None:
    h = cluster3
    beats = {0: 1_000, 1: 5_000, 2: 6_001}
    decision = decide_session_expirations(
        h.image, beats, now_ms=11_000, session_timeout_ms=5_000, request_id="x"
    )
    assert decision.reply == [0, 1]
    assert [r.broker_registration_change.broker_id for r in decision.records] == [0, 1]
    assert all(r.broker_registration_change.fenced for r in decision.records)
    assert all(r.principal == "controller" and r.time_ms == 11_000 for r in decision.records)
    assert "session timeout" in decision.records[0].broker_registration_change.reason
    nobody = decide_session_expirations(
        h.image, beats, now_ms=10_000, session_timeout_ms=9_000, request_id="y"
    )
    assert nobody.records == [] and nobody.reply == []


def test_session_expiry_needs_every_live_brokers_heartbeat(cluster3) -> None:
    with pytest.raises(ValueError, match="no heartbeat time for live broker 2"):
        decide_session_expirations(
            cluster3.image, {0: 1, 1: 1}, now_ms=2, session_timeout_ms=5, request_id="x"
        )
    with pytest.raises(ValueError, match="session_timeout_ms"):
        decide_session_expirations(cluster3.image, {}, now_ms=2, session_timeout_ms=0, request_id="x")


def test_fencing_the_leader_elects_the_next_isr_member_with_a_bumped_epoch(cluster3) -> None:
    h = cluster3
    topic = h.create_topic("t", 6, 3)
    before = {p.partition_id: p for p in topic.partitions}
    records = h.fence(0)
    for c in changes(records):
        assert c.cause in (m.CAUSE_LEADER_FENCED, m.CAUSE_REPLICA_FENCED)
        assert "broker 0 fenced" in c.reason
    assert len(changes(records)) == 6  # RF 3 on 3 brokers: broker 0 is in every partition
    for p in h.image.topics["t"].partitions:
        old = before[p.partition_id]
        assert 0 not in p.isr and p.partition_epoch == old.partition_epoch + 1
        if old.leader == 0:
            expected = next(b for b in old.replicas if b != 0)
            assert (p.leader, p.leader_epoch) == (expected, old.leader_epoch + 1)
        else:
            assert (p.leader, p.leader_epoch) == (old.leader, old.leader_epoch)


def test_last_isr_member_stays_when_the_partition_goes_offline_and_recovers(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 2)
    p = h.image.topics["t"].partitions[0]
    leader, follower = p.replicas
    shrink_isr(h, "t", 0, [leader])
    records = h.fence(leader)
    [c] = changes(records)
    assert c.leader == NO_LEADER and not c.HasField("isr") and c.cause == m.CAUSE_LEADER_FENCED
    p = h.image.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.leader_epoch) == (NO_LEADER, (leader,), 1)
    # The follower was out of sync: its own return does not bring the partition back.
    h.fence(follower)
    assert h.image.topics["t"].partitions[0].offline
    h.heartbeat(follower)
    assert h.image.topics["t"].partitions[0].offline
    # The last in-sync replica does.
    h.heartbeat(leader)
    p = h.image.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.leader_epoch) == (leader, (leader,), 2)


def test_recovery_is_recorded_with_its_cause(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 3, 1)
    led_by_2 = [p.partition_id for p in h.image.topics["t"].partitions if p.leader == 2]
    h.fence(2)
    reg = h.image.brokers[2]
    decision = decide_broker_heartbeat(
        h.image,
        controller_pb2.BrokerHeartbeatRequest(
            broker_id=2, broker_epoch=reg.broker_epoch, metadata_offset=h.image.next_offset
        ),
        **h.ctx(),
    )
    assert decision.records[0].broker_registration_change.fenced is False
    recovered = changes(decision.records)
    assert [c.partition_id for c in recovered] == led_by_2
    assert all(c.cause == m.CAUSE_LEADER_RECOVERED and c.leader == 2 for c in recovered)
    assert "unfenced" in recovered[0].reason


def test_unclean_election_picks_a_live_replica_outside_the_isr(cluster3) -> None:
    h = cluster3
    h.create_topic("dirty", 1, 3, {"unclean.leader.election.enable": "true"})
    h.create_topic("clean", 1, 3)
    for name in ("dirty", "clean"):
        shrink_isr(h, name, 0, [h.image.topics[name].partitions[0].leader])
    dirty, clean = h.image.topics["dirty"].partitions[0], h.image.topics["clean"].partitions[0]
    to_fence = sorted({dirty.leader, clean.leader})
    records = h.fence(*to_fence)
    cause = {c.topic_id: c.cause for c in changes(records)}
    assert cause[h.image.topics["dirty"].topic_id] == m.CAUSE_UNCLEAN_ELECTION
    assert cause[h.image.topics["clean"].topic_id] == m.CAUSE_LEADER_FENCED
    new_dirty = h.image.topics["dirty"].partitions[0]
    expected = next(b for b in dirty.replicas if b not in to_fence)
    assert (new_dirty.leader, new_dirty.isr) == (expected, (expected,))
    assert new_dirty.leader_epoch == dirty.leader_epoch + 1
    new_clean = h.image.topics["clean"].partitions[0]
    assert (new_clean.leader, new_clean.isr) == (NO_LEADER, (clean.leader,))


def test_unfencing_a_replica_outside_the_isr_triggers_unclean_election_when_allowed(cluster3) -> None:
    h = cluster3
    h.create_topic("dirty", 1, 2, {"unclean.leader.election.enable": "true"})
    p = h.image.topics["dirty"].partitions[0]
    leader, follower = p.replicas
    shrink_isr(h, "dirty", 0, [leader])
    h.fence(follower)
    h.fence(leader)
    assert h.image.topics["dirty"].partitions[0].offline
    h.heartbeat(follower)
    p = h.image.topics["dirty"].partitions[0]
    assert (p.leader, p.isr) == (follower, (follower,))


def test_fencing_several_brokers_writes_one_change_per_partition(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 6, 3)
    records = h.fence(0, 1)
    assert [r.broker_registration_change.broker_id for r in records[:2]] == [0, 1]
    assert sorted(c.partition_id for c in changes(records)) == list(range(6))
    for p in h.image.topics["t"].partitions:
        assert (p.leader, p.isr) == (2, (2,))


def test_preferred_leader_election_moves_leaders_home(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 6, 2)
    preferred = {p.partition_id: p.replicas[0] for p in h.image.topics["t"].partitions}
    h.fence(1)
    h.heartbeat(1)
    moved_away = [pid for pid, b in preferred.items() if b == 1]
    assert moved_away and all(h.image.topics["t"].partitions[pid].leader != 1 for pid in moved_away)
    # Broker 1 left the ISRs when fenced; its leaders re-add it once it has caught up.
    for p in list(h.image.topics["t"].partitions):
        if 1 in p.replicas and 1 not in p.isr:
            leader = h.image.brokers[p.leader]
            h.commit(
                decide_alter_partition(
                    h.image,
                    controller_pb2.AlterPartitionRequest(
                        broker_id=p.leader,
                        broker_epoch=leader.broker_epoch,
                        items=[
                            controller_pb2.AlterPartitionRequest.Item(
                                topic_id=h.image.topics["t"].topic_id,
                                partition_id=p.partition_id,
                                leader_epoch=p.leader_epoch,
                                partition_epoch=p.partition_epoch,
                                new_isr=[*p.isr, 1],
                                new_isr_broker_epochs=[h.image.brokers[b].broker_epoch for b in [*p.isr, 1]],
                            )
                        ],
                    ),
                    **h.ctx(),
                )
            )
    decision = decide_preferred_leader_elections(h.image, now_ms=h.now_ms, request_id="rebalance")
    assert sorted(pid for _, pid in decision.reply) == sorted(moved_away)
    assert all(c.cause == m.CAUSE_PREFERRED_ELECTION for c in changes(decision.records))
    h.commit(decision)
    assert {p.partition_id: p.leader for p in h.image.topics["t"].partitions} == preferred
    assert decide_preferred_leader_elections(h.image, now_ms=h.now_ms, request_id="again").records == []


# -- controlled shutdown holds (issue 40: a heartbeat right after the request unfenced the broker) ---------


def test_a_heartbeat_right_after_the_shutdown_request_does_not_unfence(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 6, 3)
    shutdown = h.heartbeat(1, want_shutdown=True)
    assert shutdown.fenced and shutdown.shutdown_ready
    reg = h.image.brokers[1]
    assert reg.fenced and reg.in_controlled_shutdown
    assert all(p.leader != 1 and 1 not in p.isr for p in h.image.topics["t"].partitions)
    # The broker's heartbeat thread, 8 ms later, caught up: it used to unfence the broker here.
    h.now_ms += 8
    offset = h.image.next_offset
    reply = h.heartbeat(1, metadata_offset=h.image.next_offset + 100)
    assert reply.fenced and reply.shutdown_ready and h.image.next_offset == offset
    assert h.image.brokers[1].in_controlled_shutdown
    # Asking again changes nothing either.
    assert h.heartbeat(1, want_shutdown=True).fenced and h.image.next_offset == offset
    # Only a new registration (the restarted process) clears it; it is then unfenced once caught up.
    epoch = h.register(1)
    assert not h.image.brokers[1].in_controlled_shutdown and h.image.brokers[1].fenced
    h.heartbeat(1)
    assert not h.image.brokers[1].fenced and h.image.brokers[1].broker_epoch == epoch


def test_a_fenced_broker_that_asks_to_shut_down_is_marked_too(cluster3) -> None:
    h = cluster3
    h.commit(decide_session_expirations(h.image, {0: h.now_ms, 1: 0, 2: h.now_ms}, now_ms=h.now_ms + 10_000,
                                        session_timeout_ms=9_000, request_id="expiry"))
    assert h.image.brokers[1].fenced and not h.image.brokers[1].in_controlled_shutdown
    assert h.heartbeat(1, want_shutdown=True).shutdown_ready
    assert h.image.brokers[1].in_controlled_shutdown
    assert h.heartbeat(1).fenced


def test_the_mark_survives_a_snapshot(cluster3) -> None:
    from kanal.metadata import MetadataImage, apply_batch
    from kanal.metadata.snapshot import image_to_snapshot

    h = cluster3
    h.heartbeat(2, want_shutdown=True)
    restored = MetadataImage()
    apply_batch(restored, m.MetadataBatch(controller_epoch=h.image.controller_epoch,
                                          records=image_to_snapshot(h.image).records), 0)
    assert restored.brokers[2].in_controlled_shutdown and restored.brokers[2].fenced


def test_apply_refuses_to_unfence_a_broker_in_controlled_shutdown(cluster3) -> None:
    from kanal.metadata import MetadataInvariantError, apply_batch

    h = cluster3
    h.heartbeat(0, want_shutdown=True)
    reg = h.image.brokers[0]
    unfence = m.MetadataBatch(controller_epoch=1, records=[m.MetadataRecord(
        broker_registration_change=m.BrokerRegistrationChangeRecord(
            broker_id=0, broker_epoch=reg.broker_epoch, fenced=False, reason="x"))])
    with pytest.raises(MetadataInvariantError, match="controlled shutdown"):
        apply_batch(h.image, unfence, h.image.next_offset)
