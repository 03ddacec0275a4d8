from kanal.v1 import schema_registry_pb2 as _schema_registry_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PartitionChangeCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAUSE_UNSPECIFIED: _ClassVar[PartitionChangeCause]
    CAUSE_ISR_SHRINK: _ClassVar[PartitionChangeCause]
    CAUSE_ISR_EXPAND: _ClassVar[PartitionChangeCause]
    CAUSE_LEADER_FENCED: _ClassVar[PartitionChangeCause]
    CAUSE_REPLICA_FENCED: _ClassVar[PartitionChangeCause]
    CAUSE_LEADER_RECOVERED: _ClassVar[PartitionChangeCause]
    CAUSE_PREFERRED_ELECTION: _ClassVar[PartitionChangeCause]
    CAUSE_UNCLEAN_ELECTION: _ClassVar[PartitionChangeCause]
    CAUSE_UNCLEAN_RESTART: _ClassVar[PartitionChangeCause]
    CAUSE_RECOVERY_ELECTION: _ClassVar[PartitionChangeCause]

class ConfigResourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIG_RESOURCE_UNSPECIFIED: _ClassVar[ConfigResourceType]
    CONFIG_RESOURCE_TOPIC: _ClassVar[ConfigResourceType]
    CONFIG_RESOURCE_BROKER: _ClassVar[ConfigResourceType]

class AclResourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_RESOURCE_UNSPECIFIED: _ClassVar[AclResourceType]
    ACL_RESOURCE_TOPIC: _ClassVar[AclResourceType]
    ACL_RESOURCE_GROUP: _ClassVar[AclResourceType]
    ACL_RESOURCE_CLUSTER: _ClassVar[AclResourceType]
    ACL_RESOURCE_TRANSACTIONAL_ID: _ClassVar[AclResourceType]
    ACL_RESOURCE_SUBJECT: _ClassVar[AclResourceType]

class AclPatternType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_PATTERN_UNSPECIFIED: _ClassVar[AclPatternType]
    ACL_PATTERN_LITERAL: _ClassVar[AclPatternType]
    ACL_PATTERN_PREFIXED: _ClassVar[AclPatternType]

class AclOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_OPERATION_UNSPECIFIED: _ClassVar[AclOperation]
    ACL_OPERATION_ALL: _ClassVar[AclOperation]
    ACL_OPERATION_READ: _ClassVar[AclOperation]
    ACL_OPERATION_WRITE: _ClassVar[AclOperation]
    ACL_OPERATION_CREATE: _ClassVar[AclOperation]
    ACL_OPERATION_DELETE: _ClassVar[AclOperation]
    ACL_OPERATION_ALTER: _ClassVar[AclOperation]
    ACL_OPERATION_DESCRIBE: _ClassVar[AclOperation]
    ACL_OPERATION_CLUSTER_ACTION: _ClassVar[AclOperation]
    ACL_OPERATION_DESCRIBE_CONFIGS: _ClassVar[AclOperation]
    ACL_OPERATION_ALTER_CONFIGS: _ClassVar[AclOperation]
    ACL_OPERATION_IDEMPOTENT_WRITE: _ClassVar[AclOperation]

class AclPermission(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_PERMISSION_UNSPECIFIED: _ClassVar[AclPermission]
    ACL_PERMISSION_ALLOW: _ClassVar[AclPermission]
    ACL_PERMISSION_DENY: _ClassVar[AclPermission]
CAUSE_UNSPECIFIED: PartitionChangeCause
CAUSE_ISR_SHRINK: PartitionChangeCause
CAUSE_ISR_EXPAND: PartitionChangeCause
CAUSE_LEADER_FENCED: PartitionChangeCause
CAUSE_REPLICA_FENCED: PartitionChangeCause
CAUSE_LEADER_RECOVERED: PartitionChangeCause
CAUSE_PREFERRED_ELECTION: PartitionChangeCause
CAUSE_UNCLEAN_ELECTION: PartitionChangeCause
CAUSE_UNCLEAN_RESTART: PartitionChangeCause
CAUSE_RECOVERY_ELECTION: PartitionChangeCause
CONFIG_RESOURCE_UNSPECIFIED: ConfigResourceType
CONFIG_RESOURCE_TOPIC: ConfigResourceType
CONFIG_RESOURCE_BROKER: ConfigResourceType
ACL_RESOURCE_UNSPECIFIED: AclResourceType
ACL_RESOURCE_TOPIC: AclResourceType
ACL_RESOURCE_GROUP: AclResourceType
ACL_RESOURCE_CLUSTER: AclResourceType
ACL_RESOURCE_TRANSACTIONAL_ID: AclResourceType
ACL_RESOURCE_SUBJECT: AclResourceType
ACL_PATTERN_UNSPECIFIED: AclPatternType
ACL_PATTERN_LITERAL: AclPatternType
ACL_PATTERN_PREFIXED: AclPatternType
ACL_OPERATION_UNSPECIFIED: AclOperation
ACL_OPERATION_ALL: AclOperation
ACL_OPERATION_READ: AclOperation
ACL_OPERATION_WRITE: AclOperation
ACL_OPERATION_CREATE: AclOperation
ACL_OPERATION_DELETE: AclOperation
ACL_OPERATION_ALTER: AclOperation
ACL_OPERATION_DESCRIBE: AclOperation
ACL_OPERATION_CLUSTER_ACTION: AclOperation
ACL_OPERATION_DESCRIBE_CONFIGS: AclOperation
ACL_OPERATION_ALTER_CONFIGS: AclOperation
ACL_OPERATION_IDEMPOTENT_WRITE: AclOperation
ACL_PERMISSION_UNSPECIFIED: AclPermission
ACL_PERMISSION_ALLOW: AclPermission
ACL_PERMISSION_DENY: AclPermission

class RegisterBrokerRecord(_message.Message):
    __slots__ = ("broker_id", "incarnation_id", "broker_epoch", "endpoint", "rack", "fenced", "metrics_endpoint", "directory_id", "unclean_shutdown", "inter_node_endpoint", "kafka_endpoint")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    METRICS_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoint: str
    rack: str
    fenced: bool
    metrics_endpoint: str
    directory_id: str
    unclean_shutdown: bool
    inter_node_endpoint: str
    kafka_endpoint: str
    def __init__(self, broker_id: _Optional[int] = ..., incarnation_id: _Optional[str] = ..., broker_epoch: _Optional[int] = ..., endpoint: _Optional[str] = ..., rack: _Optional[str] = ..., fenced: _Optional[bool] = ..., metrics_endpoint: _Optional[str] = ..., directory_id: _Optional[str] = ..., unclean_shutdown: _Optional[bool] = ..., inter_node_endpoint: _Optional[str] = ..., kafka_endpoint: _Optional[str] = ...) -> None: ...

class BrokerRegistrationChangeRecord(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "fenced", "reason", "in_controlled_shutdown")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    IN_CONTROLLED_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    fenced: bool
    reason: str
    in_controlled_shutdown: bool
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., fenced: _Optional[bool] = ..., reason: _Optional[str] = ..., in_controlled_shutdown: _Optional[bool] = ...) -> None: ...

class UnregisterBrokerRecord(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class TopicRecord(_message.Message):
    __slots__ = ("name", "topic_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: str
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[str] = ...) -> None: ...

class PartitionRecord(_message.Message):
    __slots__ = ("topic_id", "partition_id", "replicas", "isr", "leader", "leader_epoch", "partition_epoch", "isr_directory_ids", "adding_replicas", "removing_replicas", "recovering")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_DIRECTORY_IDS_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    RECOVERING_FIELD_NUMBER: _ClassVar[int]
    topic_id: str
    partition_id: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr_directory_ids: _containers.RepeatedScalarFieldContainer[str]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    recovering: bool
    def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., isr_directory_ids: _Optional[_Iterable[str]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ..., recovering: _Optional[bool] = ...) -> None: ...

class ReplicaList(_message.Message):
    __slots__ = ("broker_ids",)
    BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
    broker_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, broker_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class PartitionChangeRecord(_message.Message):
    __slots__ = ("topic_id", "partition_id", "leader", "isr", "cause", "reason", "isr_directory_ids", "recovering")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ISR_DIRECTORY_IDS_FIELD_NUMBER: _ClassVar[int]
    RECOVERING_FIELD_NUMBER: _ClassVar[int]
    topic_id: str
    partition_id: int
    leader: int
    isr: ReplicaList
    cause: PartitionChangeCause
    reason: str
    isr_directory_ids: _containers.RepeatedScalarFieldContainer[str]
    recovering: bool
    def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., leader: _Optional[int] = ..., isr: _Optional[_Union[ReplicaList, _Mapping]] = ..., cause: _Optional[_Union[PartitionChangeCause, str]] = ..., reason: _Optional[str] = ..., isr_directory_ids: _Optional[_Iterable[str]] = ..., recovering: _Optional[bool] = ...) -> None: ...

class RemoveTopicRecord(_message.Message):
    __slots__ = ("topic_id",)
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic_id: str
    def __init__(self, topic_id: _Optional[str] = ...) -> None: ...

class ConfigRecord(_message.Message):
    __slots__ = ("resource_type", "resource_name", "key", "value")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    resource_type: ConfigResourceType
    resource_name: str
    key: str
    value: str
    def __init__(self, resource_type: _Optional[_Union[ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ClientQuotaRecord(_message.Message):
    __slots__ = ("entity_type", "entity_name", "key", "value", "client_id")
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    entity_type: str
    entity_name: str
    key: str
    value: float
    client_id: str
    def __init__(self, entity_type: _Optional[str] = ..., entity_name: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[float] = ..., client_id: _Optional[str] = ...) -> None: ...

class ProducerIdsRecord(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "next_producer_id")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEXT_PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    next_producer_id: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., next_producer_id: _Optional[int] = ...) -> None: ...

class ControllerRegistrationRecord(_message.Message):
    __slots__ = ("controller_id", "directory_id", "removed")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    directory_id: str
    removed: bool
    def __init__(self, controller_id: _Optional[int] = ..., directory_id: _Optional[str] = ..., removed: _Optional[bool] = ...) -> None: ...

class ClusterIdentityRecord(_message.Message):
    __slots__ = ("cluster_id",)
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    def __init__(self, cluster_id: _Optional[str] = ...) -> None: ...

class QuorumVoter(_message.Message):
    __slots__ = ("controller_id", "raft_endpoint", "grpc_endpoint")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    GRPC_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    raft_endpoint: str
    grpc_endpoint: str
    def __init__(self, controller_id: _Optional[int] = ..., raft_endpoint: _Optional[str] = ..., grpc_endpoint: _Optional[str] = ...) -> None: ...

class VoterSetRecord(_message.Message):
    __slots__ = ("voters",)
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    voters: _containers.RepeatedCompositeFieldContainer[QuorumVoter]
    def __init__(self, voters: _Optional[_Iterable[_Union[QuorumVoter, _Mapping]]] = ...) -> None: ...

class AccessControlEntry(_message.Message):
    __slots__ = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    resource_type: AclResourceType
    resource_name: str
    pattern_type: AclPatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission
    def __init__(self, resource_type: _Optional[_Union[AclResourceType, str]] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[_Union[AclPatternType, str]] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[_Union[AclOperation, str]] = ..., permission: _Optional[_Union[AclPermission, str]] = ...) -> None: ...

class AccessControlEntryRecord(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: AccessControlEntry
    def __init__(self, entry: _Optional[_Union[AccessControlEntry, _Mapping]] = ...) -> None: ...

class RemoveAccessControlEntryRecord(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: AccessControlEntry
    def __init__(self, entry: _Optional[_Union[AccessControlEntry, _Mapping]] = ...) -> None: ...

class UserScramCredentialRecord(_message.Message):
    __slots__ = ("name", "mechanism", "salt", "stored_key", "server_key", "iterations")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    STORED_KEY_FIELD_NUMBER: _ClassVar[int]
    SERVER_KEY_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ..., salt: _Optional[bytes] = ..., stored_key: _Optional[bytes] = ..., server_key: _Optional[bytes] = ..., iterations: _Optional[int] = ...) -> None: ...

class RemoveUserScramCredentialRecord(_message.Message):
    __slots__ = ("name", "mechanism")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ...) -> None: ...

class NoOpRecord(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionReassignmentRecord(_message.Message):
    __slots__ = ("topic_id", "partition_id", "replicas", "adding_replicas", "removing_replicas", "leader", "isr", "isr_directory_ids", "reason")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    ISR_DIRECTORY_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    topic_id: str
    partition_id: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    isr: ReplicaList
    isr_directory_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., isr: _Optional[_Union[ReplicaList, _Mapping]] = ..., isr_directory_ids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...

class RemoteLogSegmentRecord(_message.Message):
    __slots__ = ("topic_id", "partition_id", "base_offset", "end_offset", "size_bytes", "meta_bytes", "max_timestamp_ms", "leader_epoch", "broker_id", "epochs", "aborted_transactions", "open_transactions")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    META_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    OPEN_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    topic_id: str
    partition_id: int
    base_offset: int
    end_offset: int
    size_bytes: int
    meta_bytes: int
    max_timestamp_ms: int
    leader_epoch: int
    broker_id: int
    epochs: _containers.RepeatedCompositeFieldContainer[RemoteLogEpochStart]
    aborted_transactions: _containers.RepeatedCompositeFieldContainer[RemoteLogAbortedTransaction]
    open_transactions: _containers.RepeatedCompositeFieldContainer[RemoteLogOpenTransaction]
    def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., base_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., size_bytes: _Optional[int] = ..., meta_bytes: _Optional[int] = ..., max_timestamp_ms: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., broker_id: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[RemoteLogEpochStart, _Mapping]]] = ..., aborted_transactions: _Optional[_Iterable[_Union[RemoteLogAbortedTransaction, _Mapping]]] = ..., open_transactions: _Optional[_Iterable[_Union[RemoteLogOpenTransaction, _Mapping]]] = ...) -> None: ...

class RemoteLogEpochStart(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class RemoteLogAbortedTransaction(_message.Message):
    __slots__ = ("producer_id", "first_offset", "last_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    first_offset: int
    last_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ..., last_offset: _Optional[int] = ...) -> None: ...

class RemoteLogOpenTransaction(_message.Message):
    __slots__ = ("producer_id", "first_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    first_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ...) -> None: ...

class RemoteLogStartRecord(_message.Message):
    __slots__ = ("topic_id", "partition_id", "log_start_offset", "reason")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    topic_id: str
    partition_id: int
    log_start_offset: int
    reason: str
    def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class MetadataRecord(_message.Message):
    __slots__ = ("time_ms", "principal", "request_id", "register_broker", "broker_registration_change", "unregister_broker", "topic", "partition", "partition_change", "remove_topic", "config", "client_quota", "producer_ids", "no_op", "controller_registration", "access_control_entry", "remove_access_control_entry", "user_scram_credential", "remove_user_scram_credential", "partition_reassignment", "voter_set", "cluster_identity", "remote_log_segment", "remote_log_start", "schema", "subject_version", "remove_subject_version", "registry_config", "registry_mode")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTER_BROKER_FIELD_NUMBER: _ClassVar[int]
    BROKER_REGISTRATION_CHANGE_FIELD_NUMBER: _ClassVar[int]
    UNREGISTER_BROKER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PARTITION_CHANGE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CLIENT_QUOTA_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_IDS_FIELD_NUMBER: _ClassVar[int]
    NO_OP_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_REGISTRATION_FIELD_NUMBER: _ClassVar[int]
    ACCESS_CONTROL_ENTRY_FIELD_NUMBER: _ClassVar[int]
    REMOVE_ACCESS_CONTROL_ENTRY_FIELD_NUMBER: _ClassVar[int]
    USER_SCRAM_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    REMOVE_USER_SCRAM_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    PARTITION_REASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    VOTER_SET_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_START_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_VERSION_FIELD_NUMBER: _ClassVar[int]
    REMOVE_SUBJECT_VERSION_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_CONFIG_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_MODE_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    principal: str
    request_id: str
    register_broker: RegisterBrokerRecord
    broker_registration_change: BrokerRegistrationChangeRecord
    unregister_broker: UnregisterBrokerRecord
    topic: TopicRecord
    partition: PartitionRecord
    partition_change: PartitionChangeRecord
    remove_topic: RemoveTopicRecord
    config: ConfigRecord
    client_quota: ClientQuotaRecord
    producer_ids: ProducerIdsRecord
    no_op: NoOpRecord
    controller_registration: ControllerRegistrationRecord
    access_control_entry: AccessControlEntryRecord
    remove_access_control_entry: RemoveAccessControlEntryRecord
    user_scram_credential: UserScramCredentialRecord
    remove_user_scram_credential: RemoveUserScramCredentialRecord
    partition_reassignment: PartitionReassignmentRecord
    voter_set: VoterSetRecord
    cluster_identity: ClusterIdentityRecord
    remote_log_segment: RemoteLogSegmentRecord
    remote_log_start: RemoteLogStartRecord
    schema: SchemaRecord
    subject_version: SubjectVersionRecord
    remove_subject_version: RemoveSubjectVersionRecord
    registry_config: RegistryConfigRecord
    registry_mode: RegistryModeRecord
    def __init__(self, time_ms: _Optional[int] = ..., principal: _Optional[str] = ..., request_id: _Optional[str] = ..., register_broker: _Optional[_Union[RegisterBrokerRecord, _Mapping]] = ..., broker_registration_change: _Optional[_Union[BrokerRegistrationChangeRecord, _Mapping]] = ..., unregister_broker: _Optional[_Union[UnregisterBrokerRecord, _Mapping]] = ..., topic: _Optional[_Union[TopicRecord, _Mapping]] = ..., partition: _Optional[_Union[PartitionRecord, _Mapping]] = ..., partition_change: _Optional[_Union[PartitionChangeRecord, _Mapping]] = ..., remove_topic: _Optional[_Union[RemoveTopicRecord, _Mapping]] = ..., config: _Optional[_Union[ConfigRecord, _Mapping]] = ..., client_quota: _Optional[_Union[ClientQuotaRecord, _Mapping]] = ..., producer_ids: _Optional[_Union[ProducerIdsRecord, _Mapping]] = ..., no_op: _Optional[_Union[NoOpRecord, _Mapping]] = ..., controller_registration: _Optional[_Union[ControllerRegistrationRecord, _Mapping]] = ..., access_control_entry: _Optional[_Union[AccessControlEntryRecord, _Mapping]] = ..., remove_access_control_entry: _Optional[_Union[RemoveAccessControlEntryRecord, _Mapping]] = ..., user_scram_credential: _Optional[_Union[UserScramCredentialRecord, _Mapping]] = ..., remove_user_scram_credential: _Optional[_Union[RemoveUserScramCredentialRecord, _Mapping]] = ..., partition_reassignment: _Optional[_Union[PartitionReassignmentRecord, _Mapping]] = ..., voter_set: _Optional[_Union[VoterSetRecord, _Mapping]] = ..., cluster_identity: _Optional[_Union[ClusterIdentityRecord, _Mapping]] = ..., remote_log_segment: _Optional[_Union[RemoteLogSegmentRecord, _Mapping]] = ..., remote_log_start: _Optional[_Union[RemoteLogStartRecord, _Mapping]] = ..., schema: _Optional[_Union[SchemaRecord, _Mapping]] = ..., subject_version: _Optional[_Union[SubjectVersionRecord, _Mapping]] = ..., remove_subject_version: _Optional[_Union[RemoveSubjectVersionRecord, _Mapping]] = ..., registry_config: _Optional[_Union[RegistryConfigRecord, _Mapping]] = ..., registry_mode: _Optional[_Union[RegistryModeRecord, _Mapping]] = ...) -> None: ...

class SchemaRecord(_message.Message):
    __slots__ = ("id", "schema_type", "schema", "references")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    id: int
    schema_type: str
    schema: str
    references: _containers.RepeatedCompositeFieldContainer[_schema_registry_pb2.SchemaReference]
    def __init__(self, id: _Optional[int] = ..., schema_type: _Optional[str] = ..., schema: _Optional[str] = ..., references: _Optional[_Iterable[_Union[_schema_registry_pb2.SchemaReference, _Mapping]]] = ...) -> None: ...

class SubjectVersionRecord(_message.Message):
    __slots__ = ("subject", "version", "schema_id", "deleted")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    subject: str
    version: int
    schema_id: int
    deleted: bool
    def __init__(self, subject: _Optional[str] = ..., version: _Optional[int] = ..., schema_id: _Optional[int] = ..., deleted: _Optional[bool] = ...) -> None: ...

class RemoveSubjectVersionRecord(_message.Message):
    __slots__ = ("subject", "version")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    subject: str
    version: int
    def __init__(self, subject: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class RegistryConfigRecord(_message.Message):
    __slots__ = ("subject", "compatibility", "normalize")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    subject: str
    compatibility: str
    normalize: bool
    def __init__(self, subject: _Optional[str] = ..., compatibility: _Optional[str] = ..., normalize: _Optional[bool] = ...) -> None: ...

class RegistryModeRecord(_message.Message):
    __slots__ = ("subject", "mode")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    subject: str
    mode: str
    def __init__(self, subject: _Optional[str] = ..., mode: _Optional[str] = ...) -> None: ...

class MetadataBatch(_message.Message):
    __slots__ = ("controller_epoch", "records")
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    controller_epoch: int
    records: _containers.RepeatedCompositeFieldContainer[MetadataRecord]
    def __init__(self, controller_epoch: _Optional[int] = ..., records: _Optional[_Iterable[_Union[MetadataRecord, _Mapping]]] = ...) -> None: ...

class MetadataSnapshot(_message.Message):
    __slots__ = ("next_offset", "controller_epoch", "records")
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    next_offset: int
    controller_epoch: int
    records: _containers.RepeatedCompositeFieldContainer[MetadataRecord]
    def __init__(self, next_offset: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., records: _Optional[_Iterable[_Union[MetadataRecord, _Mapping]]] = ...) -> None: ...
