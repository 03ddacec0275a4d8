"""One entry to the formats: `parse_schema(schema_type, text, references)` picks the module of the type
(avro_schema.py, json_schema.py, protobuf_schema.py), each behind `schema_types.ParsedSchema`."""

from __future__ import annotations

import importlib
from typing import cast

from kanal.schemas.schema_types import ParsedSchema, ResolvedReferences, SchemaInvalid, SchemaType

# The module that parses each type, imported on first use: each pulls in its own library (avro, jsonschema,
# the protobuf compiler), which a caller of one format need not load.
_MODULES = {
    SchemaType.AVRO: "kanal.schemas.avro_schema",
    SchemaType.JSON: "kanal.schemas.json_schema",
    SchemaType.PROTOBUF: "kanal.schemas.protobuf_schema",
}


def schema_type_of(name: str) -> SchemaType:
    """The registry's `schemaType` (empty: AVRO, as Confluent's API defaults); SchemaInvalid for another."""
    try:
        return SchemaType(name or SchemaType.AVRO)
    except ValueError:
        raise SchemaInvalid(f"unknown schema type {name!r}: one of {', '.join(SchemaType)}") from None


def parse_schema(schema_type: SchemaType, text: str, references: ResolvedReferences | None = None
                 ) -> ParsedSchema:
    """The schema parsed and checked; SchemaInvalid with what is wrong and where."""
    # By name, not `from kanal.schemas import json_schema`: the three modules land one at a time, and a
    # module's `parse(text, references)` is the whole interface this needs.
    module = importlib.import_module(_MODULES[schema_type])
    return cast(ParsedSchema, module.parse(text, references or {}))
