"""AvroTypes: an Avro schema as the Spark type Spark's `from_avro` gives it, and fastavro's datums as the
values Arrow builds that type from.

The mapping is spark-avro's (SchemaConverters.toSqlType, Spark 4, its options left at their defaults):

| Avro | Spark |
|---|---|
| null | void |
| boolean, int, long, float, double, string, bytes | boolean, int, bigint, float, double, string, binary |
| fixed | binary |
| enum | string (the symbol) |
| record | struct; a field is NOT NULL unless its type is a union with null |
| array, map | array, map<string, V>; items / values nullable when they are a union with null |
| union [null, T] (null anywhere) | T, nullable |
| union [null, T1, T2, ...] | the union [T1, T2, ...], nullable |
| union [int, long] / [float, double] | bigint / double |
| any other union [T1, T2, ...] | struct<member0: T1, member1: T2, ...>, each nullable, the value's branch set |
| int date | date |
| long timestamp-millis / timestamp-micros | timestamp (UTC) |
| long local-timestamp-millis / local-timestamp-micros | timestamp_ntz |
| bytes or fixed decimal(p, s) | decimal(p, s); p above 38 is refused (Spark's decimals stop there) |
| int time-millis, long time-micros, string uuid, fixed duration | int, bigint, string, binary (the underlying type) |

Recursive records are refused, as Spark refuses them unless its `recursiveFieldMaxDepth` option is set.

Datums are fastavro's, read with `return_named_type=True` (value_decoding.py): a named type (record, enum,
fixed) inside a union comes as `(full name, value)`, so the branch of a union of named types is known.
A value of an unnamed branch is placed by its Python type; where two branches give the same Python type
(a union [int, long, string]: fastavro reads int and long both as int), it goes to the first of them,
where spark-avro, which knows the branch index written, may put it in the second.
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from avro.schema import (
    ArraySchema,
    DecimalLogicalSchema,
    EnumSchema,
    Field,
    FixedSchema,
    MapSchema,
    NamedSchema,
    RecordSchema,
    Schema,
    UnionSchema,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

# fastavro's datum (a branch of it) -> the value pyarrow builds the Spark type's Arrow array from.
Converter = Callable[[Any], Any]

DECIMAL_PRECISION_MAX = 38  # Spark's DecimalType.MAX_PRECISION

_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
    "double": DoubleType(), "string": StringType(), "bytes": BinaryType(), "null": NullType(),
}
_UTC_TIMESTAMPS = ("timestamp-millis", "timestamp-micros")
_LOCAL_TIMESTAMPS = ("local-timestamp-millis", "local-timestamp-micros")
_US_PER_S = 1_000_000


class AvroNotMappable(ValueError):
    """An Avro schema Spark has no type for (a recursive record, a decimal wider than 38 digits)."""


@dataclass(frozen=True, slots=True)
class SparkShape:
    """What one Avro type is in Spark: its type, whether it may be null (a union with null), and how a
    fastavro value of it becomes Arrow's input (None: as it is)."""

    data_type: DataType
    nullable: bool
    convert: Converter | None


def spark_shape(schema: Schema) -> SparkShape:
    """The Spark type of `schema` (the module docstring's table); AvroNotMappable when there is none."""
    return _shape(schema, ())


def _shape(schema: Schema, path: tuple[str, ...]) -> SparkShape:
    if isinstance(schema, UnionSchema):
        return _union(schema, path)
    if isinstance(schema, RecordSchema):
        return _record(schema, path)
    if isinstance(schema, ArraySchema):
        items = _shape(schema.items, path)
        convert = _each(items.convert)
        return SparkShape(ArrayType(items.data_type, items.nullable), False, convert)
    if isinstance(schema, MapSchema):
        values = _shape(schema.values, path)
        convert = _each_value(values.convert)
        return SparkShape(MapType(StringType(), values.data_type, values.nullable), False, convert)
    if isinstance(schema, EnumSchema):
        return SparkShape(StringType(), False, None)
    logical = schema.get_prop("logicalType")
    if isinstance(schema, DecimalLogicalSchema):
        precision, scale = _number(schema.get_prop("precision")), _number(schema.get_prop("scale") or 0)
        if precision > DECIMAL_PRECISION_MAX:
            raise AvroNotMappable(f"{_where(path)}: decimal({precision}, {scale}) has more digits than "
                                  f"Spark's decimals hold ({DECIMAL_PRECISION_MAX})")
        return SparkShape(DecimalType(precision, scale), False, None)
    if isinstance(schema, FixedSchema):
        return SparkShape(BinaryType(), False, None)
    kind = schema.type
    if kind == "int" and logical == "date":
        return SparkShape(DateType(), False, None)
    if kind == "int" and logical == "time-millis":
        return SparkShape(IntegerType(), False, _time_millis)
    if kind == "long" and logical == "time-micros":
        return SparkShape(LongType(), False, _time_micros)
    if kind == "long" and logical in _UTC_TIMESTAMPS:
        return SparkShape(TimestampType(), False, None)
    if kind == "long" and logical in _LOCAL_TIMESTAMPS:
        return SparkShape(TimestampNTZType(), False, None)
    if kind == "string" and logical == "uuid":
        return SparkShape(StringType(), False, str)
    if kind not in _PRIMITIVES:
        raise AvroNotMappable(f"{_where(path)}: Avro type {kind!r} has no Spark type")
    return SparkShape(_PRIMITIVES[kind], kind == "null", None)


def _record(schema: RecordSchema, path: tuple[str, ...]) -> SparkShape:
    name = schema.fullname
    if name in path:
        raise AvroNotMappable(f"{_where(path)}: record {name} contains itself; Spark maps no recursive "
                              f"schema (spark-avro's recursiveFieldMaxDepth is off by default)")
    inner = (*path, name)
    fields: list[Field] = schema.fields
    shapes = [(f.name, _shape(f.type, inner)) for f in fields]
    struct = StructType([StructField(n, s.data_type, s.nullable) for n, s in shapes])
    converts = tuple((n, s.convert) for n, s in shapes if s.convert is not None)
    if not converts:
        return SparkShape(struct, False, None)

    def convert(datum: dict[str, Any]) -> dict[str, Any]:
        for field_name, field_convert in converts:
            value = datum[field_name]
            if value is not None:
                datum[field_name] = field_convert(value)
        return datum

    return SparkShape(struct, False, convert)


def _union(schema: UnionSchema, path: tuple[str, ...]) -> SparkShape:
    branches: list[Schema] = schema.schemas
    others = [b for b in branches if b.type != "null"]
    has_null = len(others) < len(branches)
    if not others:
        return SparkShape(NullType(), True, None)
    if len(others) == 1:
        only = _shape(others[0], path)
        unwrap = isinstance(others[0], NamedSchema)  # a named branch comes as (name, value)
        if not unwrap:
            return SparkShape(only.data_type, has_null or only.nullable, only.convert)
        inner = only.convert

        def convert_named(datum: Any) -> Any:
            value = datum[1] if isinstance(datum, tuple) else datum
            return inner(value) if inner is not None and value is not None else value

        return SparkShape(only.data_type, has_null or only.nullable, convert_named)
    kinds = {b.type for b in others}
    if len(others) == 2 and kinds == {"int", "long"}:
        return SparkShape(LongType(), has_null, _union_widened(others, int))
    if len(others) == 2 and kinds == {"float", "double"}:
        return SparkShape(DoubleType(), has_null, _union_widened(others, float))
    return _members(others, has_null, path)


def _union_widened(branches: list[Schema], kind: type) -> Converter | None:
    """[int, long] and [float, double] read as bigint / double: a logical type on a branch (a date, a
    time) is read by fastavro as its Python value, which is turned back into the number it was written."""
    converts = [_shape(b, ()).convert for b in branches if b.get_prop("logicalType")]
    if not converts:
        return None

    def convert(datum: Any) -> Any:
        if isinstance(datum, datetime.date):
            return (datum - datetime.date(1970, 1, 1)).days
        if isinstance(datum, datetime.time):
            return _time_micros(datum)
        return kind(datum)

    return convert


def _members(branches: list[Schema], has_null: bool, path: tuple[str, ...]) -> SparkShape:
    """A union of several types other than null: struct<member0, member1, ...> (spark-avro's), the value's
    branch set and the others null."""
    shapes = [_shape(b, path) for b in branches]
    struct = StructType([StructField(f"member{i}", s.data_type, True) for i, s in enumerate(shapes)])
    names: dict[str, int] = {}
    for i, b in enumerate(branches):
        if isinstance(b, NamedSchema):
            names.setdefault(b.fullname, i)
            names.setdefault(b.name, i)
    fields = struct.fieldNames()
    where = _where(path)

    def convert(datum: Any) -> dict[str, Any]:
        if isinstance(datum, tuple):
            index = names.get(datum[0])
            value = datum[1]
        else:
            index = None
            value = datum
        if index is None:
            index = _branch_of(branches, value)
        if index is None:
            raise ValueError(f"{where}: a value of {type(value).__name__} fits no branch of the union")
        out: dict[str, Any] = dict.fromkeys(fields)
        branch_convert = shapes[index].convert
        out[fields[index]] = branch_convert(value) if branch_convert is not None and value is not None \
            else value
        return out

    return SparkShape(struct, has_null, convert)


def _branch_of(branches: list[Schema], value: Any) -> int | None:
    """The first unnamed branch whose fastavro values have the Python type of `value`."""
    for i, b in enumerate(branches):
        if not isinstance(b, NamedSchema) and _python_fits(b, value):
            return i
    return None


def _python_fits(schema: Schema, value: Any) -> bool:
    kind, logical = schema.type, schema.get_prop("logicalType")
    if isinstance(schema, DecimalLogicalSchema):
        return isinstance(value, decimal.Decimal)
    if logical == "date" and kind == "int":
        return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    if logical in ("time-millis", "time-micros"):
        return isinstance(value, datetime.time)
    if logical in (*_UTC_TIMESTAMPS, *_LOCAL_TIMESTAMPS):
        return isinstance(value, datetime.datetime)
    if logical == "uuid" and kind == "string":
        return isinstance(value, (uuid.UUID, str))
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("int", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in ("float", "double"):
        return isinstance(value, float)
    if kind == "string":
        return isinstance(value, str)
    if kind == "bytes":
        return isinstance(value, bytes)
    if isinstance(schema, ArraySchema):
        return isinstance(value, list)
    if isinstance(schema, MapSchema):
        return isinstance(value, dict)
    return False


def _each(convert: Converter | None) -> Converter | None:
    if convert is None:
        return None
    return lambda items: [convert(v) if v is not None else None for v in items]


def _each_value(convert: Converter | None) -> Converter | None:
    if convert is None:
        return None
    return lambda entries: {k: convert(v) if v is not None else None for k, v in entries.items()}


def _number(prop: object) -> int:
    """A logical type's numeric attribute (avro checked it is an int when it parsed the schema)."""
    if not isinstance(prop, int):
        raise AvroNotMappable(f"a decimal's precision and scale are integers, not {prop!r}")
    return prop


def _time_millis(value: datetime.time) -> int:
    return _time_micros(value) // 1000


def _time_micros(value: datetime.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * _US_PER_S + value.microsecond


def _where(path: tuple[str, ...]) -> str:
    return "/".join(path) or "the schema"
