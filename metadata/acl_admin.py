"""ACL decisions: CreateAcls, DeleteAcls, and DescribeAcls (a read), as Kafka's calls.

CreateAcls: each creation succeeds or fails on its own. One that is not well formed (acl.py's rules)
gets INVALID_REQUEST and writes nothing; one that exists already, or repeats an earlier creation of the
same request, succeeds and writes nothing (the ACLs are a set). The rest become one
AccessControlEntryRecord each, all in one batch.

DeleteAcls: each filter removes the entries it matches, listed in its result; an entry several filters
match is removed (and listed) once, under the first. A filter that cannot match (acl.py check_filter)
gets INVALID_REQUEST and removes nothing; the other filters go ahead.

More than ACL_CHANGES_PER_REQUEST_MAX creations or filters: the whole request is INVALID_REQUEST (a
decision is one Raft entry; split the request).
"""

from __future__ import annotations

from kanal.metadata.acl import (
    ACL_CHANGES_PER_REQUEST_MAX,
    AclEntry,
    check_entry,
    check_filter,
    select,
)
from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.image import MetadataImage
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError


def decide_create_acls(
    image: MetadataImage,
    request: admin_pb2.CreateAclsRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[admin_pb2.CreateAclsResponse]:
    """Add the well-formed entries that are not there yet."""
    _check_count(len(request.creations), "creations")
    stamp = Stamp(now_ms, principal, request_id)
    records: list[metadata_pb2.MetadataRecord] = []
    results = []
    adding: set[AclEntry] = set()
    for proto in request.creations:
        entry = AclEntry.from_proto(proto)
        try:
            check_entry(entry)
        except KanalError as exc:
            results.append(admin_pb2.CreateAclsResponse.Result(error=exc.code, error_message=exc.message))
            continue
        results.append(admin_pb2.CreateAclsResponse.Result())
        if entry in image.acls.get(entry.resource, ()) or entry in adding:
            continue
        adding.add(entry)
        records.append(stamp.record(access_control_entry=metadata_pb2.AccessControlEntryRecord(entry=proto)))
    return Decision(records, admin_pb2.CreateAclsResponse(results=results))


def decide_delete_acls(
    image: MetadataImage,
    request: admin_pb2.DeleteAclsRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[admin_pb2.DeleteAclsResponse]:
    """Remove every entry a filter matches; the reply lists them per filter."""
    _check_count(len(request.filters), "filters")
    stamp = Stamp(now_ms, principal, request_id)
    records: list[metadata_pb2.MetadataRecord] = []
    results = []
    removing: set[AclEntry] = set()
    for acl_filter in request.filters:
        try:
            check_filter(acl_filter)
        except KanalError as exc:
            results.append(
                admin_pb2.DeleteAclsResponse.FilterResult(error=exc.code, error_message=exc.message)
            )
            continue
        deleted = [e for e in select(image.acls, acl_filter) if e not in removing]
        removing.update(deleted)
        results.append(admin_pb2.DeleteAclsResponse.FilterResult(deleted=[e.to_proto() for e in deleted]))
        records.extend(
            stamp.record(remove_access_control_entry=metadata_pb2.RemoveAccessControlEntryRecord(entry=e.to_proto()))
            for e in deleted
        )
    return Decision(records, admin_pb2.DeleteAclsResponse(results=results))


def describe_acls(
    image: MetadataImage, request: admin_pb2.DescribeAclsRequest
) -> admin_pb2.DescribeAclsResponse:
    """The entries the filter selects, sorted (an unset filter selects all)."""
    try:
        check_filter(request.filter)
    except KanalError as exc:
        return admin_pb2.DescribeAclsResponse(error=exc.code, error_message=exc.message)
    return admin_pb2.DescribeAclsResponse(acls=[e.to_proto() for e in select(image.acls, request.filter)])


def _check_count(count: int, what: str) -> None:
    if count > ACL_CHANGES_PER_REQUEST_MAX:
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"{count} {what} in one request; at most {ACL_CHANGES_PER_REQUEST_MAX}")
