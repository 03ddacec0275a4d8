"""The schema registry's state in the image: its five records through apply (and the invariants that refuse
a record that does not fit), its indexes, and snapshots of it."""

from __future__ import annotations

import pytest

from kanal.metadata import (
    MetadataImage,
    MetadataInvariantError,
    apply,
    apply_batch,
    check_image,
    image_from_snapshot,
    image_to_snapshot,
)
from kanal.metadata.decision import Stamp
from kanal.metadata.image import (
    DEFAULT_REGISTRY_CONFIG,
    RegistryConfig,
    RegistryMode,
    SchemaContent,
    SchemaVersion,
    build_registry_indexes,
)
from kanal.schemas.compatibility import CompatibilityLevel
from kanal.schemas.schema_types import Reference, SchemaType
from kanal.v1 import metadata_pb2
from kanal.v1 import schema_registry_pb2 as pb

STAMP = Stamp(1, "test", "req")


def schema(schema_id, text='"string"', refs=(), schema_type="AVRO"):
    return STAMP.record(schema=metadata_pb2.SchemaRecord(
        id=schema_id, schema_type=schema_type, schema=text,
        references=[pb.SchemaReference(name=n, subject=s, version=v) for n, s, v in refs]))


def version(subject, number, schema_id, deleted=False):
    return STAMP.record(subject_version=metadata_pb2.SubjectVersionRecord(
        subject=subject, version=number, schema_id=schema_id, deleted=deleted))


def remove(subject, number):
    return STAMP.record(remove_subject_version=metadata_pb2.RemoveSubjectVersionRecord(
        subject=subject, version=number))


def config(subject, level="", normalize=False):
    return STAMP.record(registry_config=metadata_pb2.RegistryConfigRecord(
        subject=subject, compatibility=level, normalize=normalize))


def mode(subject, name=""):
    return STAMP.record(registry_mode=metadata_pb2.RegistryModeRecord(subject=subject, mode=name))


def applied(*records) -> MetadataImage:
    image = MetadataImage()
    for record in records:
        apply(image, record)
    check_image(image)
    return image


def referencing_image() -> MetadataImage:
    """Schema 1 at address/1; schema 2 (referencing address/1) at user/1 and, soft-deleted, at other/1."""
    return applied(
        schema(1, '{"type": "fixed", "name": "A", "size": 1}'), version("address", 1, 1),
        schema(2, '{"type": "array", "items": "A"}', refs=[("A", "address", 1)]),
        version("user", 1, 2), version("other", 1, 2, deleted=True),
    )


def test_records_build_the_registry_state() -> None:
    image = applied(
        schema(1), schema(2, '"int"'), version("s", 1, 1), version("s", 2, 2), version("t", 1, 1),
        config("", "FULL"), config("s", "NONE", normalize=True), mode("", "READONLY"), mode("t", "IMPORT"),
    )
    assert image.schemas[1].schema_type is SchemaType.AVRO and image.schemas[2].text == '"int"'
    assert image.subjects == {"s": {1: SchemaVersion(1), 2: SchemaVersion(2)}, "t": {1: SchemaVersion(1)}}
    assert image.registry_configs == {"": RegistryConfig(CompatibilityLevel.FULL),
                                      "s": RegistryConfig(CompatibilityLevel.NONE, True)}
    assert image.registry_modes == {"": RegistryMode.READONLY, "t": RegistryMode.IMPORT}
    assert image.next_schema_id == 3
    assert image.schema_holders == {1: {("s", 1), ("t", 1)}, 2: {("s", 2)}}
    assert image.schema_ids_by_content[SchemaContent(SchemaType.AVRO, '"string"', ())] == (1,)
    assert "schemas=2 subjects=2" in repr(image)


def test_soft_delete_undelete_and_hard_delete() -> None:
    image = applied(schema(1), version("s", 1, 1), version("s", 1, 1, deleted=True))
    assert image.subjects["s"][1] == SchemaVersion(1, deleted=True)
    apply(image, version("s", 1, 1, deleted=False))  # an IMPORT of the same schema brings it back
    assert not image.subjects["s"][1].deleted
    apply(image, version("s", 1, 1, deleted=True))
    apply(image, remove("s", 1))
    check_image(image)
    # The subject is gone; the schema stays, an orphan: its id is never given to another text.
    assert image.subjects == {} and image.schema_holders == {}
    assert 1 in image.schemas and image.next_schema_id == 2


def test_an_imported_id_moves_the_next_id_past_it() -> None:
    image = applied(schema(100), schema(7, '"int"'))
    assert image.next_schema_id == 101


def test_removing_settings_returns_to_the_defaults() -> None:
    image = applied(config("", "FULL_TRANSITIVE"), config("s", "FORWARD"), mode("", "READONLY"))
    for record in (config(""), config("s"), mode("")):
        apply(image, record)
    assert image.registry_configs == {} and image.registry_modes == {}


def test_references_are_indexed() -> None:
    image = referencing_image()
    assert image.referenced_by == {("address", 1): (2,)}
    assert image.schemas[2].references == (Reference("A", "address", 1),)


@pytest.mark.parametrize(("records", "why"), [
    ([schema(0)], "positive"),
    ([schema(-3)], "positive"),
    ([schema(1), schema(1, '"int"')], "already"),
    ([schema(1, schema_type="XML")], "unknown type"),
    ([schema(1, "")], "without a schema text"),
    ([schema(1, refs=[("", "s", 1)])], "malformed reference"),
    ([schema(1, refs=[("n", "s", 0)])], "malformed reference"),
    ([version("s", 1, 1)], "unknown schema"),
    ([schema(1), version("s", 0, 1)], "version >= 1"),
    ([schema(1), version("", 1, 1)], "a subject"),
    ([schema(1), schema(2, '"int"'), version("s", 1, 1), version("s", 1, 2)], "moves"),
    ([schema(1), version("s", 1, 1), version("s", 1, 1)], "changes nothing"),
    ([schema(1), version("s", 1, 1), remove("s", 1)], "not soft-deleted"),
    ([remove("s", 1)], "does not exist"),
    ([config("s", "SIDEWAYS")], "unknown level"),
    ([config("s")], "which has none"),
    ([config("", "FULL"), config("", "", normalize=True)], "sets normalize"),
    ([mode("s", "WRITEONLY")], "unknown mode"),
    ([mode("s")], "which has none"),
])
def test_records_that_do_not_fit_are_refused(records, why) -> None:
    image = MetadataImage()
    *good, bad = records
    for record in good:
        apply(image, record)
    before = image.copy()
    with pytest.raises(MetadataInvariantError, match=why):
        apply(image, bad)
    assert image == before and image.registry_indexes() == before.registry_indexes()


def test_a_referenced_version_stays() -> None:
    image = referencing_image()
    # Live user/1 holds schema 2, which references address/1: no soft delete, no hard delete.
    with pytest.raises(MetadataInvariantError, match="references"):
        apply(image, version("address", 1, 1, deleted=True))
    apply(image, version("user", 1, 2, deleted=True))
    apply(image, version("address", 1, 1, deleted=True))  # only soft-deleted referrers left
    with pytest.raises(MetadataInvariantError, match="references"):
        apply(image, remove("address", 1))  # a soft-deleted version still holds the referrer
    for subject in ("user", "other"):
        apply(image, remove(subject, 1))
    apply(image, remove("address", 1))  # the referrer is an orphan now
    check_image(image)
    assert image.subjects == {}


def test_a_batch_with_a_broken_registry_record_changes_nothing() -> None:
    image = applied(schema(1), version("s", 1, 1))
    before = image.copy()
    batch = metadata_pb2.MetadataBatch(controller_epoch=1, records=[
        schema(2, '"int"'), version("s", 2, 2), version("t", 1, 2), config("s", "FULL"), version("s", 9, 99)])
    with pytest.raises(MetadataInvariantError, match="unknown schema 99"):
        apply_batch(image, batch, image.next_offset)
    assert image == before
    assert image.registry_indexes() == before.registry_indexes()
    assert image.next_schema_id == 2
    check_image(image)


def test_check_image_finds_a_drifted_registry_index() -> None:
    image = referencing_image()
    image.schema_holders[1] = frozenset()
    with pytest.raises(MetadataInvariantError, match="schema_holders"):
        check_image(image)
    image = referencing_image()
    image.next_schema_id = 2
    with pytest.raises(MetadataInvariantError, match="next schema id"):
        check_image(image)


def registry_image() -> MetadataImage:
    """Live, soft-deleted and orphaned schemas, references, configs and modes."""
    image = referencing_image()
    for record in (
        schema(3, '"bytes"'), version("user", 2, 3), version("user", 2, 3, deleted=True),
        schema(9, '{"type":"enum","name":"E","symbols":["X"]}', schema_type="AVRO"), version("gone", 4, 9),
        version("gone", 4, 9, deleted=True), remove("gone", 4),  # 9: the highest id, an orphan
        config("", "FULL"), config("user", "NONE", normalize=True),
        mode("", "READWRITE"), mode("user", "READONLY"),
    ):
        apply(image, record)
    check_image(image)
    return image


def test_snapshot_round_trip_keeps_the_registry_and_its_next_id() -> None:
    image = registry_image()
    assert 9 not in image.schema_holders and image.next_schema_id == 10
    snapshot = image_to_snapshot(image)
    kinds = [r.WhichOneof("record") for r in snapshot.records]
    assert kinds == ["schema"] * 4 + ["subject_version"] * 4 + ["registry_config"] * 2 + ["registry_mode"] * 2
    restored = image_from_snapshot(metadata_pb2.MetadataSnapshot.FromString(snapshot.SerializeToString()))
    assert restored == image
    assert restored.registry_indexes() == build_registry_indexes(image.schemas, image.subjects)
    assert restored.registry_indexes() == image.registry_indexes()
    assert restored.next_schema_id == 10  # the orphan's id is not handed out again after a restore
    assert image_to_snapshot(restored) == snapshot


def test_copy_is_independent() -> None:
    image = registry_image()
    copy = image.copy()
    assert copy == image and copy.registry_indexes() == image.registry_indexes()
    apply(copy, version("user", 2, 3, deleted=False))
    apply(copy, config("user"))
    assert image.subjects["user"][2].deleted and "user" in image.registry_configs
    assert DEFAULT_REGISTRY_CONFIG.compatibility is CompatibilityLevel.BACKWARD
