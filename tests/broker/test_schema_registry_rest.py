"""Confluent's REST API as SchemaRegistry calls (broker/schema_registry_rest.py): each path and method to its
call and request, the replies rendered as Confluent's JSON, and what the API refuses before any call, with
Confluent's status and error codes."""

from __future__ import annotations

import json

import pytest

from kanal.broker.schema_registry_rest import RestError, rest_error, route
from kanal.v1 import schema_registry_pb2 as pb
from kanal.v1.error import ErrorCode


def body(**fields) -> bytes:
    return json.dumps(fields).encode()


AVRO = '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'


def test_register_carries_the_schema_type_references_and_normalize_and_answers_the_id():
    routed = route("POST", "/subjects/orders-value/versions", {"normalize": "true"},
                   body(schema=AVRO, schemaType="AVRO",
                        references=[{"name": "x.avsc", "subject": "x", "version": 2}]))
    assert routed.method == "Register"
    assert routed.request == pb.RegisterSchemaRequest(
        subject="orders-value", schema_type="AVRO", schema=AVRO, normalize=True,
        references=[pb.SchemaReference(name="x.avsc", subject="x", version=2)])
    assert routed.render(pb.RegisterSchemaResponse(id=7, version=1)) == {"id": 7}


def test_a_version_shows_subject_version_id_and_schema_with_schema_type_only_when_not_avro():
    routed = route("GET", "/subjects/s/versions/latest", {}, b"")
    assert routed.request == pb.GetVersionRequest(subject="s", version=-1)
    avro = pb.SubjectVersion(subject="s", version=3, schema=pb.RegisteredSchema(id=9, schema_type="AVRO",
                                                                                  schema=AVRO))
    assert routed.render(pb.GetVersionResponse(version=avro)) == {"subject": "s", "version": 3, "id": 9,
                                                                  "schema": AVRO}
    ref = pb.SchemaReference(name="a", subject="b", version=1)
    json_schema = pb.SubjectVersion(subject="s", version=1, schema=pb.RegisteredSchema(
        id=2, schema_type="JSON", schema="{}", references=[ref]))
    assert routed.render(pb.GetVersionResponse(version=json_schema)) == {
        "subject": "s", "version": 1, "id": 2, "schemaType": "JSON", "schema": "{}",
        "references": [{"name": "a", "subject": "b", "version": 1}]}


@pytest.mark.parametrize(("method", "path", "query", "call", "request_message"), [
    ("GET", "/subjects", {"deleted": "true", "subjectPrefix": "ord"}, "ListSubjects",
     pb.ListSubjectsRequest(deleted=True, prefix="ord")),
    ("GET", "/subjects/a%2Fb/versions", {}, "ListVersions", pb.ListVersionsRequest(subject="a/b")),
    ("GET", "/subjects/versions/versions/2", {}, "GetVersion",
     pb.GetVersionRequest(subject="versions", version=2)),
    ("DELETE", "/subjects/s", {"permanent": "true"}, "DeleteSubject",
     pb.DeleteSubjectRequest(subject="s", permanent=True)),
    ("DELETE", "/subjects/s/versions/-1", {}, "DeleteVersion",
     pb.DeleteVersionRequest(subject="s", version=-1)),
    ("GET", "/subjects/s/versions/4/referencedby", {}, "GetReferencedBy",
     pb.GetReferencedByRequest(subject="s", version=4)),
    ("GET", "/schemas/ids/12", {}, "GetSchema", pb.GetSchemaRequest(id=12)),
    ("GET", "/config", {}, "GetConfig", pb.GetRegistryConfigRequest()),
    ("GET", "/config/s", {"defaultToGlobal": "true"}, "GetConfig",
     pb.GetRegistryConfigRequest(subject="s", default_to_global=True)),
    ("DELETE", "/config/s", {}, "SetConfig", pb.SetRegistryConfigRequest(subject="s", delete=True)),
    ("GET", "/mode", {}, "GetMode", pb.GetRegistryModeRequest()),
    ("DELETE", "/mode/s", {}, "SetMode", pb.SetRegistryModeRequest(subject="s", delete=True)),
])
def test_each_path_is_its_call(method, path, query, call, request_message):
    routed = route(method, path, query, b"")
    assert (routed.method, routed.request) == (call, request_message)


def test_put_config_and_mode_read_their_bodies():
    routed = route("PUT", "/config/s", {}, body(compatibility="FULL"))
    assert routed.request == pb.SetRegistryConfigRequest(subject="s", compatibility="FULL")
    assert routed.render(pb.SetRegistryConfigResponse(compatibility="FULL")) == {"compatibility": "FULL",
                                                                                "normalize": False}
    routed = route("PUT", "/mode", {"force": "true"}, body(mode="IMPORT"))
    assert routed.request == pb.SetRegistryModeRequest(mode="IMPORT", force=True)


def test_compatibility_against_one_version_or_all_verbose_or_not():
    routed = route("POST", "/compatibility/subjects/s/versions/latest", {"verbose": "true"},
                   body(schema=AVRO))
    assert routed.request == pb.CheckCompatibilityRequest(subject="s", version=-1, schema=AVRO)
    reply = pb.CheckCompatibilityResponse(compatible=False, messages=["a field went"])
    assert routed.render(reply) == {"is_compatible": False, "messages": ["a field went"]}
    routed = route("POST", "/compatibility/subjects/s/versions", {}, body(schema=AVRO))
    assert routed.request.version == 0
    assert routed.render(pb.CheckCompatibilityResponse(compatible=True)) == {"is_compatible": True}


def test_the_schema_paths_answer_the_text_itself_and_ids_list_subjects_and_versions():
    schema = pb.GetSchemaResponse(schema=pb.RegisteredSchema(id=1, schema=AVRO), versions=[
        pb.SubjectVersion(subject="b", version=2), pb.SubjectVersion(subject="a", version=1)])
    assert route("GET", "/schemas/ids/1/schema", {}, b"").raw_schema
    assert route("GET", "/schemas/ids/1/schema", {}, b"").render(schema) == AVRO
    assert route("GET", "/schemas/ids/1/subjects", {}, b"").render(schema) == ["a", "b"]
    assert route("GET", "/schemas/ids/1/versions", {}, b"").render(schema) == [
        {"subject": "b", "version": 2}, {"subject": "a", "version": 1}]
    assert route("GET", "/schemas/types", {}, b"").render(None) == ["JSON", "PROTOBUF", "AVRO"]


@pytest.mark.parametrize(("method", "path", "query", "payload", "status", "code"), [
    ("GET", "/nowhere", {}, b"", 404, 404),
    ("PATCH", "/subjects", {}, b"", 405, 405),
    ("DELETE", "/config", {}, b"", 405, 405),
    ("GET", "/subjects/s/versions/0", {}, b"", 422, 42202),
    ("GET", "/subjects/s/versions/first", {}, b"", 422, 42202),
    ("GET", "/subjects/s/versions/2147483648", {}, b"", 422, 42202),
    ("POST", "/subjects/s/versions", {}, b"{not json", 400, 400),
    ("POST", "/subjects/s/versions", {}, b"[1]", 422, 422),
    ("POST", "/subjects/s/versions", {}, body(schemaType="AVRO"), 422, 42201),
    ("POST", "/subjects/s/versions", {}, body(schema=AVRO, references=[{"name": "x"}]), 422, 42201),
    ("POST", "/subjects/s/versions", {}, body(schema=AVRO, id=-4), 422, 42201),
    ("GET", "/subjects", {"deleted": "maybe"}, b"", 400, 400),
    ("PUT", "/config", {}, body(compatibility=5), 422, 42203),
    ("PUT", "/mode", {}, body(), 422, 42204),
])
def test_what_the_api_refuses_before_any_call(method, path, query, payload, status, code):
    with pytest.raises(RestError) as refused:
        route(method, path, query, payload)
    assert (refused.value.status, refused.value.error_code) == (status, code)


@pytest.mark.parametrize(("code", "path", "status", "error_code"), [
    (ErrorCode.INVALID_SCHEMA, "/subjects/s/versions", 422, 42201),
    (ErrorCode.INCOMPATIBLE_SCHEMA, "/subjects/s/versions", 409, 409),
    (ErrorCode.SUBJECT_NOT_FOUND, "/subjects/s/versions", 404, 40401),
    (ErrorCode.SCHEMA_NOT_FOUND, "/subjects/s/versions", 404, 40403),
    (ErrorCode.REGISTRY_MODE_FORBIDS, "/subjects/s/versions", 422, 42205),
    (ErrorCode.AUTHORIZATION_FAILED, "/subjects/s/versions", 403, 40301),
    (ErrorCode.AUTHENTICATION_FAILED, "/subjects/s/versions", 401, 40101),
    (ErrorCode.CONTROLLER_NOT_AVAILABLE, "/subjects/s/versions", 500, 50003),
    (ErrorCode.UNKNOWN_SERVER_ERROR, "/subjects/s/versions", 500, 50001),
])
def test_call_errors_are_confluents_status_and_code(code, path, status, error_code):
    routed = route("POST", path, {}, body(schema=AVRO))
    refused = rest_error(routed, code, "m")
    assert (refused.status, refused.error_code) == (status, error_code)


def test_the_two_codes_that_depend_on_the_call():
    subject = route("DELETE", "/subjects/s", {}, b"")
    version = route("DELETE", "/subjects/s/versions/1", {}, b"")
    assert rest_error(subject, ErrorCode.NOT_SOFT_DELETED, "").error_code == 40405
    assert rest_error(version, ErrorCode.NOT_SOFT_DELETED, "").error_code == 40407
    config = route("PUT", "/config", {}, body(compatibility="X"))
    mode = route("PUT", "/mode", {}, body(mode="X"))
    assert rest_error(config, ErrorCode.INVALID_CONFIG, "").error_code == 42203
    assert rest_error(mode, ErrorCode.INVALID_CONFIG, "").error_code == 42204


def test_a_subject_without_a_setting_of_its_own_is_40408_or_40409():
    config = route("GET", "/config/s", {}, b"")
    mode = route("GET", "/mode/s", {}, b"")
    assert rest_error(config, ErrorCode.SUBJECT_NOT_FOUND, "").error_code == 40408
    assert rest_error(mode, ErrorCode.SUBJECT_NOT_FOUND, "").error_code == 40409
    versions = route("GET", "/subjects/s/versions", {}, b"")
    assert rest_error(versions, ErrorCode.SUBJECT_NOT_FOUND, "").error_code == 40401
