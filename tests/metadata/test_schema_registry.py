"""The schema registry's decisions (register, delete, config, mode) with real Avro schemas, decided and
applied as the controller does; every image checked (indexes included) after each commit."""

from __future__ import annotations

import json

import pytest

from kanal.metadata import check_image, image_from_snapshot, image_to_snapshot
from kanal.metadata.image import RegistryMode
from kanal.metadata.schema_registry import (
    decide_delete_subject,
    decide_delete_version,
    decide_register_schema,
    decide_set_registry_config,
    decide_set_registry_mode,
)
from kanal.metadata.schema_registry_reads import get_referenced_by, get_schema, list_versions
from kanal.metadata.schema_registry_rules import SCHEMA_TEXT_BYTES_MAX
from kanal.v1 import schema_registry_pb2 as pb
from kanal.v1.error import ErrorCode


def record(name: str, *fields: dict, namespace: str | None = None) -> str:
    schema = {"type": "record", "name": name, "fields": list(fields)}
    if namespace:
        schema["namespace"] = namespace
    return json.dumps(schema)


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int", "default": 0}
EMAIL = {"name": "email", "type": "string"}  # no default: a reader with it cannot read data without it
V1 = record("User", NAME)
V2 = record("User", NAME, AGE)  # BACKWARD compatible with V1
V3 = record("User", NAME, AGE, EMAIL)  # not BACKWARD compatible with V2
OTHER = record("Other", {"name": "x", "type": "long"})
ADDRESS = record("Address", {"name": "zip", "type": "string"}, namespace="com.acme")
WITH_ADDRESS = record("Customer", NAME, {"name": "address", "type": "com.acme.Address"}, namespace="com.acme")
ADDRESS_REF = pb.SchemaReference(name="com.acme.Address", subject="address", version=1)


class Registry:
    """Decide and commit registry requests against the harness's image, checking the image each time."""

    def __init__(self, harness) -> None:
        self.h = harness

    def commit(self, decision):
        reply = self.h.commit(decision)
        check_image(self.h.image)
        if reply.error:
            assert decision.records == []  # a refusal writes nothing
        return reply

    def register(self, subject: str, schema: str, **fields) -> pb.RegisterSchemaResponse:
        request = pb.RegisterSchemaRequest(subject=subject, schema=schema, **fields)
        return self.commit(decide_register_schema(self.h.image, request, **self.h.ctx("User:alice")))

    def ok(self, subject: str, schema: str, **fields) -> tuple[int, int]:
        reply = self.register(subject, schema, **fields)
        assert reply.error == ErrorCode.NONE, reply.error_message
        return reply.id, reply.version

    def delete_subject(self, subject: str, permanent: bool = False) -> pb.DeleteSubjectResponse:
        request = pb.DeleteSubjectRequest(subject=subject, permanent=permanent)
        return self.commit(decide_delete_subject(self.h.image, request, **self.h.ctx()))

    def delete_version(self, subject: str, version: int, permanent: bool = False) -> pb.DeleteVersionResponse:
        request = pb.DeleteVersionRequest(subject=subject, version=version, permanent=permanent)
        return self.commit(decide_delete_version(self.h.image, request, **self.h.ctx()))

    def set_config(self, subject: str = "", compatibility: str = "", **fields
                   ) -> pb.SetRegistryConfigResponse:
        request = pb.SetRegistryConfigRequest(subject=subject, compatibility=compatibility, **fields)
        return self.commit(decide_set_registry_config(self.h.image, request, **self.h.ctx()))

    def set_mode(self, subject: str = "", mode: str = "", **fields) -> pb.SetRegistryModeResponse:
        request = pb.SetRegistryModeRequest(subject=subject, mode=mode, **fields)
        return self.commit(decide_set_registry_mode(self.h.image, request, **self.h.ctx()))

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        request = pb.ListVersionsRequest(subject=subject, deleted=deleted)
        return list(list_versions(self.h.image, request).versions)

    @property
    def image(self):
        return self.h.image


@pytest.fixture
def reg(harness) -> Registry:
    return Registry(harness)


# -- register ------------------------------------------------------------------------------------------


def test_register_then_find_the_same_schema(reg) -> None:
    decision = decide_register_schema(reg.image, pb.RegisterSchemaRequest(subject="users-value", schema=V1),
                                      **reg.h.ctx("User:alice"))
    assert [r.WhichOneof("record") for r in decision.records] == ["schema", "subject_version"]
    assert {r.principal for r in decision.records} == {"User:alice"}  # the audit trail names the caller
    reg.commit(decision)
    assert (decision.reply.id, decision.reply.version) == (1, 1)
    # Again, and reformatted (whitespace, key order): the same version answers, nothing is written.
    reformatted = json.dumps(json.loads(V1), indent=4, sort_keys=True)
    for text in (V1, reformatted):
        request = pb.RegisterSchemaRequest(subject="users-value", schema=text)
        again = decide_register_schema(reg.image, request, **reg.h.ctx())
        assert again.records == [] and (again.reply.id, again.reply.version) == (1, 1)


def test_compatible_versions_follow_and_incompatible_ones_are_refused(reg) -> None:
    assert reg.ok("users-value", V1) == (1, 1)
    assert reg.ok("users-value", V2) == (2, 2)
    refused = reg.register("users-value", V3)
    assert refused.error == ErrorCode.INCOMPATIBLE_SCHEMA
    assert "BACKWARD" in refused.error_message and "version 2" in refused.error_message
    assert "email" in refused.error_message
    assert reg.versions("users-value") == [1, 2]
    assert reg.set_config("users-value", "NONE").error == ErrorCode.NONE
    assert reg.ok("users-value", V3) == (3, 3)


def test_transitive_levels_name_the_subjects_version_numbers(reg) -> None:
    reg.ok("s", record("R", {"name": "a", "type": "int"}))
    reg.ok("s", record("R", {"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1}))
    reg.ok("s", record("R", {"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1},
                       {"name": "c", "type": "int", "default": 1}))
    assert reg.delete_version("s", 2).error == ErrorCode.NONE  # live: 1 and 3
    reg.set_config("s", "FORWARD_TRANSITIVE")
    # Dropping `a` breaks forward compatibility with versions 1 and 3 (old readers need `a`).
    refused = reg.register("s", record("R", {"name": "b", "type": "int", "default": 1}))
    assert refused.error == ErrorCode.INCOMPATIBLE_SCHEMA
    assert "version 1 (forward" in refused.error_message and "version 3 (forward" in refused.error_message
    assert "version 2 " not in refused.error_message


@pytest.mark.parametrize(("fields", "why"), [
    ({"schema": '{"type": "nope"}'}, "Undefined type"),
    ({"schema": "not json"}, ""),
    ({"schema": "   "}, "empty schema"),
    ({"schema": V1, "schema_type": "XML"}, "unknown schema type"),
    ({"schema": V1, "references": [pb.SchemaReference(name="x", subject="nowhere", version=1)]}, "no schema"),
    ({"schema": " " * SCHEMA_TEXT_BYTES_MAX + V1}, "bytes, more than"),
])
def test_invalid_schemas_are_refused(reg, fields, why) -> None:
    reply = reg.register("s", **fields)
    assert reply.error == ErrorCode.INVALID_SCHEMA
    assert why in reply.error_message
    assert reg.image.schemas == {}


@pytest.mark.parametrize("subject", ["", "a\nb", "x" * 1001])
def test_bad_subject_names_are_refused(reg, subject) -> None:
    assert reg.register(subject, V1).error == ErrorCode.INVALID_REQUEST


def test_the_same_schema_in_two_subjects_shares_its_id(reg) -> None:
    assert reg.ok("a-value", V1) == (1, 1)
    assert reg.ok("b-value", OTHER) == (2, 1)
    reg.set_config("b-value", "NONE")  # Other then User: a new record name is no evolution
    decision = decide_register_schema(reg.image, pb.RegisterSchemaRequest(subject="b-value", schema=V1),
                                      **reg.h.ctx())
    assert [r.WhichOneof("record") for r in decision.records] == ["subject_version"]  # no new schema
    reg.commit(decision)
    assert (decision.reply.id, decision.reply.version) == (1, 2)
    held = get_schema(reg.image, pb.GetSchemaRequest(id=1)).versions
    assert [(v.subject, v.version) for v in held] == [("a-value", 1), ("b-value", 2)]


def test_normalize_stores_and_compares_the_normalized_text(reg) -> None:
    spaced = json.dumps(json.loads(V1), indent=2)
    reg.ok("n", spaced, normalize=True)
    stored = reg.image.schemas[1].text
    assert stored != spaced and json.loads(stored) == {"fields": [{"name": "name", "type": "string"}],
                                                       "name": "User", "type": "record"}
    # Another subject whose config normalizes finds the same id through the normalized text.
    reg.set_config("m", "BACKWARD", normalize=True)
    assert reg.ok("m", json.dumps(json.loads(V1), indent=7)) == (1, 1)
    # Without normalize the text is kept as given: a new id for a new text, though the same schema.
    assert reg.ok("raw", spaced) == (2, 1)
    assert reg.image.schemas[2].text == spaced


def test_references_resolve_and_protect_what_they_name(reg) -> None:
    assert reg.ok("address", ADDRESS) == (1, 1)
    unresolved = reg.register("customer", WITH_ADDRESS)
    assert unresolved.error == ErrorCode.INVALID_SCHEMA and "com.acme.Address" in unresolved.error_message
    assert reg.ok("customer", WITH_ADDRESS, references=[ADDRESS_REF]) == (2, 1)
    # -1 names the latest live version and is stored as its number.
    latest = pb.SchemaReference(name="com.acme.Address", subject="address", version=-1)
    assert reg.ok("customer2", WITH_ADDRESS, references=[latest]) == (2, 1)
    assert [(r.subject, r.version) for r in reg.image.schemas[2].references] == [("address", 1)]
    referenced_by = get_referenced_by(reg.image, pb.GetReferencedByRequest(subject="address", version=1))
    assert list(referenced_by.ids) == [2]

    # A referenced version cannot be deleted, softly or for good, nor its subject.
    assert reg.delete_version("address", 1).error == ErrorCode.SCHEMA_REFERENCED
    assert reg.delete_subject("address").error == ErrorCode.SCHEMA_REFERENCED
    # Once the referrers are soft-deleted, the version may be soft-deleted, but not hard-deleted.
    assert reg.delete_subject("customer").error == ErrorCode.NONE
    assert reg.delete_subject("customer2").error == ErrorCode.NONE
    assert reg.delete_version("address", 1).error == ErrorCode.NONE
    assert reg.delete_version("address", 1, permanent=True).error == ErrorCode.SCHEMA_REFERENCED
    # A new schema may not reference a soft-deleted version.
    again = reg.register("customer3", WITH_ADDRESS, references=[ADDRESS_REF])
    assert again.error == ErrorCode.INVALID_SCHEMA and "no schema registered" in again.error_message
    for subject in ("customer", "customer2"):
        assert reg.delete_subject(subject, permanent=True).error == ErrorCode.NONE
    assert reg.delete_version("address", 1, permanent=True).error == ErrorCode.NONE
    assert reg.image.subjects == {}


def test_references_within_a_subject_are_deleted_referrer_first(reg) -> None:
    reg.set_config("", "NONE")
    reg.ok("both", ADDRESS)
    both_ref = pb.SchemaReference(name="com.acme.Address", subject="both", version=1)
    reg.ok("both", WITH_ADDRESS, references=[both_ref])
    soft = decide_delete_subject(reg.image, pb.DeleteSubjectRequest(subject="both"), **reg.h.ctx())
    assert [r.subject_version.version for r in soft.records] == [2, 1]
    reg.commit(soft)
    assert list(soft.reply.versions) == [1, 2]
    hard = reg.delete_subject("both", permanent=True)
    assert list(hard.versions) == [1, 2] and reg.image.subjects == {}


def test_versions_soft_deleted_are_not_reused_hard_deleted_top_ones_are(reg) -> None:
    reg.set_config("", "NONE")
    reg.ok("s", V1)
    reg.ok("s", V2)
    reg.delete_version("s", 2)
    assert reg.ok("s", V3) == (3, 3)  # 2 is soft-deleted: kept, its number too
    reg.delete_version("s", 3)
    reg.delete_version("s", 3, permanent=True)
    # Confluent's register numbers from the highest version it holds: a hard-deleted top number returns.
    assert reg.ok("s", OTHER) == (4, 3)
    assert reg.versions("s", deleted=True) == [1, 2, 3]


def test_ids_are_never_reused_after_hard_deletes_nor_across_a_snapshot(reg, harness) -> None:
    reg.ok("s", V1)
    reg.ok("t", OTHER)
    for subject in ("s", "t"):
        reg.delete_subject(subject)
        reg.delete_subject(subject, permanent=True)
    assert reg.image.subjects == {} and get_schema(reg.image, pb.GetSchemaRequest(id=2)).error == \
        ErrorCode.SCHEMA_NOT_FOUND
    # The image as a restarted controller rebuilds it from a snapshot: the next id is still 3.
    harness.image = image_from_snapshot(image_to_snapshot(reg.image))
    assert reg.ok("u", V2) == (3, 1)
    # The text of an orphaned id gets that id back: nothing written with it decodes as another schema.
    assert reg.ok("v", OTHER) == (2, 1)


def test_a_soft_deleted_schema_registered_again_moves_to_a_new_version(reg) -> None:
    reg.ok("s", V1)
    reg.ok("s", V2)
    reg.delete_version("s", 1)
    decision = decide_register_schema(reg.image, pb.RegisterSchemaRequest(subject="s", schema=V1),
                                      **reg.h.ctx())
    # Confluent's register: a new version with the same id, the soft-deleted one below it hard-deleted.
    assert [r.WhichOneof("record") for r in decision.records] == ["subject_version", "remove_subject_version"]
    reg.commit(decision)
    assert (decision.reply.id, decision.reply.version) == (1, 3)
    assert reg.versions("s", deleted=True) == [2, 3]


def test_version_minus_one_makes_an_older_schema_the_latest(reg) -> None:
    reg.ok("s", V1)
    reg.ok("s", V2)
    assert reg.ok("s", V1) == (1, 1)  # version 0: found among the live versions
    assert reg.ok("s", V2, version=-1) == (2, 2)  # it is the latest already
    assert reg.ok("s", V1, version=-1) == (1, 3)  # not the latest: registered again, as the latest
    assert reg.versions("s") == [1, 2, 3]


def test_explicit_versions(reg) -> None:
    reg.ok("s", V1)
    assert reg.ok("s", V1, version=1) == (1, 1)  # a resend of what version 1 holds
    wrong = reg.register("s", V2, version=5)
    assert wrong.error == ErrorCode.INVALID_SCHEMA and "not one more" in wrong.error_message
    assert reg.ok("s", V2, version=2) == (2, 2)
    assert reg.register("s", V2, version=-2).error == ErrorCode.INVALID_REQUEST


def test_an_id_outside_import_mode(reg) -> None:
    reg.ok("s", V1)
    assert reg.ok("s", V1, id=1) == (1, 1)  # what it holds already
    assert reg.ok("t", V1, id=1) == (1, 1)  # what the schema gets anyway
    refused = reg.register("s", V2, id=7)
    assert refused.error == ErrorCode.REGISTRY_MODE_FORBIDS and "IMPORT" in refused.error_message
    assert reg.register("s", V1, id=2).error == ErrorCode.REGISTRY_MODE_FORBIDS


# -- modes ---------------------------------------------------------------------------------------------


def test_read_only_mode_refuses_writes(reg) -> None:
    reg.ok("s", V1)
    assert reg.set_mode("s", "READONLY").mode == "READONLY"
    assert reg.register("s", V2).error == ErrorCode.REGISTRY_MODE_FORBIDS
    assert reg.delete_version("s", 1).error == ErrorCode.REGISTRY_MODE_FORBIDS
    assert reg.delete_subject("s").error == ErrorCode.REGISTRY_MODE_FORBIDS
    assert reg.set_config("s", "NONE").error == ErrorCode.REGISTRY_MODE_FORBIDS
    assert reg.ok("t", V2) == (2, 1)  # another subject follows the registry's READWRITE
    reg.set_mode("", "READONLY")
    assert reg.register("t", OTHER).error == ErrorCode.REGISTRY_MODE_FORBIDS
    assert reg.set_mode("", delete=True).mode == "READONLY"  # the reply: the mode deleted
    assert reg.set_mode("s", delete=True).mode == "READONLY"
    assert reg.ok("s", V2) == (2, 2)


def test_import_mode_takes_the_callers_ids_and_versions(reg) -> None:
    assert reg.set_mode("", "IMPORT").error == ErrorCode.NONE  # an empty registry: no force needed
    no_id = reg.register("s", V1)
    assert no_id.error == ErrorCode.REGISTRY_MODE_FORBIDS and "names its schema id" in no_id.error_message
    assert reg.ok("s", V1, id=40, version=3) == (40, 3)
    # No compatibility check, any version, the caller's id; the next id passes the imported ones.
    assert reg.ok("s", V3, id=12, version=7) == (12, 7)
    assert reg.ok("s", V2, id=13) == (13, 8)  # without a version: the next one
    assert reg.ok("s", V1, id=40) == (40, 3)  # imported already
    assert reg.image.next_schema_id == 41
    # An id names one schema, a version holds one schema: an import overwrites neither.
    assert reg.register("t", OTHER, id=40).error == ErrorCode.REGISTRY_MODE_FORBIDS
    assert reg.register("s", OTHER, id=50, version=3).error == ErrorCode.INVALID_REQUEST
    # A soft-deleted version imported again with its own schema comes back.
    reg.delete_version("s", 7)
    assert reg.ok("s", V3, id=12, version=7) == (12, 7)
    assert reg.versions("s") == [3, 7, 8]
    reg.set_mode("", "READWRITE")
    assert reg.ok("t", OTHER) == (41, 1)


def test_switching_to_import_needs_an_empty_scope_or_force(reg) -> None:
    reg.ok("live", V1)
    reg.ok("gone", OTHER)
    reg.delete_subject("gone")
    refused = reg.set_mode("", "IMPORT")
    assert refused.error == ErrorCode.REGISTRY_MODE_FORBIDS and "live" in refused.error_message
    # A subject holding only soft-deleted versions: they are hard-deleted with the switch.
    decision = decide_set_registry_mode(reg.image, pb.SetRegistryModeRequest(subject="gone", mode="import"),
                                        **reg.h.ctx())
    assert [r.WhichOneof("record") for r in decision.records] == ["remove_subject_version", "registry_mode"]
    reg.commit(decision)
    assert "gone" not in reg.image.subjects and reg.image.registry_modes["gone"] is RegistryMode.IMPORT
    assert reg.set_mode("", "IMPORT", force=True).mode == "IMPORT"
    assert "live" in reg.image.subjects  # force leaves everything where it is


def test_switching_to_import_keeps_what_a_schema_outside_references(reg) -> None:
    reg.ok("address", ADDRESS)
    reg.ok("customer", WITH_ADDRESS, references=[ADDRESS_REF])
    reg.delete_subject("customer")
    reg.delete_subject("address")
    # The subject alone: its soft-deleted version is referenced from "customer", outside the switch.
    refused = reg.set_mode("address", "IMPORT")
    assert refused.error == ErrorCode.SCHEMA_REFERENCED
    # The whole registry: the referrer goes first, then what it references.
    decision = decide_set_registry_mode(reg.image, pb.SetRegistryModeRequest(mode="IMPORT"), **reg.h.ctx())
    assert [r.remove_subject_version.subject for r in decision.records[:-1]] == ["customer", "address"]
    reg.commit(decision)
    assert reg.image.subjects == {}


def test_mode_and_config_names(reg) -> None:
    assert reg.set_mode("s", "SIDEWAYS").error == ErrorCode.INVALID_CONFIG
    assert reg.set_config("s", "MOSTLY").error == ErrorCode.INVALID_CONFIG
    assert reg.set_config("s", "full_transitive").compatibility == "FULL_TRANSITIVE"
    assert reg.set_mode("s", delete=True).error == ErrorCode.SUBJECT_NOT_FOUND


# -- configs -------------------------------------------------------------------------------------------


def test_configs_set_keep_and_delete(reg) -> None:
    assert reg.set_config("", "FULL").compatibility == "FULL"
    same = decide_set_registry_config(reg.image, pb.SetRegistryConfigRequest(compatibility="FULL"),
                                      **reg.h.ctx())
    assert same.records == []  # nothing changes, nothing written
    # Normalize alone: the level stays (the scope's, else the one in effect).
    kept = reg.set_config("s", normalize=True)
    assert (kept.compatibility, kept.normalize) == ("FULL", True)
    deleted = reg.set_config("s", delete=True)
    assert (deleted.compatibility, deleted.normalize) == ("FULL", True)  # what was deleted
    assert reg.set_config("s", delete=True).error == ErrorCode.SUBJECT_NOT_FOUND
    assert reg.set_config("", delete=True).compatibility == "FULL"
    assert reg.image.registry_configs == {}
    assert reg.set_config("", delete=True).compatibility == "BACKWARD"  # the default, nothing to delete


# -- deletes -------------------------------------------------------------------------------------------


def test_delete_subject_soft_then_permanent(reg) -> None:
    assert reg.delete_subject("nothing").error == ErrorCode.SUBJECT_NOT_FOUND
    reg.set_config("", "NONE")
    for schema in (V1, V2, V3):
        reg.ok("s", schema)
    reg.delete_version("s", 2)
    reg.set_config("s", "FULL")
    reg.set_mode("s", "READWRITE")
    assert reg.delete_subject("s", permanent=True).error == ErrorCode.NOT_SOFT_DELETED
    assert list(reg.delete_subject("s").versions) == [1, 3]
    again = reg.delete_subject("s")
    assert again.error == ErrorCode.SUBJECT_NOT_FOUND and "soft-deleted already" in again.error_message
    assert list(reg.delete_subject("s", permanent=True).versions) == [1, 2, 3]
    # Its settings went with its last version (Confluent's); the schemas stay, as orphans.
    assert "s" not in reg.image.registry_configs and "s" not in reg.image.registry_modes
    assert sorted(reg.image.schemas) == [1, 2, 3] and reg.image.schema_holders == {}


def test_delete_version(reg) -> None:
    assert reg.delete_version("s", 1).error == ErrorCode.SUBJECT_NOT_FOUND
    reg.ok("s", V1)
    reg.ok("s", V2)
    reg.set_config("s", "FULL")
    assert reg.delete_version("s", 0).error == ErrorCode.INVALID_REQUEST
    assert reg.delete_version("s", 9).error == ErrorCode.SCHEMA_VERSION_NOT_FOUND
    assert reg.delete_version("s", 1, permanent=True).error == ErrorCode.NOT_SOFT_DELETED
    assert reg.delete_version("s", -1).version == 2  # the latest live one
    twice = reg.delete_version("s", 2)
    assert twice.error == ErrorCode.SCHEMA_VERSION_NOT_FOUND and "soft-deleted already" in twice.error_message
    assert reg.delete_version("s", -1).version == 1
    assert reg.delete_version("s", -1).error == ErrorCode.SCHEMA_VERSION_NOT_FOUND  # no live one left
    assert reg.delete_version("s", 2, permanent=True).version == 2
    assert "s" in reg.image.registry_configs
    assert reg.delete_version("s", 1, permanent=True).version == 1
    assert "s" not in reg.image.registry_configs and "s" not in reg.image.subjects
