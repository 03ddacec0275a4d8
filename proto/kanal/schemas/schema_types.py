"""The interface every schema format implements, and what the registry calls schemas.

A `ParsedSchema` is a schema text parsed and checked (an invalid one raises `SchemaInvalid`, the registry's
422 / 42201), with the schemas it references already resolved. Compatibility is asked of a reader and a
writer: `reader.incompatibilities(writer)` lists why data written with `writer` cannot be read with
`reader` (empty: it can). The compatibility levels (compatibility.py) are built on that one question.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from kanal.v1.error import ErrorCode, KanalError


class SchemaType(StrEnum):
    """The registry's `schemaType` names (an absent one is AVRO, as in Confluent's API)."""

    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's reference to another registered schema: the `name` it imports it by (an Avro full name,
    a JSON Schema `$ref` URL, a `.proto` import path), and the subject and version that hold it."""

    name: str
    subject: str
    version: int


class SchemaInvalid(KanalError):
    """The text is not a valid schema of its type (or a reference it needs is not given)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_SCHEMA, message)


class ParsedSchema(Protocol):
    @property
    def schema_type(self) -> SchemaType: ...

    def canonical(self) -> str:
        """The schema in its normalized form (`normalize=true` registration and lookup): equal for two
        texts that describe the same schema (whitespace, key order, defaults spelled out the same way)."""
        ...

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        """Why data written with `writer` cannot be read with this schema; [] when it can. A writer of
        another type is one incompatibility."""
        ...


# A reference's resolved text, by the name the referring schema uses for it (Reference.name). Resolved
# in dependency order by the registry before parsing; a format parses the referenced texts it needs.
ResolvedReferences = Mapping[str, str]
