from kanal.v1 import errors_pb2 as _errors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SchemaReference(_message.Message):
    __slots__ = ("name", "subject", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    subject: str
    version: int
    def __init__(self, name: _Optional[str] = ..., subject: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class RegisteredSchema(_message.Message):
    __slots__ = ("id", "schema_type", "schema", "references")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    id: int
    schema_type: str
    schema: str
    references: _containers.RepeatedCompositeFieldContainer[SchemaReference]
    def __init__(self, id: _Optional[int] = ..., schema_type: _Optional[str] = ..., schema: _Optional[str] = ..., references: _Optional[_Iterable[_Union[SchemaReference, _Mapping]]] = ...) -> None: ...

class SubjectVersion(_message.Message):
    __slots__ = ("subject", "version", "schema", "deleted")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    subject: str
    version: int
    schema: RegisteredSchema
    deleted: bool
    def __init__(self, subject: _Optional[str] = ..., version: _Optional[int] = ..., schema: _Optional[_Union[RegisteredSchema, _Mapping]] = ..., deleted: _Optional[bool] = ...) -> None: ...

class RegisterSchemaRequest(_message.Message):
    __slots__ = ("subject", "schema_type", "schema", "references", "normalize", "id", "version", "request_id")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    subject: str
    schema_type: str
    schema: str
    references: _containers.RepeatedCompositeFieldContainer[SchemaReference]
    normalize: bool
    id: int
    version: int
    request_id: str
    def __init__(self, subject: _Optional[str] = ..., schema_type: _Optional[str] = ..., schema: _Optional[str] = ..., references: _Optional[_Iterable[_Union[SchemaReference, _Mapping]]] = ..., normalize: _Optional[bool] = ..., id: _Optional[int] = ..., version: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class RegisterSchemaResponse(_message.Message):
    __slots__ = ("error", "error_message", "id", "version")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    id: int
    version: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., id: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class GetSchemaRequest(_message.Message):
    __slots__ = ("id", "deleted", "format")
    ID_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    id: int
    deleted: bool
    format: str
    def __init__(self, id: _Optional[int] = ..., deleted: _Optional[bool] = ..., format: _Optional[str] = ...) -> None: ...

class GetSchemaResponse(_message.Message):
    __slots__ = ("error", "error_message", "schema", "versions")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    schema: RegisteredSchema
    versions: _containers.RepeatedCompositeFieldContainer[SubjectVersion]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., schema: _Optional[_Union[RegisteredSchema, _Mapping]] = ..., versions: _Optional[_Iterable[_Union[SubjectVersion, _Mapping]]] = ...) -> None: ...

class ListSubjectsRequest(_message.Message):
    __slots__ = ("deleted", "prefix")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    prefix: str
    def __init__(self, deleted: _Optional[bool] = ..., prefix: _Optional[str] = ...) -> None: ...

class ListSubjectsResponse(_message.Message):
    __slots__ = ("error", "error_message", "subjects")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SUBJECTS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    subjects: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., subjects: _Optional[_Iterable[str]] = ...) -> None: ...

class ListVersionsRequest(_message.Message):
    __slots__ = ("subject", "deleted")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    subject: str
    deleted: bool
    def __init__(self, subject: _Optional[str] = ..., deleted: _Optional[bool] = ...) -> None: ...

class ListVersionsResponse(_message.Message):
    __slots__ = ("error", "error_message", "versions")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    versions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., versions: _Optional[_Iterable[int]] = ...) -> None: ...

class GetVersionRequest(_message.Message):
    __slots__ = ("subject", "version", "deleted")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    subject: str
    version: int
    deleted: bool
    def __init__(self, subject: _Optional[str] = ..., version: _Optional[int] = ..., deleted: _Optional[bool] = ...) -> None: ...

class GetVersionResponse(_message.Message):
    __slots__ = ("error", "error_message", "version")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    version: SubjectVersion
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., version: _Optional[_Union[SubjectVersion, _Mapping]] = ...) -> None: ...

class LookupSchemaRequest(_message.Message):
    __slots__ = ("subject", "schema_type", "schema", "references", "normalize", "deleted")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    subject: str
    schema_type: str
    schema: str
    references: _containers.RepeatedCompositeFieldContainer[SchemaReference]
    normalize: bool
    deleted: bool
    def __init__(self, subject: _Optional[str] = ..., schema_type: _Optional[str] = ..., schema: _Optional[str] = ..., references: _Optional[_Iterable[_Union[SchemaReference, _Mapping]]] = ..., normalize: _Optional[bool] = ..., deleted: _Optional[bool] = ...) -> None: ...

class LookupSchemaResponse(_message.Message):
    __slots__ = ("error", "error_message", "version")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    version: SubjectVersion
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., version: _Optional[_Union[SubjectVersion, _Mapping]] = ...) -> None: ...

class DeleteSubjectRequest(_message.Message):
    __slots__ = ("subject", "permanent", "request_id")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    subject: str
    permanent: bool
    request_id: str
    def __init__(self, subject: _Optional[str] = ..., permanent: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteSubjectResponse(_message.Message):
    __slots__ = ("error", "error_message", "versions")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    versions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., versions: _Optional[_Iterable[int]] = ...) -> None: ...

class DeleteVersionRequest(_message.Message):
    __slots__ = ("subject", "version", "permanent", "request_id")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    subject: str
    version: int
    permanent: bool
    request_id: str
    def __init__(self, subject: _Optional[str] = ..., version: _Optional[int] = ..., permanent: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteVersionResponse(_message.Message):
    __slots__ = ("error", "error_message", "version")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    version: int
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class CheckCompatibilityRequest(_message.Message):
    __slots__ = ("subject", "version", "schema_type", "schema", "references", "normalize")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    subject: str
    version: int
    schema_type: str
    schema: str
    references: _containers.RepeatedCompositeFieldContainer[SchemaReference]
    normalize: bool
    def __init__(self, subject: _Optional[str] = ..., version: _Optional[int] = ..., schema_type: _Optional[str] = ..., schema: _Optional[str] = ..., references: _Optional[_Iterable[_Union[SchemaReference, _Mapping]]] = ..., normalize: _Optional[bool] = ...) -> None: ...

class CheckCompatibilityResponse(_message.Message):
    __slots__ = ("error", "error_message", "compatible", "messages")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMPATIBLE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    compatible: bool
    messages: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., compatible: _Optional[bool] = ..., messages: _Optional[_Iterable[str]] = ...) -> None: ...

class GetRegistryConfigRequest(_message.Message):
    __slots__ = ("subject", "default_to_global")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TO_GLOBAL_FIELD_NUMBER: _ClassVar[int]
    subject: str
    default_to_global: bool
    def __init__(self, subject: _Optional[str] = ..., default_to_global: _Optional[bool] = ...) -> None: ...

class GetRegistryConfigResponse(_message.Message):
    __slots__ = ("error", "error_message", "compatibility", "normalize")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    compatibility: str
    normalize: bool
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., compatibility: _Optional[str] = ..., normalize: _Optional[bool] = ...) -> None: ...

class SetRegistryConfigRequest(_message.Message):
    __slots__ = ("subject", "compatibility", "normalize", "delete", "request_id")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    subject: str
    compatibility: str
    normalize: bool
    delete: bool
    request_id: str
    def __init__(self, subject: _Optional[str] = ..., compatibility: _Optional[str] = ..., normalize: _Optional[bool] = ..., delete: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetRegistryConfigResponse(_message.Message):
    __slots__ = ("error", "error_message", "compatibility", "normalize")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    compatibility: str
    normalize: bool
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., compatibility: _Optional[str] = ..., normalize: _Optional[bool] = ...) -> None: ...

class GetRegistryModeRequest(_message.Message):
    __slots__ = ("subject", "default_to_global")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TO_GLOBAL_FIELD_NUMBER: _ClassVar[int]
    subject: str
    default_to_global: bool
    def __init__(self, subject: _Optional[str] = ..., default_to_global: _Optional[bool] = ...) -> None: ...

class GetRegistryModeResponse(_message.Message):
    __slots__ = ("error", "error_message", "mode")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    mode: str
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., mode: _Optional[str] = ...) -> None: ...

class SetRegistryModeRequest(_message.Message):
    __slots__ = ("subject", "mode", "force", "delete", "request_id")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    subject: str
    mode: str
    force: bool
    delete: bool
    request_id: str
    def __init__(self, subject: _Optional[str] = ..., mode: _Optional[str] = ..., force: _Optional[bool] = ..., delete: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetRegistryModeResponse(_message.Message):
    __slots__ = ("error", "error_message", "mode")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    mode: str
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., mode: _Optional[str] = ...) -> None: ...

class GetReferencedByRequest(_message.Message):
    __slots__ = ("subject", "version")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    subject: str
    version: int
    def __init__(self, subject: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetReferencedByResponse(_message.Message):
    __slots__ = ("error", "error_message", "ids")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorCode
    error_message: str
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., ids: _Optional[_Iterable[int]] = ...) -> None: ...
