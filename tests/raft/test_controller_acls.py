"""ACLs on a real controller quorum: CreateAcls / DescribeAcls / DeleteAcls through the log, bad input
changes nothing, entries survive a restart from snapshots and the log, records carry the caller's
principal; and the controllers' own authorizer (`--authorizer on`), where every caller is
User:ANONYMOUS (no authentication here): broker calls from anyone but the broker itself are refused, and
allow.everyone.if.no.acl.found opens exactly the resources without ACLs."""

from __future__ import annotations

import grpc
import pytest

from kanal.security.call_identity import PRINCIPAL_METADATA_KEY
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

from .conftest import error_code, wait_until

pytestmark = pytest.mark.cluster
M = metadata_pb2
ANONYMOUS = "User:ANONYMOUS"
# The first test's controllers do not enforce ACLs, so they answer an ACL call only as a broker that does
# enforce them forwards it (naming its caller); made directly, it is SECURITY_DISABLED (the last test).
AS_FORWARDED = ((PRINCIPAL_METADATA_KEY, ANONYMOUS),)


def forwarded(call, request):
    return call(request, timeout=10, metadata=AS_FORWARDED)


def entry(name="orders", op=M.ACL_OPERATION_READ, *, principal="User:alice", rtype=M.ACL_RESOURCE_TOPIC,
          pattern=M.ACL_PATTERN_LITERAL, permission=M.ACL_PERMISSION_ALLOW) -> M.AccessControlEntry:
    return M.AccessControlEntry(
        resource_type=rtype,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host="*",
        operation=op,
        permission=permission,
    )


# What controllers write on their own, at any time: leader no-ops, each controller recording its
# directory id once it reaches the quorum (a background retry that may land in the middle of a test), and
# the first active controller recording the cluster id (issue 40), which may land just after activation.
_BACKGROUND_RECORDS = frozenset({"no_op", "controller_registration", "cluster_identity"})


def added_records(q, i, before):
    return [r for batch in q.fetch_from(i, before) for r in batch.metadata_batch().records
            if r.WhichOneof("record") not in _BACKGROUND_RECORDS]


def test_acls_are_metadata_records_that_survive_a_restart(quorum_factory):
    q = quorum_factory(3, ["--metadata-snapshot-interval-bytes", "1024", "--raft-compaction-entries", "10"])
    active = q.wait_active()
    stub = q.stub(active)
    before = q.end_offset(active)
    bad = [entry(op=M.ACL_OPERATION_UNSPECIFIED), entry(principal="alice"), entry(name=""),
           entry(name="*", pattern=M.ACL_PATTERN_PREFIXED), entry(rtype=M.ACL_RESOURCE_CLUSTER)]
    reply = forwarded(stub.CreateAcls, admin_pb2.CreateAclsRequest(creations=bad))
    assert [r.error for r in reply.results] == [ErrorCode.INVALID_REQUEST] * len(bad)
    assert added_records(q, active, before) == []

    good = [
        entry(),
        entry("pay-", M.ACL_OPERATION_WRITE, pattern=M.ACL_PATTERN_PREFIXED),
        entry(
            "kanal-cluster",
            M.ACL_OPERATION_ALTER,
            rtype=M.ACL_RESOURCE_CLUSTER,
            permission=M.ACL_PERMISSION_DENY,
        ),
    ]
    standby = next(i for i in q.alive_ids() if i != active)
    # A standby forwards only once it knows the active controller: right after the quorum forms, an
    # election may still be settling, and a standby that knows no leader answers CONTROLLER_NOT_AVAILABLE.
    wait_until(lambda: q.stub(standby).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=2).leader_id
               == active and q.active_id() == active, 30, "the standby to know the active controller")
    reply = forwarded(q.stub(standby).CreateAcls, admin_pb2.CreateAclsRequest(creations=good))  # forwarded
    assert [r.error for r in reply.results] == [ErrorCode.NONE] * 3
    records = added_records(q, active, before)
    assert [r.principal for r in records] == [ANONYMOUS] * 3  # the caller's principal, not "anonymous"
    listed = forwarded(stub.DescribeAcls, admin_pb2.DescribeAclsRequest()).acls
    assert sorted(a.resource_name for a in listed) == ["kanal-cluster", "orders", "pay-"]

    # Enough writes for snapshots and pysyncobj compaction, then a restart of every controller.
    for n in range(12):
        forwarded(stub.CreateAcls, admin_pb2.CreateAclsRequest(creations=[entry(f"filler-{n}")]))
    wait_until(lambda: all(list((q.data_dir(i)).rglob("*.checkpoint")) for i in q.alive_ids()), 30,
               "a metadata snapshot on every controller")
    q.stop_all()
    q.start_all()
    stub = q.stub(q.wait_active())
    # A restarted controller answers reads from its committed image: wait for the log to be applied.
    wait_until(lambda: len(forwarded(stub.DescribeAcls, admin_pb2.DescribeAclsRequest()).acls) == 15, 30,
               "the ACLs after the restart")
    match = admin_pb2.AclFilter(resource_name="pay-eu", pattern_filter=admin_pb2.AclFilter.MATCH)
    assert [
        a.resource_name
        for a in forwarded(stub.DescribeAcls, admin_pb2.DescribeAclsRequest(filter=match)).acls
    ] == ["pay-"]
    deleted = forwarded(stub.DeleteAcls, admin_pb2.DeleteAclsRequest(filters=[admin_pb2.AclFilter(
        resource_type=M.ACL_RESOURCE_TOPIC, pattern_filter=admin_pb2.AclFilter.PREFIXED)]))
    assert [a.resource_name for a in deleted.results[0].deleted] == ["pay-"]
    assert len(forwarded(stub.DescribeAcls, admin_pb2.DescribeAclsRequest()).acls) == 14


def test_the_controllers_authorizer(quorum_factory):
    q = quorum_factory(3, ["--authorizer", "on", "--allow-everyone-if-no-acl-found"])
    active = q.wait_active()
    stub = q.stub(active)
    # No ACL on the cluster yet: allow.everyone.if.no.acl.found lets ANONYMOUS add the first one...
    reply = stub.CreateAcls(admin_pb2.CreateAclsRequest(creations=[
        entry("kanal-cluster", M.ACL_OPERATION_ALTER, rtype=M.ACL_RESOURCE_CLUSTER)]), timeout=10)
    assert reply.results[0].error == ErrorCode.NONE
    # ...after which the cluster has ACLs, none of them for ANONYMOUS: it may neither add nor list more.
    for call, request in ((stub.CreateAcls, admin_pb2.CreateAclsRequest(creations=[entry()])),
                          (stub.DescribeAcls, admin_pb2.DescribeAclsRequest()),
                          (stub.AlterClientQuotas, admin_pb2.AlterClientQuotasRequest()),
                          (stub.DescribeMetadataImage, controller_pb2.DescribeMetadataImageRequest())):
        with pytest.raises(grpc.RpcError) as err:
            call(request, timeout=10)
        assert error_code(err.value) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # Topics have no ACLs: creating one is open (per topic: CREATE on the cluster is not allowed any more).
    created = stub.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
        name="open", partitions=1, replication_factor=1)]), timeout=10).results[0]
    # No broker is registered (they are ANONYMOUS too), so the topic cannot be placed: refused for that
    # reason, not for authorization.
    assert created.error == ErrorCode.INVALID_REPLICATION_FACTOR
    # Broker calls come from ANONYMOUS, not from User:broker-1: refused, nothing registered.
    registered = stub.RegisterBroker(controller_pb2.RegisterBrokerRequest(
        broker_id=1, incarnation_id="x", endpoint="127.0.0.1:1"), timeout=10)
    assert registered.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and registered.error_message
    heartbeat = stub.BrokerHeartbeat(
        controller_pb2.BrokerHeartbeatRequest(broker_id=1, broker_epoch=1), timeout=10
    )
    assert heartbeat.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    remote_log = stub.AlterRemoteLog(
        controller_pb2.AlterRemoteLogRequest(broker_id=1, broker_epoch=1), timeout=10
    )
    assert remote_log.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and remote_log.error_message
    fetched = stub.FetchMetadata(controller_pb2.FetchMetadataRequest(offset=0), timeout=10)
    assert fetched.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not fetched.entries
    assert stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=10).brokers == []
    # A forwarded-principal header from a caller that is not a broker or controller is ignored: claiming
    # to be alice (whom the cluster ACL allows ALTER) gets nothing.
    with pytest.raises(grpc.RpcError) as err:
        stub.CreateAcls(admin_pb2.CreateAclsRequest(creations=[entry()]), timeout=10,
                        metadata=(("kanal-forwarded-principal", "User:alice"),))
    assert error_code(err.value) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_a_controller_without_the_authorizer_refuses_acl_calls_made_to_it(quorum_factory):
    """Issue 42, item 1: with `--authorizer off` an entry would change nothing, so each ACL call made to
    a controller directly is SECURITY_DISABLED (Kafka's answer without an authorizer); nothing is written."""
    q = quorum_factory(1)
    active = q.wait_active()
    stub = q.stub(active)
    before = q.end_offset(active)
    calls = ((stub.CreateAcls, admin_pb2.CreateAclsRequest(creations=[entry()])),
             (stub.DeleteAcls, admin_pb2.DeleteAclsRequest(filters=[admin_pb2.AclFilter()])),
             (stub.DescribeAcls, admin_pb2.DescribeAclsRequest()))
    for call, request in calls:
        with pytest.raises(grpc.RpcError) as err:
            call(request, timeout=10)
        assert error_code(err.value) == ErrorCode.SECURITY_DISABLED
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "--authorizer off" in err.value.details()
    assert added_records(q, active, before) == []
    # A broker that enforces ACLs forwards them with its caller's name: that call is served.
    reply = forwarded(stub.CreateAcls, admin_pb2.CreateAclsRequest(creations=[entry()]))
    assert [r.error for r in reply.results] == [ErrorCode.NONE]
