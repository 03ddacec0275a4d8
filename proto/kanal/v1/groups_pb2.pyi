from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OffsetCommitKey(_message.Message):
    __slots__ = ("group_id", "topic", "partition")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topic: str
    partition: int
    def __init__(self, group_id: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class GroupMetadataKey(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class GroupRecordKey(_message.Message):
    __slots__ = ("offset", "group")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    offset: OffsetCommitKey
    group: GroupMetadataKey
    def __init__(self, offset: _Optional[_Union[OffsetCommitKey, _Mapping]] = ..., group: _Optional[_Union[GroupMetadataKey, _Mapping]] = ...) -> None: ...

class OffsetCommitValue(_message.Message):
    __slots__ = ("offset", "leader_epoch", "metadata", "commit_timestamp_ms", "generation_id", "member_id", "topic_id")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    generation_id: int
    member_id: str
    topic_id: str
    def __init__(self, offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_timestamp_ms: _Optional[int] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., topic_id: _Optional[str] = ...) -> None: ...

class GroupMemberMetadata(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms", "session_timeout_ms", "subscription", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., rebalance_timeout_ms: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ..., subscription: _Optional[bytes] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class GroupMetadataValue(_message.Message):
    __slots__ = ("protocol_type", "generation_id", "protocol_name", "leader", "state_timestamp_ms", "members")
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    STATE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    protocol_type: str
    generation_id: int
    protocol_name: str
    leader: str
    state_timestamp_ms: int
    members: _containers.RepeatedCompositeFieldContainer[GroupMemberMetadata]
    def __init__(self, protocol_type: _Optional[str] = ..., generation_id: _Optional[int] = ..., protocol_name: _Optional[str] = ..., leader: _Optional[str] = ..., state_timestamp_ms: _Optional[int] = ..., members: _Optional[_Iterable[_Union[GroupMemberMetadata, _Mapping]]] = ...) -> None: ...
