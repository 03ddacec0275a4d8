from kanal.v1 import errors_pb2 as _errors_pb2
from kanal.v1 import metadata_pb2 as _metadata_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConfigEntry(_message.Message):
    __slots__ = ("key", "value", "is_default")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    is_default: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ..., is_default: _Optional[bool] = ...) -> None: ...

class CreatableTopic(_message.Message):
    __slots__ = ("name", "partitions", "replication_factor", "configs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    replication_factor: int
    configs: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., configs: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topics", "validate_only", "request_id")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatableTopic]
    validate_only: bool
    request_id: str
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatableTopic, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateTopicResult(_message.Message):
    __slots__ = ("name", "error", "error_message", "topic_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    error: _errors_pb2.ErrorCode
    error_message: str
    topic_id: str
    def __init__(self, name: _Optional[str] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topic_id: _Optional[str] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateTopicResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CreateTopicResult, _Mapping]]] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("names", "request_id")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    request_id: str
    def __init__(self, names: _Optional[_Iterable[str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class TopicResult(_message.Message):
    __slots__ = ("name", "error", "error_message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    error: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, name: _Optional[str] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TopicResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("targets", "validate_only", "request_id")
    class Target(_message.Message):
        __slots__ = ("name", "count")
        NAME_FIELD_NUMBER: _ClassVar[int]
        COUNT_FIELD_NUMBER: _ClassVar[int]
        name: str
        count: int
        def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[CreatePartitionsRequest.Target]
    validate_only: bool
    request_id: str
    def __init__(self, targets: _Optional[_Iterable[_Union[CreatePartitionsRequest.Target, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TopicResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ...) -> None: ...

class ConfigResource(_message.Message):
    __slots__ = ("type", "name")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    type: _metadata_pb2.ConfigResourceType
    name: str
    def __init__(self, type: _Optional[_Union[_metadata_pb2.ConfigResourceType, str]] = ..., name: _Optional[str] = ...) -> None: ...

class DescribeConfigsRequest(_message.Message):
    __slots__ = ("resources",)
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[ConfigResource]
    def __init__(self, resources: _Optional[_Iterable[_Union[ConfigResource, _Mapping]]] = ...) -> None: ...

class ResourceConfigs(_message.Message):
    __slots__ = ("resource", "error", "error_message", "entries")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    resource: ConfigResource
    error: _errors_pb2.ErrorCode
    error_message: str
    entries: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
    def __init__(self, resource: _Optional[_Union[ConfigResource, _Mapping]] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...

class DescribeConfigsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ResourceConfigs]
    def __init__(self, results: _Optional[_Iterable[_Union[ResourceConfigs, _Mapping]]] = ...) -> None: ...

class AlterConfigOp(_message.Message):
    __slots__ = ("key", "op", "value")
    class OpType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SET: _ClassVar[AlterConfigOp.OpType]
        DELETE: _ClassVar[AlterConfigOp.OpType]
    SET: AlterConfigOp.OpType
    DELETE: AlterConfigOp.OpType
    KEY_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    op: AlterConfigOp.OpType
    value: str
    def __init__(self, key: _Optional[str] = ..., op: _Optional[_Union[AlterConfigOp.OpType, str]] = ..., value: _Optional[str] = ...) -> None: ...

class AlterConfigsRequest(_message.Message):
    __slots__ = ("changes", "validate_only", "request_id")
    class Change(_message.Message):
        __slots__ = ("resource", "ops")
        RESOURCE_FIELD_NUMBER: _ClassVar[int]
        OPS_FIELD_NUMBER: _ClassVar[int]
        resource: ConfigResource
        ops: _containers.RepeatedCompositeFieldContainer[AlterConfigOp]
        def __init__(self, resource: _Optional[_Union[ConfigResource, _Mapping]] = ..., ops: _Optional[_Iterable[_Union[AlterConfigOp, _Mapping]]] = ...) -> None: ...
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[AlterConfigsRequest.Change]
    validate_only: bool
    request_id: str
    def __init__(self, changes: _Optional[_Iterable[_Union[AlterConfigsRequest.Change, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ConfigResourceResult(_message.Message):
    __slots__ = ("resource", "error", "error_message")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    resource: ConfigResource
    error: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, resource: _Optional[_Union[ConfigResource, _Mapping]] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class AlterConfigsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ConfigResourceResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ConfigResourceResult, _Mapping]]] = ...) -> None: ...

class QuotaEntity(_message.Message):
    __slots__ = ("entity_type", "entity_name", "client_id")
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_NAME_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    entity_type: str
    entity_name: str
    client_id: str
    def __init__(self, entity_type: _Optional[str] = ..., entity_name: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class QuotaValue(_message.Message):
    __slots__ = ("key", "value", "remove")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: float
    remove: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ..., remove: _Optional[bool] = ...) -> None: ...

class AlterClientQuotasRequest(_message.Message):
    __slots__ = ("entries", "validate_only", "request_id")
    class Entry(_message.Message):
        __slots__ = ("entity", "values")
        ENTITY_FIELD_NUMBER: _ClassVar[int]
        VALUES_FIELD_NUMBER: _ClassVar[int]
        entity: QuotaEntity
        values: _containers.RepeatedCompositeFieldContainer[QuotaValue]
        def __init__(self, entity: _Optional[_Union[QuotaEntity, _Mapping]] = ..., values: _Optional[_Iterable[_Union[QuotaValue, _Mapping]]] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AlterClientQuotasRequest.Entry]
    validate_only: bool
    request_id: str
    def __init__(self, entries: _Optional[_Iterable[_Union[AlterClientQuotasRequest.Entry, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class QuotaEntityResult(_message.Message):
    __slots__ = ("entity", "error", "error_message")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    entity: QuotaEntity
    error: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, entity: _Optional[_Union[QuotaEntity, _Mapping]] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class AlterClientQuotasResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[QuotaEntityResult]
    def __init__(self, results: _Optional[_Iterable[_Union[QuotaEntityResult, _Mapping]]] = ...) -> None: ...

class DescribeClientQuotasRequest(_message.Message):
    __slots__ = ("entity_type", "entity_name")
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_NAME_FIELD_NUMBER: _ClassVar[int]
    entity_type: str
    entity_name: str
    def __init__(self, entity_type: _Optional[str] = ..., entity_name: _Optional[str] = ...) -> None: ...

class DescribeClientQuotasResponse(_message.Message):
    __slots__ = ("entries",)
    class Entry(_message.Message):
        __slots__ = ("entity", "values")
        ENTITY_FIELD_NUMBER: _ClassVar[int]
        VALUES_FIELD_NUMBER: _ClassVar[int]
        entity: QuotaEntity
        values: _containers.RepeatedCompositeFieldContainer[QuotaValue]
        def __init__(self, entity: _Optional[_Union[QuotaEntity, _Mapping]] = ..., values: _Optional[_Iterable[_Union[QuotaValue, _Mapping]]] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DescribeClientQuotasResponse.Entry]
    def __init__(self, entries: _Optional[_Iterable[_Union[DescribeClientQuotasResponse.Entry, _Mapping]]] = ...) -> None: ...

class BrokerDescription(_message.Message):
    __slots__ = ("broker_id", "endpoint", "rack", "fenced", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    endpoint: str
    rack: str
    fenced: bool
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., endpoint: _Optional[str] = ..., rack: _Optional[str] = ..., fenced: _Optional[bool] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class ControllerDescription(_message.Message):
    __slots__ = ("controller_id", "endpoint", "is_active", "match_index", "lag", "reachable")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    IS_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    endpoint: str
    is_active: bool
    match_index: int
    lag: int
    reachable: bool
    def __init__(self, controller_id: _Optional[int] = ..., endpoint: _Optional[str] = ..., is_active: _Optional[bool] = ..., match_index: _Optional[int] = ..., lag: _Optional[int] = ..., reachable: _Optional[bool] = ...) -> None: ...

class DescribeQuorumRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeQuorumResponse(_message.Message):
    __slots__ = ("leader_id", "term", "commit_index", "voters", "metadata_end_offset")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    leader_id: int
    term: int
    commit_index: int
    voters: _containers.RepeatedCompositeFieldContainer[ControllerDescription]
    metadata_end_offset: int
    def __init__(self, leader_id: _Optional[int] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., voters: _Optional[_Iterable[_Union[ControllerDescription, _Mapping]]] = ..., metadata_end_offset: _Optional[int] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("cluster_id", "brokers", "quorum")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerDescription]
    quorum: DescribeQuorumResponse
    def __init__(self, cluster_id: _Optional[str] = ..., brokers: _Optional[_Iterable[_Union[BrokerDescription, _Mapping]]] = ..., quorum: _Optional[_Union[DescribeQuorumResponse, _Mapping]] = ...) -> None: ...

class AclFilter(_message.Message):
    __slots__ = ("resource_type", "resource_name", "pattern_filter", "principal", "host", "operation", "permission")
    class PatternFilter(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ANY: _ClassVar[AclFilter.PatternFilter]
        LITERAL: _ClassVar[AclFilter.PatternFilter]
        PREFIXED: _ClassVar[AclFilter.PatternFilter]
        MATCH: _ClassVar[AclFilter.PatternFilter]
    ANY: AclFilter.PatternFilter
    LITERAL: AclFilter.PatternFilter
    PREFIXED: AclFilter.PatternFilter
    MATCH: AclFilter.PatternFilter
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FILTER_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    resource_type: _metadata_pb2.AclResourceType
    resource_name: str
    pattern_filter: AclFilter.PatternFilter
    principal: str
    host: str
    operation: _metadata_pb2.AclOperation
    permission: _metadata_pb2.AclPermission
    def __init__(self, resource_type: _Optional[_Union[_metadata_pb2.AclResourceType, str]] = ..., resource_name: _Optional[str] = ..., pattern_filter: _Optional[_Union[AclFilter.PatternFilter, str]] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[_Union[_metadata_pb2.AclOperation, str]] = ..., permission: _Optional[_Union[_metadata_pb2.AclPermission, str]] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("creations", "request_id")
    CREATIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    creations: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.AccessControlEntry]
    request_id: str
    def __init__(self, creations: _Optional[_Iterable[_Union[_metadata_pb2.AccessControlEntry, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ("results",)
    class Result(_message.Message):
        __slots__ = ("error", "error_message")
        ERROR_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        error: _errors_pb2.ErrorCode
        error_message: str
        def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateAclsResponse.Result]
    def __init__(self, results: _Optional[_Iterable[_Union[CreateAclsResponse.Result, _Mapping]]] = ...) -> None: ...

class DescribeAclsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: AclFilter
    def __init__(self, filter: _Optional[_Union[AclFilter, _Mapping]] = ...) -> None: ...

class DescribeAclsResponse(_message.Message):
    __slots__ = ("error", "error_message", "acls")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACLS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    acls: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.AccessControlEntry]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., acls: _Optional[_Iterable[_Union[_metadata_pb2.AccessControlEntry, _Mapping]]] = ...) -> None: ...

class DeleteAclsRequest(_message.Message):
    __slots__ = ("filters", "request_id")
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[AclFilter]
    request_id: str
    def __init__(self, filters: _Optional[_Iterable[_Union[AclFilter, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteAclsResponse(_message.Message):
    __slots__ = ("results",)
    class FilterResult(_message.Message):
        __slots__ = ("error", "error_message", "deleted")
        ERROR_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        DELETED_FIELD_NUMBER: _ClassVar[int]
        error: _errors_pb2.ErrorCode
        error_message: str
        deleted: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.AccessControlEntry]
        def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., deleted: _Optional[_Iterable[_Union[_metadata_pb2.AccessControlEntry, _Mapping]]] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteAclsResponse.FilterResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteAclsResponse.FilterResult, _Mapping]]] = ...) -> None: ...

class ScramCredentialUpsertion(_message.Message):
    __slots__ = ("name", "mechanism", "iterations", "salt", "salted_password")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    SALTED_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ..., iterations: _Optional[int] = ..., salt: _Optional[bytes] = ..., salted_password: _Optional[bytes] = ...) -> None: ...

class ScramCredentialDeletion(_message.Message):
    __slots__ = ("name", "mechanism")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ...) -> None: ...

class AlterUserScramCredentialsRequest(_message.Message):
    __slots__ = ("deletions", "upsertions", "request_id")
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    UPSERTIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[ScramCredentialDeletion]
    upsertions: _containers.RepeatedCompositeFieldContainer[ScramCredentialUpsertion]
    request_id: str
    def __init__(self, deletions: _Optional[_Iterable[_Union[ScramCredentialDeletion, _Mapping]]] = ..., upsertions: _Optional[_Iterable[_Union[ScramCredentialUpsertion, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class AlterUserScramCredentialsResponse(_message.Message):
    __slots__ = ("results",)
    class Result(_message.Message):
        __slots__ = ("user", "error", "error_message")
        USER_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        user: str
        error: _errors_pb2.ErrorCode
        error_message: str
        def __init__(self, user: _Optional[str] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AlterUserScramCredentialsResponse.Result]
    def __init__(self, results: _Optional[_Iterable[_Union[AlterUserScramCredentialsResponse.Result, _Mapping]]] = ...) -> None: ...

class DescribeUserScramCredentialsRequest(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, users: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeUserScramCredentialsResponse(_message.Message):
    __slots__ = ("results",)
    class CredentialInfo(_message.Message):
        __slots__ = ("mechanism", "iterations")
        MECHANISM_FIELD_NUMBER: _ClassVar[int]
        ITERATIONS_FIELD_NUMBER: _ClassVar[int]
        mechanism: str
        iterations: int
        def __init__(self, mechanism: _Optional[str] = ..., iterations: _Optional[int] = ...) -> None: ...
    class Result(_message.Message):
        __slots__ = ("user", "error", "error_message", "credentials")
        USER_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
        user: str
        error: _errors_pb2.ErrorCode
        error_message: str
        credentials: _containers.RepeatedCompositeFieldContainer[DescribeUserScramCredentialsResponse.CredentialInfo]
        def __init__(self, user: _Optional[str] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., credentials: _Optional[_Iterable[_Union[DescribeUserScramCredentialsResponse.CredentialInfo, _Mapping]]] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DescribeUserScramCredentialsResponse.Result]
    def __init__(self, results: _Optional[_Iterable[_Union[DescribeUserScramCredentialsResponse.Result, _Mapping]]] = ...) -> None: ...
