from kanal.v1 import admin_pb2 as _admin_pb2
from kanal.v1 import errors_pb2 as _errors_pb2
from kanal.v1 import metadata_pb2 as _metadata_pb2
from kanal.v1 import operations_pb2 as _operations_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ControllerHint(_message.Message):
    __slots__ = ("controller_id", "endpoint")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    endpoint: str
    def __init__(self, controller_id: _Optional[int] = ..., endpoint: _Optional[str] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("broker_id", "incarnation_id", "endpoint", "rack", "metrics_endpoint", "directory_id", "unclean_shutdown", "inter_node_endpoint", "kafka_endpoint")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    METRICS_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    incarnation_id: str
    endpoint: str
    rack: str
    metrics_endpoint: str
    directory_id: str
    unclean_shutdown: bool
    inter_node_endpoint: str
    kafka_endpoint: str
    def __init__(self, broker_id: _Optional[int] = ..., incarnation_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., rack: _Optional[str] = ..., metrics_endpoint: _Optional[str] = ..., directory_id: _Optional[str] = ..., unclean_shutdown: _Optional[bool] = ..., inter_node_endpoint: _Optional[str] = ..., kafka_endpoint: _Optional[str] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("error", "error_message", "broker_epoch", "active_controller", "session_timeout_ms", "cluster_id", "controller_id")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    broker_epoch: int
    active_controller: ControllerHint
    session_timeout_ms: int
    cluster_id: str
    controller_id: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., broker_epoch: _Optional[int] = ..., active_controller: _Optional[_Union[ControllerHint, _Mapping]] = ..., session_timeout_ms: _Optional[int] = ..., cluster_id: _Optional[str] = ..., controller_id: _Optional[int] = ...) -> None: ...

class BrokerHeartbeatRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "metadata_offset", "want_shutdown", "recovery_log_ends")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WANT_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_LOG_ENDS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    metadata_offset: int
    want_shutdown: bool
    recovery_log_ends: _containers.RepeatedCompositeFieldContainer[ReplicaLogEnd]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., metadata_offset: _Optional[int] = ..., want_shutdown: _Optional[bool] = ..., recovery_log_ends: _Optional[_Iterable[_Union[ReplicaLogEnd, _Mapping]]] = ...) -> None: ...

class ReplicaLogEnd(_message.Message):
    __slots__ = ("topic_id", "partition_id", "partition_epoch", "last_leader_epoch", "log_end_offset")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic_id: str
    partition_id: int
    partition_epoch: int
    last_leader_epoch: int
    log_end_offset: int
    def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., last_leader_epoch: _Optional[int] = ..., log_end_offset: _Optional[int] = ...) -> None: ...

class BrokerHeartbeatResponse(_message.Message):
    __slots__ = ("error", "error_message", "fenced", "metadata_end_offset", "active_controller", "controller_epoch", "shutdown_ready", "controller_id", "registered_broker_epoch")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    METADATA_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_READY_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    fenced: bool
    metadata_end_offset: int
    active_controller: ControllerHint
    controller_epoch: int
    shutdown_ready: bool
    controller_id: int
    registered_broker_epoch: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., fenced: _Optional[bool] = ..., metadata_end_offset: _Optional[int] = ..., active_controller: _Optional[_Union[ControllerHint, _Mapping]] = ..., controller_epoch: _Optional[int] = ..., shutdown_ready: _Optional[bool] = ..., controller_id: _Optional[int] = ..., registered_broker_epoch: _Optional[int] = ...) -> None: ...

class FetchMetadataRequest(_message.Message):
    __slots__ = ("offset", "max_bytes", "max_wait_ms")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    offset: int
    max_bytes: int
    max_wait_ms: int
    def __init__(self, offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class FetchMetadataResponse(_message.Message):
    __slots__ = ("error", "error_message", "entries", "end_offset", "start_offset", "controller_epoch")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    entries: bytes
    end_offset: int
    start_offset: int
    controller_epoch: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., entries: _Optional[bytes] = ..., end_offset: _Optional[int] = ..., start_offset: _Optional[int] = ..., controller_epoch: _Optional[int] = ...) -> None: ...

class AlterPartitionRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "items")
    class Item(_message.Message):
        __slots__ = ("topic_id", "partition_id", "leader_epoch", "partition_epoch", "new_isr", "new_isr_broker_epochs")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
        NEW_ISR_FIELD_NUMBER: _ClassVar[int]
        NEW_ISR_BROKER_EPOCHS_FIELD_NUMBER: _ClassVar[int]
        topic_id: str
        partition_id: int
        leader_epoch: int
        partition_epoch: int
        new_isr: _containers.RepeatedScalarFieldContainer[int]
        new_isr_broker_epochs: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., new_isr: _Optional[_Iterable[int]] = ..., new_isr_broker_epochs: _Optional[_Iterable[int]] = ...) -> None: ...
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    items: _containers.RepeatedCompositeFieldContainer[AlterPartitionRequest.Item]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., items: _Optional[_Iterable[_Union[AlterPartitionRequest.Item, _Mapping]]] = ...) -> None: ...

class AlterPartitionResponse(_message.Message):
    __slots__ = ("error", "items", "active_controller")
    class Item(_message.Message):
        __slots__ = ("topic_id", "partition_id", "error", "isr", "leader_epoch", "partition_epoch")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        ISR_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
        topic_id: str
        partition_id: int
        error: _errors_pb2.ErrorCode
        isr: _containers.RepeatedScalarFieldContainer[int]
        leader_epoch: int
        partition_epoch: int
        def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., isr: _Optional[_Iterable[int]] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    items: _containers.RepeatedCompositeFieldContainer[AlterPartitionResponse.Item]
    active_controller: ControllerHint
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., items: _Optional[_Iterable[_Union[AlterPartitionResponse.Item, _Mapping]]] = ..., active_controller: _Optional[_Union[ControllerHint, _Mapping]] = ...) -> None: ...

class AllocateProducerIdsRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class AllocateProducerIdsResponse(_message.Message):
    __slots__ = ("error", "first_producer_id", "block_size", "active_controller")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FIRST_PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    first_producer_id: int
    block_size: int
    active_controller: ControllerHint
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., first_producer_id: _Optional[int] = ..., block_size: _Optional[int] = ..., active_controller: _Optional[_Union[ControllerHint, _Mapping]] = ...) -> None: ...

class AlterRemoteLogRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "items")
    class SegmentsUploaded(_message.Message):
        __slots__ = ("segments",)
        SEGMENTS_FIELD_NUMBER: _ClassVar[int]
        segments: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.RemoteLogSegmentRecord]
        def __init__(self, segments: _Optional[_Iterable[_Union[_metadata_pb2.RemoteLogSegmentRecord, _Mapping]]] = ...) -> None: ...
    class NewLogStart(_message.Message):
        __slots__ = ("log_start_offset", "reason")
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        log_start_offset: int
        reason: str
        def __init__(self, log_start_offset: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...
    class Item(_message.Message):
        __slots__ = ("topic_id", "partition_id", "leader_epoch", "segments_uploaded", "new_log_start")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        SEGMENTS_UPLOADED_FIELD_NUMBER: _ClassVar[int]
        NEW_LOG_START_FIELD_NUMBER: _ClassVar[int]
        topic_id: str
        partition_id: int
        leader_epoch: int
        segments_uploaded: AlterRemoteLogRequest.SegmentsUploaded
        new_log_start: AlterRemoteLogRequest.NewLogStart
        def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., segments_uploaded: _Optional[_Union[AlterRemoteLogRequest.SegmentsUploaded, _Mapping]] = ..., new_log_start: _Optional[_Union[AlterRemoteLogRequest.NewLogStart, _Mapping]] = ...) -> None: ...
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    items: _containers.RepeatedCompositeFieldContainer[AlterRemoteLogRequest.Item]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., items: _Optional[_Iterable[_Union[AlterRemoteLogRequest.Item, _Mapping]]] = ...) -> None: ...

class AlterRemoteLogResponse(_message.Message):
    __slots__ = ("error", "items", "active_controller", "error_message")
    class Item(_message.Message):
        __slots__ = ("topic_id", "partition_id", "error", "error_message", "log_start_offset", "end_offset")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        topic_id: str
        partition_id: int
        error: _errors_pb2.ErrorCode
        error_message: str
        log_start_offset: int
        end_offset: int
        def __init__(self, topic_id: _Optional[str] = ..., partition_id: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., log_start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    items: _containers.RepeatedCompositeFieldContainer[AlterRemoteLogResponse.Item]
    active_controller: ControllerHint
    error_message: str
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., items: _Optional[_Iterable[_Union[AlterRemoteLogResponse.Item, _Mapping]]] = ..., active_controller: _Optional[_Union[ControllerHint, _Mapping]] = ..., error_message: _Optional[str] = ...) -> None: ...

class RegisterControllerRequest(_message.Message):
    __slots__ = ("controller_id", "directory_id")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    directory_id: str
    def __init__(self, controller_id: _Optional[int] = ..., directory_id: _Optional[str] = ...) -> None: ...

class RegisterControllerResponse(_message.Message):
    __slots__ = ("error", "error_message", "active_controller")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    active_controller: ControllerHint
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., active_controller: _Optional[_Union[ControllerHint, _Mapping]] = ...) -> None: ...

class DescribeMetadataImageRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeMetadataImageResponse(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: _metadata_pb2.MetadataSnapshot
    def __init__(self, snapshot: _Optional[_Union[_metadata_pb2.MetadataSnapshot, _Mapping]] = ...) -> None: ...
