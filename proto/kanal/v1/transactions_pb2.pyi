from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransactionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_EMPTY: _ClassVar[TransactionState]
    TXN_ONGOING: _ClassVar[TransactionState]
    TXN_PREPARE_COMMIT: _ClassVar[TransactionState]
    TXN_PREPARE_ABORT: _ClassVar[TransactionState]
    TXN_COMPLETE_COMMIT: _ClassVar[TransactionState]
    TXN_COMPLETE_ABORT: _ClassVar[TransactionState]
TXN_EMPTY: TransactionState
TXN_ONGOING: TransactionState
TXN_PREPARE_COMMIT: TransactionState
TXN_PREPARE_ABORT: TransactionState
TXN_COMPLETE_COMMIT: TransactionState
TXN_COMPLETE_ABORT: TransactionState

class TransactionPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class TransactionStateValue(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "timeout_ms", "state", "partitions", "start_ms", "last_update_ms")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_MS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: _containers.RepeatedCompositeFieldContainer[TransactionPartition]
    start_ms: int
    last_update_ms: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., state: _Optional[_Union[TransactionState, str]] = ..., partitions: _Optional[_Iterable[_Union[TransactionPartition, _Mapping]]] = ..., start_ms: _Optional[int] = ..., last_update_ms: _Optional[int] = ...) -> None: ...
