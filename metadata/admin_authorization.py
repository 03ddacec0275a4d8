"""What each admin call needs (Kafka's rules), checked the same way where a broker receives the call and
where a controller decides it: `admit_admin(method, request, access) -> Admission`.

| call | needs | refused |
|---|---|---|
| CreateTopics | CREATE on the cluster, else CREATE on the topic | per topic, TOPIC_AUTHORIZATION_FAILED |
| DeleteTopics | DELETE on the topic | per topic, TOPIC_AUTHORIZATION_FAILED |
| CreatePartitions | ALTER on the topic | per topic, TOPIC_AUTHORIZATION_FAILED |
| DescribeConfigs | DESCRIBE_CONFIGS on the topic (broker resources: the cluster) | per resource, TOPIC_/CLUSTER_... |
| AlterConfigs | ALTER_CONFIGS on the topic (broker resources: on the cluster) | per resource, as above |
| AlterClientQuotas | ALTER_CONFIGS on the cluster | whole call, CLUSTER_AUTHORIZATION_FAILED |
| DescribeClientQuotas | DESCRIBE_CONFIGS on the cluster | whole call, CLUSTER_AUTHORIZATION_FAILED |
| CreateAcls, DeleteAcls | ALTER on the cluster | whole call, CLUSTER_AUTHORIZATION_FAILED |
| DescribeAcls | DESCRIBE on the cluster | whole call, CLUSTER_AUTHORIZATION_FAILED |
| AlterUserScramCredentials | ALTER on the cluster | whole call, CLUSTER_AUTHORIZATION_FAILED |
| DescribeUserScramCredentials | DESCRIBE on the cluster | whole call, CLUSTER_AUTHORIZATION_FAILED |
| AlterPartitionReassignments, ElectLeaders, UnregisterBroker, AddVoter, RemoveVoter | ALTER on the cluster | whole call, CLUSTER_AUTHORIZATION_FAILED |
| ListPartitionReassignments | DESCRIBE on the cluster | whole call, CLUSTER_AUTHORIZATION_FAILED |
| DescribeCluster | nothing (the brokers and the quorum, as Metadata shows brokers to anyone) | — |
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kanal.metadata.access import Access, Admission, admitted, per_item
from kanal.metadata.acl import CLUSTER, CLUSTER_RESOURCE_NAME, TOPIC
from kanal.v1 import admin_pb2, errors_pb2, metadata_pb2
from kanal.v1.error import ErrorCode
from kanal.v1.wire_enum import as_enum

_OP = metadata_pb2
TOPIC_REFUSED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_REFUSED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def admit_admin(method: str, request: Any, access: Access) -> Admission:
    """The part of an admin call `access` allows; KanalError for a call refused whole. ValueError for a
    method that has no rule (a new admin call must get one: nothing passes unchecked by omission)."""
    rule = _RULES.get(method)
    if rule is None:
        raise ValueError(f"no authorization rule for admin call {method}")
    return rule(request, access)


def _create_topics(request: admin_pb2.CreateTopicsRequest, access: Access) -> Admission:
    if access.allows(_OP.ACL_OPERATION_CREATE, CLUSTER, CLUSTER_RESOURCE_NAME):
        return admitted(request)
    return per_item(
        request,
        "topics",
        lambda t: access.allows(_OP.ACL_OPERATION_CREATE, TOPIC, t.name),
        lambda t: admin_pb2.CreateTopicResult(
            name=t.name,
            error=TOPIC_REFUSED,
            error_message=access.refusal(_OP.ACL_OPERATION_CREATE, TOPIC, t.name),
        ),
        admin_pb2.CreateTopicsResponse,
        "results",
    )


# An admin call's rule: any admin request message (each rule reads its own fields) and the caller's access.
AdmissionRule = Callable[[Any, Access], Admission]


def _topic_results(op: int, field: str, name_of: Callable[[Any], str], response_type: type) -> AdmissionRule:
    def rule(request: Any, access: Access) -> Admission:
        return per_item(
            request, field, lambda item: access.allows(op, TOPIC, name_of(item)),
            lambda item: admin_pb2.TopicResult(name=name_of(item), error=TOPIC_REFUSED,
                                               error_message=access.refusal(op, TOPIC, name_of(item))),
            response_type, "results")

    return rule


def _config_resource(resource: admin_pb2.ConfigResource) -> tuple[int, str, int]:
    """(ACL resource type, name, error) a config resource is checked as: topics as themselves, broker
    configs (and the cluster default) as the cluster."""
    if resource.type == metadata_pb2.CONFIG_RESOURCE_TOPIC:
        return TOPIC, resource.name, TOPIC_REFUSED
    return CLUSTER, CLUSTER_RESOURCE_NAME, CLUSTER_REFUSED


def _describe_configs(request: admin_pb2.DescribeConfigsRequest, access: Access) -> Admission:
    op = _OP.ACL_OPERATION_DESCRIBE_CONFIGS

    def refused(resource: admin_pb2.ConfigResource) -> admin_pb2.ResourceConfigs:
        rtype, name, code = _config_resource(resource)
        return admin_pb2.ResourceConfigs(resource=resource, error=as_enum(errors_pb2.ErrorCode, code),
                                         error_message=access.refusal(op, rtype, name))

    return per_item(request, "resources", lambda r: access.allows(op, *_config_resource(r)[:2]), refused,
                    admin_pb2.DescribeConfigsResponse, "results")


def _alter_configs(request: admin_pb2.AlterConfigsRequest, access: Access) -> Admission:
    op = _OP.ACL_OPERATION_ALTER_CONFIGS

    def refused(change: admin_pb2.AlterConfigsRequest.Change) -> admin_pb2.ConfigResourceResult:
        rtype, name, code = _config_resource(change.resource)
        return admin_pb2.ConfigResourceResult(
            resource=change.resource,
            error=as_enum(errors_pb2.ErrorCode, code),
            error_message=access.refusal(op, rtype, name),
        )

    return per_item(
        request,
        "changes",
        lambda c: access.allows(op, *_config_resource(c.resource)[:2]),
        refused,
        admin_pb2.AlterConfigsResponse,
        "results",
    )


def _on_cluster(op: int) -> AdmissionRule:
    def rule(request: Any, access: Access) -> Admission:
        access.require(op, CLUSTER, CLUSTER_RESOURCE_NAME, CLUSTER_REFUSED)
        return admitted(request)

    return rule


_RULES: dict[str, AdmissionRule] = {
    "CreateTopics": _create_topics,
    "DeleteTopics": _topic_results(_OP.ACL_OPERATION_DELETE, "names", lambda name: name,
                                   admin_pb2.DeleteTopicsResponse),
    "CreatePartitions": _topic_results(_OP.ACL_OPERATION_ALTER, "targets", lambda target: target.name,
                                       admin_pb2.CreatePartitionsResponse),
    "DescribeConfigs": _describe_configs,
    "AlterConfigs": _alter_configs,
    "AlterClientQuotas": _on_cluster(_OP.ACL_OPERATION_ALTER_CONFIGS),
    "DescribeClientQuotas": _on_cluster(_OP.ACL_OPERATION_DESCRIBE_CONFIGS),
    "CreateAcls": _on_cluster(_OP.ACL_OPERATION_ALTER),
    "DeleteAcls": _on_cluster(_OP.ACL_OPERATION_ALTER),
    "DescribeAcls": _on_cluster(_OP.ACL_OPERATION_DESCRIBE),
    "AlterUserScramCredentials": _on_cluster(_OP.ACL_OPERATION_ALTER),
    "DescribeUserScramCredentials": _on_cluster(_OP.ACL_OPERATION_DESCRIBE),
    "DescribeCluster": lambda request, access: admitted(request),
    "AlterPartitionReassignments": _on_cluster(_OP.ACL_OPERATION_ALTER),
    "ListPartitionReassignments": _on_cluster(_OP.ACL_OPERATION_DESCRIBE),
    "ElectLeaders": _on_cluster(_OP.ACL_OPERATION_ALTER),
    "UnregisterBroker": _on_cluster(_OP.ACL_OPERATION_ALTER),
    "AddVoter": _on_cluster(_OP.ACL_OPERATION_ALTER),
    "RemoveVoter": _on_cluster(_OP.ACL_OPERATION_ALTER),
}
ADMIN_CALLS = tuple(_RULES)
