"""SchemaLookup: where `kanal-log` finds the schemas it decodes with, on the driver when a read is planned.

From files (a path, no `schemaRegistry`): the metadata image replayed from the controllers' logs under the
path (metadata_files.py) holds the registry's whole state, and its reads are the registry's own functions
(kanal.metadata.schema_registry_reads: the REST API answers with them too), so no network is needed and
the answer is the registry's at the log's committed end. The reader schema is `get_version(subject,
latest)` (or `get_schema(id)`), and every schema `get_schema` serves is a writer: the Avro ones as
standalone texts, the others as why they cannot be (a Protobuf id in an Avro topic). An id no version holds
(unknown, or every holder hard-deleted) is not served, as at the REST API: its records do not decode.

With `schemaRegistry` (and always through `bootstrap`): the reader schema from the registry's REST API
(registry_client.py), and writers fetched by each task as it meets their ids.
"""

from __future__ import annotations

from pathlib import Path

from kanal.metadata import MetadataImage
from kanal.metadata.image import SchemaId
from kanal.metadata.schema_registry_reads import get_schema, get_version
from kanal.metadata.schema_registry_rules import LATEST_VERSION, parse_stored
from kanal.schemas.avro_schema import AvroSchema
from kanal.schemas.formats import parse_schema
from kanal.schemas.schema_types import SchemaInvalid, SchemaType
from kanal.spark.decoding_options import DecodingOptions, SideOptions
from kanal.spark.metadata_files import image_from_files
from kanal.spark.registry_client import RegistryClient
from kanal.spark.value_decoding import AvroDecoding
from kanal.v1 import schema_registry_pb2 as pb


def plan_decodings(decoding: DecodingOptions, topics: frozenset[str] | None, path: str,
                   image: MetadataImage | None = None, *, writers: bool = True,
                   sides: tuple[str, ...] | None = None) -> dict[str, AvroDecoding]:
    """The AvroDecoding of each decoded side (of `sides` only, when given); with `writers` False only the
    reader schemas (what the table's types need). `image`: the metadata image of `path` when the caller
    has it already. ValueError when a reader schema cannot be had (the message says what to give)."""
    wanted = [s for s in decoding.sides if sides is None or s.side in sides]
    if decoding.registry is not None:
        client = RegistryClient(decoding.registry)
        return {s.side: _from_registry(client, s, topics) for s in wanted}
    if image is None:
        image, _note = image_from_files(Path(path))
    if image is None:
        raise ValueError(f"no metadata log under {path} to take schemas from: give schemaRegistry=URL")
    known = _image_writers(image) if writers else ({}, {})
    return {s.side: _from_image(image, s, topics, known) for s in wanted}


def _from_image(image: MetadataImage, side: SideOptions, topics: frozenset[str] | None,
                known: tuple[dict[int, str], dict[int, str]]) -> AvroDecoding:
    if side.schema_id:
        got = get_schema(image, pb.GetSchemaRequest(id=side.schema_id))
        if got.error:
            raise ValueError(f"{side.side}SchemaId {side.schema_id}: {got.error_message} in the metadata log")
        schema_id, source = got.schema.id, f"schema id {side.schema_id}"
    else:
        subject = side.subject_for(topics)
        found = get_version(image, pb.GetVersionRequest(subject=subject, version=LATEST_VERSION))
        if found.error:
            raise ValueError(f"no reader schema for {side.side}Format=avro: {found.error_message} in the "
                             f"metadata log (register one, or give {side.side}Subject or "
                             f"{side.side}SchemaId)")
        schema_id = found.version.schema.id
        source = f"subject {subject} version {found.version.version}"
    try:
        reader = _image_avro(image, schema_id)
    except NotAvro as exc:
        raise ValueError(f"the reader schema ({source}): {exc}") from None
    writers, refused = known
    return AvroDecoding(side.side, schema_id, reader.inline_json(), source, writers, refused)


def _image_writers(image: MetadataImage) -> tuple[dict[int, str], dict[int, str]]:
    """Every schema the registry serves, by id: Avro ones as standalone texts, the others' reasons."""
    writers: dict[int, str] = {}
    refused: dict[int, str] = {}
    for schema_id in image.schemas:
        if not image.schema_holders.get(schema_id):
            continue  # served by no read: as unknown as an id never given
        try:
            writers[schema_id] = _image_avro(image, schema_id).inline_json()
        except NotAvro as exc:
            refused[schema_id] = str(exc)
    return writers, refused


class NotAvro(ValueError):
    """A registered schema that cannot decode Avro data (another type; one that no longer parses)."""


def _image_avro(image: MetadataImage, schema_id: int) -> AvroSchema:
    stored = image.schemas[SchemaId(schema_id)]
    if stored.schema_type != SchemaType.AVRO:
        raise NotAvro(f"a {stored.schema_type} schema, not Avro")
    try:
        parsed = parse_stored(image, stored, parse_schema)
    except SchemaInvalid as exc:
        raise NotAvro(exc.message) from None
    if isinstance(parsed, AvroSchema):
        return parsed
    raise TypeError(f"parse_schema gave {type(parsed).__name__} for an AVRO schema")


def _from_registry(client: RegistryClient, side: SideOptions, topics: frozenset[str] | None) -> AvroDecoding:
    where = client.endpoint.urls[0]
    if side.schema_id:
        got = client.schema_by_id(side.schema_id)
        source = f"schema id {side.schema_id}"
        if got is None:
            raise ValueError(f"{side.side}SchemaId {side.schema_id}: the registry at {where} has no such "
                             f"schema")
    else:
        subject = side.subject_for(topics)
        got = client.version(subject)
        if got is None:
            raise ValueError(f"no reader schema for {side.side}Format=avro: the registry at {where} has no "
                             f"subject {subject!r} (register one, or give {side.side}Subject or "
                             f"{side.side}SchemaId)")
        source = f"subject {subject} latest version (id {got.schema_id})"
    if got.schema_type != SchemaType.AVRO:
        raise ValueError(f"the reader schema ({source}) is a {got.schema_type} schema, not Avro")
    try:
        reader = client.avro(got)
    except SchemaInvalid as exc:
        raise ValueError(f"the reader schema ({source}) does not parse: {exc.message}") from None
    return AvroDecoding(side.side, got.schema_id, reader.inline_json(), source, registry=client.endpoint)
