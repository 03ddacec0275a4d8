from kanal.v1 import admin_pb2 as _admin_pb2
from kanal.v1 import operations_pb2 as _operations_pb2
from kanal.v1 import errors_pb2 as _errors_pb2
from kanal.v1 import transactions_pb2 as _transactions_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_UNCOMMITTED: _ClassVar[IsolationLevel]
    READ_COMMITTED: _ClassVar[IsolationLevel]

class CoordinatorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COORDINATOR_GROUP: _ClassVar[CoordinatorType]
    COORDINATOR_TRANSACTION: _ClassVar[CoordinatorType]
READ_UNCOMMITTED: IsolationLevel
READ_COMMITTED: IsolationLevel
COORDINATOR_GROUP: CoordinatorType
COORDINATOR_TRANSACTION: CoordinatorType

class ProduceRequest(_message.Message):
    __slots__ = ("acks", "timeout_ms", "topics")
    class PartitionData(_message.Message):
        __slots__ = ("partition", "batches")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        BATCHES_FIELD_NUMBER: _ClassVar[int]
        partition: int
        batches: _containers.RepeatedScalarFieldContainer[bytes]
        def __init__(self, partition: _Optional[int] = ..., batches: _Optional[_Iterable[bytes]] = ...) -> None: ...
    class TopicData(_message.Message):
        __slots__ = ("topic", "partitions")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partitions: _containers.RepeatedCompositeFieldContainer[ProduceRequest.PartitionData]
        def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ProduceRequest.PartitionData, _Mapping]]] = ...) -> None: ...
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    acks: int
    timeout_ms: int
    topics: _containers.RepeatedCompositeFieldContainer[ProduceRequest.TopicData]
    def __init__(self, acks: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[ProduceRequest.TopicData, _Mapping]]] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("topics", "throttle_time_ms")
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "error", "error_message", "base_offset", "log_start_offset", "current_leader", "current_leader_endpoint", "batch_base_offsets")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
        CURRENT_LEADER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
        BATCH_BASE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error: _errors_pb2.ErrorCode
        error_message: str
        base_offset: int
        log_start_offset: int
        current_leader: int
        current_leader_endpoint: str
        batch_base_offsets: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, partition: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., base_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., current_leader: _Optional[int] = ..., current_leader_endpoint: _Optional[str] = ..., batch_base_offsets: _Optional[_Iterable[int]] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic", "partitions")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partitions: _containers.RepeatedCompositeFieldContainer[ProduceResponse.PartitionResult]
        def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ProduceResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[ProduceResponse.TopicResult]
    throttle_time_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[ProduceResponse.TopicResult, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("replica_id", "replica_epoch", "max_wait_ms", "min_bytes", "max_bytes", "topics", "rack_id", "isolation_level")
    class PartitionRequest(_message.Message):
        __slots__ = ("partition", "fetch_offset", "max_bytes", "current_leader_epoch", "last_fetched_epoch")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
        MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
        CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
        partition: int
        fetch_offset: int
        max_bytes: int
        current_leader_epoch: int
        last_fetched_epoch: int
        def __init__(self, partition: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ...) -> None: ...
    class TopicRequest(_message.Message):
        __slots__ = ("topic", "partitions", "topic_id")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partitions: _containers.RepeatedCompositeFieldContainer[FetchRequest.PartitionRequest]
        topic_id: str
        def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[FetchRequest.PartitionRequest, _Mapping]]] = ..., topic_id: _Optional[str] = ...) -> None: ...
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    RACK_ID_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    replica_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    topics: _containers.RepeatedCompositeFieldContainer[FetchRequest.TopicRequest]
    rack_id: str
    isolation_level: IsolationLevel
    def __init__(self, replica_id: _Optional[int] = ..., replica_epoch: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., min_bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[FetchRequest.TopicRequest, _Mapping]]] = ..., rack_id: _Optional[str] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("topics", "throttle_time_ms")
    class PartitionData(_message.Message):
        __slots__ = ("partition", "error", "error_message", "high_watermark", "log_end_offset", "log_start_offset", "records", "diverging_epoch", "diverging_end_offset", "leader_epoch", "last_stable_offset", "aborted_transactions", "preferred_read_replica")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        RECORDS_FIELD_NUMBER: _ClassVar[int]
        DIVERGING_EPOCH_FIELD_NUMBER: _ClassVar[int]
        DIVERGING_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
        PREFERRED_READ_REPLICA_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error: _errors_pb2.ErrorCode
        error_message: str
        high_watermark: int
        log_end_offset: int
        log_start_offset: int
        records: bytes
        diverging_epoch: int
        diverging_end_offset: int
        leader_epoch: int
        last_stable_offset: int
        aborted_transactions: _containers.RepeatedCompositeFieldContainer[FetchResponse.AbortedTransaction]
        preferred_read_replica: int
        def __init__(self, partition: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., high_watermark: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., diverging_epoch: _Optional[int] = ..., diverging_end_offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., last_stable_offset: _Optional[int] = ..., aborted_transactions: _Optional[_Iterable[_Union[FetchResponse.AbortedTransaction, _Mapping]]] = ..., preferred_read_replica: _Optional[int] = ...) -> None: ...
    class AbortedTransaction(_message.Message):
        __slots__ = ("producer_id", "first_offset")
        PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
        FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
        producer_id: int
        first_offset: int
        def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ...) -> None: ...
    class TopicData(_message.Message):
        __slots__ = ("topic", "partitions")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partitions: _containers.RepeatedCompositeFieldContainer[FetchResponse.PartitionData]
        def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[FetchResponse.PartitionData, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[FetchResponse.TopicData]
    throttle_time_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[FetchResponse.TopicData, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topics", "isolation_level")
    class PartitionQuery(_message.Message):
        __slots__ = ("partition", "timestamp_ms")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
        partition: int
        timestamp_ms: int
        def __init__(self, partition: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...
    class TopicQuery(_message.Message):
        __slots__ = ("topic", "partitions")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsRequest.PartitionQuery]
        def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ListOffsetsRequest.PartitionQuery, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[ListOffsetsRequest.TopicQuery]
    isolation_level: IsolationLevel
    def __init__(self, topics: _Optional[_Iterable[_Union[ListOffsetsRequest.TopicQuery, _Mapping]]] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("topics", "throttle_time_ms")
    class PartitionOffset(_message.Message):
        __slots__ = ("partition", "error", "offset", "timestamp_ms")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error: _errors_pb2.ErrorCode
        offset: int
        timestamp_ms: int
        def __init__(self, partition: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...
    class TopicOffsets(_message.Message):
        __slots__ = ("topic", "partitions")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsResponse.PartitionOffset]
        def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ListOffsetsResponse.PartitionOffset, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[ListOffsetsResponse.TopicOffsets]
    throttle_time_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[ListOffsetsResponse.TopicOffsets, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class PartitionMetadata(_message.Message):
    __slots__ = ("partition", "error", "leader", "leader_epoch", "replicas", "isr", "offline_reason")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_REASON_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error: _errors_pb2.ErrorCode
    leader: int
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    offline_reason: str
    def __init__(self, partition: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., offline_reason: _Optional[str] = ...) -> None: ...

class TopicMetadata(_message.Message):
    __slots__ = ("name", "error", "topic_id", "partitions", "is_internal")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    IS_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    error: _errors_pb2.ErrorCode
    topic_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionMetadata]
    is_internal: bool
    def __init__(self, name: _Optional[str] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., topic_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionMetadata, _Mapping]]] = ..., is_internal: _Optional[bool] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("brokers", "topics", "cluster_id", "controller_id", "metadata_offset", "throttle_time_ms")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[_admin_pb2.BrokerDescription]
    topics: _containers.RepeatedCompositeFieldContainer[TopicMetadata]
    cluster_id: str
    controller_id: int
    metadata_offset: int
    throttle_time_ms: int
    def __init__(self, brokers: _Optional[_Iterable[_Union[_admin_pb2.BrokerDescription, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicMetadata, _Mapping]]] = ..., cluster_id: _Optional[str] = ..., controller_id: _Optional[int] = ..., metadata_offset: _Optional[int] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class InitProducerIdRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "transaction_timeout_ms")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., transaction_timeout_ms: _Optional[int] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("error", "error_message", "producer_id", "producer_epoch", "throttle_time_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    producer_id: int
    producer_epoch: int
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class TxnProducer(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class AddPartitionsToTxnRequest(_message.Message):
    __slots__ = ("producer", "topics", "group_ids")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    producer: TxnProducer
    topics: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, producer: _Optional[_Union[TxnProducer, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AddPartitionsToTxnResponse(_message.Message):
    __slots__ = ("error", "error_message", "results", "throttle_time_ms", "group_ids")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[TxnPartitionResult]
    throttle_time_ms: int
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[TxnPartitionResult, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ..., group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class TxnPartitionResult(_message.Message):
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

class AddOffsetsToTxnRequest(_message.Message):
    __slots__ = ("producer", "group_id")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    producer: TxnProducer
    group_id: str
    def __init__(self, producer: _Optional[_Union[TxnProducer, _Mapping]] = ..., group_id: _Optional[str] = ...) -> None: ...

class AddOffsetsToTxnResponse(_message.Message):
    __slots__ = ("error", "error_message", "throttle_time_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class TxnOffsetCommitRequest(_message.Message):
    __slots__ = ("producer", "group_id", "topics")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    producer: TxnProducer
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitRequest.Topic]
    def __init__(self, producer: _Optional[_Union[TxnProducer, _Mapping]] = ..., group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitRequest.Topic, _Mapping]]] = ...) -> None: ...

class TxnOffsetCommitResponse(_message.Message):
    __slots__ = ("error", "error_message", "results", "throttle_time_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[TxnPartitionResult]
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[TxnPartitionResult, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class EndTxnRequest(_message.Message):
    __slots__ = ("producer", "commit")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    producer: TxnProducer
    commit: bool
    def __init__(self, producer: _Optional[_Union[TxnProducer, _Mapping]] = ..., commit: _Optional[bool] = ...) -> None: ...

class EndTxnResponse(_message.Message):
    __slots__ = ("error", "error_message", "throttle_time_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class WriteTxnMarkersRequest(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "commit", "coordinator_epoch", "topics")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., commit: _Optional[bool] = ..., coordinator_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...

class WriteTxnMarkersResponse(_message.Message):
    __slots__ = ("results", "throttle_time_ms")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TxnPartitionResult]
    throttle_time_ms: int
    def __init__(self, results: _Optional[_Iterable[_Union[TxnPartitionResult, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class DescribeTransactionsRequest(_message.Message):
    __slots__ = ("transactional_ids",)
    TRANSACTIONAL_IDS_FIELD_NUMBER: _ClassVar[int]
    transactional_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, transactional_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeTransactionsResponse(_message.Message):
    __slots__ = ("transactions", "throttle_time_ms")
    class Transaction(_message.Message):
        __slots__ = ("transactional_id", "error", "state")
        TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        STATE_FIELD_NUMBER: _ClassVar[int]
        transactional_id: str
        error: _errors_pb2.ErrorCode
        state: _transactions_pb2.TransactionStateValue
        def __init__(self, transactional_id: _Optional[str] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., state: _Optional[_Union[_transactions_pb2.TransactionStateValue, _Mapping]] = ...) -> None: ...
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    transactions: _containers.RepeatedCompositeFieldContainer[DescribeTransactionsResponse.Transaction]
    throttle_time_ms: int
    def __init__(self, transactions: _Optional[_Iterable[_Union[DescribeTransactionsResponse.Transaction, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("key", "key_type")
    KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_TYPE_FIELD_NUMBER: _ClassVar[int]
    key: str
    key_type: CoordinatorType
    def __init__(self, key: _Optional[str] = ..., key_type: _Optional[_Union[CoordinatorType, str]] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("error", "error_message", "node_id", "endpoint", "throttle_time_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    node_id: int
    endpoint: str
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., node_id: _Optional[int] = ..., endpoint: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class GroupProtocol(_message.Message):
    __slots__ = ("name", "metadata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    metadata: bytes
    def __init__(self, name: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class ConsumerSubscription(_message.Message):
    __slots__ = ("topics", "owned_partitions", "user_data", "rack_id")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    OWNED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    RACK_ID_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    owned_partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    user_data: bytes
    rack_id: str
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., owned_partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., user_data: _Optional[bytes] = ..., rack_id: _Optional[str] = ...) -> None: ...

class TopicPartitions(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class ConsumerAssignment(_message.Message):
    __slots__ = ("partitions", "user_data")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    user_data: bytes
    def __init__(self, partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., user_data: _Optional[bytes] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "session_timeout_ms", "rebalance_timeout_ms", "member_id", "group_instance_id", "protocol_type", "protocols", "client_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocols: _containers.RepeatedCompositeFieldContainer[GroupProtocol]
    client_id: str
    def __init__(self, group_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocols: _Optional[_Iterable[_Union[GroupProtocol, _Mapping]]] = ..., client_id: _Optional[str] = ...) -> None: ...

class JoinGroupMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "metadata")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    metadata: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("error", "error_message", "generation_id", "protocol_type", "protocol_name", "leader", "member_id", "members", "skip_assignment", "throttle_time_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    SKIP_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader: str
    member_id: str
    members: _containers.RepeatedCompositeFieldContainer[JoinGroupMember]
    skip_assignment: bool
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., generation_id: _Optional[int] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., leader: _Optional[str] = ..., member_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[JoinGroupMember, _Mapping]]] = ..., skip_assignment: _Optional[bool] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class SyncGroupAssignment(_message.Message):
    __slots__ = ("member_id", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "assignments", "protocol_type", "protocol_name")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    assignments: _containers.RepeatedCompositeFieldContainer[SyncGroupAssignment]
    protocol_type: str
    protocol_name: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[SyncGroupAssignment, _Mapping]]] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("error", "error_message", "assignment", "protocol_type", "protocol_name", "throttle_time_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    assignment: bytes
    protocol_type: str
    protocol_name: str
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., assignment: _Optional[bytes] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("error", "error_message", "throttle_time_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group_id", "members")
    class Member(_message.Message):
        __slots__ = ("member_id", "group_instance_id")
        MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
        GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
        member_id: str
        group_instance_id: str
        def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    members: _containers.RepeatedCompositeFieldContainer[LeaveGroupRequest.Member]
    def __init__(self, group_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[LeaveGroupRequest.Member, _Mapping]]] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("error", "error_message", "throttle_time_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class PartitionOffsetCommit(_message.Message):
    __slots__ = ("partition", "offset", "leader_epoch", "metadata")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "topics")
    class Topic(_message.Message):
        __slots__ = ("topic", "partitions")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partitions: _containers.RepeatedCompositeFieldContainer[PartitionOffsetCommit]
        def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionOffsetCommit, _Mapping]]] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitRequest.Topic]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitRequest.Topic, _Mapping]]] = ...) -> None: ...

class PartitionError(_message.Message):
    __slots__ = ("partition", "error", "error_message")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, partition: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class OffsetCommitResponse(_message.Message):
    __slots__ = ("error", "topics", "error_message", "throttle_time_ms")
    class Topic(_message.Message):
        __slots__ = ("topic", "partitions")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partitions: _containers.RepeatedCompositeFieldContainer[PartitionError]
        def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionError, _Mapping]]] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitResponse.Topic]
    error_message: str
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitResponse.Topic, _Mapping]]] = ..., error_message: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group_id", "topics", "require_stable")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_STABLE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    require_stable: bool
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., require_stable: _Optional[bool] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("error", "offsets", "error_message", "throttle_time_ms")
    class PartitionOffset(_message.Message):
        __slots__ = ("topic", "partition", "offset", "leader_epoch", "metadata", "error")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        METADATA_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partition: int
        offset: int
        leader_epoch: int
        metadata: str
        error: _errors_pb2.ErrorCode
        def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetFetchResponse.PartitionOffset]
    error_message: str
    throttle_time_ms: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., offsets: _Optional[_Iterable[_Union[OffsetFetchResponse.PartitionOffset, _Mapping]]] = ..., error_message: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GroupMemberDescription(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "assignment", "raw_assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    RAW_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    assignment: ConsumerAssignment
    raw_assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., assignment: _Optional[_Union[ConsumerAssignment, _Mapping]] = ..., raw_assignment: _Optional[bytes] = ...) -> None: ...

class PartitionLag(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset", "log_end_offset", "lag")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int
    lag: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., lag: _Optional[int] = ...) -> None: ...

class GroupDescription(_message.Message):
    __slots__ = ("group_id", "error", "state", "protocol_type", "protocol_name", "members", "generation_id", "offsets")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error: _errors_pb2.ErrorCode
    state: str
    protocol_type: str
    protocol_name: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMemberDescription]
    generation_id: int
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionLag]
    def __init__(self, group_id: _Optional[str] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., state: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMemberDescription, _Mapping]]] = ..., generation_id: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[PartitionLag, _Mapping]]] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups", "throttle_time_ms")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupDescription]
    throttle_time_ms: int
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupDescription, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups", "throttle_time_ms")
    class Group(_message.Message):
        __slots__ = ("group_id", "protocol_type", "state")
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
        STATE_FIELD_NUMBER: _ClassVar[int]
        group_id: str
        protocol_type: str
        state: str
        def __init__(self, group_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ListGroupsResponse.Group]
    throttle_time_ms: int
    def __init__(self, groups: _Optional[_Iterable[_Union[ListGroupsResponse.Group, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("results", "throttle_time_ms")
    class Result(_message.Message):
        __slots__ = ("group_id", "error")
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        group_id: str
        error: _errors_pb2.ErrorCode
        def __init__(self, group_id: _Optional[str] = ..., error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteGroupsResponse.Result]
    throttle_time_ms: int
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteGroupsResponse.Result, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...
