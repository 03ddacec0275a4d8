"""ValueDecoding: a column of registry-framed Avro bytes (Confluent's wire format: magic byte 0, the schema
id as 4 big-endian bytes, the datum) decoded into the typed column Spark's `from_avro` gives, as it does
with a schema registry: each record read with its writer's schema (by the id it carries) into one reader
schema (a subject's latest version, or an id), Avro's resolution filling defaults and dropping fields.

`AvroDecoding` is one side (key or value) as planned on the driver (schema_lookup.py) and pickled into
every task: the reader schema, the writers' schemas known then, by id, and the registry to ask for others
(None when the schemas came from the metadata log: an id not there is not registered). `SideDecoder` is
its per-task form, with schemas parsed once.

A record that does not decode is a record all the same (its offset, key, timestamp are right): in
PERMISSIVE mode its column is null and `<side>_error` says why (not framed, an id no schema has, a
schema of another type, a datum the schemas do not read, a reader that cannot read the writer); FAILFAST
raises RecordUndecodable. A null key or value (a tombstone) stays null with no error. `<side>_schema_id`
is the id the record carries (null when it carries none).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pyarrow as pa
from pyspark.sql.types import IntegerType, StringType, StructField

from kanal.schemas.avro_schema import AvroSchema, DatumInvalid, parse
from kanal.schemas.framing import FramingError, unframe
from kanal.schemas.schema_types import SchemaInvalid
from kanal.spark.avro_types import SparkShape, spark_shape
from kanal.spark.decoding_options import RegistryEndpoint
from kanal.spark.registry_client import RegistryClient
from kanal.v1.error import ErrorCode, KanalError


class RecordUndecodable(KanalError):
    """FAILFAST: a record's key or value that does not decode (where, and why)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_RECORD, message)


def id_column(side: str) -> str:
    return f"{side}_schema_id"


def error_column(side: str) -> str:
    return f"{side}_error"


@dataclass(frozen=True, slots=True)
class AvroDecoding:
    """One side's decoding, pinned when the read is planned (module docstring)."""

    side: str  # "key" or "value"
    reader_id: int
    reader_json: str  # the reader schema, standalone (its references inline)
    source: str  # where the reader came from, for messages: "subject orders-value version 2", "id 7"
    writers: Mapping[int, str] = field(default_factory=dict)  # id -> standalone Avro schema
    refused: Mapping[int, str] = field(default_factory=dict)  # id -> why it cannot be a writer here
    registry: RegistryEndpoint | None = None  # asked for ids in neither map; None: they are unknown

    def __repr__(self) -> str:
        return (f"<AvroDecoding {self.side} reader={self.reader_id} ({self.source}) "
                f"writers={len(self.writers)} registry={self.registry!r}>")

    def shape(self) -> SparkShape:
        return spark_shape(parse(self.reader_json).avro)

    def fields(self) -> list[StructField]:
        """The side's columns: the typed one, the schema id, the error."""
        return [StructField(self.side, self.shape().data_type, True),
                StructField(id_column(self.side), IntegerType(), True),
                StructField(error_column(self.side), StringType(), True)]


class SideDecoder:
    """One task's decoder of one side: schemas parsed once, writers fetched from the registry once each."""

    def __init__(self, decoding: AvroDecoding, arrow_type: pa.DataType | None) -> None:
        """`arrow_type`: the typed column's (None when the query wants only the ids and errors)."""
        self.decoding = decoding
        self.arrow_type = arrow_type
        self.reader = parse(decoding.reader_json)
        self.convert = spark_shape(self.reader.avro).convert
        self._writers: dict[int, AvroSchema | str] = {decoding.reader_id: self.reader}
        self._client = RegistryClient(decoding.registry) if decoding.registry is not None else None

    def __repr__(self) -> str:
        return f"<SideDecoder {self.decoding!r} parsed={len(self._writers)}>"

    def decode(self, data: list[bytes | None]) -> tuple[pa.Array | None, list[int | None], list[str | None]]:
        """The typed column (None without an arrow type), the ids and the errors of one batch's raw
        column (whose None is a null key or value, or a lost row)."""
        values: list[Any] = []
        ids: list[int | None] = []
        errors: list[str | None] = []
        for raw in data:
            if raw is None:
                values.append(None)
                ids.append(None)
                errors.append(None)
                continue
            schema_id, value, error = self.decode_one(raw)
            values.append(value)
            ids.append(schema_id)
            errors.append(error)
        typed = self._arrow(values, errors) if self.arrow_type is not None else None
        return typed, ids, errors

    def _arrow(self, values: list[Any], errors: list[str | None]) -> pa.Array:
        """The batch's values as one Arrow array; a value Arrow refuses (a decimal with more digits than its
        schema says, which Avro's encoding does not prevent) is that record's error, not the task's."""
        try:
            return pa.array(values, type=self.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
        for row, value in enumerate(values):
            try:
                pa.array([value], type=self.arrow_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                values[row] = None
                errors[row] = f"the decoded value does not fit the column's type {self.arrow_type}: {exc}"
        return pa.array(values, type=self.arrow_type)

    def decode_one(self, raw: bytes) -> tuple[int | None, Any, str | None]:
        """(the id the bytes carry, the value, None) or (the id or None, None, why not)."""
        try:
            schema_id, payload = unframe(raw)
        except FramingError as exc:
            return None, None, f"not framed by a schema registry: {exc.message}"
        writer = self._writer(schema_id)
        if isinstance(writer, str):
            return schema_id, None, writer
        try:
            datum = self._read(writer, payload)
        except DatumInvalid as exc:
            return schema_id, None, exc.message
        if datum is not None and self.convert is not None and self.arrow_type is not None:
            datum = self.convert(datum)
        return schema_id, datum, None

    def _writer(self, schema_id: int) -> AvroSchema | str:
        """The writer's schema for an id, or why there is none."""
        known = self._writers.get(schema_id)
        if known is not None:
            return known
        d = self.decoding
        found: AvroSchema | str
        if schema_id in d.writers:
            found = parse(d.writers[schema_id])
        elif schema_id in d.refused:
            found = f"schema id {schema_id}: {d.refused[schema_id]}"
        elif self._client is None:
            found = f"schema id {schema_id} is not registered (the metadata log holds no schema with it)"
        else:
            got = self._client.schema_by_id(schema_id)
            if got is None:
                found = f"schema id {schema_id} is not registered (the registry answers 404)"
            elif got.schema_type != "AVRO":
                found = f"schema id {schema_id} is a {got.schema_type} schema, not Avro"
            else:
                try:
                    found = self._client.avro(got)
                except SchemaInvalid as exc:
                    found = f"schema id {schema_id} does not parse: {exc.message}"
        self._writers[schema_id] = found
        return found

    def _read(self, writer: AvroSchema, payload: memoryview) -> Any:
        """The datum resolved into the reader schema, named types in unions as (name, value)
        (avro_types.py); DatumInvalid saying why when it does not read."""
        buffer = io.BytesIO(payload)
        reader_schema = None if writer is self.reader else self.reader.fastavro_schema
        try:
            datum = fastavro.schemaless_reader(buffer, writer.fastavro_schema, reader_schema,
                                               return_named_type=True)
        except (EOFError, ValueError, TypeError, IndexError, KeyError, OverflowError,
                fastavro.read.SchemaResolutionError) as exc:
            raise DatumInvalid(f"the datum does not read with writer schema {self._label(writer)} as "
                                f"{self.decoding.source}: {_describe(exc)}") from None
        extra = len(payload) - buffer.tell()
        if extra:  # a datum is the whole payload: bytes after it mean the id names another schema
            raise DatumInvalid(f"{extra} bytes after the datum written with {self._label(writer)}")
        return datum

    def _label(self, writer: AvroSchema) -> str:
        ids = [i for i, w in self._writers.items() if w is writer]
        return f"id {ids[0]}" if ids else repr(writer)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
