"""Protobuf schemas as the registry keeps them: a `.proto` file compiled, normalized, compared, and turned
into message classes.

**Compiling** is protoc's, as `grpcio-tools` ships it, run as a child process (`python -P -m
grpc_tools.protoc --include_imports --descriptor_set_out=...`) over a private temporary directory that
holds the schema and its references; the FileDescriptorSet it writes is built into a DescriptorPool of the
schema's own (never the process's default pool). This is the package's one exception to "no I/O", kept to
this module's `_compile`: the directory is the call's own (`tempfile.TemporaryDirectory`, removed however
the call ends), so calls from several threads never share anything, and the child is bounded by
`PROTOC_TIMEOUT_S`. Why this way:

- protoc is the reference compiler: what it accepts (proto2, proto3, editions, options, imports) is what
  every Protobuf user's build accepts, and its errors (`schema.proto:3:17: "strin" is not defined.`) are
  the ones users know. No pure-Python `.proto` parser is installed here; PyPI's (proto-schema-parser)
  yields a syntax tree, not descriptors, so names, imports and options would still have to be resolved and
  checked by hand, a second compiler with its own bugs.
- A child process, not grpc_tools' in-process entry: `grpc_tools.protoc.main` writes its errors to the
  process's file descriptor 2 (so they could not be told apart from other threads' output, nor returned),
  and `_protoc_compiler.get_protos` is private and yields generated Python code, not descriptors. A compile
  costs a Python start-up (about 60 ms); the results are memoized (`COMPILED_CACHE_MAX` texts), so the
  registry's checks of a subject's versions compile each text once.
- Safe-path mode (`-P`: neither the working directory nor the schema's directory is on the child's module
  path) and reference names that must be relative `.proto` paths keep a schema's files from being taken
  for Python modules or written outside the directory.

**Descriptors as text**: the schema and any reference may also be a base64-encoded FileDescriptorProto
instead of `.proto` text, as Confluent's registry accepts: confluent-kafka's Python serializer registers
its schemas that way. Those are handed to protoc as compiled files (`--descriptor_set_in`), so they are
checked and resolved the same way; `serialized()` gives a schema back in that form (`format=serialized`).

**References** map an import path (`import "other.proto";`) to its text, as Reference.name says; the
well-known types (`google/protobuf/*.proto`) resolve from grpcio-tools' bundled copies without one (a
reference of that name, as older serializers register them, is used instead). The
main file is compiled as `schema.proto` (`schema1.proto`, ... when a reference has that name), the name
protoc's messages give it.

**Messages and indexes**: `message_names()` lists the file's messages by full name, each followed by its
nested ones (depth first, in declaration order), which is the order of Confluent's message indexes: `[i]`
is the i-th top-level message, `[i, j]` the j-th message nested in it. A map field's synthetic entry
message counts among the nested ones, as confluent-kafka's Python serializer counts them (it walks the
descriptor's `nested_types`), though it is not listed (no serializer writes one). Confluent's Java
serializer, reading the text's syntax tree, does not count them: the two disagree on a message nested
after a map field in the same message, and kanal's indexes are the Python client's.

**The normalized form** (`canonical()`, what `normalize=true` registers and looks up) is `.proto` text
printed from the compiled descriptor by protobuf_text.py (which says what it keeps and sorts): whitespace,
comments, option spellings, the order of fields, enums, services, imports and options, and names written
relative or absolute all print the same. The order of messages stays: it is what message indexes count.

**Compatibility** (`reader.incompatibilities(writer)`: can the reader parse the writer's data) follows
Confluent's Protobuf checker (C: the `diff` package of confluentinc/schema-registry's protobuf-provider,
read for its rules; its docs state only the levels and that adding a message type is not forward
compatible) and the wire-compatibility rules of Protobuf's language guide (G: "Updating A Message Type").
Messages, fields and oneofs are matched as C matches them: top-level and nested messages by name, fields by
number, oneofs by name. Where the two differ, the wire decides and the row says so.

| change (from the writer's schema to the reader's) | verdict | source |
|---|---|---|
| a field added or removed (not `required`) | compatible | C, G |
| a field renamed, its number kept | compatible | C, G: the wire carries numbers |
| a proto2 `required` field added or removed | incompatible | C; G: "required is forever" |
| a type within its wire group (1) | compatible | C, G |
| any other scalar type change (int32 -> sint32, float -> double, int32 -> string) | incompatible | C, G |
| a message in the writer, `bytes` in the reader | compatible | G (2) |
| `bytes` in the writer, a message in the reader | incompatible | C (2) |
| scalar <-> message, map <-> anything else, group <-> anything else | incompatible | C: wire types differ |
| a message-typed field to a message of another name | incompatible | C (3) |
| singular <-> repeated for string, bytes or a message | compatible | C, G |
| singular <-> repeated for a number, bool or enum | incompatible | G (4) |
| `optional` in the writer, `required` in the reader | incompatible | G: data without it fails to parse |
| `required` in the writer, `optional` in the reader | compatible | the wire (5) |
| proto3 implicit presence <-> `optional` | compatible | C: one wire format |
| a message added (in the reader only) | compatible | C |
| a message removed or renamed (in the writer only) | incompatible | C (6) |
| messages reordered or moved | compatible | C: indexes are read with the record's own schema |
| an enum or an enum value added, removed or renumbered | compatible | C: values read as numbers |
| the package changed | incompatible | C |
| the syntax changed (proto2, proto3, editions) | compatible (7) | G: one wire format |
| a oneof added or removed; a field added to the reader's oneof | compatible | C |
| a field of a writer's oneof missing from the reader's oneof of that name | incompatible | C (8) |
| a single field moved into a new oneof | compatible | C, G |
| several fields moved into one oneof of the reader | incompatible | C, G (9) |
| a field moved into a oneof that holds fields of a writer's oneof | incompatible | C, G (9) |
| a field moved out of a oneof | compatible | C |

1. The groups: int32, uint32, int64, uint64, bool and enums / sint32, sint64 / fixed32, sfixed32 /
   fixed64, sfixed64 / string, bytes (float and double are each their own).
2. G: an embedded message is compatible with bytes holding its encoding. Every encoded message is such
   bytes, so a `bytes` reader always reads a message writer's data: kanal's own verdict (C refuses any
   change of kind). The other way needs bytes that happen to hold the message, which no schema promises.
3. C compares the messages of one name in turn, so their own changes count as the field's.
4. G: "not generally safe for numeric types" (a repeated number may be packed, which a singular field
   does not parse). C refuses it only when both fields carry a label (proto2, proto3 `optional`): an
   unlabelled proto3 field has none to compare. kanal refuses it whatever the labels, as the wire does.
5. C refuses it for numbers (its label check does not tell the directions apart) and accepts it for
   strings; a reader that does not require a field parses data that has it, whatever its type.
6. So adding a message is not FORWARD compatible, as Confluent's docs say (their advice for Protobuf is
   BACKWARD_TRANSITIVE).
7. C has no syntax rule; each field is still compared by the rows above.
8. The writer's value of it reads as the oneof unset. C does not apply it when the whole oneof is gone.
9. G: moving several fields into a new oneof "may be safe if you are sure that no code sets more than one
   at a time"; moving fields into an existing oneof "is not safe". A writer may set both, the reader keeps
   one.

Not compared, as C does not compare them: field options and defaults, json names, reserved ranges,
extensions and services (they describe no field of a message's data).

Sources: https://docs.confluent.io/platform/current/schema-registry/fundamentals/schema-evolution.html,
https://protobuf.dev/programming-guides/proto3/#updating,
https://protobuf.dev/programming-guides/proto2/#updating.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from kanal.schemas import protobuf_text
from kanal.schemas.framing import FramingError
from kanal.schemas.schema_types import ParsedSchema, ResolvedReferences, SchemaInvalid, SchemaType

# protobuf ships no type information: its descriptor messages are `Any` to mypy. Named here for reading.
FileProto = Any  # descriptor_pb2.FileDescriptorProto
MessageProto = Any  # descriptor_pb2.DescriptorProto
FieldProto = Any  # descriptor_pb2.FieldDescriptorProto

MAIN_FILE = "schema.proto"  # the name the schema's own text is compiled under (protoc's messages say it)
PROTOC_TIMEOUT_S = 60  # a compile of any real schema takes well under a second
COMPILED_CACHE_MAX = 256  # compiled texts remembered (the FileDescriptorSet bytes of each)
_FIELD = descriptor_pb2.FieldDescriptorProto


def parse(text: str, references: ResolvedReferences | None = None) -> ProtobufSchema:
    """The schema compiled and checked; SchemaInvalid with protoc's message (file:line:column) when it is
    not a valid `.proto` file or imports a file that neither `references` nor the well-known types hold.
    The text and each reference may also be a base64-encoded FileDescriptorProto."""
    refs = dict(references or {})
    for name in refs:
        _check_import_path(name)
    main = _main_name(refs)
    compiled = _compile(main, text, tuple(sorted(refs.items())))
    files = list(descriptor_pb2.FileDescriptorSet.FromString(compiled).file)
    pool = descriptor_pool.DescriptorPool()
    for file in files:  # dependencies first: protoc writes the set in import order
        pool.Add(file)
    if not files or files[-1].name != main:
        raise RuntimeError(f"protoc's descriptor set does not end with {main}: {[f.name for f in files]}")
    return ProtobufSchema(text, files, pool)


def _check_import_path(name: str) -> None:
    """A reference name is written as a file under the compile's directory: only a relative path to a
    `.proto` file, with no `..`, may be one."""
    path = PurePosixPath(name)
    if (not name.endswith(".proto") or path.is_absolute() or "\\" in name or "\0" in name
            or any(part in ("", ".", "..") for part in name.split("/"))):
        raise SchemaInvalid(f"reference name {name!r} is not an import path: a relative path to a .proto "
                            f"file, without '..'")


def _main_name(references: ResolvedReferences) -> str:
    """MAIN_FILE, or (when a reference is called that) the first of schema1.proto, schema2.proto, ...
    that none is."""
    name, n = MAIN_FILE, 0
    while name in references:
        n += 1
        name = f"schema{n}.proto"
    return name


@lru_cache(maxsize=1)
def _protoc_available() -> None:
    """grpcio-tools is what compiles; without it, every schema would look invalid. Checked once."""
    if importlib.util.find_spec("grpc_tools") is None:
        raise RuntimeError("Protobuf schemas are compiled by grpcio-tools' protoc, which is not installed")


@lru_cache(maxsize=COMPILED_CACHE_MAX)
def _compile(main: str, text: str, references: tuple[tuple[str, str], ...]) -> bytes:
    """The FileDescriptorSet protoc writes for `text` (named `main`) and every file it imports. A pure
    function of its arguments, so memoized (lru_cache is thread-safe; an error is never cached)."""
    _protoc_available()
    with tempfile.TemporaryDirectory(prefix="kanal-protoc-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        compiled_in = descriptor_pb2.FileDescriptorSet()  # the files given as descriptors
        for name, body in (*references, (main, text)):
            descriptor = _descriptor_of(name, body)
            if descriptor is not None:
                compiled_in.file.append(descriptor)
                continue
            path = src / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
        out = Path(tmp) / "descriptor_set.pb"
        # grpc_tools' entry point adds its bundled include directory (the well-known types) after ours.
        argv = [sys.executable, "-P", "-m", "grpc_tools.protoc", f"--proto_path={src}", "--include_imports",
                f"--descriptor_set_out={out}"]
        if compiled_in.file:
            given = Path(tmp) / "descriptors_in.pb"
            given.write_bytes(compiled_in.SerializeToString())
            argv.append(f"--descriptor_set_in={given}")
        main_is_text = not any(f.name == main for f in compiled_in.file)
        argv.append(str(src / main) if main_is_text else main)  # a descriptor: by its name
        try:
            done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise SchemaInvalid(f"protoc did not compile the schema in {PROTOC_TIMEOUT_S} s") from None
        if done.returncode != 0:
            messages = [line.replace(f"{src}/", "") for line in done.stderr.splitlines()
                        if line.strip() and not _NOT_AN_ERROR.search(line)]
            raise SchemaInvalid("; ".join(messages) or f"protoc failed (exit {done.returncode})")
        return out.read_bytes()


# protoc's warnings, and the lines its logging library (absl) prints before and with its own warnings.
_NOT_AN_ERROR = re.compile(r": warning: |^WARNING: All log messages before|^[IWEF]\d{4} \d\d:\d\d:\d\d")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _descriptor_of(name: str, body: str) -> FileProto | None:
    """The file `body` holds when it is a base64-encoded FileDescriptorProto (what confluent-kafka's
    Protobuf serializer registers, and Confluent's registry accepts beside `.proto` text), named `name`;
    None for anything else, left to protoc as `.proto` text (which always holds a `;` or a `{`, outside
    base64's alphabet, so the two are never confused)."""
    compact = body.strip().replace("\r", "").replace("\n", "")  # base64 may come in lines, never spaced
    if not compact or len(compact) % 4 or not _BASE64.fullmatch(compact):
        return None
    try:
        descriptor = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(compact, validate=True))
    except (binascii.Error, DecodeError):
        raise SchemaInvalid(f"{name}: base64 that is not a FileDescriptorProto (nor .proto text)") from None
    descriptor.name = name  # what the files that import it call it (a serializer's own name may differ)
    descriptor.ClearField("source_code_info")
    return descriptor


@dataclass(frozen=True, slots=True)
class _Message:
    """A message of the main file, in message-index order."""

    full_name: str
    indexes: tuple[int, ...]
    proto: MessageProto
    is_map_entry: bool


def _is_map_entry(message: MessageProto) -> bool:
    return bool(message.options.map_entry)


def _walk(messages: Sequence[MessageProto], scope: str, prefix: tuple[int, ...]) -> Iterator[_Message]:
    for index, message in enumerate(messages):
        full_name = f"{scope}{message.name}"
        indexes = (*prefix, index)
        yield _Message(full_name, indexes, message, _is_map_entry(message))
        yield from _walk(message.nested_type, f"{full_name}.", indexes)


class ProtobufSchema:
    """A compiled `.proto` file: its text, its descriptors (and its references') in a pool of its own, and
    what the registry, serializers and compatibility checks ask of it. Immutable once built."""

    def __init__(self, text: str, files: list[FileProto], pool: descriptor_pool.DescriptorPool) -> None:
        self.text = text
        self.files: tuple[FileProto, ...] = tuple(files)  # imports first, the schema's own file last
        self.file: FileProto = files[-1]
        self.pool = pool

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType.PROTOBUF

    @property
    def package(self) -> str:
        return str(self.file.package)

    @property
    def syntax(self) -> str:
        """proto2, proto3 or editions (a file that does not say is proto2)."""
        return str(self.file.syntax or "proto2")

    def canonical(self) -> str:
        return self._canonical

    def serialized(self) -> str:
        """The file as a base64-encoded FileDescriptorProto: Confluent's `format=serialized`, what
        confluent-kafka's Protobuf deserializer fetches (it names the file by its reference name itself)."""
        return base64.standard_b64encode(self.file.SerializeToString()).decode("ascii")

    @cached_property
    def _canonical(self) -> str:
        return protobuf_text.render(self.file, self.pool)

    @cached_property
    def _messages(self) -> tuple[_Message, ...]:
        scope = f"{self.package}." if self.package else ""
        return tuple(_walk(self.file.message_type, scope, ()))

    def message_names(self) -> list[str]:
        """The file's messages by full name, in message-index order (map entries left out)."""
        return [m.full_name for m in self._messages if not m.is_map_entry]

    def indexes_of(self, full_name: str) -> list[int]:
        """The message indexes a serializer writes for the message `full_name`; KeyError if the file has
        no such message."""
        for message in self._messages:
            if message.full_name == full_name and not message.is_map_entry:
                return list(message.indexes)
        raise KeyError(f"no message {full_name!r} in the schema (its messages: {self.message_names()})")

    def message_class(self, indexes: list[int]) -> type[Message]:
        """The message class of the message `indexes` name (what a record's framing says it holds);
        FramingError when they name none."""
        wanted = tuple(indexes)
        for message in self._messages:
            if message.indexes == wanted:
                cls: type[Message] = message_factory.GetMessageClass(
                    self.pool.FindMessageTypeByName(message.full_name))
                return cls
        raise FramingError(f"message indexes {indexes} name no message of the schema")

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, ProtobufSchema):
            return [f"the writer's schema is {writer.schema_type}, not PROTOBUF"]
        return _Comparison(writer, self).run()

    def __repr__(self) -> str:
        return f"<ProtobufSchema {self.syntax} package={self.package or '-'} messages={self.message_names()}>"


# The scalar types by wire-compatible group (C's scalar kinds; G's "compatible" lists): a type may change
# into another of its group. Enums are numbers on the wire, read as int32 is.
_SCALAR_GROUPS = {
    _FIELD.TYPE_INT32: "varint", _FIELD.TYPE_INT64: "varint", _FIELD.TYPE_UINT32: "varint",
    _FIELD.TYPE_UINT64: "varint", _FIELD.TYPE_BOOL: "varint", _FIELD.TYPE_ENUM: "varint",
    _FIELD.TYPE_SINT32: "zigzag", _FIELD.TYPE_SINT64: "zigzag",
    _FIELD.TYPE_FIXED32: "fixed32", _FIELD.TYPE_SFIXED32: "fixed32",
    _FIELD.TYPE_FIXED64: "fixed64", _FIELD.TYPE_SFIXED64: "fixed64",
    _FIELD.TYPE_FLOAT: "float", _FIELD.TYPE_DOUBLE: "double",
    _FIELD.TYPE_STRING: "length-delimited", _FIELD.TYPE_BYTES: "length-delimited",
}
_LENGTH_DELIMITED = "length-delimited"


@dataclass(frozen=True, slots=True)
class _Definition:
    """A message of a schema's files, found by full name; `local_name` is its name within its package (C
    compares message types by it, so a package change alone does not change every field's type)."""

    proto: MessageProto
    local_name: str


def _definitions(files: Sequence[FileProto]) -> dict[str, _Definition]:
    out: dict[str, _Definition] = {}
    for file in files:
        package = str(file.package)
        scope = f"{package}." if package else ""
        for message in _walk(file.message_type, scope, ()):
            out[message.full_name] = _Definition(message.proto, message.full_name[len(scope):])
    return out


def _required(field: FieldProto) -> bool:
    if field.label == _FIELD.LABEL_REQUIRED:
        return True
    features = field.options.features
    return bool(field.options.HasField("features") and features.HasField("field_presence")
                and features.field_presence == descriptor_pb2.FeatureSet.LEGACY_REQUIRED)


def _repeated(field: FieldProto) -> bool:
    return bool(field.label == _FIELD.LABEL_REPEATED)


def _real_oneofs(message: MessageProto) -> dict[int, str]:
    """Field number -> the name of its oneof, for the oneofs written as such (a proto3 `optional` field's
    synthetic oneof is not one: C, reading the text, sees a plain field)."""
    return {f.number: str(message.oneof_decl[f.oneof_index].name) for f in message.field
            if f.HasField("oneof_index") and not f.proto3_optional}


class _Comparison:
    """One check of a reader against a writer: every reason the reader cannot parse the writer's data."""

    def __init__(self, writer: ProtobufSchema, reader: ProtobufSchema) -> None:
        self.writer, self.reader = writer, reader
        self.writer_definitions = _definitions(writer.files)
        self.reader_definitions = _definitions(reader.files)
        self.compared: set[tuple[str, str]] = set()  # message pairs already compared (types can recurse)
        self.out: list[str] = []

    def run(self) -> list[str]:
        if self.writer.package != self.reader.package:
            self.out.append(f"the package changed: {self.writer.package or '(none)'} in the writer's "
                            f"schema, {self.reader.package or '(none)'} in the reader's")
        self.messages(self.writer.file.message_type, self.reader.file.message_type,
                      _scope(self.writer.package), _scope(self.reader.package))
        return self.out

    def messages(self, writer: Sequence[MessageProto], reader: Sequence[MessageProto], writer_scope: str,
                 reader_scope: str) -> None:
        """Messages matched by name (map entries are their fields' business)."""
        readers = {str(m.name): m for m in reader if not _is_map_entry(m)}
        for message in writer:
            if _is_map_entry(message):
                continue
            name = str(message.name)
            if name not in readers:
                self.out.append(f"message {writer_scope}{name} is missing from the reader's schema (removed "
                                f"or renamed): data of it cannot be read")
            else:
                self.message(f"{writer_scope}{name}", f"{reader_scope}{name}", message, readers[name])

    def message(self, writer_name: str, reader_name: str, writer: MessageProto, reader: MessageProto) -> None:
        if (writer_name, reader_name) in self.compared:
            return
        self.compared.add((writer_name, reader_name))
        where = f"message {reader_name}"
        writer_fields = {int(f.number): f for f in writer.field}
        reader_fields = {int(f.number): f for f in reader.field}
        writer_oneofs, reader_oneofs = _real_oneofs(writer), _real_oneofs(reader)
        self.oneof_moves(where, writer_fields, writer_oneofs, reader_oneofs)
        reader_oneof_names = set(reader_oneofs.values())
        for number in sorted(writer_fields.keys() | reader_fields.keys()):
            old, new = writer_fields.get(number), reader_fields.get(number)
            if old is not None and new is not None:
                self.field(where, old, new)
            elif old is not None:
                self.missing(where, old, writer_oneofs.get(number), reader_oneof_names)
            elif new is not None and _required(new):
                self.out.append(f"{where}: required field {number} ({new.name}) is not in the writer's "
                                f"schema (a required field added): its data fails to parse")
        self.messages(writer.nested_type, reader.nested_type, f"{writer_name}.", f"{reader_name}.")

    def missing(self, where: str, old: FieldProto, oneof: str | None, reader_oneofs: set[str]) -> None:
        """A writer's field the reader does not have: ignored as an unknown field, unless it is required or
        a member of a oneof the reader keeps."""
        if _required(old):
            self.out.append(f"{where}: required field {old.number} ({old.name}) is missing from the reader "
                            f"(a required field removed)")
        elif oneof is not None and oneof in reader_oneofs:
            self.out.append(f"{where}: field {old.number} ({old.name}) of oneof {oneof} is missing from the "
                            f"reader's oneof of that name: its value reads as the oneof unset")

    def oneof_moves(self, where: str, writer_fields: dict[int, FieldProto], writer_oneofs: dict[int, str],
                    reader_oneofs: dict[int, str]) -> None:
        """Plain fields of the writer that became members of a reader's oneof (G: safe for one field into
        a new oneof only)."""
        for name in dict.fromkeys(reader_oneofs.values()):
            members = sorted(n for n, oneof in reader_oneofs.items() if oneof == name)
            moved = [n for n in members if n in writer_fields and n not in writer_oneofs]
            existing = [n for n in members if n in writer_oneofs]
            if len(moved) > 1:
                self.out.append(f"{where}: fields {', '.join(map(str, moved))} moved into oneof {name}: the "
                                f"writer may set more than one of them, the reader keeps only one")
            elif moved and existing:
                self.out.append(f"{where}: field {moved[0]} moved into oneof {name}, which holds fields of a "
                                f"writer's oneof: the writer may set both, the reader keeps only one")

    def field(self, where: str, old: FieldProto, new: FieldProto, at: str | None = None) -> None:
        """A field of both: `at` says where it is (by default: `where`, then its number and name)."""
        name = str(new.name) if new.name == old.name else f"{old.name}, now {new.name}"
        at = at or f"{where}, field {new.number} ({name})"
        if _required(new) and not _required(old):
            self.out.append(f"{at}: required in the reader, not in the writer: data without it fails to "
                            f"parse")
        old_kind, new_kind = self.kind(old, self.writer_definitions), self.kind(new, self.reader_definitions)
        if old_kind != new_kind:
            if not (old_kind == "message" and new.type == _FIELD.TYPE_BYTES):  # G: bytes hold the message
                self.out.append(f"{at}: {self.describe(old, self.writer_definitions)} in the writer, "
                                f"{self.describe(new, self.reader_definitions)} in the reader: not "
                                f"wire-compatible")
            return
        if old_kind == "scalar":
            self.scalar(at, old, new)
        elif old_kind == "map":
            old_entry = self.writer_definitions[_type_name(old)].proto
            new_entry = self.reader_definitions[_type_name(new)].proto
            for index, part in enumerate(("key", "value")):
                self.field(where, old_entry.field[index], new_entry.field[index], at=f"{at}, map {part}")
        else:  # a message or a group, whatever its labels (G: singular and repeated are compatible)
            old_type = self.writer_definitions[_type_name(old)]
            new_type = self.reader_definitions[_type_name(new)]
            if old_type.local_name != new_type.local_name:
                self.out.append(f"{at}: `{_type_name(old)}` in the writer, `{_type_name(new)}` in the "
                                f"reader: another message type")
            else:
                self.message(_type_name(old), _type_name(new), old_type.proto, new_type.proto)

    def scalar(self, at: str, old: FieldProto, new: FieldProto) -> None:
        group = _SCALAR_GROUPS[old.type]
        if group != _SCALAR_GROUPS[new.type]:
            self.out.append(f"{at}: {self.describe(old, self.writer_definitions)} in the writer, "
                            f"{self.describe(new, self.reader_definitions)} in the reader: not "
                            f"wire-compatible")
        elif _repeated(old) != _repeated(new) and group != _LENGTH_DELIMITED:
            self.out.append(f"{at}: {'repeated' if _repeated(old) else 'singular'} in the writer, "
                            f"{'repeated' if _repeated(new) else 'singular'} in the reader: a number's "
                            f"packed encoding is not read as a singular field")

    def kind(self, field: FieldProto, definitions: dict[str, _Definition]) -> str:
        if field.type == _FIELD.TYPE_GROUP:
            return "group"
        if field.type != _FIELD.TYPE_MESSAGE:
            return "scalar"
        is_map = _repeated(field) and _is_map_entry(definitions[_type_name(field)].proto)
        return "map" if is_map else "message"

    def describe(self, field: FieldProto, definitions: dict[str, _Definition]) -> str:
        """The field's type as written in a .proto file, quoted: `repeated int32`, `map<string, M>`."""
        kind = self.kind(field, definitions)
        if kind == "map":
            entry = definitions[_type_name(field)].proto
            key, value = (self.describe(f, definitions)[1:-1] for f in entry.field)
            return f"`map<{key}, {value}>`"
        label = "repeated " if _repeated(field) else ""
        if kind == "group":
            return f"`{label}group {_type_name(field)}`"
        if field.type in (_FIELD.TYPE_MESSAGE, _FIELD.TYPE_ENUM):
            return f"`{label}{_type_name(field)}`"
        return f"`{label}{protobuf_text.SCALAR_NAMES[field.type]}`"


def _scope(package: str) -> str:
    return f"{package}." if package else ""


def _type_name(field: FieldProto) -> str:
    """A field's message or enum type by full name (protoc writes it absolute: `.pkg.Name`)."""
    return str(field.type_name).lstrip(".")
