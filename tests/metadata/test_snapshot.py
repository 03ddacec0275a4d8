"""Snapshots: image -> records -> image is the identity."""

from __future__ import annotations

import pytest

from kanal.metadata import (
    Decision,
    MetadataImage,
    MetadataInvariantError,
    Stamp,
    apply,
    decide_allocate_producer_ids,
    decide_alter_client_quotas,
    decide_alter_configs,
    image_from_snapshot,
    image_to_snapshot,
)
from kanal.metadata.remote_log import REMOTE_STORAGE_ENABLE
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2, schema_registry_pb2


def rich_image(harness) -> MetadataImage:
    """Brokers live and fenced, topics with configs, an offline partition, broker configs, quotas, ids,
    remote logs (plain, started inside a segment, emptied by a start move), the schema registry (live,
    soft-deleted and orphaned schemas, a reference, configs, a mode)."""
    h = harness
    h.add_brokers([0, 1, 2, 3], racks=["a", "a", "b", "b"])
    h.create_topic("orders", 6, 3, {"retention.ms": "1000", "cleanup.policy": "compact"})
    h.create_topic("solo", 2, 1)
    h.create_topic("tiered", 4, 2, {REMOTE_STORAGE_ENABLE: "true"})
    h.alter_remote_log("tiered", 0, segments=[(0, 100)], aborted=[(4, 10, 20)], open_at_end=[(5, 90)])
    h.alter_remote_log("tiered", 0, segments=[(100, 250)], epochs=[(0, 100)])
    h.alter_remote_log("tiered", 1, segments=[(1000, 1100), (1100, 1200), (1200, 1300)])
    h.alter_remote_log("tiered", 1, start=1150)
    h.alter_remote_log("tiered", 2, segments=[(0, 10)])
    h.alter_remote_log("tiered", 2, start=10)
    h.commit(
        decide_alter_configs(
            h.image,
            admin_pb2.AlterConfigsRequest(
                changes=[
                    admin_pb2.AlterConfigsRequest.Change(
                        resource=admin_pb2.ConfigResource(type=metadata_pb2.CONFIG_RESOURCE_BROKER, name=""),
                        ops=[admin_pb2.AlterConfigOp(key="min.insync.replicas", value="2")],
                    ),
                    admin_pb2.AlterConfigsRequest.Change(
                        resource=admin_pb2.ConfigResource(type=metadata_pb2.CONFIG_RESOURCE_BROKER, name="2"),
                        ops=[admin_pb2.AlterConfigOp(key="segment.bytes", value="4096")],
                    ),
                ]
            ),
            **h.ctx(),
        )
    )
    h.commit(
        decide_alter_client_quotas(
            h.image,
            admin_pb2.AlterClientQuotasRequest(
                entries=[
                    admin_pb2.AlterClientQuotasRequest.Entry(
                        entity=admin_pb2.QuotaEntity(entity_type="user", entity_name="alice"),
                        values=[admin_pb2.QuotaValue(key="producer_byte_rate", value=1024.5)],
                    ),
                ]
            ),
            **h.ctx(),
        )
    )
    reg = h.image.brokers[1]
    h.commit(
        decide_allocate_producer_ids(
            h.image,
            controller_pb2.AllocateProducerIdsRequest(broker_id=1, broker_epoch=reg.broker_epoch),
            **h.ctx(),
        )
    )
    h.commit(Decision(registry_records(Stamp(h.now_ms, "User:admin", "registry")), None))
    h.commit(Decision([Stamp(h.now_ms, "User:admin", "hard-delete").record(
        remove_subject_version=metadata_pb2.RemoveSubjectVersionRecord(subject="gone", version=1))], None))
    solo_leaders = {p.leader for p in h.image.topics["solo"].partitions}
    h.fence(*sorted(solo_leaders))  # "solo" goes offline, "orders" moves leaders
    h.controller_epoch = 3
    h.commit(
        Decision([Stamp(h.now_ms, "controller", "elected").record(no_op=metadata_pb2.NoOpRecord())], None)
    )
    return h.image


def registry_records(stamp: Stamp) -> list[metadata_pb2.MetadataRecord]:
    """Schemas 1..3: 1 at users/1, 2 (referencing users/1) at users/2 soft-deleted, 3 at gone/1 soft-deleted
    (then hard-deleted: an orphan, the highest id); a registry config, a subject config and mode."""
    return [
        stamp.record(schema=metadata_pb2.SchemaRecord(id=1, schema_type="AVRO", schema='"string"')),
        stamp.record(schema=metadata_pb2.SchemaRecord(
            id=2, schema_type="AVRO", schema='{"type": "array", "items": "string"}',
            references=[schema_registry_pb2.SchemaReference(name="s", subject="users", version=1)])),
        stamp.record(schema=metadata_pb2.SchemaRecord(id=3, schema_type="AVRO", schema='"int"')),
        stamp.record(subject_version=metadata_pb2.SubjectVersionRecord(
            subject="users", version=1, schema_id=1)),
        stamp.record(subject_version=metadata_pb2.SubjectVersionRecord(
            subject="users", version=2, schema_id=2, deleted=True)),
        stamp.record(subject_version=metadata_pb2.SubjectVersionRecord(
            subject="gone", version=1, schema_id=3, deleted=True)),
        stamp.record(registry_config=metadata_pb2.RegistryConfigRecord(subject="", compatibility="FULL")),
        stamp.record(registry_config=metadata_pb2.RegistryConfigRecord(
            subject="users", compatibility="NONE", normalize=True)),
        stamp.record(registry_mode=metadata_pb2.RegistryModeRecord(subject="users", mode="READONLY")),
    ]


def test_round_trip_gives_an_equal_image(harness) -> None:
    image = rich_image(harness)
    assert any(p.offline for p in image.topics["solo"].partitions)
    assert any(b.fenced for b in image.brokers.values())
    assert any(p.leader_epoch > 0 for p in image.topics["orders"].partitions)
    starts = sorted((log.log_start_offset, len(log.segments)) for log in image.remote_logs.values())
    assert starts == [(0, 2), (10, 0), (1150, 2)]
    assert sorted(image.subjects) == ["users"] and image.next_schema_id == 4 and 3 not in image.schema_holders
    snapshot = image_to_snapshot(image)
    assert snapshot.next_offset == image.next_offset
    assert snapshot.controller_epoch == image.controller_epoch == 3
    restored = image_from_snapshot(metadata_pb2.MetadataSnapshot.FromString(snapshot.SerializeToString()))
    assert restored == image
    assert restored.topics_by_id.keys() == image.topics_by_id.keys()
    assert restored.registry_indexes() == image.registry_indexes()
    assert restored.next_schema_id == 4  # the orphaned highest id is not handed out again
    assert image_to_snapshot(restored) == snapshot


def test_applying_snapshot_records_to_an_empty_image_rebuilds_the_state(harness) -> None:
    image = rich_image(harness)
    snapshot = image_to_snapshot(image)
    rebuilt = MetadataImage()
    for record in snapshot.records:
        apply(rebuilt, record)
    assert rebuilt.next_offset == len(snapshot.records)
    rebuilt.next_offset = image.next_offset
    rebuilt.controller_epoch = image.controller_epoch
    assert rebuilt == image


def test_snapshot_is_deterministic_and_stamped_as_a_copy(harness) -> None:
    image = rich_image(harness)
    first, second = image_to_snapshot(image), image_to_snapshot(image.copy())
    assert first.SerializeToString(deterministic=True) == second.SerializeToString(deterministic=True)
    assert {(r.time_ms, r.principal, r.request_id) for r in first.records} == {
        (0, "snapshot", f"snapshot-{image.next_offset}")
    }


def test_empty_image_round_trips() -> None:
    empty = MetadataImage()
    assert image_from_snapshot(image_to_snapshot(empty)) == empty


def test_snapshot_whose_records_do_not_fit_is_refused(harness) -> None:
    snapshot = image_to_snapshot(rich_image(harness))
    records = list(snapshot.records)
    assert records[4].WhichOneof("record") == "topic"
    broken = metadata_pb2.MetadataSnapshot(
        next_offset=1, records=records[:4] + records[5:]
    )  # a topic record gone
    with pytest.raises(MetadataInvariantError):
        image_from_snapshot(broken)
    topic_only = metadata_pb2.MetadataSnapshot(
        next_offset=1, records=[r for r in records if r.WhichOneof("record") in ("register_broker", "topic")]
    )
    with pytest.raises(MetadataInvariantError, match="without partitions"):
        image_from_snapshot(topic_only)
