"""Key and value serializers for the Producer and Consumer: the context they are called with, their types,
and the errors a failing one becomes.

A serializer is `(obj, ctx) -> bytes | None`, a deserializer `(bytes | None, ctx) -> obj`, where `ctx` is a
`SerializationContext(topic, field, headers)` with `field` the string "key" or "value". That is the shape
of confluent-kafka's serializers (`confluent_kafka.schema_registry.avro.AvroSerializer`, its JSON and
Protobuf ones and their deserializers), so they plug into kanal's clients unchanged: they read
`ctx.topic`, compare `ctx.field` with their `MessageField.KEY` / `MessageField.VALUE` (str enums equal to
"key" / "value") to pick the subject `<topic>-key` or `<topic>-value`, and read (a header-writing
serializer appends to) `ctx.headers`, a list of (str, bytes | None) pairs.

Rules the clients keep (producer.py, consumer.py):

- A serializer is called for every record, None included (Kafka's and confluent-kafka's producers do
  too; the registry serializers return None for None, a tombstone). produce() calls it before anything
  else is checked, so its output is what the size limit and the partitioner see; produce_many() calls it
  for each record with `ctx.headers` None (its records carry no headers).
- A serializer's failure is raised by produce() as `RecordSerializationError`, with nothing queued.
- A deserializer's failure is raised by poll() as `RecordDeserializationError` (topic, partition, offset,
  field); the record is not skipped (see Consumer.poll for where the position stays).

Either error carries the failure's own code when it is a KanalError (a registry's SCHEMA_NOT_FOUND, an
INVALID_RECORD from kanal's serializers); for a failure that carries a Confluent registry `error_code`
(confluent-kafka's SchemaRegistryError: 409 for an incompatible schema, 40403 for an unknown id), the code
that error code stands for (schema_registry_client.CONFLUENT_CODES); else INVALID_RECORD. The original
exception is the `__cause__` (confluent-kafka's SerializationError or SchemaRegistryError, with its HTTP
status and error code).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kanal.clients.schema_registry_client import CONFLUENT_CODES
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import TopicPartition

KEY: Final = "key"  # SerializationContext.field for a key (confluent-kafka's MessageField.KEY)
VALUE: Final = "value"  # ... and for a value (MessageField.VALUE)

Headers = list[tuple[str, bytes | None]]


class SerializationContext:
    """What a (de)serializer is told about the record: its topic, which field ("key" or "value"), and its
    headers (a list a serializer may append to; None where the record can carry none)."""

    __slots__ = ("field", "headers", "topic")

    def __init__(self, topic: str, field: str, headers: Headers | None = None) -> None:
        self.topic = topic
        self.field = field
        self.headers = headers

    def __repr__(self) -> str:
        return f"<SerializationContext {self.topic} {self.field} headers={self.headers!r}>"


Serializer = Callable[[Any, SerializationContext], bytes | None]
Deserializer = Callable[[bytes | None, SerializationContext], Any]


def _code_of(cause: BaseException) -> int:
    if isinstance(cause, KanalError):
        return cause.code
    registry_code = getattr(cause, "error_code", None)  # confluent-kafka's SchemaRegistryError
    if isinstance(registry_code, int) and registry_code in CONFLUENT_CODES:
        return CONFLUENT_CODES[registry_code]
    return ErrorCode.INVALID_RECORD


def _reason(cause: BaseException) -> str:
    """A KanalError's message (its code is the new error's), else the exception's type and text."""
    return cause.message if isinstance(cause, KanalError) else f"{type(cause).__name__}: {cause}"


class RecordSerializationError(KanalError):
    """produce()'s serializer failed for `topic`'s `field`; nothing was queued."""

    def __init__(self, topic: str, field: str, cause: BaseException) -> None:
        super().__init__(_code_of(cause), f"{topic}: the {field} serializer failed: {_reason(cause)}")
        self.topic = topic
        self.field = field


class RecordDeserializationError(KanalError):
    """poll()'s deserializer failed on the record of `topic_partition` at `offset` (its `field`)."""

    def __init__(self, topic_partition: TopicPartition, offset: int, field: str,
                 cause: BaseException) -> None:
        topic, partition = topic_partition
        super().__init__(_code_of(cause), f"{topic}-{partition} offset {offset}: the {field} deserializer "
                                          f"failed: {_reason(cause)}")
        self.topic_partition = topic_partition
        self.offset = offset
        self.field = field
