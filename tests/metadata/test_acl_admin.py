"""ACL decisions and records: CreateAcls / DescribeAcls / DeleteAcls through decide -> records -> apply;
bad input writes nothing; entries survive a snapshot; apply refuses records that do not fit."""

from __future__ import annotations

import pytest

from kanal.metadata import (
    MetadataInvariantError,
    Stamp,
    apply,
    decide_create_acls,
    decide_delete_acls,
    describe_acls,
    image_from_snapshot,
    image_to_snapshot,
)
from kanal.metadata.acl import ACL_CHANGES_PER_REQUEST_MAX, AclEntry
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

M = metadata_pb2


def entry(principal="User:alice", op=M.ACL_OPERATION_READ, name="orders", pattern=M.ACL_PATTERN_LITERAL,
          rtype=M.ACL_RESOURCE_TOPIC, host="*", permission=M.ACL_PERMISSION_ALLOW) -> M.AccessControlEntry:
    return M.AccessControlEntry(
        resource_type=rtype,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host=host,
        operation=op,
        permission=permission,
    )


def create(h, *entries):
    return h.commit(
        decide_create_acls(h.image, admin_pb2.CreateAclsRequest(creations=entries), **h.ctx("User:admin"))
    )


def listed(h, **filter_fields):
    reply = describe_acls(h.image, admin_pb2.DescribeAclsRequest(filter=admin_pb2.AclFilter(**filter_fields)))
    assert reply.error == ErrorCode.NONE, reply.error_message
    return list(reply.acls)


def test_create_describe_delete(harness):
    h = harness
    reply = create(
        h, entry(), entry(op=M.ACL_OPERATION_WRITE), entry(name="pay", pattern=M.ACL_PATTERN_PREFIXED)
    )
    assert [r.error for r in reply.results] == [0, 0, 0]
    assert len(listed(h)) == 3
    assert len(listed(h, operation=M.ACL_OPERATION_WRITE)) == 1
    assert [
        a.resource_name for a in listed(h, resource_name="payments", pattern_filter=admin_pb2.AclFilter.MATCH)
    ] == ["pay"]
    assert len(listed(h, resource_name="orders")) == 2
    assert listed(h, principal="User:bob") == []
    deleted = h.commit(decide_delete_acls(h.image, admin_pb2.DeleteAclsRequest(filters=[
        admin_pb2.AclFilter(resource_name="orders"), admin_pb2.AclFilter(operation=M.ACL_OPERATION_READ)]),
        **h.ctx()))
    # The second filter matches READ on orders too, but that was deleted (and is listed) under the first.
    assert [[a.resource_name for a in r.deleted] for r in deleted.results] == [["orders", "orders"], ["pay"]]
    assert listed(h) == []


def test_records_are_stamped_and_an_existing_entry_writes_nothing(harness):
    h = harness
    decision = decide_create_acls(h.image, admin_pb2.CreateAclsRequest(creations=[entry(), entry()]),
                                  **h.ctx("User:admin"))
    assert len(decision.records) == 1  # the repeat within the request is the same entry
    assert decision.records[0].principal == "User:admin"
    h.commit(decision)
    again = decide_create_acls(h.image, admin_pb2.CreateAclsRequest(creations=[entry()]), **h.ctx())
    assert again.records == [] and again.reply.results[0].error == ErrorCode.NONE


@pytest.mark.parametrize("bad", [
    entry(op=M.ACL_OPERATION_UNSPECIFIED),
    entry(op=99),
    entry(permission=M.ACL_PERMISSION_UNSPECIFIED),
    entry(pattern=M.ACL_PATTERN_UNSPECIFIED),
    entry(rtype=M.ACL_RESOURCE_UNSPECIFIED),
    entry(principal="alice"),
    entry(principal="Group:alice"),
    entry(principal="User:"),
    entry(name=""),
    entry(name="*", pattern=M.ACL_PATTERN_PREFIXED),
    entry(host=""),
    entry(host="a host"),
    entry(rtype=M.ACL_RESOURCE_CLUSTER, name="orders"),
    entry(name="x" * 256),
], ids=lambda e: str(e).replace("\n", " "))
def test_bad_entries_are_invalid_and_write_nothing(harness, bad):
    h = harness
    decision = decide_create_acls(h.image, admin_pb2.CreateAclsRequest(creations=[bad, entry()]), **h.ctx())
    assert decision.reply.results[0].error == ErrorCode.INVALID_REQUEST
    assert decision.reply.results[0].error_message
    assert decision.reply.results[1].error == ErrorCode.NONE
    assert [r.access_control_entry.entry for r in decision.records] == [entry()]


def test_bad_filters_and_too_many_changes(harness):
    h = harness
    create(h, entry())
    reply = describe_acls(h.image, admin_pb2.DescribeAclsRequest(
        filter=admin_pb2.AclFilter(pattern_filter=admin_pb2.AclFilter.MATCH)))
    assert reply.error == ErrorCode.INVALID_REQUEST
    decision = decide_delete_acls(h.image, admin_pb2.DeleteAclsRequest(filters=[
        admin_pb2.AclFilter(operation=77)]), **h.ctx())
    assert decision.records == [] and decision.reply.results[0].error == ErrorCode.INVALID_REQUEST
    with pytest.raises(KanalError) as err:
        decide_create_acls(h.image, admin_pb2.CreateAclsRequest(
            creations=[entry(name=f"t{i}") for i in range(ACL_CHANGES_PER_REQUEST_MAX + 1)]), **h.ctx())
    assert err.value.code == ErrorCode.INVALID_REQUEST


def test_acls_survive_a_snapshot(harness):
    h = harness
    h.add_brokers([0, 1, 2])
    h.create_topic("orders", 2, 3)
    create(h, entry(), entry(principal="User:*", permission=M.ACL_PERMISSION_DENY, host="10.0.0.1"),
           entry(rtype=M.ACL_RESOURCE_CLUSTER, name="kanal-cluster", op=M.ACL_OPERATION_ALTER),
           entry(rtype=M.ACL_RESOURCE_GROUP, name="g-", pattern=M.ACL_PATTERN_PREFIXED))
    snapshot = image_to_snapshot(h.image)
    restored = image_from_snapshot(snapshot)
    assert restored == h.image
    assert restored.acls == h.image.acls and len(listed(h)) == 4
    assert image_to_snapshot(restored) == snapshot


def test_apply_refuses_acl_records_that_do_not_fit(harness):
    h = harness
    stamp = Stamp(1, "test", "r")
    with pytest.raises(MetadataInvariantError):
        apply(
            h.image, stamp.record(remove_access_control_entry=M.RemoveAccessControlEntryRecord(entry=entry()))
        )
    with pytest.raises(MetadataInvariantError):
        apply(
            h.image, stamp.record(access_control_entry=M.AccessControlEntryRecord(entry=entry(principal="x")))
        )
    apply(h.image, stamp.record(access_control_entry=M.AccessControlEntryRecord(entry=entry())))
    with pytest.raises(MetadataInvariantError):
        apply(h.image, stamp.record(access_control_entry=M.AccessControlEntryRecord(entry=entry())))
    apply(h.image, stamp.record(remove_access_control_entry=M.RemoveAccessControlEntryRecord(entry=entry())))
    assert h.image.acls == {}  # no empty sets left behind
    assert AclEntry.from_proto(entry()).to_proto() == entry()
