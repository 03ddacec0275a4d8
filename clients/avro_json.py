"""Avro data as plain JSON, both ways: what `kanal produce --value-format avro` reads from each line and
`kanal consume --value-format avro` prints (record_serializers.py).

Plain JSON, not Avro's JSON encoding: a union's value is written as itself (`"x"`, not `{"string": "x"}`),
the branch it belongs to found by its shape (the first branch, in the union's order, that the value
fits). Where JSON has no type of its own, the Avro specification's JSON forms are used, so the output of
`consume` is what `produce` takes back:

| Avro | JSON |
|---|---|
| bytes, fixed | a string whose code points are the bytes (0-255), as the specification writes defaults |
| decimal (bytes or fixed) | a string of the number (`"12.30"`): a JSON number may not keep its digits |
| uuid | the string |
| date | days since 1970-01-01, an integer |
| time-millis, time-micros | milliseconds or microseconds after midnight, an integer |
| timestamp-*, local-timestamp-* | milliseconds or microseconds since 1970-01-01T00:00, an integer |
| float, double | a number (NaN and the infinities as Python's json writes them) |

Schemas are fastavro's parsed form (`AvroSchema.fastavro_schema`): named types defined where first used,
then named by full name, all in its `__named_schemas`.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Mapping
from typing import Any

Named = Mapping[str, Any]  # full name -> a named type's parsed schema

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_LOCAL_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_DAY = datetime.date(1970, 1, 1)
_BYTE_MAX = 255
_NUMBER_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int, "long": int, "float": (int, float), "double": (int, float)}
_SCALED = {"timestamp-millis": 1000, "timestamp-micros": 1, "local-timestamp-millis": 1000,
           "local-timestamp-micros": 1}  # microseconds per unit


def named_types(schema: Any) -> Named:
    """The named types of a fastavro-parsed schema."""
    found = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    return dict(found)


def to_json(schema: Any, datum: Any, named: Named) -> Any:
    """A datum as fastavro's reader returns it, as plain JSON (the module's table)."""
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        return to_json(_branch(schema, datum, named, _datum_fits), datum, named)
    kind, logical = _kind(schema)
    if datum is None:
        return None
    if kind == "record":
        return {f["name"]: to_json(f["type"], datum.get(f["name"]), named) for f in schema["fields"]}
    if kind == "array":
        return [to_json(schema["items"], item, named) for item in datum]
    if kind == "map":
        return {k: to_json(schema["values"], v, named) for k, v in datum.items()}
    if logical == "decimal" and isinstance(datum, decimal.Decimal):
        return str(datum)
    if logical == "uuid" and isinstance(datum, uuid.UUID):
        return str(datum)
    if logical == "date" and isinstance(datum, datetime.date):
        return (datum - _EPOCH_DAY).days
    if logical in ("time-millis", "time-micros") and isinstance(datum, datetime.time):
        micros = ((datum.hour * 60 + datum.minute) * 60 + datum.second) * 1_000_000 + datum.microsecond
        return micros // 1000 if logical == "time-millis" else micros
    if logical in _SCALED and isinstance(datum, datetime.datetime):
        since = datum - (_EPOCH if datum.tzinfo is not None else _LOCAL_EPOCH)
        micros = (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds
        return micros // 1000 if _SCALED[logical] == 1000 else micros
    if isinstance(datum, bytes):
        return datum.decode("latin-1")
    return datum


def from_json(schema: Any, value: Any, named: Named) -> Any:
    """A plain JSON value as a datum fastavro writes (the module's table); a value that fits nothing is
    left as it is, for the encoder's validation to name."""
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        return from_json(_branch(schema, value, named, _json_fits), value, named)
    kind, logical = _kind(schema)
    if value is None:
        return None
    if kind == "record" and isinstance(value, dict):
        fields = {f["name"]: f["type"] for f in schema["fields"]}
        return {k: from_json(fields[k], v, named) if k in fields else v for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [from_json(schema["items"], item, named) for item in value]
    if kind == "map" and isinstance(value, dict):
        return {k: from_json(schema["values"], v, named) for k, v in value.items()}
    if logical == "decimal" and isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return decimal.Decimal(str(value))
        except decimal.InvalidOperation:
            return value
    if kind in ("bytes", "fixed") and isinstance(value, str) and _byte_string(value):
        return value.encode("latin-1")
    return value


def _resolve(schema: Any, named: Named) -> Any:
    """A named type's definition for its name; any other schema as it is."""
    if isinstance(schema, str) and schema in named:
        return named[schema]
    return schema


def _kind(schema: Any) -> tuple[str, str]:
    """(type, logicalType or "") of a schema that is not a union."""
    if isinstance(schema, str):
        return schema, ""
    kind = schema.get("type")
    if isinstance(kind, dict | list):  # {"type": {"type": "int"}}: the inner one
        return _kind(kind)
    return str(kind), str(schema.get("logicalType") or "")


def _branch(branches: list[Any], value: Any, named: Named, fits: Any) -> Any:
    for branch in branches:
        if fits(_resolve(branch, named), value, named):
            return branch
    return branches[0]  # nothing fits: the writer's validation will say so


def _byte_string(text: str) -> bool:
    return all(ord(c) <= _BYTE_MAX for c in text)


def _record_fits(schema: Any, keys: set[str]) -> bool:
    """Whether a dict of `keys` can be the record: no unknown key, every field without a default there."""
    fields = {f["name"]: f for f in schema["fields"]}
    return keys <= set(fields) and all(name in keys or "default" in f for name, f in fields.items())


def _datum_fits(schema: Any, datum: Any, named: Named) -> bool:
    """Whether a datum fastavro read belongs to the union branch `schema`."""
    if isinstance(schema, list):
        return False  # a union directly in a union is not Avro
    kind, logical = _kind(schema)
    if kind == "null":
        return datum is None
    if kind == "boolean":
        return isinstance(datum, bool)
    if logical == "decimal":
        return isinstance(datum, decimal.Decimal)
    if logical == "uuid":
        return isinstance(datum, uuid.UUID | str)
    if logical == "date":
        return isinstance(datum, datetime.date) and not isinstance(datum, datetime.datetime)
    if logical in ("time-millis", "time-micros"):
        return isinstance(datum, datetime.time)
    if logical in _SCALED:
        return isinstance(datum, datetime.datetime)
    return _plain_fits(schema, kind, datum)


def _json_fits(schema: Any, value: Any, named: Named) -> bool:
    """Whether a plain JSON value can be written as the union branch `schema`."""
    if isinstance(schema, list):
        return False
    kind, logical = _kind(schema)
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if logical == "decimal":
        return isinstance(value, str | int | float) and not isinstance(value, bool)
    if kind in ("bytes", "fixed") and isinstance(value, str):
        size = schema.get("size") if isinstance(schema, dict) else None
        return _byte_string(value) and (size is None or len(value) == size)
    return _plain_fits(schema, kind, value)


def _plain_fits(schema: Any, kind: str, value: Any) -> bool:
    """The checks a datum and a JSON value share: numbers, strings, enums, arrays, maps and records."""
    if kind in _NUMBER_TYPES:
        return isinstance(value, _NUMBER_TYPES[kind]) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind in ("bytes", "fixed"):
        return isinstance(value, bytes) and (kind == "bytes" or len(value) == schema.get("size"))
    if kind == "enum":
        return isinstance(value, str) and value in schema.get("symbols", ())
    if kind == "array":
        return isinstance(value, list)
    if kind == "map":
        return isinstance(value, dict)
    if kind == "record":
        return isinstance(value, dict) and _record_fits(schema, set(value))
    return False
