"""MetadataJson: a protobuf message as the JSON text `json_format.MessageToJson(message, indent=None,
preserving_proto_field_name=True)` gives, character for character, at a fraction of its cost.

json_format builds a dict per message through generic per-field dispatch (descriptor lookups, enum option
lookups, type tests) and then hands it to `json.dumps`; for the metadata source that was most of a row's
cost. Here each message type gets a plan once: per field, its key already encoded and a formatter for its
type. A message is then `ListFields()` (the fields json_format prints, in the same order: those with a
value, by field number) and one formatter call per field. The pieces of the output are json.dumps's own:
strings through `json.encoder.encode_basestring_ascii` (the C function json.dumps uses with
ensure_ascii), separators ", " and ": ", floats through float's repr.

What json_format treats specially is left to it: a message type with a map field, an extension, a
well-known type (google.protobuf.*: Timestamp, wrappers, Struct, Any, ...) at any depth, or an enum value
with a JSON name option has no plan, and `message_json` calls json_format for it. The types of
kanal.v1.metadata have none of these, so every metadata record takes the fast path
(tests/spark/test_metadata_json.py holds both to the same text over generated records of every kind).
"""

from __future__ import annotations

import binascii
import math
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.internal.type_checkers import ToShortestFloat
from google.protobuf.message import Message

Formatter = Callable[[Any], str]
# Per message type: field -> (its key and ": ", the formatter of its value); None: json_format's (above).
Plan = dict[FieldDescriptor, tuple[str, Formatter]]

_INT64_TYPES = frozenset((FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64))
_INT32_TYPES = frozenset((FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_UINT32))
_plans: dict[Descriptor, Plan | None] = {}


def message_json(message: Message) -> str:
    """`json_format.MessageToJson(message, indent=None, preserving_proto_field_name=True)`."""
    descriptor = message.DESCRIPTOR
    plan = _plans[descriptor] if descriptor in _plans else plan_for(descriptor)
    if plan is None:
        return json_format.MessageToJson(message, indent=None, preserving_proto_field_name=True)
    fields = message.ListFields()
    if not fields:
        return "{}"
    parts = []
    for field, value in fields:
        key, fmt = plan[field]
        parts.append(key + fmt(value))
    return "{" + ", ".join(parts) + "}"


def plan_for(descriptor: Descriptor) -> Plan | None:
    """The plan of a message type (cached), or None where json_format must do it (module docstring)."""
    if descriptor in _plans:
        return _plans[descriptor]
    _plans[descriptor] = None  # a recursive type is left to json_format
    plan: Plan | None = {}
    if descriptor.full_name.startswith("google.protobuf.") or descriptor.GetOptions().map_entry:
        plan = None
    else:
        for field in descriptor.fields:
            fmt = _formatter(field)
            if fmt is None:
                plan = None
                break
            if field.is_repeated:
                fmt = _repeated(fmt)
            plan[field] = (encode_basestring_ascii(field.name) + ": ", fmt)  # type: ignore[index]
    _plans[descriptor] = plan
    return plan


def _repeated(fmt: Formatter) -> Formatter:
    return lambda values: "[" + ", ".join([fmt(v) for v in values]) + "]"


def _formatter(field: FieldDescriptor) -> Formatter | None:
    """One value of `field` as JSON text (json_format._FieldToJsonObject, then json.dumps), or None."""
    cpp = field.cpp_type
    if field.is_extension:
        return None
    if cpp == FieldDescriptor.CPPTYPE_MESSAGE:
        if plan_for(field.message_type) is None:
            return None
        return message_json
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        enum = field.enum_type
        if enum.full_name.startswith("google.protobuf.") or any(v.has_options for v in enum.values):
            return None
        names = {v.number: encode_basestring_ascii(v.name) for v in enum.values}
        # An open enum's unknown number is printed as the number; a closed enum's is an error there.
        if enum.is_closed:
            return None
        return lambda v: names.get(v) or str(v)
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        if field.type == FieldDescriptor.TYPE_BYTES:
            return _bytes
        return encode_basestring_ascii
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return _bool
    if cpp in _INT64_TYPES:
        return _int64
    if cpp in _INT32_TYPES:
        return int.__repr__
    if cpp == FieldDescriptor.CPPTYPE_DOUBLE:
        return _double
    if cpp == FieldDescriptor.CPPTYPE_FLOAT:
        return _float
    return None


def _bytes(value: bytes) -> str:
    # base64 with padding, no newline: base64.b64encode's text (its alphabet needs no JSON escape).
    return '"' + binascii.b2a_base64(value, newline=False).decode("ascii") + '"'


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _int64(value: int) -> str:
    return '"' + str(value) + '"'  # 64-bit integers are JSON strings in protobuf's mapping


def _special_float(value: float) -> str | None:
    if math.isinf(value):
        return '"-Infinity"' if value < 0.0 else '"Infinity"'
    if math.isnan(value):
        return '"NaN"'
    return None


def _double(value: float) -> str:
    return _special_float(value) or float.__repr__(value)


def _float(value: float) -> str:
    return _special_float(value) or float.__repr__(ToShortestFloat(value))
