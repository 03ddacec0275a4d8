"""The schema registry's reads: pure functions of the image, one per read call of schema_registry.proto."""

from __future__ import annotations

import json

import pytest

from kanal.metadata.schema_registry_reads import (
    check_compatibility,
    get_referenced_by,
    get_registry_config,
    get_registry_mode,
    get_schema,
    get_version,
    list_subjects,
    list_versions,
    lookup_schema,
)
from kanal.metadata.schema_registry_rules import CachingParser
from kanal.schemas.formats import parse_schema
from kanal.schemas.schema_types import SchemaInvalid, SchemaType
from kanal.v1 import schema_registry_pb2 as pb
from kanal.v1.error import ErrorCode

from .test_schema_registry import ADDRESS, ADDRESS_REF, OTHER, V1, V2, V3, WITH_ADDRESS, Registry


@pytest.fixture
def reg(harness) -> Registry:
    """users: 1 (V1, soft-deleted), 2 (V2); orders: 1 (OTHER, soft-deleted); address: 1; customer: 1
    referencing address 1; a config and a mode on users."""
    reg = Registry(harness)
    reg.ok("users", V1)
    reg.ok("users", V2)
    reg.ok("orders", OTHER)
    reg.ok("address", ADDRESS)
    reg.ok("customer", WITH_ADDRESS, references=[ADDRESS_REF])
    reg.delete_version("users", 1)
    reg.delete_subject("orders")
    reg.set_config("users", "FORWARD")
    reg.set_mode("users", "READWRITE")
    return reg


def test_get_schema(reg) -> None:
    reply = get_schema(reg.image, pb.GetSchemaRequest(id=2))
    assert reply.error == ErrorCode.NONE
    assert (reply.schema.id, reply.schema.schema_type, reply.schema.schema) == (2, "AVRO", V2)
    assert [(v.subject, v.version, v.deleted) for v in reply.versions] == [("users", 2, False)]
    with_refs = get_schema(reg.image, pb.GetSchemaRequest(id=5)).schema
    assert [(r.name, r.subject, r.version) for r in with_refs.references] == [
        ("com.acme.Address", "address", 1)]


def test_a_soft_deleted_schema_is_still_served_by_id(reg) -> None:
    # Data written with id 1 stays decodable after a soft delete (Confluent's); its version shows only
    # when deleted ones are asked for.
    reply = get_schema(reg.image, pb.GetSchemaRequest(id=1))
    assert reply.error == ErrorCode.NONE and reply.schema.schema == V1 and list(reply.versions) == []
    deleted = get_schema(reg.image, pb.GetSchemaRequest(id=1, deleted=True))
    assert [(v.subject, v.version, v.deleted) for v in deleted.versions] == [("users", 1, True)]


def test_get_schema_not_found(reg) -> None:
    assert get_schema(reg.image, pb.GetSchemaRequest(id=99)).error == ErrorCode.SCHEMA_NOT_FOUND
    reg.delete_subject("orders", permanent=True)
    # Every holder of id 3 hard-deleted: the id answers nothing (and is never given to another text).
    assert get_schema(reg.image, pb.GetSchemaRequest(id=3, deleted=True)).error == ErrorCode.SCHEMA_NOT_FOUND


def test_list_subjects(reg) -> None:
    def subjects(**fields):
        return list(list_subjects(reg.image, pb.ListSubjectsRequest(**fields)).subjects)

    assert subjects() == ["address", "customer", "users"]
    assert subjects(deleted=True) == ["address", "customer", "orders", "users"]
    assert subjects(prefix="cu") == ["customer"]
    assert subjects(prefix="or") == []


def test_list_versions(reg) -> None:
    assert reg.versions("users") == [2]
    assert reg.versions("users", deleted=True) == [1, 2]
    reply = list_versions(reg.image, pb.ListVersionsRequest(subject="orders"))
    assert reply.error == ErrorCode.SUBJECT_NOT_FOUND  # only soft-deleted versions
    assert reg.versions("orders", deleted=True) == [1]


def test_get_version(reg) -> None:
    def version(subject, number, deleted=False):
        return get_version(reg.image, pb.GetVersionRequest(subject=subject, version=number, deleted=deleted))

    latest = version("users", -1).version
    assert (latest.subject, latest.version, latest.schema.id, latest.schema.schema, latest.deleted) == (
        "users", 2, 2, V2, False)
    assert version("users", 1).error == ErrorCode.SCHEMA_VERSION_NOT_FOUND
    soft = version("users", 1, deleted=True).version
    assert (soft.version, soft.deleted) == (1, True)
    assert version("users", 7).error == ErrorCode.SCHEMA_VERSION_NOT_FOUND
    assert version("nobody", 1).error == ErrorCode.SUBJECT_NOT_FOUND
    assert version("orders", -1).error == ErrorCode.SUBJECT_NOT_FOUND
    assert version("orders", -1, deleted=True).error == ErrorCode.SCHEMA_VERSION_NOT_FOUND  # none live
    assert version("users", 0).error == ErrorCode.INVALID_REQUEST


def test_lookup_schema(reg) -> None:
    def lookup(subject, schema, **fields):
        return lookup_schema(reg.image, pb.LookupSchemaRequest(subject=subject, schema=schema, **fields))

    found = lookup("users", json.dumps(json.loads(V2), indent=3)).version  # reformatted: the same schema
    assert (found.subject, found.version, found.schema.id) == ("users", 2, 2)
    assert lookup("users", V1).error == ErrorCode.SCHEMA_NOT_FOUND  # soft-deleted
    assert lookup("users", V1, deleted=True).version.version == 1
    assert lookup("users", V3).error == ErrorCode.SCHEMA_NOT_FOUND
    assert lookup("orders", OTHER).error == ErrorCode.SUBJECT_NOT_FOUND
    assert lookup("orders", OTHER, deleted=True).version.deleted
    assert lookup("users", '{"type": "nope"}').error == ErrorCode.INVALID_SCHEMA
    # The references are part of the schema: without them it does not even parse.
    assert lookup("customer", WITH_ADDRESS).error == ErrorCode.INVALID_SCHEMA
    assert lookup("customer", WITH_ADDRESS, references=[ADDRESS_REF]).version.version == 1


def test_check_compatibility(reg) -> None:
    def check(subject, schema, version=0):
        return check_compatibility(reg.image, pb.CheckCompatibilityRequest(subject=subject, version=version,
                                                                           schema=schema))

    # users is FORWARD: the latest (V2) must read what the new schema writes.
    assert check("users", V3).compatible  # V2 ignores email
    dropped = check("users", json.dumps({"type": "record", "name": "User", "fields": []}))
    assert not dropped.compatible and any("version 2 (forward" in m for m in dropped.messages)
    assert check("users", V3, version=-1).compatible
    assert check("users", V3, version=2).compatible
    assert check("users", V3, version=1).error == ErrorCode.SCHEMA_VERSION_NOT_FOUND  # soft-deleted
    assert check("address", V1, version=-1).compatible is False  # BACKWARD: User cannot read Address
    assert check("nobody", V1).compatible and check("nobody", V1, version=-1).compatible
    assert check("nobody", V1, version=1).error == ErrorCode.SCHEMA_VERSION_NOT_FOUND
    assert check("users", "{").error == ErrorCode.INVALID_SCHEMA
    assert check("users", V3, version=-5).error == ErrorCode.INVALID_REQUEST


def test_config_and_mode(reg) -> None:
    def config(subject, **fields):
        return get_registry_config(reg.image, pb.GetRegistryConfigRequest(subject=subject, **fields))

    def mode(subject, **fields):
        return get_registry_mode(reg.image, pb.GetRegistryModeRequest(subject=subject, **fields))

    assert (config("").compatibility, config("").normalize) == ("BACKWARD", False)
    assert config("users").compatibility == "FORWARD"
    assert config("address").error == ErrorCode.SUBJECT_NOT_FOUND
    assert config("address", default_to_global=True).compatibility == "BACKWARD"
    reg.set_config("", "FULL", normalize=True)
    assert (config("address", default_to_global=True).compatibility,
            config("address", default_to_global=True).normalize) == ("FULL", True)
    assert mode("").mode == "READWRITE" and mode("users").mode == "READWRITE"
    assert mode("address").error == ErrorCode.SUBJECT_NOT_FOUND
    reg.set_mode("", "READONLY")
    assert mode("address", default_to_global=True).mode == "READONLY"


def test_get_referenced_by(reg) -> None:
    def referenced_by(subject, version):
        return get_referenced_by(reg.image, pb.GetReferencedByRequest(subject=subject, version=version))

    assert list(referenced_by("address", 1).ids) == [5]
    assert list(referenced_by("address", -1).ids) == [5]
    assert list(referenced_by("users", 2).ids) == []
    assert referenced_by("address", 2).error == ErrorCode.SCHEMA_VERSION_NOT_FOUND
    assert referenced_by("nobody", 1).error == ErrorCode.SUBJECT_NOT_FOUND
    reg.delete_subject("customer")
    assert list(referenced_by("address", 1).ids) == []  # only live referrers count


def test_a_caching_parser_parses_each_text_once() -> None:
    calls = []

    def counting(schema_type, text, references):
        calls.append(text)
        return parse_schema(schema_type, text, references)

    parser = CachingParser(entries_max=2, parse=counting)
    first = parser(SchemaType.AVRO, V1, {})
    assert parser(SchemaType.AVRO, V1, {}) is first and calls == [V1]
    parser(SchemaType.AVRO, V2, {})
    parser(SchemaType.AVRO, V3, {})  # V1 is the least recently used: forgotten
    parser(SchemaType.AVRO, V1, {})
    assert calls == [V1, V2, V3, V1]
    with pytest.raises(SchemaInvalid):
        parser(SchemaType.AVRO, "{", {})
    with pytest.raises(SchemaInvalid):
        parser(SchemaType.AVRO, "{", {})
    assert calls.count("{") == 2  # a refusal is not remembered


def test_a_registered_schema_that_no_longer_parses_is_reported(reg) -> None:
    def strict(schema_type, text, references):
        if text == V2:
            raise SchemaInvalid("this parser no longer takes it")
        return parse_schema(schema_type, text, references)

    request = pb.CheckCompatibilityRequest(subject="users", schema=V3)
    reply = check_compatibility(reg.image, request, parse=strict)
    assert reply.error == ErrorCode.INVALID_SCHEMA
    assert "registered schema 2 no longer parses" in reply.error_message
