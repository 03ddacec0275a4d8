"""The schema registry's per-call rules over ACLs on subjects (metadata/registry_authorization.py): writes
need WRITE, reads READ, settings DESCRIBE_CONFIGS / ALTER_CONFIGS (on the cluster for the global ones),
lists narrowed to the readable subjects, a schema by id only through a readable subject."""

from __future__ import annotations

import pytest

from kanal.metadata.access import Access
from kanal.metadata.acl import (
    ALLOW,
    CLUSTER,
    CLUSTER_RESOURCE_NAME,
    LITERAL,
    PREFIXED,
    SUBJECT,
    AclEntry,
    build_acl_map,
)
from kanal.metadata.authorizer import AuthorizerConfig
from kanal.metadata.registry_authorization import REGISTRY_CALLS, admit_registry
from kanal.v1 import metadata_pb2 as M
from kanal.v1 import schema_registry_pb2 as pb
from kanal.v1.error import ErrorCode, KanalError

ALICE = "User:alice"


def access(*grants: tuple[int, int, str, int]) -> Access:
    entries = [AclEntry(rtype, name, pattern, ALICE, "*", op, ALLOW) for op, rtype, name, pattern in grants]
    return Access(ALICE, "127.0.0.1", build_acl_map(entries), AuthorizerConfig(enabled=True))


READ_ORDERS = (M.ACL_OPERATION_READ, SUBJECT, "orders-", PREFIXED)
WRITE_ORDERS_VALUE = (M.ACL_OPERATION_WRITE, SUBJECT, "orders-value", LITERAL)


@pytest.mark.parametrize(("method", "request_message", "grants", "allowed"), [
    ("Register", pb.RegisterSchemaRequest(subject="orders-value"), [WRITE_ORDERS_VALUE], True),
    ("Register", pb.RegisterSchemaRequest(subject="orders-value"), [READ_ORDERS], False),
    ("Register", pb.RegisterSchemaRequest(subject="orders-key"), [WRITE_ORDERS_VALUE], False),
    ("DeleteSubject", pb.DeleteSubjectRequest(subject="orders-value"), [WRITE_ORDERS_VALUE], True),
    ("DeleteVersion", pb.DeleteVersionRequest(subject="orders-value"), [READ_ORDERS], False),
    ("GetVersion", pb.GetVersionRequest(subject="orders-value"), [READ_ORDERS], True),
    ("LookupSchema", pb.LookupSchemaRequest(subject="payments-value"), [READ_ORDERS], False),
    ("CheckCompatibility", pb.CheckCompatibilityRequest(subject="orders-key"), [READ_ORDERS], True),
    ("SetConfig", pb.SetRegistryConfigRequest(subject="orders-value"),
     [(M.ACL_OPERATION_ALTER_CONFIGS, SUBJECT, "orders-value", LITERAL)], True),
    ("SetConfig", pb.SetRegistryConfigRequest(),
     [(M.ACL_OPERATION_ALTER_CONFIGS, SUBJECT, "*", LITERAL)], False),
    ("SetConfig", pb.SetRegistryConfigRequest(),
     [(M.ACL_OPERATION_ALTER_CONFIGS, CLUSTER, CLUSTER_RESOURCE_NAME, LITERAL)], True),
    ("GetMode", pb.GetRegistryModeRequest(subject="orders-value"),
     [(M.ACL_OPERATION_DESCRIBE_CONFIGS, SUBJECT, "orders-", PREFIXED)], True),
])
def test_each_call_needs_its_operation_on_its_subject(method, request_message, grants, allowed):
    if allowed:
        assert admit_registry(method, request_message, access(*grants)).request == request_message
    else:
        with pytest.raises(KanalError) as refused:
            admit_registry(method, request_message, access(*grants))
        assert refused.value.code == ErrorCode.AUTHORIZATION_FAILED


def test_subject_lists_and_schemas_by_id_show_only_readable_subjects():
    a = access(READ_ORDERS)
    listed = admit_registry("ListSubjects", pb.ListSubjectsRequest(), a)
    subjects = pb.ListSubjectsResponse(subjects=["orders-key", "pay", "orders-value"])
    assert list(listed.reply(subjects).subjects) == ["orders-key", "orders-value"]
    by_id = admit_registry("GetSchema", pb.GetSchemaRequest(id=3), a)
    reply = by_id.reply(pb.GetSchemaResponse(versions=[pb.SubjectVersion(subject="pay", version=1),
                                                      pb.SubjectVersion(subject="orders-x", version=2)]))
    assert [v.subject for v in reply.versions] == ["orders-x"]
    hidden = by_id.reply(pb.GetSchemaResponse(versions=[pb.SubjectVersion(subject="pay", version=1)]))
    assert hidden.error == ErrorCode.AUTHORIZATION_FAILED and not hidden.versions


def test_every_call_of_the_service_has_a_rule():
    assert REGISTRY_CALLS == {m.name for m in pb.DESCRIPTOR.services_by_name["SchemaRegistry"].methods}
    with pytest.raises(ValueError, match="no authorization rule"):
        admit_registry("Nothing", None, access())
