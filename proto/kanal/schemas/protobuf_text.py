"""The normalized `.proto` text of a compiled file: what `ProtobufSchema.canonical()` returns, and what
`normalize=true` registers (so it is itself a valid `.proto` file, which compiles to the same schema and
prints the same text again).

It is printed from the FileDescriptorProto protoc wrote, so whatever protoc already resolves prints one
way: whitespace, comments, `;` and quoting; type names (always absolute: `.pkg.Message`); an option
written `[packed = true]` or `option` in a block, by its short or parenthesized name; a map or a group
(printed back as such). On top of that:

| what | printed as |
|---|---|
| `syntax` | always written (`"proto2"` for a file that does not say), or `edition = "..."` |
| imports | sorted by path (`public` and `weak` kept) |
| options of any element | sorted by name (a repeated one's values in their order) (1) |
| `json_name` | only when it differs from the name's default (protoc records it always) |
| fields | by number, then the oneofs by their first number, each oneof's fields by number |
| messages, top-level and nested | in their order: it is what message indexes count (2) |
| enums | by name; the first value first (the proto3 zero, the proto2 default), the rest by number |
| reserved numbers and names, extension ranges | sorted, one statement per kind |
| `extend` blocks | after the enums, by extended message, their fields by number |
| services | by name, their methods by name |

1. An option set to what it means when absent is left out: `deprecated = false`, `packed` when the syntax
   packs (proto3) or does not (proto2) anyway.
2. A map field or a group is printed where its entry or group message stands among the nested messages
   (a oneof with groups where its first group's does), so every nested message keeps its index.

Message order is the one thing the brief's "ordering of top-level definitions" cannot cover: two files
that declare their messages in another order have different message indexes, so data framed against one
would decode as the wrong message with the other. Confluent's normalization keeps message order for the
same reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

FileProto = Any  # descriptor_pb2.FileDescriptorProto (protobuf ships no type information)
MessageProto = Any  # descriptor_pb2.DescriptorProto
FieldProto = Any  # descriptor_pb2.FieldDescriptorProto

_FIELD = descriptor_pb2.FieldDescriptorProto
SCALAR_NAMES: dict[int, str] = {
    _FIELD.TYPE_DOUBLE: "double", _FIELD.TYPE_FLOAT: "float", _FIELD.TYPE_INT64: "int64",
    _FIELD.TYPE_UINT64: "uint64", _FIELD.TYPE_INT32: "int32", _FIELD.TYPE_FIXED64: "fixed64",
    _FIELD.TYPE_FIXED32: "fixed32", _FIELD.TYPE_BOOL: "bool", _FIELD.TYPE_STRING: "string",
    _FIELD.TYPE_BYTES: "bytes", _FIELD.TYPE_UINT32: "uint32", _FIELD.TYPE_SFIXED32: "sfixed32",
    _FIELD.TYPE_SFIXED64: "sfixed64", _FIELD.TYPE_SINT32: "sint32", _FIELD.TYPE_SINT64: "sint64",
}
FIELD_NUMBER_MAX = 536_870_911  # `max` in a message's reserved or extension range
ENUM_NUMBER_MAX = 2_147_483_647  # `max` in an enum's reserved range
_INDENT = "  "


def render(file: FileProto, pool: descriptor_pool.DescriptorPool) -> str:
    """`file` (compiled into `pool` with its imports) as normalized `.proto` text."""
    return _Printer(file, pool).file()


def default_json_name(name: str) -> str:
    """protoc's json_name for a field name: each `_` dropped and the letter after it capitalized."""
    out, upper = [], False
    for char in name:
        if char == "_":
            upper = True
        else:
            out.append(char.upper() if upper else char)
            upper = False
    return "".join(out)


def quote(data: bytes) -> str:
    """A `.proto` string literal of `data`, printable ASCII kept and every other byte an octal escape."""
    escapes = {ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}
    return '"' + "".join(escapes.get(b) or (chr(b) if 0x20 <= b < 0x7F else f"\\{b:03o}") for b in data) + '"'


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def _ranges(ranges: Iterable[Any], exclusive_end: bool, number_max: int) -> str:
    parts = []
    for r in sorted(ranges, key=lambda r: (r.start, r.end)):
        end = r.end - 1 if exclusive_end else r.end
        last = "max" if end == number_max else str(end)
        parts.append(str(r.start) if end == r.start else f"{r.start} to {last}")
    return ", ".join(parts)


class _Printer:
    def __init__(self, file: FileProto, pool: descriptor_pool.DescriptorPool) -> None:
        self.proto = file
        self.pool = pool
        self.syntax = str(file.syntax or "proto2")
        self.lines: list[str] = []
        self.option_classes: dict[str, Any] = {}

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(f"{_INDENT * depth}{text}")

    # The file

    def file(self) -> str:
        f = self.proto
        if self.syntax == "editions":
            self.emit(0, f'edition = "{descriptor_pb2.Edition.Name(f.edition).removeprefix("EDITION_")}";')
        else:
            self.emit(0, f'syntax = "{self.syntax}";')
        if f.package:
            self.emit(0, f"package {f.package};")
        imports = [(str(path), "public " if i in f.public_dependency else "weak " if i in f.weak_dependency
                    else "") for i, path in enumerate(f.dependency)]
        imports += [(str(path), "option ") for path in getattr(f, "option_dependency", ())]
        if imports:
            self.lines.append("")
            for path, kind in sorted(imports):
                self.emit(0, f"import {kind}{quote(path.encode())};")
        self.option_statements(0, f.options, blank_before=True)
        scope = f".{f.package}." if f.package else "."
        self.blocks(0, f.message_type, f.enum_type, f.extension, scope, top_level=True)
        for service in sorted(f.service, key=lambda s: s.name):
            self.lines.append("")
            self.service(service)
        return "\n".join(self.lines) + "\n"

    def blocks(self, depth: int, messages: Sequence[MessageProto], enums: Sequence[Any],
               extensions: Sequence[FieldProto], scope: str, top_level: bool,
               owned: dict[str, Callable[[], None] | None] | None = None) -> None:
        """A scope's messages (in order), enums and extend blocks. `owned`: the nested messages a field of
        the enclosing message prints (a map's entry, a group's body), by full name, each with what prints
        it at its place (None: printed with another)."""
        owned = dict(owned or {})
        group_extensions = {str(e.type_name): e for e in extensions if self.prints_as_group(e)}
        for message in messages:
            full_name = f"{scope}{message.name}"
            if top_level:
                self.lines.append("")
            if full_name in group_extensions:
                extension = group_extensions[full_name]
                self.emit(depth, f"extend {extension.extendee} {{")
                self.field(depth + 1, extension, message, in_oneof=False)
                self.emit(depth, "}")
            elif full_name in owned:
                print_it = owned[full_name]
                if print_it is not None:
                    print_it()
            else:
                self.message(depth, message, full_name)
        for enum in sorted(enums, key=lambda e: e.name):
            if top_level:
                self.lines.append("")
            self.enum(depth, enum)
        plain = [e for e in extensions if str(e.type_name) not in group_extensions]
        for extendee in sorted({str(e.extendee) for e in plain}):
            if top_level:
                self.lines.append("")
            self.emit(depth, f"extend {extendee} {{")
            for extension in sorted((e for e in plain if e.extendee == extendee), key=lambda e: e.number):
                self.field(depth + 1, extension, None, in_oneof=False)
            self.emit(depth, "}")

    def prints_as_group(self, field: FieldProto) -> bool:
        return bool(field.type == _FIELD.TYPE_GROUP and self.syntax != "editions")

    # Messages

    def message(self, depth: int, message: MessageProto, full_name: str) -> None:
        self.emit(depth, f"message {message.name} {{")
        self.message_body(depth + 1, message, full_name)
        self.emit(depth, "}")

    def message_body(self, depth: int, message: MessageProto, full_name: str) -> None:
        nested = {f"{full_name}.{m.name}": m for m in message.nested_type}
        oneofs = {f.number: f.oneof_index for f in message.field
                  if f.HasField("oneof_index") and not f.proto3_optional}
        # The nested messages a field prints: a map field its entry, a group field its body. Printed where
        # the message is, so that every nested message keeps its place (its index); a oneof with groups
        # is printed where its first group's body is.
        owned: dict[str, Callable[[], None] | None] = {}
        members: dict[int, list[FieldProto]] = {}
        placed_fields: set[int] = set()  # numbers of the fields printed at their nested message
        placed_oneofs: set[int] = set()  # indexes of the oneofs printed at a group's nested message
        for field in sorted(message.field, key=lambda f: f.number):
            if field.number in oneofs:
                members.setdefault(oneofs[field.number], []).append(field)
            elif self.is_map(field, nested) or (self.prints_as_group(field)
                                                and str(field.type_name) in nested):
                body = nested[str(field.type_name)]
                owned[str(field.type_name)] = partial(self.field, depth, field, body, False)
                placed_fields.add(field.number)
        for index, fields in members.items():
            groups = [str(f.type_name) for f in fields
                      if self.prints_as_group(f) and str(f.type_name) in nested]
            for name in groups:
                owned[name] = None
            if groups:
                first = min(groups, key=list(nested).index)
                owned[first] = partial(self.oneof, depth, message.oneof_decl[index], fields, nested)
                placed_oneofs.add(index)
        self.option_statements(depth, message.options)
        if message.reserved_range:
            self.emit(depth, f"reserved {_ranges(message.reserved_range, True, FIELD_NUMBER_MAX)};")
        if message.reserved_name:
            self.emit(depth, f"reserved {self.reserved_names(message.reserved_name)};")
        for r in sorted(message.extension_range, key=lambda r: (r.start, r.end)):
            options = self.option_list(r.options) if r.HasField("options") else ""
            self.emit(depth, f"extensions {_ranges([r], True, FIELD_NUMBER_MAX)}{options};")
        for field in sorted(message.field, key=lambda f: f.number):
            if field.number not in oneofs and field.number not in placed_fields:
                self.field(depth, field, nested.get(str(field.type_name)), in_oneof=False)
        for index, fields in sorted(members.items(), key=lambda item: item[1][0].number):
            if index not in placed_oneofs:
                self.oneof(depth, message.oneof_decl[index], fields, nested)
        self.blocks(depth, message.nested_type, message.enum_type, message.extension, f"{full_name}.",
                    top_level=False, owned=owned)

    def oneof(self, depth: int, oneof: Any, fields: Sequence[FieldProto], nested: dict[str, MessageProto]
              ) -> None:
        self.emit(depth, f"oneof {oneof.name} {{")
        self.option_statements(depth + 1, oneof.options)
        for field in fields:
            self.field(depth + 1, field, nested.get(str(field.type_name)), in_oneof=True)
        self.emit(depth, "}")

    def is_map(self, field: FieldProto, nested: dict[str, MessageProto]) -> bool:
        entry = nested.get(str(field.type_name))
        return bool(field.label == _FIELD.LABEL_REPEATED and entry is not None and entry.options.map_entry)

    def field(self, depth: int, field: FieldProto, body: MessageProto | None, in_oneof: bool) -> None:
        """A field's line; a map's as `map<K, V>`, a group's with its body (`body`: the field's nested
        message, when it has one)."""
        options = self.field_options(field)
        if body is not None and body.options.map_entry:
            key, value = (self.type_text(f) for f in body.field)
            self.emit(depth, f"map<{key}, {value}> {field.name} = {field.number}{options};")
        elif body is not None and self.prints_as_group(field):
            self.emit(depth, f"{self.label(field, in_oneof)}group {body.name} = {field.number}{options} {{")
            self.message_body(depth + 1, body, str(field.type_name))
            self.emit(depth, "}")
        else:
            self.emit(depth, f"{self.label(field, in_oneof)}{self.type_text(field)} {field.name} = "
                             f"{field.number}{options};")

    def label(self, field: FieldProto, in_oneof: bool) -> str:
        if in_oneof:
            return ""
        if field.label == _FIELD.LABEL_REPEATED:
            return "repeated "
        if self.syntax == "editions":
            return ""  # presence is a feature there
        if self.syntax == "proto3":
            return "optional " if field.proto3_optional else ""
        return "required " if field.label == _FIELD.LABEL_REQUIRED else "optional "

    def type_text(self, field: FieldProto) -> str:
        return SCALAR_NAMES.get(field.type) or str(field.type_name)

    def field_options(self, field: FieldProto) -> str:
        items: list[tuple[str, str]] = []
        if field.HasField("default_value"):
            items.append(("default", self.default_text(field)))
        if (field.HasField("json_name") and not field.HasField("extendee")
                and field.json_name != default_json_name(field.name)):
            items.append(("json_name", quote(field.json_name.encode())))
        return self.option_list(field.options, items)

    def default_text(self, field: FieldProto) -> str:
        value = str(field.default_value)
        if field.type == _FIELD.TYPE_STRING:
            return quote(value.encode())
        if field.type == _FIELD.TYPE_BYTES:
            return f'"{value}"'  # protoc writes a bytes default C-escaped already
        return value  # a number, inf / -inf / nan, true / false, an enum value's name

    # Enums and services

    def enum(self, depth: int, enum: Any) -> None:
        self.emit(depth, f"enum {enum.name} {{")
        self.option_statements(depth + 1, enum.options)
        if enum.reserved_range:
            self.emit(depth + 1, f"reserved {_ranges(enum.reserved_range, False, ENUM_NUMBER_MAX)};")
        if enum.reserved_name:
            self.emit(depth + 1, f"reserved {self.reserved_names(enum.reserved_name)};")
        values = list(enum.value)
        for value in values[:1] + sorted(values[1:], key=lambda v: (v.number, v.name)):
            self.emit(depth + 1, f"{value.name} = {value.number}{self.option_list(value.options)};")
        self.emit(depth, "}")

    def reserved_names(self, names: Iterable[str]) -> str:
        if self.syntax == "editions":  # editions reserve identifiers, not strings
            return ", ".join(sorted(names))
        return ", ".join(quote(str(name).encode()) for name in sorted(names))

    def service(self, service: Any) -> None:
        self.emit(0, f"service {service.name} {{")
        self.option_statements(1, service.options)
        for method in sorted(service.method, key=lambda m: m.name):
            request = f"{'stream ' if method.client_streaming else ''}{method.input_type}"
            response = f"{'stream ' if method.server_streaming else ''}{method.output_type}"
            head = f"rpc {method.name} ({request}) returns ({response})"
            options = self.options(method.options)
            if not options:
                self.emit(1, f"{head};")
                continue
            self.emit(1, f"{head} {{")
            for name, value in options:
                self.emit(2, f"option {name} = {value};")
            self.emit(1, "}")
        self.emit(0, "}")

    # Options

    def option_statements(self, depth: int, options: Any, blank_before: bool = False) -> None:
        items = self.options(options)
        if items and blank_before:
            self.lines.append("")
        for name, value in items:
            self.emit(depth, f"option {name} = {value};")

    def option_list(self, options: Any, extra: Sequence[tuple[str, str]] = ()) -> str:
        items = sorted([*extra, *self.options(options)], key=lambda item: item[0])
        return f" [{', '.join(f'{name} = {value}' for name, value in items)}]" if items else ""

    def options(self, options: Any) -> list[tuple[str, str]]:
        """An options message as (name, value) pairs, by name (a repeated option's values in order).
        Custom options are extensions protoc leaves as unknown fields of descriptor_pb2's classes: the
        options are read again with the schema pool's class, which knows the schema's extensions."""
        if not options.ByteSize():
            return []
        cls = self.option_class(str(options.DESCRIPTOR.full_name))
        if cls is not None:
            options = cls.FromString(options.SerializeToString())
        items = []
        for field, value in options.ListFields():
            name = f"(.{field.full_name})" if field.is_extension else str(field.name)
            if field.is_extension or not self.is_default(options, field, value):
                for one in value if field.is_repeated else [value]:
                    items.append((name, self.value_text(field, one)))
        return sorted(items, key=lambda item: item[0])

    def option_class(self, full_name: str) -> Any:
        if full_name not in self.option_classes:
            try:
                descriptor = self.pool.FindMessageTypeByName(full_name)
            except KeyError:  # the schema's files do not import descriptor.proto: no custom options
                descriptor = None
            self.option_classes[full_name] = (None if descriptor is None
                                              else message_factory.GetMessageClass(descriptor))
        return self.option_classes[full_name]

    def is_default(self, options: Any, field: Any, value: Any) -> bool:
        """An option set to what it means when absent, left out. `packed`'s default is the syntax's:
        proto3 packs repeated numbers unless told not to, proto2 does not unless told to."""
        if field.name == "packed" and options.DESCRIPTOR.full_name == "google.protobuf.FieldOptions":
            return bool(value) == (self.syntax == "proto3")
        if field.is_repeated or field.type in (_FIELD.TYPE_MESSAGE, _FIELD.TYPE_GROUP):
            return False
        return bool(value == field.default_value)

    def value_text(self, field: Any, value: Any) -> str:
        if field.type in (_FIELD.TYPE_MESSAGE, _FIELD.TYPE_GROUP):
            text = text_format.MessageToString(value, as_one_line=True)
            return f"{{ {text} }}" if text else "{}"
        if field.type == _FIELD.TYPE_ENUM:
            known = field.enum_type.values_by_number.get(value)
            return str(value) if known is None else str(known.name)
        if field.type == _FIELD.TYPE_BOOL:
            return "true" if value else "false"
        if field.type == _FIELD.TYPE_STRING:
            return quote(str(value).encode())
        if field.type == _FIELD.TYPE_BYTES:
            return quote(bytes(value))
        if field.type in (_FIELD.TYPE_FLOAT, _FIELD.TYPE_DOUBLE):
            return _float_text(float(value))
        return str(value)
