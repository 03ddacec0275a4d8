from kanal.v1 import errors_pb2 as _errors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopicPartitionRef(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class AlterPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("targets", "request_id")
    class Target(_message.Message):
        __slots__ = ("topic", "partition", "replicas", "cancel")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        REPLICAS_FIELD_NUMBER: _ClassVar[int]
        CANCEL_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partition: int
        replicas: _containers.RepeatedScalarFieldContainer[int]
        cancel: bool
        def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., cancel: _Optional[bool] = ...) -> None: ...
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[AlterPartitionReassignmentsRequest.Target]
    request_id: str
    def __init__(self, targets: _Optional[_Iterable[_Union[AlterPartitionReassignmentsRequest.Target, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class PartitionOperationResult(_message.Message):
    __slots__ = ("topic", "partition", "error", "error_message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class AlterPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PartitionOperationResult]
    def __init__(self, results: _Optional[_Iterable[_Union[PartitionOperationResult, _Mapping]]] = ...) -> None: ...

class ListPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    def __init__(self, partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ...) -> None: ...

class PartitionReassignmentState(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "adding_replicas", "removing_replicas", "isr", "leader", "error")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    error: _errors_pb2.ErrorCode
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ...) -> None: ...

class ListPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionReassignmentState]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionReassignmentState, _Mapping]]] = ...) -> None: ...

class ElectLeadersRequest(_message.Message):
    __slots__ = ("partitions", "request_id")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    request_id: str
    def __init__(self, partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ElectLeadersResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PartitionOperationResult]
    def __init__(self, results: _Optional[_Iterable[_Union[PartitionOperationResult, _Mapping]]] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("broker_id", "request_id")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    request_id: str
    def __init__(self, broker_id: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ("error", "error_message")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class AddVoterRequest(_message.Message):
    __slots__ = ("controller_id", "raft_endpoint", "grpc_endpoint", "request_id")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    GRPC_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    raft_endpoint: str
    grpc_endpoint: str
    request_id: str
    def __init__(self, controller_id: _Optional[int] = ..., raft_endpoint: _Optional[str] = ..., grpc_endpoint: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class AddVoterResponse(_message.Message):
    __slots__ = ("error", "error_message", "voter_ids")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VOTER_IDS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    voter_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., voter_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class RemoveVoterRequest(_message.Message):
    __slots__ = ("controller_id", "request_id")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    request_id: str
    def __init__(self, controller_id: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class RemoveVoterResponse(_message.Message):
    __slots__ = ("error", "error_message", "voter_ids")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VOTER_IDS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    voter_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., voter_ids: _Optional[_Iterable[int]] = ...) -> None: ...
