"""The controller's per-call rules (pure, over an Access): a broker-only call is admitted for the broker it
names, authenticated as itself with CLUSTER_ACTION, and refused in the reply for anyone else."""

from __future__ import annotations

import pytest

from kanal.metadata.access import Access
from kanal.metadata.acl import ALLOW, CLUSTER, CLUSTER_RESOURCE_NAME, LITERAL, AclEntry, build_acl_map
from kanal.metadata.authorizer import AuthorizerConfig
from kanal.raft.request_authorization import _RULES
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

BROKER_CALLS = {
    "AlterPartition": (controller_pb2.AlterPartitionRequest, controller_pb2.AlterPartitionResponse),
    "AllocateProducerIds": (controller_pb2.AllocateProducerIdsRequest,
                            controller_pb2.AllocateProducerIdsResponse),
    "AlterRemoteLog": (controller_pb2.AlterRemoteLogRequest, controller_pb2.AlterRemoteLogResponse),
}


def access(principal: str, *, cluster_action: bool) -> Access:
    entries = ([AclEntry(CLUSTER, CLUSTER_RESOURCE_NAME, LITERAL, principal, "*",
                         metadata_pb2.ACL_OPERATION_CLUSTER_ACTION, ALLOW)] if cluster_action else [])
    return Access(principal, "127.0.0.1", build_acl_map(entries), AuthorizerConfig(enabled=True))


@pytest.mark.parametrize("method", BROKER_CALLS)
def test_a_broker_call_is_the_named_brokers_own(method: str) -> None:
    request_type, response_type = BROKER_CALLS[method]
    request = request_type(broker_id=3, broker_epoch=7)
    assert _RULES[method](request, access("User:broker-3", cluster_action=True)).request is request
    for who, allowed in (("User:broker-4", True), ("User:ANONYMOUS", True), ("User:broker-3", False)):
        admission = _RULES[method](request, access(who, cluster_action=allowed))
        assert admission.request is None, who
        reply = admission.reply(None)
        assert isinstance(reply, response_type) and reply.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        if "error_message" in response_type.DESCRIPTOR.fields_by_name:
            assert reply.error_message
