"""Issue 18, findings 5 and 6: broker epochs that fence (KIP-903), one live process per broker id, and
disk identities (a replica whose disk was replaced is never elected from the ISR; KIP-853 controller
directory ids)."""

from __future__ import annotations

from kanal.metadata import (
    decide_alter_partition,
    decide_register_broker,
    decide_register_controller,
    image_from_snapshot,
    image_to_snapshot,
    offline_reason,
)
from kanal.metadata.ids import NO_LEADER
from kanal.v1 import controller_pb2
from kanal.v1 import metadata_pb2 as m
from kanal.v1.error import ErrorCode

from .conftest import Harness

Item = controller_pb2.AlterPartitionRequest.Item


def expand(h: Harness, topic_name: str, pid: int, member: int, epochs: list[int] | None):
    topic = h.image.topics[topic_name]
    p = topic.partitions[pid]
    new_isr = [*p.isr, member]
    request = controller_pb2.AlterPartitionRequest(
        broker_id=p.leader,
        broker_epoch=h.image.brokers[p.leader].broker_epoch,
        items=[Item(topic_id=topic.topic_id, partition_id=pid, leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch, new_isr=new_isr, new_isr_broker_epochs=epochs or [])],
    )
    return decide_alter_partition(h.image, request, **h.ctx())


def shrink_to_leader(h: Harness, topic_name: str, pid: int) -> None:
    topic = h.image.topics[topic_name]
    p = topic.partitions[pid]
    request = controller_pb2.AlterPartitionRequest(
        broker_id=p.leader,
        broker_epoch=h.image.brokers[p.leader].broker_epoch,
        items=[Item(topic_id=topic.topic_id, partition_id=pid, leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch, new_isr=[p.leader])],
    )
    assert h.commit(decide_alter_partition(h.image, request, **h.ctx())).items[0].error == ErrorCode.NONE


# -- KIP-903: an ISR expansion names each member's broker epoch ---------------------------------------


def test_expansion_with_an_earlier_incarnations_epoch_is_refused(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 3)
    p = h.image.topics["t"].partitions[0]
    follower = p.replicas[2]
    shrink_to_leader(h, "t", 0)
    seen_epoch = h.image.brokers[follower].broker_epoch  # the leader saw it fetch at this epoch
    # The follower restarts (a crash: its session expired, then a new incarnation registers).
    h.fence(follower)
    h.register(follower)
    h.heartbeat(follower)
    assert h.image.brokers[follower].broker_epoch != seen_epoch
    decision = expand(h, "t", 0, follower, [-1] * len(p.isr[:1]) + [seen_epoch])
    assert decision.records == []
    assert decision.reply.items[0].error == ErrorCode.INELIGIBLE_REPLICA
    # Without any epoch an addition is refused too: the leader must vouch for an incarnation.
    decision = expand(h, "t", 0, follower, None)
    assert decision.records == [] and decision.reply.items[0].error == ErrorCode.INELIGIBLE_REPLICA
    # With the current epoch (the leader saw the new incarnation fetch) it joins, with its directory.
    current = h.image.brokers[follower].broker_epoch
    decision = expand(h, "t", 0, follower, [-1, current])
    assert decision.reply.items[0].error == ErrorCode.NONE
    [record] = decision.records
    assert record.partition_change.cause == m.CAUSE_ISR_EXPAND
    assert list(record.partition_change.isr_directory_ids) == [f"dir-{p.leader}", f"dir-{follower}"]
    h.commit(decision)
    assert h.image.topics["t"].partitions[0].recorded_directory(follower) == f"dir-{follower}"


def test_a_shrink_needs_no_epochs_but_a_wrong_one_given_is_refused(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 3)
    topic = h.image.topics["t"]
    p = topic.partitions[0]
    stale = [h.image.brokers[b].broker_epoch for b in p.isr[:2]]
    stale[1] += 1000
    request = controller_pb2.AlterPartitionRequest(
        broker_id=p.leader, broker_epoch=h.image.brokers[p.leader].broker_epoch,
        items=[Item(topic_id=topic.topic_id, partition_id=0, leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch, new_isr=list(p.isr[:2]), new_isr_broker_epochs=stale)])
    assert (
        decide_alter_partition(h.image, request, **h.ctx()).reply.items[0].error
        == ErrorCode.INELIGIBLE_REPLICA
    )
    shrink_to_leader(h, "t", 0)  # no epochs at all: removing members is always safe


# -- one live process per broker id --------------------------------------------------------------------


def register_request(
    broker_id: int, incarnation: str, directory: str = ""
) -> controller_pb2.RegisterBrokerRequest:
    return controller_pb2.RegisterBrokerRequest(broker_id=broker_id, incarnation_id=incarnation,
                                                endpoint=f"b{broker_id}-{incarnation}:9092",
                                                directory_id=directory or f"dir-{broker_id}")


def test_a_second_incarnation_is_refused_while_the_first_has_a_live_session(cluster3) -> None:
    h = cluster3
    old_epoch = h.image.brokers[1].broker_epoch
    h.last_heartbeat_ms[1] = h.now_ms - 100
    decision = decide_register_broker(h.image, register_request(1, "intruder"), **h.ctx(),
                                      last_heartbeat_ms=h.last_heartbeat_ms, session_timeout_ms=5_000)
    assert decision.records == []
    assert decision.reply.error == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert "registered by incarnation" in decision.reply.error_message
    assert h.image.brokers[1].broker_epoch == old_epoch
    # Once the old session expired, the newer registration wins (a crashed broker restarting).
    h.now_ms += 6_000
    decision = decide_register_broker(h.image, register_request(1, "restart"), **h.ctx(),
                                      last_heartbeat_ms=h.last_heartbeat_ms, session_timeout_ms=5_000)
    assert decision.reply.error == ErrorCode.NONE
    h.commit(decision)
    assert h.image.brokers[1].incarnation_id == "restart"


def test_a_broker_fenced_by_controlled_shutdown_restarts_at_once(cluster3) -> None:
    h = cluster3
    h.heartbeat(2, want_shutdown=True)
    assert h.image.brokers[2].fenced
    decision = decide_register_broker(h.image, register_request(2, "next-run"), **h.ctx(),
                                      last_heartbeat_ms={2: h.now_ms}, session_timeout_ms=5_000)
    assert decision.reply.error == ErrorCode.NONE


def test_the_superseded_process_is_told_to_stop(cluster3) -> None:
    from kanal.metadata import decide_broker_heartbeat

    h = cluster3
    old_epoch = h.image.brokers[0].broker_epoch
    h.fence(0)  # the old process hung past its session
    h.register(0)
    decision = decide_broker_heartbeat(
        h.image, controller_pb2.BrokerHeartbeatRequest(broker_id=0, broker_epoch=old_epoch), **h.ctx())
    assert decision.reply.error == ErrorCode.STALE_BROKER_EPOCH
    assert decision.reply.registered_broker_epoch == h.image.brokers[0].broker_epoch > old_epoch


# -- KIP-966's gap: a replica back on an empty disk is not elected --------------------------------------


def last_isr_member_setup() -> tuple[Harness, int, list[int]]:
    """Topic t (1 partition, 3 replicas); the other two replicas fenced, then the leader too: the
    partition is offline with the leader as its last in-sync replica."""
    h = Harness()
    h.add_brokers([0, 1, 2])
    h.create_topic("t", 1, 3)
    p = h.image.topics["t"].partitions[0]
    last = p.leader
    others = [b for b in p.replicas if b != last]
    h.fence(*others)
    h.fence(last)
    p = h.image.topics["t"].partitions[0]
    assert (p.leader, p.isr) == (NO_LEADER, (last,))
    assert p.recorded_directory(last) == f"dir-{last}"
    return h, last, others


def test_last_isr_member_back_on_an_empty_disk_is_not_elected() -> None:
    h, last, others = last_isr_member_setup()
    h.register(last, directory="wiped-disk")
    h.heartbeat(last)  # caught up: unfenced
    assert not h.image.brokers[last].fenced
    p = h.image.topics["t"].partitions[0]
    assert p.leader == NO_LEADER and p.isr == (last,)
    live = set(h.image.live_brokers())
    reason = offline_reason(p, live, {b: r.directory_id for b, r in h.image.brokers.items()})
    assert "another data directory" in reason and "dir-" in reason
    # The other replicas come back: still offline (they are not in the ISR; no clean leader).
    for b in others:
        h.register(b)
        h.heartbeat(b)
    assert h.image.topics["t"].partitions[0].leader == NO_LEADER
    # Unclean election, when allowed, prefers a replica that still has its log.
    from kanal.metadata import decide_alter_configs
    from kanal.v1 import admin_pb2

    h.commit(decide_alter_configs(h.image, admin_pb2.AlterConfigsRequest(changes=[
        admin_pb2.AlterConfigsRequest.Change(
            resource=admin_pb2.ConfigResource(type=m.CONFIG_RESOURCE_TOPIC, name="t"),
            ops=[admin_pb2.AlterConfigOp(key="unclean.leader.election.enable", op=admin_pb2.AlterConfigOp.SET,
                                         value="true")])]), **h.ctx()))
    p = h.image.topics["t"].partitions[0]
    assert p.leader in others and p.isr == (p.leader,)
    assert p.recorded_directory(p.leader) == f"dir-{p.leader}"


def test_last_isr_member_back_on_its_own_disk_leads_again() -> None:
    h, last, _ = last_isr_member_setup()
    h.register(last)  # same directory id: same disk
    h.heartbeat(last)
    p = h.image.topics["t"].partitions[0]
    assert p.leader == last


def test_offline_reason_without_a_live_isr_member() -> None:
    h, last, _ = last_isr_member_setup()
    p = h.image.topics["t"].partitions[0]
    assert "no in-sync replica is live" in offline_reason(p, set(h.image.live_brokers()), {})
    assert offline_reason(h.image.topics["t"].partitions[0].__class__(
        p.partition_id, p.replicas, p.isr, last, p.leader_epoch, p.partition_epoch), set(), {}) == ""


def test_directory_ids_survive_a_snapshot() -> None:
    h, _, _ = last_isr_member_setup()
    h.commit(decide_register_controller(h.image, controller_pb2.RegisterControllerRequest(
        controller_id=1, directory_id="ctl-dir-1"), **h.ctx()))
    restored = image_from_snapshot(image_to_snapshot(h.image))
    assert restored == h.image
    assert restored.controller_directories == {1: "ctl-dir-1"}


# -- KIP-853: controller directory ids -------------------------------------------------------------------


def test_controller_directory_is_recorded_once_and_never_overwritten(harness) -> None:
    h = harness

    def register(directory: str):
        return decide_register_controller(h.image, controller_pb2.RegisterControllerRequest(
            controller_id=2, directory_id=directory), **h.ctx())

    first = register("disk-a")
    assert [r.WhichOneof("record") for r in first.records] == ["controller_registration"]
    h.commit(first)
    again = register("disk-a")
    assert again.records == [] and again.reply.error == ErrorCode.NONE
    other = register("empty-disk")
    assert other.records == [] and other.reply.error == ErrorCode.INVALID_REQUEST
    assert "must not vote" in other.reply.error_message
    assert h.image.controller_directories == {2: "disk-a"}
