from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CompressionCodec(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPRESSION_NONE: _ClassVar[CompressionCodec]
    COMPRESSION_GZIP: _ClassVar[CompressionCodec]
    COMPRESSION_SNAPPY: _ClassVar[CompressionCodec]
    COMPRESSION_LZ4: _ClassVar[CompressionCodec]
    COMPRESSION_ZSTD: _ClassVar[CompressionCodec]

class ControlRecordType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTROL_RECORD_TYPE_UNSPECIFIED: _ClassVar[ControlRecordType]
    CONTROL_RECORD_ABORT: _ClassVar[ControlRecordType]
    CONTROL_RECORD_COMMIT: _ClassVar[ControlRecordType]
COMPRESSION_NONE: CompressionCodec
COMPRESSION_GZIP: CompressionCodec
COMPRESSION_SNAPPY: CompressionCodec
COMPRESSION_LZ4: CompressionCodec
COMPRESSION_ZSTD: CompressionCodec
CONTROL_RECORD_TYPE_UNSPECIFIED: ControlRecordType
CONTROL_RECORD_ABORT: ControlRecordType
CONTROL_RECORD_COMMIT: ControlRecordType

class RecordHeader(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("offset_delta", "timestamp_delta_ms", "key", "value", "headers")
    OFFSET_DELTA_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_DELTA_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    offset_delta: int
    timestamp_delta_ms: int
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[RecordHeader]
    def __init__(self, offset_delta: _Optional[int] = ..., timestamp_delta_ms: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[RecordHeader, _Mapping]]] = ...) -> None: ...

class RecordList(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ...) -> None: ...

class RecordBatch(_message.Message):
    __slots__ = ("base_offset", "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence", "first_timestamp_ms", "max_timestamp_ms", "record_count", "codec", "records", "crc", "last_offset_delta", "attributes")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PARTITION_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    CRC_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_DELTA_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    partition_leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    first_timestamp_ms: int
    max_timestamp_ms: int
    record_count: int
    codec: CompressionCodec
    records: bytes
    crc: int
    last_offset_delta: int
    attributes: int
    def __init__(self, base_offset: _Optional[int] = ..., partition_leader_epoch: _Optional[int] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., base_sequence: _Optional[int] = ..., first_timestamp_ms: _Optional[int] = ..., max_timestamp_ms: _Optional[int] = ..., record_count: _Optional[int] = ..., codec: _Optional[_Union[CompressionCodec, str]] = ..., records: _Optional[bytes] = ..., crc: _Optional[int] = ..., last_offset_delta: _Optional[int] = ..., attributes: _Optional[int] = ...) -> None: ...

class ControlRecordKey(_message.Message):
    __slots__ = ("type",)
    TYPE_FIELD_NUMBER: _ClassVar[int]
    type: ControlRecordType
    def __init__(self, type: _Optional[_Union[ControlRecordType, str]] = ...) -> None: ...

class ControlRecordValue(_message.Message):
    __slots__ = ("coordinator_epoch",)
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    coordinator_epoch: int
    def __init__(self, coordinator_epoch: _Optional[int] = ...) -> None: ...

class RecordBatchList(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[RecordBatch]
    def __init__(self, batches: _Optional[_Iterable[_Union[RecordBatch, _Mapping]]] = ...) -> None: ...
