"""Avro schemas as the registry keeps them: parsed and checked, normalized, compared, and used to encode.

Parsing and compatibility are Apache's `avro` package's (what Karapace uses; Confluent's registry runs the
Java original of the same checker); encoding is fastavro's (what confluent-kafka's serializers use).

Rules kept here, beyond what `avro.schema.parse` checks:

- **References**: each referenced text (name -> text) defines named types (records, enums, fixed) that the
  schema and the other references may use by full name. They are parsed first, in whatever order lets
  each find the names it uses, so the mapping may come in any order.
- **Defaults are checked** (as Confluent's parser does; `avro` does not): a field's default must be a
  value of the field's type, as the Avro specification's JSON encoding of defaults says. A union's default
  may match any branch: the Avro 1.12 specification's rule (earlier versions required the first branch).
- **The normalized form** (`canonical()`, what `normalize=true` registers and looks up) is the schema as
  JSON with sorted keys and no whitespace, names written as full names (a namespace inherited or spelled
  out gives the same text), a primitive with no other attribute written as its name ("int", never
  {"type": "int"}), a field's "ascending" order (the default) left out, and aliases of named types made
  full names and sorted. Everything that can change how data is read or written stays: defaults, aliases,
  logical types and their attributes, field order, union branch order, enum symbol order, sort orders, and
  custom attributes. Avro's Parsing Canonical Form is not used: it drops defaults and aliases, which decide
  compatibility, so two schemas it merges may have different verdicts. Docs are kept, as Confluent keeps
  them: a registration that changes only the documentation is a new text the user meant to record, and a
  lookup of it must not answer with the old doc. Defaults are kept as written (1 and 1.0 for a double stay
  two texts: a normalization that might merge two different schemas is worse than one that keeps two equal
  ones apart).
- **Compatibility** is Avro's schema resolution: a reader can read a writer's data when the checker of
  `avro.compatibility` says so (the verdict is always its own). Each reason names where it is, as a path
  from the reader's top type through field names (`com.acme.User/address/zip`).
- **Data**: `encode` writes a datum as the schemaless binary Confluent's serializers put after the 5-byte
  header (framing.py); `decode` reads it back, `decode_with` resolves a writer's data into this schema.
  A datum that does not fit, or bytes that are not exactly one encoded datum, raise DatumInvalid.
"""

from __future__ import annotations

import io
import json
import re
import sys
import warnings
from functools import cached_property
from types import MappingProxyType
from typing import Any

import fastavro
import fastavro.validation
from avro.compatibility import (
    ReaderWriterCompatibilityChecker,
    SchemaCompatibilityResult,
    SchemaCompatibilityType,
    lookup_writer_field,
    schema_name_equals,
)
from avro.errors import AvroException, IgnoredLogicalType
from avro.name import Names
from avro.schema import (
    ArraySchema,
    EnumSchema,
    Field,
    FixedSchema,
    MapSchema,
    NamedSchema,
    RecordSchema,
    Schema,
    UnionSchema,
    make_avsc_object,
)

from kanal.schemas.schema_types import ParsedSchema, ResolvedReferences, SchemaInvalid, SchemaType
from kanal.v1.error import ErrorCode, KanalError

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
BYTE_CODE_POINT_MAX = 255  # bytes and fixed defaults are strings whose code points are the bytes


class DatumInvalid(KanalError):
    """A datum that is not a value of the schema (encode), or bytes that are not one encoded datum
    (decode)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_RECORD, message)


NO_REFERENCES: ResolvedReferences = MappingProxyType({})


def parse(text: str, references: ResolvedReferences = NO_REFERENCES) -> AvroSchema:
    """The Avro schema `text`, using the named types its `references` define; SchemaInvalid when it is not
    one (invalid JSON or schema, an unknown type, a bad default), saying what and where."""
    names = _reference_names(references)
    referenced = frozenset(names.names)
    return AvroSchema(_parse_into(text, names, referenced), referenced)


class AvroSchema:
    """A parsed, checked Avro schema (see the module docstring for its rules); made by `parse`."""

    def __init__(self, schema: Schema, referenced: frozenset[str]) -> None:
        self.avro = schema  # the `avro` package's form, named types of references included
        self._referenced = referenced  # full names of the named types that references define

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType.AVRO

    def __repr__(self) -> str:
        return f"<AvroSchema {_label(self.avro)}>"

    def canonical(self) -> str:
        return _dumps(_to_json(self.avro, set(self._referenced)))

    def inline_json(self) -> str:
        """The schema with its references' named types defined inline, where first used: a standalone
        schema (what fastavro parses, and Spark's `from_avro` takes)."""
        return _dumps(_to_json(self.avro, set()))

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, AvroSchema):
            return [f"the writer is a {writer.schema_type} schema: an Avro schema reads Avro data only"]
        # The checker's __init__ is not annotated; the object it makes is.
        checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
        try:
            verdict = checker.get_compatibility(self.avro, writer.avro)
            if verdict.compatibility is not SchemaCompatibilityType.incompatible:
                return []
            found = _explain(checker, self.avro, writer.avro, _label(self.avro), set())
            return found or _reasons(verdict, "")
        except AvroException as exc:  # a type the checker does not know (a protocol's "error"): refuse
            return [f"the schemas cannot be compared: {exc}"]

    @cached_property
    def fastavro_schema(self) -> Any:
        """fastavro's parsed form, named types of references included (made when first needed, so that a
        registration never depends on fastavro's own, slightly different, schema checks)."""
        return fastavro.parse_schema(json.loads(self.inline_json()))

    def encode(self, datum: object) -> bytes:
        try:
            # fastavro's writer does not check ranges (an int field takes 2**40): its validator does.
            fastavro.validation.validate(datum, self.fastavro_schema, raise_errors=True)
            out = io.BytesIO()
            fastavro.schemaless_writer(out, self.fastavro_schema, datum)
        except (fastavro.validation.ValidationError, ValueError, TypeError, AttributeError) as exc:
            raise DatumInvalid(f"not a value of {_label(self.avro)}: {exc}") from None
        return out.getvalue()

    def decode(self, data: bytes | memoryview) -> object:
        return self.decode_with(self, data)

    def decode_with(self, writer: AvroSchema, data: bytes | memoryview) -> object:
        """`data` written with `writer`, read as this schema (Avro's resolution: defaults fill fields the
        writer lacks, its extra fields are skipped, ints widen)."""
        buffer = io.BytesIO(data)
        try:
            datum = fastavro.schemaless_reader(buffer, writer.fastavro_schema,
                                               None if writer is self else self.fastavro_schema)
        except (EOFError, ValueError, TypeError, IndexError, KeyError, fastavro.read.SchemaResolutionError) \
                as exc:
            raise DatumInvalid(f"not a {_label(writer.avro)} datum read as {_label(self.avro)}: "
                               f"{type(exc).__name__} {exc}") from None
        # A datum is the whole payload: bytes after it mean the writer's schema is not this id's.
        read_bytes = buffer.tell()
        total_bytes = buffer.seek(0, io.SEEK_END)
        if read_bytes != total_bytes:
            raise DatumInvalid(f"{total_bytes - read_bytes} bytes after a {_label(writer.avro)} datum")
        return datum


# mypy checks AvroSchema against the interface here.
_PARSED: type[ParsedSchema] = AvroSchema


# -- parsing -----------------------------------------------------------------------------------------------


def _reference_names(references: ResolvedReferences) -> Names:
    """The named types the references define. A reference may use the names of others, so each is tried
    until all parse or a whole round makes no progress (then the first failing one is the error)."""
    names = Names()
    pending = dict(references)
    while pending:
        before = len(pending)
        failures: dict[str, SchemaInvalid] = {}
        for name, text in list(pending.items()):
            trial = _copy(names)  # a failed parse leaves the names it added half-made
            try:
                _parse_into(text, trial, frozenset(names.names))
            except SchemaInvalid as exc:
                failures[name] = exc
                continue
            names = trial
            del pending[name]
        if len(pending) == before:  # none parsed this round: none ever will
            name = next(iter(failures))
            raise SchemaInvalid(f"reference {name!r}: {failures[name].message}")
    return names


def _copy(names: Names) -> Names:
    out = Names()
    out.names = dict(names.names)
    return out


def _parse_into(text: str, names: Names, known: frozenset[str]) -> Schema:
    """`text` parsed with (and adding to) `names`; `known`: the named types already checked."""
    try:
        return _parse_nested(text, names, known)
    except RecursionError:  # JSON nested deeper than the parsers' recursion goes: refused, not a crash
        raise SchemaInvalid(f"nested deeper than {sys.getrecursionlimit()} levels") from None


def _parse_nested(text: str, names: Names, known: frozenset[str]) -> Schema:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise SchemaInvalid(f"not JSON: {exc}") from None
    try:
        with warnings.catch_warnings():
            # An invalid logical type is ignored (the underlying type stays), as Java's parser does. (The
            # filter is process-wide while it is set: at worst another thread's warning is hidden.)
            warnings.simplefilter("ignore", IgnoredLogicalType)
            if isinstance(data, str) and names.has_name(data):  # the whole schema is a referenced type
                schema: Schema | None = names.get_name(data)
            else:
                schema = make_avsc_object(data, names)
    # avro's parser assumes well-formed JSON shapes: a wrong one (a number for a name) raises what Python
    # raises, and untrusted input must be a 422, never a crash.
    except (AvroException, TypeError, ValueError, AttributeError, KeyError) as exc:
        raise SchemaInvalid(_parse_error(data, str(exc))) from None
    if schema is None:
        raise SchemaInvalid(f"unknown type {data!r}")
    _settle(schema, set(known))
    return schema


_UNKNOWN_TYPE = re.compile(r"Could not make an Avro Schema object from ([\w.]+)")
_NOT_TYPES = frozenset({"name", "namespace", "doc", "aliases", "symbols", "default"})


def _parse_error(data: object, message: str) -> str:
    unknown = _UNKNOWN_TYPE.findall(message)
    where = _where(data, unknown[-1], "") if unknown else None  # the innermost one failed first
    if where is None:
        return f"invalid Avro schema: {message}"
    return (f"unknown type {unknown[-1]!r} at {where}: neither a primitive type nor a named type defined "
            f"before it or by a reference")


def _where(data: object, name: str, path: str) -> str | None:
    """The JSON pointer of the first place `data` uses `name` as a type."""
    if data == name:
        return path or "/"
    if isinstance(data, dict):
        items: list[tuple[object, object]] = [(k, v) for k, v in data.items() if k not in _NOT_TYPES]
    elif isinstance(data, list):
        items = list(enumerate(data))
    else:
        return None
    for key, value in items:
        found = _where(value, name, f"{path}/{key}")
        if found is not None:
            return found
    return None


def _settle(schema: Schema, done: set[str]) -> None:
    """Check every field's default, and make named types' aliases full names (Java's checker compares
    aliases with the writer's full name; `avro`'s compares them as written)."""
    if isinstance(schema, NamedSchema):
        if schema.fullname in done:
            return
        done.add(schema.fullname)
        aliases = schema.get_prop("aliases")
        if isinstance(aliases, list):
            schema.set_prop("aliases", [_full_name(a, schema.namespace) for a in aliases])
    if isinstance(schema, RecordSchema):
        for field in _fields(schema):
            if field.has_default and not _fits(field.type, field.default):
                raise SchemaInvalid(f"field {schema.fullname}.{field.name}: the default "
                                    f"{json.dumps(field.default)} is not a value of its type "
                                    f"{_dumps(_to_json(field.type, set()))}")
            _settle(field.type, done)
    for child in _children(schema):
        _settle(child, done)


def _full_name(name: object, namespace: object) -> object:
    if isinstance(name, str) and "." not in name and isinstance(namespace, str) and namespace:
        return f"{namespace}.{name}"
    return name


def _fits(schema: Schema, value: object) -> bool:
    """Whether the JSON `value` is a value of `schema` (the specification's encoding of defaults)."""
    kind = schema.type
    if isinstance(schema, UnionSchema):
        return any(_fits(branch, value) for branch in schema.schemas)
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("int", "long"):
        low, high = (INT_MIN, INT_MAX) if kind == "int" else (LONG_MIN, LONG_MAX)
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if kind in ("float", "double"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind in ("bytes", "fixed"):
        return (isinstance(value, str) and all(ord(c) <= BYTE_CODE_POINT_MAX for c in value)
                and (not isinstance(schema, FixedSchema) or len(value) == schema.size))
    if isinstance(schema, EnumSchema):
        return value in schema.symbols
    if isinstance(schema, ArraySchema):
        return isinstance(value, list) and all(_fits(schema.items, v) for v in value)
    if isinstance(schema, MapSchema):
        return isinstance(value, dict) and all(_fits(schema.values, v) for v in value.values())
    if isinstance(schema, RecordSchema):
        return isinstance(value, dict) and all(
            _fits(f.type, value[f.name]) if f.name in value else f.has_default for f in _fields(schema))
    return False


# -- the JSON forms ----------------------------------------------------------------------------------------


def _to_json(schema: Schema, defined: set[str]) -> object:
    """`schema` as plain JSON with full names; a named type in `defined` is written as its name, any other
    is defined where first met (and added to `defined`)."""
    if isinstance(schema, UnionSchema):
        return [_to_json(branch, defined) for branch in schema.schemas]
    if isinstance(schema, NamedSchema):
        if schema.fullname in defined:
            return schema.fullname
        defined.add(schema.fullname)
    out: dict[str, object] = {}
    for key, value in schema.props.items():
        if key == "namespace":
            continue  # in the full name
        if key == "name":
            out[key] = schema.fullname if isinstance(schema, NamedSchema) else value
        elif key == "aliases" and isinstance(value, list):
            out[key] = sorted(value, key=str)
        elif key == "fields" and isinstance(schema, RecordSchema):
            out[key] = [_field_json(field, defined) for field in _fields(schema)]
        elif key in ("items", "values") and isinstance(value, Schema):
            out[key] = _to_json(value, defined)
        else:
            out[key] = value
    return out["type"] if out.keys() == {"type"} else out


def _field_json(field: Field, defined: set[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in field.props.items():
        if key == "type":
            out[key] = _to_json(field.type, defined)
        elif key == "order" and value == "ascending":
            continue  # the default order
        elif key == "aliases" and isinstance(value, list):
            out[key] = sorted(value, key=str)
        else:
            out[key] = value
    return out


def _dumps(data: object) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


# -- compatibility -----------------------------------------------------------------------------------------


def _explain(checker: ReaderWriterCompatibilityChecker, reader: Schema, writer: Schema, path: str,
             seen: set[tuple[int, int]]) -> list[str]:
    """Why `reader` cannot read `writer`, by place: the checker's verdict for each pair, followed down
    through record fields, union branches, array items and map values to the pairs that fail themselves.
    `seen` stops recursive types."""
    verdict = checker.get_compatibility(reader, writer)
    pair = (id(reader), id(writer))
    if verdict.compatibility is not SchemaCompatibilityType.incompatible or pair in seen:
        return []
    seen.add(pair)
    if isinstance(writer, UnionSchema):  # each branch the writer may write must be readable
        return [why for branch in writer.schemas for why in _explain(checker, reader, branch, path, seen)]
    if isinstance(reader, RecordSchema) and isinstance(writer, RecordSchema):
        out = [] if schema_name_equals(reader, writer) else [(
            f"{path}: the reader's record {reader.fullname} is not the writer's {writer.fullname}, "
            f"nor has it as an alias")]
        for field in _fields(reader):
            found = lookup_writer_field(writer, field)
            if found is not None:
                out += _explain(checker, field.type, found.type, f"{path}/{field.name}", seen)
            elif not field.has_default:
                out.append(f"{path}/{field.name}: the reader's field has no default and the writer has no "
                           f"field of that name or alias")
        return out or _reasons(verdict, path)
    if isinstance(reader, ArraySchema) and isinstance(writer, ArraySchema):
        return _explain(checker, reader.items, writer.items, f"{path}/items", seen) or _reasons(verdict, path)
    if isinstance(reader, MapSchema) and isinstance(writer, MapSchema):
        return _explain(checker, reader.values, writer.values, f"{path}/values", seen) \
            or _reasons(verdict, path)
    return _reasons(verdict, path)


def _reasons(verdict: SchemaCompatibilityResult, path: str) -> list[str]:
    """The checker's own words for a pair that fails by itself (its kinds and messages are sets, unpaired,
    so they are given together)."""
    kinds = ", ".join(sorted({kind.value.replace("_", " ") for kind in verdict.incompatibilities}))
    return [f"{path or '/'}: {kinds}: {'; '.join(sorted(verdict.messages))}"]


# -- the untyped corners of `avro`, typed ------------------------------------------------------------------


def _fields(record: RecordSchema) -> list[Field]:
    fields: list[Field] = record.fields
    return fields


def _children(schema: Schema) -> list[Schema]:
    """The schemas directly inside `schema` other than record fields."""
    if isinstance(schema, UnionSchema):
        branches: list[Schema] = schema.schemas
        return branches
    if isinstance(schema, ArraySchema):
        return [schema.items]
    if isinstance(schema, MapSchema):
        return [schema.values]
    return []


def _label(schema: Schema) -> str:
    return str(schema.fullname) if isinstance(schema, NamedSchema) else str(schema.type)
