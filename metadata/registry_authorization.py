"""What each schema registry call needs (issue 45), checked where the active controller decides it, with the
ACLs on subjects (ACL_RESOURCE_SUBJECT; prefixed patterns work as for topics): `admit_registry(method,
request, access) -> Admission`. Refusals are AUTHORIZATION_FAILED for the whole call (the REST API's 403
with Confluent's 40301); lists are narrowed to what the caller may see instead.

| call | needs |
|---|---|
| Register, DeleteSubject, DeleteVersion | WRITE on the subject |
| GetVersion, ListVersions, LookupSchema, CheckCompatibility, GetReferencedBy | READ on the subject |
| GetSchema | READ on a subject that holds the schema (the reply names only those); none: refused |
| ListSubjects | nothing; the reply lists only the subjects the caller may READ |
| GetConfig, GetMode | DESCRIBE_CONFIGS on the subject; the global ones: on the cluster |
| SetConfig, SetMode | ALTER_CONFIGS on the subject; the global ones: on the cluster |

Why WRITE and READ (not Confluent's own operation names): kanal has one ACL vocabulary, Kafka's, and a
subject is read and written as a topic is; a registry principal is the same principal everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kanal.metadata.access import Access, Admission, admitted
from kanal.metadata.acl import CLUSTER, CLUSTER_RESOURCE_NAME, SUBJECT
from kanal.v1 import metadata_pb2, schema_registry_pb2
from kanal.v1.error import ErrorCode

REFUSED = ErrorCode.AUTHORIZATION_FAILED
_OP = metadata_pb2


def admit_registry(method: str, request: Any, access: Access) -> Admission:
    """The part of a registry call `access` allows; KanalError(AUTHORIZATION_FAILED) for a call refused
    whole. ValueError for a method without a rule (nothing passes unchecked by omission)."""
    rule = _RULES.get(method)
    if rule is None:
        raise ValueError(f"no authorization rule for schema registry call {method}")
    return rule(request, access)


def _on_subject(operation: int) -> Callable[[Any, Access], Admission]:
    def rule(request: Any, access: Access) -> Admission:
        access.require(operation, SUBJECT, request.subject, REFUSED)
        return admitted(request)

    return rule


def _on_subject_or_cluster(operation: int) -> Callable[[Any, Access], Admission]:
    """A subject's setting needs `operation` on the subject; the global one ("" subject) on the cluster."""

    def rule(request: Any, access: Access) -> Admission:
        if request.subject:
            access.require(operation, SUBJECT, request.subject, REFUSED)
        else:
            access.require(operation, CLUSTER, CLUSTER_RESOURCE_NAME, REFUSED)
        return admitted(request)

    return rule


def _list_subjects(request: schema_registry_pb2.ListSubjectsRequest, access: Access) -> Admission:
    def finish(reply: schema_registry_pb2.ListSubjectsResponse) -> schema_registry_pb2.ListSubjectsResponse:
        readable = [s for s in reply.subjects if access.allows(_OP.ACL_OPERATION_READ, SUBJECT, s)]
        del reply.subjects[:]
        reply.subjects.extend(readable)
        return reply

    return Admission(request, finish)


def _get_schema(request: schema_registry_pb2.GetSchemaRequest, access: Access) -> Admission:
    def finish(reply: schema_registry_pb2.GetSchemaResponse) -> schema_registry_pb2.GetSchemaResponse:
        if reply.error != ErrorCode.NONE:
            return reply
        readable = [v for v in reply.versions if access.allows(_OP.ACL_OPERATION_READ, SUBJECT, v.subject)]
        if not readable:
            message = f"{access.principal} from {access.host} may not read a subject of schema {request.id}"
            return schema_registry_pb2.GetSchemaResponse(error=REFUSED, error_message=message)
        del reply.versions[:]
        reply.versions.extend(readable)
        return reply

    return Admission(request, finish)


_RULES: dict[str, Callable[[Any, Access], Admission]] = {
    "Register": _on_subject(_OP.ACL_OPERATION_WRITE),
    "DeleteSubject": _on_subject(_OP.ACL_OPERATION_WRITE),
    "DeleteVersion": _on_subject(_OP.ACL_OPERATION_WRITE),
    "GetVersion": _on_subject(_OP.ACL_OPERATION_READ),
    "ListVersions": _on_subject(_OP.ACL_OPERATION_READ),
    "LookupSchema": _on_subject(_OP.ACL_OPERATION_READ),
    "CheckCompatibility": _on_subject(_OP.ACL_OPERATION_READ),
    "GetReferencedBy": _on_subject(_OP.ACL_OPERATION_READ),
    "GetSchema": _get_schema,
    "ListSubjects": _list_subjects,
    "GetConfig": _on_subject_or_cluster(_OP.ACL_OPERATION_DESCRIBE_CONFIGS),
    "GetMode": _on_subject_or_cluster(_OP.ACL_OPERATION_DESCRIBE_CONFIGS),
    "SetConfig": _on_subject_or_cluster(_OP.ACL_OPERATION_ALTER_CONFIGS),
    "SetMode": _on_subject_or_cluster(_OP.ACL_OPERATION_ALTER_CONFIGS),
}
REGISTRY_CALLS = frozenset(_RULES)
