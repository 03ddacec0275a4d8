"""One entry to the formats: `parse_schema(schema_type, text, references)` picks the module of the type
(avro_schema.py, json_schema.py, protobuf_schema.py), each behind `schema_types.ParsedSchema`."""

from __future__ import annotations

from kanal.schemas.schema_types import ParsedSchema, ResolvedReferences, SchemaInvalid, SchemaType


def schema_type_of(name: str) -> SchemaType:
    """The registry's `schemaType` (empty: AVRO, as Confluent's API defaults); SchemaInvalid for another."""
    try:
        return SchemaType(name or SchemaType.AVRO)
    except ValueError:
        raise SchemaInvalid(f"unknown schema type {name!r}: one of {', '.join(SchemaType)}") from None


def parse_schema(schema_type: SchemaType, text: str, references: ResolvedReferences | None = None
                 ) -> ParsedSchema:
    """The schema parsed and checked; SchemaInvalid with what is wrong and where."""
    refs = references or {}
    # Imported here: each format pulls in its own library (avro, jsonschema, the protobuf compiler).
    if schema_type is SchemaType.AVRO:
        from kanal.schemas import avro_schema

        return avro_schema.parse(text, refs)
    if schema_type is SchemaType.JSON:
        from kanal.schemas import json_schema

        return json_schema.parse(text, refs)
    from kanal.schemas import protobuf_schema

    return protobuf_schema.parse(text, refs)
