"""apply / apply_batch: every record type, the invariant checks, atomicity and offsets."""

from __future__ import annotations

import random

import pytest

from kanal.metadata import (
    MetadataImage,
    MetadataInvariantError,
    apply,
    apply_batch,
    decide_create_topics,
    effective_topic_config,
)
from kanal.v1 import admin_pb2
from kanal.v1 import metadata_pb2 as m


def rec(**body) -> m.MetadataRecord:
    return m.MetadataRecord(time_ms=5, principal="test", request_id="r", **body)


def register(broker_id: int, epoch: int, fenced: bool = False, rack: str = "") -> m.MetadataRecord:
    return rec(
        register_broker=m.RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=f"i{broker_id}",
            broker_epoch=epoch,
            endpoint=f"h{broker_id}:1",
            rack=rack,
            fenced=fenced,
        )
    )


def topic(name: str = "t", topic_id: str = "tid") -> m.MetadataRecord:
    return rec(topic=m.TopicRecord(name=name, topic_id=topic_id))


def partition(pid: int, replicas, isr=None, leader=None, topic_id: str = "tid") -> m.MetadataRecord:
    isr = list(replicas) if isr is None else isr
    leader = replicas[0] if leader is None else leader
    return rec(
        partition=m.PartitionRecord(
            topic_id=topic_id,
            partition_id=pid,
            replicas=replicas,
            isr=isr,
            leader=leader,
        )
    )


def change(pid: int = 0, leader: int | None = None, isr=None, cause=m.CAUSE_LEADER_FENCED, topic_id="tid"):
    body = m.PartitionChangeRecord(topic_id=topic_id, partition_id=pid, cause=cause, reason="test")
    if leader is not None:
        body.leader = leader
    if isr is not None:
        body.isr.broker_ids.extend(isr)
    return rec(partition_change=body)


def fence(broker_id: int, epoch: int, fenced: bool = True) -> m.MetadataRecord:
    return rec(
        broker_registration_change=m.BrokerRegistrationChangeRecord(
            broker_id=broker_id,
            broker_epoch=epoch,
            fenced=fenced,
            reason="test",
        )
    )


def batch(*records: m.MetadataRecord, epoch: int = 1) -> m.MetadataBatch:
    return m.MetadataBatch(controller_epoch=epoch, records=records)


@pytest.fixture
def image() -> MetadataImage:
    """Brokers 1, 2, 3 live; topic t (id tid) with partition 0 on [1, 2, 3] led by 1."""
    img = MetadataImage()
    assert apply_batch(img, batch(register(1, 0), register(2, 1), register(3, 2)), 0)
    assert apply_batch(img, batch(topic(), partition(0, [1, 2, 3])), 3)
    return img


def test_applies_brokers_topic_and_partition(image: MetadataImage) -> None:
    assert image.next_offset == 5
    assert image.controller_epoch == 1
    assert sorted(image.brokers) == [1, 2, 3]
    assert image.brokers[2].broker_epoch == 1
    t = image.topics["t"]
    assert image.topics_by_id["tid"] is t
    p = t.partitions[0]
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1, 2, 3), (1, 2, 3), 1, 0, 0)


def test_leader_change_bumps_both_epochs_isr_change_only_partition_epoch(image: MetadataImage) -> None:
    apply(image, change(isr=[1, 2], cause=m.CAUSE_ISR_SHRINK))
    p = image.partition("tid", 0)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1, 2), 1, 0, 1)
    apply(image, fence(1, 0))
    apply(image, change(leader=2, isr=[2]))
    p = image.partition("tid", 0)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((2,), 2, 1, 2)
    assert image.next_offset == 8


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (change(pid=1, isr=[1]), "unknown partition"),
        (change(topic_id="nope", isr=[1]), "unknown partition"),
        (change(leader=1), "current leader"),
        (change(isr=[1, 2, 3]), "changes neither"),
        (change(isr=[2, 3]), "not in the ISR"),
        (change(isr=[]), "at least one"),
        (change(isr=[1, 4]), "distinct replicas"),
        (change(isr=[1, 1]), "distinct replicas"),
        (change(isr=[1], cause=m.CAUSE_UNSPECIFIED), "without a cause"),
        (change(leader=2, isr=[2, 4]), "distinct replicas"),
        (topic(name="t", topic_id="other"), "exists already"),
        (topic(name="u", topic_id="tid"), "used topic id"),
        (topic(name="bad name", topic_id="x"), "illegal name"),
        (partition(0, [1]), "next partition"),
        (partition(2, [1]), "next partition"),
        (partition(1, [1, 1]), "distinct broker ids"),
        (partition(1, [], isr=[], leader=-1), "distinct broker ids"),
        (partition(1, [1, 9], isr=[1, 9]), "not a live broker"),
        (partition(1, [1, 2], topic_id="nope"), "unknown topic"),
        (register(1, 9), "registered already"),
        (fence(9, 0), "unregistered broker"),
        (fence(1, 5), "newer than"),
        (fence(1, 0, fenced=False), "changes nothing"),
        (rec(unregister_broker=m.UnregisterBrokerRecord(broker_id=1, broker_epoch=0)), "not fenced"),
        (rec(unregister_broker=m.UnregisterBrokerRecord(broker_id=1, broker_epoch=3)), "not registered"),
        (rec(remove_topic=m.RemoveTopicRecord(topic_id="nope")), "unknown topic"),
        (
            rec(
                config=m.ConfigRecord(
                    resource_type=m.CONFIG_RESOURCE_TOPIC, resource_name="x", key="retention.ms", value="1"
                )
            ),
            "unknown topic",
        ),
        (
            rec(
                config=m.ConfigRecord(
                    resource_type=m.CONFIG_RESOURCE_TOPIC, resource_name="t", key="nope", value="1"
                )
            ),
            "unknown topic config key",
        ),
        (
            rec(
                config=m.ConfigRecord(
                    resource_type=m.CONFIG_RESOURCE_TOPIC, resource_name="t", key="retention.ms", value="soon"
                )
            ),
            "bad value",
        ),
        (
            rec(
                config=m.ConfigRecord(
                    resource_type=m.CONFIG_RESOURCE_TOPIC, resource_name="t", key="retention.ms"
                )
            ),
            "not set",
        ),
        (
            rec(
                config=m.ConfigRecord(
                    resource_type=m.CONFIG_RESOURCE_BROKER, resource_name="01", key="retention.ms", value="1"
                )
            ),
            "broker id in decimal",
        ),
        (
            rec(config=m.ConfigRecord(resource_name="t", key="retention.ms", value="1")),
            "unknown resource type",
        ),
        (
            rec(
                client_quota=m.ClientQuotaRecord(
                    entity_type="group", entity_name="", key="producer_byte_rate", value=1
                )
            ),
            "unknown entity type",
        ),
        (
            rec(
                client_quota=m.ClientQuotaRecord(
                    entity_type="user", entity_name="a", key="producer_byte_rate", value=0
                )
            ),
            "finite number > 0",
        ),
        (
            rec(
                client_quota=m.ClientQuotaRecord(
                    entity_type="user", entity_name="a", key="producer_byte_rate"
                )
            ),
            "not set",
        ),
        (
            rec(producer_ids=m.ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=0)),
            "next producer id",
        ),
        (
            rec(producer_ids=m.ProducerIdsRecord(broker_id=1, broker_epoch=7, next_producer_id=10)),
            "not registered",
        ),
        (m.MetadataRecord(time_ms=1), "without a body"),
    ],
)
def test_records_that_do_not_fit_raise_and_change_nothing(image: MetadataImage, bad, message) -> None:
    before = image.copy()
    with pytest.raises(MetadataInvariantError, match=message):
        apply(image, bad)
    assert image == before
    with pytest.raises(MetadataInvariantError, match=message):
        apply_batch(image, batch(bad), image.next_offset)
    assert image == before


def test_fenced_broker_cannot_be_elected(image: MetadataImage) -> None:
    apply(image, fence(2, 1))
    with pytest.raises(MetadataInvariantError, match="not a live broker"):
        apply(image, change(leader=2, isr=[2]))


def test_failed_batch_rolls_back_every_record(image: MetadataImage) -> None:
    before = image.copy()
    good_then_bad = batch(
        register(4, 5),
        topic("u", "uid"),
        partition(0, [1, 2], topic_id="uid"),
        rec(
            config=m.ConfigRecord(
                resource_type=m.CONFIG_RESOURCE_BROKER, resource_name="", key="retention.ms", value="5"
            )
        ),
        rec(
            client_quota=m.ClientQuotaRecord(
                entity_type="user", entity_name="a", key="producer_byte_rate", value=5
            )
        ),
        rec(producer_ids=m.ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=1000)),
        change(isr=[1, 2], cause=m.CAUSE_ISR_SHRINK),
        rec(remove_topic=m.RemoveTopicRecord(topic_id="tid")),
        change(pid=0, isr=[1]),  # the topic was just removed
        epoch=3,
    )
    with pytest.raises(MetadataInvariantError, match="unknown partition"):
        apply_batch(image, good_then_bad, image.next_offset)
    assert image == before
    assert image.topics_by_id.keys() == {"tid"}
    assert image.controller_epoch == 1


def test_batch_must_follow_the_image_and_not_be_empty(image: MetadataImage) -> None:
    with pytest.raises(MetadataInvariantError, match="does not follow"):
        apply_batch(image, batch(rec(no_op=m.NoOpRecord())), image.next_offset + 1)
    with pytest.raises(MetadataInvariantError, match="does not follow"):
        apply_batch(image, batch(rec(no_op=m.NoOpRecord())), image.next_offset - 1)
    with pytest.raises(MetadataInvariantError, match="empty"):
        apply_batch(image, batch(), image.next_offset)
    assert image.next_offset == 5


def test_batch_from_a_deposed_controller_takes_offsets_but_changes_nothing(image: MetadataImage) -> None:
    assert apply_batch(image, batch(rec(no_op=m.NoOpRecord()), epoch=4), 5)
    assert image.controller_epoch == 4
    before = image.copy()
    stale = batch(register(7, 6), rec(remove_topic=m.RemoveTopicRecord(topic_id="nope")), epoch=3)
    assert apply_batch(image, stale, 6) is False
    assert image.next_offset == 8
    before.next_offset = 8
    assert image == before
    assert apply_batch(image, batch(register(7, 8), epoch=4), 8)
    assert image.brokers[7].broker_epoch == 8


def test_topic_without_partitions_is_rejected_at_batch_end(image: MetadataImage) -> None:
    with pytest.raises(MetadataInvariantError, match="without partitions"):
        apply_batch(image, batch(topic("u", "uid")), image.next_offset)
    assert "u" not in image.topics
    apply(image, topic("u", "uid"))  # record by record it is legal: partitions may follow
    assert image.topics["u"].partitions == []


def test_fenced_broker_must_not_keep_leading_at_batch_end(image: MetadataImage) -> None:
    with pytest.raises(MetadataInvariantError, match="still led by fenced broker 1"):
        apply_batch(image, batch(fence(1, 0)), image.next_offset)
    with pytest.raises(MetadataInvariantError, match="keeps fenced brokers"):
        apply_batch(image, batch(fence(3, 2)), image.next_offset)
    assert apply_batch(image, batch(fence(3, 2), change(isr=[1, 2], cause=m.CAUSE_REPLICA_FENCED)), 5)
    assert image.brokers[3].fenced


def test_offline_partition_keeps_its_last_isr_member(image: MetadataImage) -> None:
    apply_batch(image, batch(fence(2, 1), fence(3, 2), change(isr=[1], cause=m.CAUSE_REPLICA_FENCED)), 5)
    apply_batch(image, batch(fence(1, 0), change(leader=-1)), 8)
    p = image.partition("tid", 0)
    assert (p.leader, p.isr, p.leader_epoch) == (-1, (1,), 1)
    assert p.offline


def test_change_for_an_older_broker_epoch_is_ignored(image: MetadataImage) -> None:
    # Broker 3 re-registers (epoch 10); a fence aimed at its old epoch 2 must not touch the new one.
    apply_batch(
        image,
        batch(
            fence(3, 2),
            change(isr=[1, 2], cause=m.CAUSE_REPLICA_FENCED),
            rec(unregister_broker=m.UnregisterBrokerRecord(broker_id=3, broker_epoch=2)),
            register(3, 8, fenced=True),
        ),
        5,
    )
    apply(image, fence(3, 8, fenced=False))
    apply(image, fence(3, 2, fenced=True))
    assert not image.brokers[3].fenced
    assert image.brokers[3].broker_epoch == 8


def test_configs_quotas_and_producer_ids(image: MetadataImage) -> None:
    cfg = m.CONFIG_RESOURCE_TOPIC
    apply(
        image, rec(config=m.ConfigRecord(resource_type=cfg, resource_name="t", key="retention.ms", value="5"))
    )
    apply(
        image,
        rec(
            config=m.ConfigRecord(
                resource_type=m.CONFIG_RESOURCE_BROKER, resource_name="2", key="segment.bytes", value="2048"
            )
        ),
    )
    apply(
        image,
        rec(
            client_quota=m.ClientQuotaRecord(
                entity_type="client-id", entity_name="app", key="consumer_byte_rate", value=1e6
            )
        ),
    )
    apply(image, rec(producer_ids=m.ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=1000)))
    assert image.topics["t"].configs == {"retention.ms": "5"}
    assert image.broker_configs == {"2": {"segment.bytes": "2048"}}
    assert image.client_quotas == {("client-id", "app"): {"consumer_byte_rate": 1e6}}
    assert image.next_producer_id == 1000
    # Removing the last key leaves no empty map behind (a snapshot could not reproduce it).
    apply(
        image,
        rec(
            config=m.ConfigRecord(
                resource_type=m.CONFIG_RESOURCE_BROKER, resource_name="2", key="segment.bytes"
            )
        ),
    )
    apply(
        image,
        rec(
            client_quota=m.ClientQuotaRecord(
                entity_type="client-id", entity_name="app", key="consumer_byte_rate"
            )
        ),
    )
    assert image.broker_configs == {}
    assert image.client_quotas == {}
    apply(image, rec(remove_topic=m.RemoveTopicRecord(topic_id="tid")))
    assert image.topics == {} and image.topics_by_id == {}


def test_a_config_value_an_older_version_admitted_still_replays(image: MetadataImage) -> None:
    # Before issue 17, retention.ms=-5 was admitted (and meant "keep forever"); a log holding it must replay.
    config = m.ConfigRecord(
        resource_type=m.CONFIG_RESOURCE_TOPIC, resource_name="t", key="retention.ms", value="-5"
    )
    apply(image, rec(config=config))
    assert image.topics["t"].configs == {"retention.ms": "-5"}
    assert effective_topic_config(image, "t")["retention.ms"] is None


def test_images_compare_by_content_and_repr_is_one_line(image: MetadataImage) -> None:
    other = image.copy()
    assert other == image and other is not image
    apply(other, change(isr=[1, 2], cause=m.CAUSE_ISR_SHRINK))
    assert other != image
    for text in (
        repr(image),
        repr(image.topics["t"]),
        repr(image.partition("tid", 0)),
        repr(image.brokers[1]),
    ):
        assert "\n" not in text and text.startswith("<")
    assert repr(image.partition("tid", 0)) == (
        "<Partition 0 leader=1 epoch=0 pepoch=0 replicas=[1, 2, 3] isr=[1, 2, 3]>"
    )


def test_a_ten_thousand_partition_topic_is_one_batch(image: MetadataImage) -> None:
    decision = decide_create_topics(
        image,
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name="big", partitions=10_000, replication_factor=3)]
        ),
        now_ms=1,
        principal="admin",
        request_id="big",
        rng=random.Random(1),
    )
    assert len(decision.records) == 10_001
    wire = m.MetadataBatch(controller_epoch=1, records=decision.records).SerializeToString()
    assert apply_batch(image, m.MetadataBatch.FromString(wire), image.next_offset)
    assert len(image.topics["big"].partitions) == 10_000
    assert image.next_offset == 5 + 10_001
