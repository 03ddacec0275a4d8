"""kanal's own registry-aware record serializers: JSON values in, Confluent's framing out, and back.

    registry = SchemaRegistryClient(url)
    serializer = RegistrySerializer(registry, "avro", schema=Schema(avro_text))
    config = ProducerConfig(bootstrap, value_serializer=serializer)
    producer.produce("orders", {"id": 7, "note": "first"})          # framed Avro under orders-value
    ConsumerConfig(bootstrap, value_deserializer=RegistryDeserializer(registry))   # values as JSON values

What `kanal produce --value-format` and `kanal consume --value-format` use (confluent-kafka's serializers
plug into the same hooks, for applications that want its classes and rules). Each record is written as
every registry client writes it (kanal.schemas.framing): a zero byte, the schema id (4 bytes, big-endian),
then the payload:

- **avro**: the value is plain JSON (clients/avro_json.py says how unions, bytes and logical types look),
  encoded by fastavro through kanal.schemas.avro_schema; decoded with the record's own (writer's) schema.
- **json**: the value is validated against the JSON Schema (kanal.schemas.json_schema) and written as
  compact UTF-8 JSON; decoded and validated again against the record's schema.
- **protobuf**: the value is the message in the proto3 JSON mapping (`google.protobuf.json_format`: field
  names as in the .proto or in lowerCamelCase, enums by name, bytes in base64), made into the message
  class of the registered schema (kanal.schemas.protobuf_schema), written after its message indexes; a
  `google.protobuf` message of that type is taken as it is. Decoded into the class the record's indexes
  name and printed with field names as in the .proto, 64-bit integers as numbers where a double holds them
  exactly, and fields at their default value left out (proto3's JSON rules).

The schema a serializer writes with, per subject (TopicNameStrategy: `<topic>-key`, `<topic>-value`, as
confluent-kafka's serializers name them), is decided on its first record and kept:
- `schema=`: registered under the subject (`auto_register=True`, confluent-kafka's default), or, with
  `auto_register=False`, looked up there (SCHEMA_NOT_FOUND when the subject does not hold it);
- `schema_id=`: that registered schema, as it is (confluent-kafka's `use.schema.id`);
- neither: the subject's latest version (`use.latest.version`).
A schema of another type than the serializer's format is INVALID_SCHEMA. A value that does not fit the
schema is INVALID_RECORD (the producer raises it as RecordSerializationError, nothing queued); None is
written as None (a tombstone) without a schema.

The deserializer reads any framed record, whatever its schema's type (a `record_format` given makes another
type INVALID_RECORD), parsing each schema id's schema once (at most `parsed_cached_max` kept, the least
recently used go first). Bytes that are not framed, or do not decode with their schema, are INVALID_RECORD.
Both are thread-safe.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from kanal.clients import avro_json
from kanal.clients.schema_registry_client import Schema, SchemaRegistryClient
from kanal.clients.serialization import SerializationContext
from kanal.schemas.avro_schema import AvroSchema
from kanal.schemas.formats import parse_schema, schema_type_of
from kanal.schemas.framing import frame, frame_message_indexes, unframe, unframe_message_indexes
from kanal.schemas.json_schema import InstanceInvalid, JsonSchema
from kanal.schemas.protobuf_schema import ProtobufSchema
from kanal.schemas.schema_types import ParsedSchema, SchemaType
from kanal.v1.error import ErrorCode, KanalError

PARSED_CACHED_MAX_DEFAULT: Final = 1000


class RecordFormat(StrEnum):
    """The formats' names on the command line, each a registry schema type."""

    AVRO = "avro"
    JSON = "json"
    PROTOBUF = "protobuf"

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType(self.name)


def record_format(name: str) -> RecordFormat:
    try:
        return RecordFormat(name.lower())
    except ValueError:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"record format {name!r}: one of "
                                                   f"{', '.join(RecordFormat)}") from None


def subject_name(ctx: SerializationContext) -> str:
    """TopicNameStrategy: `<topic>-key` or `<topic>-value`."""
    return f"{ctx.topic}-{ctx.field}"


def _invalid_record(message: str) -> KanalError:
    return KanalError(ErrorCode.INVALID_RECORD, message)


def _parsed(registry: SchemaRegistryClient, schema: Schema) -> ParsedSchema:
    """The schema parsed with its references (fetched from the registry)."""
    return parse_schema(schema_type_of(schema.schema_type), schema.text, registry.references_of(schema))


@dataclass(frozen=True, slots=True)
class _Writer:
    """What a subject's records are written with: the schema id and the parsed schema."""

    schema_id: int
    parsed: ParsedSchema
    message_indexes: bytes = b""  # Protobuf: the framed indexes of the message written


class RegistrySerializer:
    """`(value, ctx) -> bytes | None`: a JSON value framed with its registered schema (module docstring)."""

    def __init__(self, registry: SchemaRegistryClient, record_format_name: str, *,
                 schema: Schema | None = None, schema_id: int | None = None, auto_register: bool = True,
                 normalize: bool = False, message: str | None = None) -> None:
        """`message`: for Protobuf, the full name of the message written (default: the schema's first)."""
        self.record_format = record_format(record_format_name)
        if schema is not None and schema_id is not None:
            raise KanalError(ErrorCode.INVALID_CONFIG, "a serializer takes a schema or a schema id, not both")
        if schema is not None and schema_type_of(schema.schema_type) != self.record_format.schema_type:
            raise KanalError(ErrorCode.INVALID_SCHEMA, f"a {schema.schema_type} schema for the "
                                                       f"{self.record_format} format")
        self._registry = registry
        self._schema = schema
        self._schema_id = schema_id
        self._auto_register = auto_register
        self._normalize = normalize
        self._message = message
        self._writers: dict[str, _Writer] = {}
        self._lock = threading.Lock()
        # A given schema is parsed now: an invalid one fails here, not at the first record.
        self._own = _parsed(registry, schema) if schema is not None else None

    def __repr__(self) -> str:
        return f"<RegistrySerializer {self.record_format} subjects={sorted(self._writers)}>"

    def __call__(self, value: Any, ctx: SerializationContext) -> bytes | None:
        if value is None:
            return None
        writer = self._writer(subject_name(ctx))
        return frame(writer.schema_id, writer.message_indexes + self._encode(writer.parsed, value))

    def _writer(self, subject: str) -> _Writer:
        with self._lock:
            found = self._writers.get(subject)
        if found is not None:
            return found
        if self._schema is not None and self._own is not None:  # (the one implies the other)
            if self._auto_register:
                schema_id = self._registry.register(subject, self._schema, normalize=self._normalize)
            else:
                schema_id = self._registry.lookup(subject, self._schema, normalize=self._normalize).schema_id
            parsed = self._own
        elif self._schema_id is not None:
            schema_id, parsed = self._schema_id, self._checked(self._registry.schema(self._schema_id),
                                                               f"schema id {self._schema_id}")
        else:
            latest = self._registry.version(subject)
            schema_id, parsed = latest.schema_id, self._checked(latest.schema, f"{subject}'s latest version")
        writer = _Writer(schema_id, parsed, self._indexes(parsed))
        with self._lock:
            return self._writers.setdefault(subject, writer)

    def _checked(self, schema: Schema, what: str) -> ParsedSchema:
        if schema_type_of(schema.schema_type) != self.record_format.schema_type:
            raise KanalError(ErrorCode.INVALID_SCHEMA, f"{what} is a {schema.schema_type} schema, not "
                                                       f"{self.record_format.schema_type}")
        return _parsed(self._registry, schema)

    def _indexes(self, parsed: ParsedSchema) -> bytes:
        if not isinstance(parsed, ProtobufSchema):
            return b""
        names = parsed.message_names()
        if not names:
            raise KanalError(ErrorCode.INVALID_SCHEMA, "the Protobuf schema has no message to write")
        try:
            return frame_message_indexes(parsed.indexes_of(self._message or names[0]))
        except KeyError as exc:
            raise KanalError(ErrorCode.INVALID_SCHEMA, str(exc.args[0])) from None

    def _encode(self, parsed: ParsedSchema, value: Any) -> bytes:
        if isinstance(parsed, AvroSchema):
            schema = parsed.fastavro_schema
            return parsed.encode(avro_json.from_json(schema, value, avro_json.named_types(schema)))
        if isinstance(parsed, JsonSchema):
            try:
                parsed.validate(value)
                return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            except (InstanceInvalid, ValueError, TypeError) as exc:
                raise _invalid_record(f"not a value of the JSON schema: {exc}") from None
        if isinstance(parsed, ProtobufSchema):
            return _protobuf_encode(parsed, self._message, value)
        raise KanalError(ErrorCode.INVALID_SCHEMA, f"no encoder for {parsed!r}")


def _protobuf_encode(parsed: ProtobufSchema, message: str | None, value: Any) -> bytes:
    cls = parsed.message_class(parsed.indexes_of(message or parsed.message_names()[0]))
    if isinstance(value, Message):
        if value.DESCRIPTOR.full_name != cls.DESCRIPTOR.full_name:
            raise _invalid_record(f"a {value.DESCRIPTOR.full_name} message where the schema writes "
                                  f"{cls.DESCRIPTOR.full_name}")
        data: bytes = value.SerializeToString()
        return data
    try:
        data = json_format.ParseDict(value, cls()).SerializeToString()
    except (json_format.ParseError, TypeError, AttributeError) as exc:
        raise _invalid_record(f"not a {cls.DESCRIPTOR.full_name} in the proto3 JSON mapping: {exc}") from None
    return data


class RegistryDeserializer:
    """`(bytes | None, ctx) -> JSON value`: a framed record decoded with its schema (module docstring)."""

    def __init__(self, registry: SchemaRegistryClient, record_format_name: str | None = None, *,
                 parsed_cached_max: int = PARSED_CACHED_MAX_DEFAULT) -> None:
        self.record_format = record_format(record_format_name) if record_format_name else None
        self._registry = registry
        self._parsed: OrderedDict[int, ParsedSchema] = OrderedDict()
        self._parsed_max = parsed_cached_max
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<RegistryDeserializer {self.record_format or 'any format'} parsed={len(self._parsed)}>"

    def __call__(self, data: bytes | None, ctx: SerializationContext) -> Any:
        if data is None:
            return None
        schema_id, payload = unframe(data)
        parsed = self._schema(schema_id)
        if self.record_format is not None and parsed.schema_type != self.record_format.schema_type:
            raise _invalid_record(f"schema id {schema_id} is a {parsed.schema_type} schema, not "
                                  f"{self.record_format.schema_type}")
        if isinstance(parsed, AvroSchema):
            schema = parsed.fastavro_schema
            return avro_json.to_json(schema, parsed.decode(payload), avro_json.named_types(schema))
        if isinstance(parsed, JsonSchema):
            try:
                value = json.loads(bytes(payload))
                parsed.validate(value)
            except (InstanceInvalid, ValueError) as exc:
                raise _invalid_record(f"not a value of JSON schema id {schema_id}: {exc}") from None
            return value
        if isinstance(parsed, ProtobufSchema):
            indexes, body = unframe_message_indexes(payload)
            cls = parsed.message_class(indexes)
            try:
                message = cls.FromString(bytes(body))
            except DecodeError as exc:
                raise _invalid_record(f"not a {cls.DESCRIPTOR.full_name} (schema id {schema_id}): {exc}") \
                    from None
            return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                             unquote_int64_if_possible=True)
        raise KanalError(ErrorCode.INVALID_SCHEMA, f"no decoder for {parsed!r}")

    def _schema(self, schema_id: int) -> ParsedSchema:
        with self._lock:
            found = self._parsed.get(schema_id)
            if found is not None:
                self._parsed.move_to_end(schema_id)
                return found
        parsed = _parsed(self._registry, self._registry.schema(schema_id))
        with self._lock:
            self._parsed[schema_id] = parsed
            while len(self._parsed) > self._parsed_max:
                self._parsed.popitem(last=False)
        return parsed
