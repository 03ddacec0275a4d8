"""The pure parts of kanal-log's Avro decoding (no Spark session, no cluster): Avro types as spark-avro
maps them (avro_types.py), datums decoded with writer and reader schemas into Arrow (value_decoding.py),
batches of the plain table turned into the decoded table in both modes (decoded_columns.py), and the
options' refusals (decoding_options.py)."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, MapType, StringType, StructField, StructType

from kanal.schemas.avro_schema import parse
from kanal.schemas.framing import frame
from kanal.spark.avro_types import AvroNotMappable, spark_shape
from kanal.spark.columns import LOG_TABLE
from kanal.spark.decoded_columns import BatchDecoder, check_types, decoded_schema, read_table
from kanal.spark.decoding_options import DecodingOptions
from kanal.spark.value_decoding import AvroDecoding, RecordUndecodable, SideDecoder


def shape(schema: object):
    return spark_shape(parse(json.dumps(schema)).avro)


def record(*fields: tuple[str, object], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


INNER = record(("x", "int"), name="Inner")


@pytest.mark.parametrize(("avro", "spark", "nullable"), [
    ("boolean", "boolean", False), ("int", "int", False), ("long", "bigint", False),
    ("float", "float", False), ("double", "double", False), ("string", "string", False),
    ("bytes", "binary", False), ("null", "void", True),
    ({"type": "fixed", "name": "F", "size": 4}, "binary", False),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, "string", False),
    ({"type": "array", "items": "int"}, "array<int>", False),
    ({"type": "map", "values": "long"}, "map<string,bigint>", False),
    (record(("a", "int"), ("b", ["null", "string"])), "struct<a:int,b:string>", False),
    (["null", "string"], "string", True),
    (["string", "null"], "string", True),
    (["int", "long"], "bigint", False),
    (["float", "double"], "double", False),
    (["null", "int", "long"], "bigint", True),
    (["string", "null", "int"], "struct<member0:string,member1:int>", True),
    (["string", "int", INNER], "struct<member0:string,member1:int,member2:struct<x:int>>", False),
    ({"type": "int", "logicalType": "date"}, "date", False),
    ({"type": "long", "logicalType": "timestamp-millis"}, "timestamp", False),
    ({"type": "long", "logicalType": "timestamp-micros"}, "timestamp", False),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, "timestamp_ntz", False),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp_ntz", False),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, "decimal(10,2)", False),
    ({"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4},
     "decimal(18,4)", False),
    ({"type": "int", "logicalType": "time-millis"}, "int", False),
    ({"type": "long", "logicalType": "time-micros"}, "bigint", False),
    ({"type": "string", "logicalType": "uuid"}, "string", False),
])
def test_avro_types_are_spark_avros(avro, spark, nullable):
    got = shape(avro)
    assert (got.data_type.simpleString(), got.nullable) == (spark, nullable)


def test_nullability_inside_records_arrays_and_maps_is_spark_avros():
    got = shape(record(("a", "int"), ("b", ["null", "int"]),
                       ("c", {"type": "array", "items": ["null", "int"]}),
                       ("d", {"type": "map", "values": "string"})))
    fields = {f.name: f for f in got.data_type.fields}
    assert (fields["a"].nullable, fields["b"].nullable) == (False, True)
    assert fields["c"].dataType == ArrayType(IntegerType(), True)
    assert fields["d"].dataType == MapType(StringType(), StringType(), False)


def test_schemas_spark_has_no_type_for_are_refused():
    with pytest.raises(AvroNotMappable, match="contains itself"):
        shape({"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]})
    with pytest.raises(AvroNotMappable, match="38"):
        shape({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 0})


RICH = record(
    ("pick", ["null", INNER, record(("y", "string"), name="Other"),
              {"type": "enum", "name": "E", "symbols": ["S"]}, "string"]),
    ("when", {"type": "long", "logicalType": "local-timestamp-micros"}),
    ("at", {"type": "int", "logicalType": "time-millis"}),
    ("id", {"type": "string", "logicalType": "uuid"}),
    ("price", {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 3}),
    ("sizes", {"type": "map", "values": ["null", "int"]}),
    ("wide", ["int", "long"]),
)


def decoding(reader: object, writers: dict[int, object], side: str = "value") -> AvroDecoding:
    return AvroDecoding(side, 1, parse(json.dumps(reader)).inline_json(), "test",
                        {i: parse(json.dumps(w)).inline_json() for i, w in writers.items()},
                        {7: "a JSON schema, not Avro"})


def decoder(reader: object, writers: dict[int, object]) -> SideDecoder:
    d = decoding(reader, writers)
    return SideDecoder(d, to_arrow_schema(StructType(d.fields()[:1]), timezone="UTC")[0].type)


def test_a_datum_of_every_kind_decodes_into_arrow_as_spark_reads_it():
    schema = parse(json.dumps(RICH))
    u = uuid.UUID(int=5)
    data = [
        {"pick": ("Inner", {"x": 3}), "when": datetime.datetime(2024, 5, 6, 7, 8, 9, 10),
         "at": datetime.time(1, 2, 3), "id": str(u), "price": decimal.Decimal("1.250"),
         "sizes": {"a": 1, "b": None}, "wide": 1 << 40},
        {"pick": ("Other", {"y": "z"}), "when": datetime.datetime(1999, 1, 1),
         "at": datetime.time(0, 0, 0, 1000), "id": str(u), "price": decimal.Decimal("-0.001"), "sizes": {},
         "wide": 2},
        {"pick": "S", "when": datetime.datetime(2000, 1, 1), "at": datetime.time(0), "id": str(u),
         "price": decimal.Decimal(0), "sizes": {}, "wide": 3},  # a symbol: written as the enum
        {"pick": "T", "when": datetime.datetime(2000, 1, 1), "at": datetime.time(0), "id": str(u),
         "price": decimal.Decimal(0), "sizes": {}, "wide": 4},  # not a symbol: the string branch
        {"pick": None, "when": datetime.datetime(2000, 1, 1), "at": datetime.time(0), "id": str(u),
         "price": decimal.Decimal(0), "sizes": {}, "wide": 5},
    ]
    column, ids, errors = decoder(RICH, {1: RICH}).decode([frame(1, schema.encode(d)) for d in data])
    assert (ids, errors) == ([1] * 5, [None] * 5)
    rows = column.to_pylist()
    members = [r["pick"] for r in rows]
    assert members == [
        {"member0": {"x": 3}, "member1": None, "member2": None, "member3": None},
        {"member0": None, "member1": {"y": "z"}, "member2": None, "member3": None},
        {"member0": None, "member1": None, "member2": "S", "member3": None},
        {"member0": None, "member1": None, "member2": None, "member3": "T"},
        None,
    ]
    first = rows[0]
    assert first["when"] == datetime.datetime(2024, 5, 6, 7, 8, 9, 10)
    assert (first["at"], first["id"], first["price"]) == (3_723_000, str(u), decimal.Decimal("1.250"))
    assert first["wide"] == 1 << 40
    assert dict(first["sizes"]) == {"a": 1, "b": None}


V1 = record(("id", "long"))
V2 = record(("id", "long"), ("note", "string"))
V2["fields"][1]["default"] = "none"


def test_writers_are_resolved_into_the_reader_and_what_does_not_decode_says_why():
    v1, v2 = parse(json.dumps(V1)), parse(json.dumps(V2))
    d = decoder(V2, {1: V2, 2: V1})
    column, ids, errors = d.decode([
        frame(2, v1.encode({"id": 1})), frame(1, v2.encode({"id": 2, "note": "hi"})), None,
        b"\x01\x00\x00\x00\x01a",
        frame(3, b"\x02"), frame(7, b"{}"), frame(2, b""), frame(2, v1.encode({"id": 1}) + b"\x00"),
    ])
    assert column.to_pylist()[:3] == [{"id": 1, "note": "none"}, {"id": 2, "note": "hi"}, None]
    assert column.to_pylist()[3:] == [None] * 5
    assert ids == [2, 1, None, None, 3, 7, 2, 2]
    assert errors[:3] == [None, None, None]
    assert "magic byte 1" in errors[3]
    assert errors[4] == "schema id 3 is not registered (the metadata log holds no schema with it)"
    assert errors[5] == "schema id 7: a JSON schema, not Avro"
    assert "does not read with writer schema id 2" in errors[6]
    assert "1 bytes after the datum" in errors[7]


def test_a_reader_that_cannot_read_the_writer_is_a_records_error():
    strings = record(("id", "string"))
    column, _ids, errors = decoder(strings, {1: strings, 2: V1}).decode(
        [frame(2, parse(json.dumps(V1)).encode({"id": 1}))])
    assert column.to_pylist() == [None] and "SchemaResolutionError" in errors[0]


def test_a_value_arrow_refuses_is_that_records_error():
    narrow = record(("p", {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 1}))
    wide = record(("p", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 1}))
    # Avro's encoding holds any unscaled integer: a writer can put more digits than the schema says.
    too_many = frame(1, parse(json.dumps(wide)).encode({"p": decimal.Decimal("123456.7")}))
    column, _ids, errors = decoder(narrow, {1: narrow}).decode(
        [frame(1, parse(json.dumps(narrow)).encode({"p": decimal.Decimal("12.3")})), too_many])
    assert column.to_pylist() == [{"p": decimal.Decimal("12.3")}, None]
    assert errors[0] is None and "does not fit the column's type" in errors[1]


def raw_batch(values: list[bytes | None]) -> pa.RecordBatch:
    table = LOG_TABLE.select(["topic", "partition", "offset", "value", "_corrupt"])
    return table.batch({"topic": ["t"] * len(values), "partition": [0] * len(values),
                        "offset": list(range(len(values))), "value": values,
                        "_corrupt": [None] * len(values)})


def test_batches_of_the_plain_table_become_the_decoded_table_in_both_modes():
    options = DecodingOptions.parse({"valueformat": "avro"}, from_files=True)
    decodings = {"value": decoding(V2, {1: V2, 2: V1})}
    schema = decoded_schema(decodings)
    table = read_table(StructType([schema[n] for n in ("offset", "value", "value_schema_id", "value_error")]),
                       options)
    check_types(table, decodings)
    values = [frame(2, parse(json.dumps(V1)).encode({"id": 5})), b"raw", None]
    permissive = BatchDecoder(table, decodings, fail_fast=False)
    assert permissive.raw_table.names() == ("offset", "value", "topic", "partition")
    out = permissive.batch(raw_batch(values).select(list(permissive.raw_table.names())))
    assert out.to_pydict()["value"] == [{"id": 5, "note": "none"}, None, None]
    assert out.to_pydict()["value_schema_id"] == [2, None, None]
    assert [e is not None for e in out.to_pydict()["value_error"]] == [False, True, False]
    failfast = BatchDecoder(table, decodings, fail_fast=True)
    with pytest.raises(RecordUndecodable, match="t-0 offset 1: the value does not decode: not framed"):
        failfast.batch(raw_batch(values).select(list(failfast.raw_table.names())))
    newer = {"value": decoding(V1, {1: V1})}
    with pytest.raises(ValueError, match="a new version since"):
        check_types(table, newer)


def test_the_decoded_tables_arrow_schema_is_the_one_spark_expects():
    decodings = {"value": decoding(RICH, {1: RICH}), "key": decoding("string", {1: "string"}, "key")}
    schema = decoded_schema(decodings)
    options = DecodingOptions.parse({"valueformat": "avro", "keyformat": "avro"}, from_files=True)
    assert read_table(schema, options).arrow_schema() == to_arrow_schema(schema, timezone="UTC")
    assert schema.fieldNames()[-6:] == ["key_schema_id", "key_error", "value_schema_id", "value_error",
                                        "_corrupt", "_lost"]
    with pytest.raises(ValueError, match="read the bytes without valueFormat"):
        read_table(StructType([StructField("value", BinaryType(), True)]), options)


@pytest.mark.parametrize(("given", "files", "error"), [
    ({"valueformat": "json"}, True, "valueFormat must be one of"),
    ({"valueformat": "avro", "valuesubject": "s", "valueschemaid": "3"}, True, "not both"),
    ({"valuesubject": "s"}, True, "apply to valueFormat=avro only"),
    ({"valueformat": "avro", "valueschemaid": "x"}, True, "must be an integer"),
    ({"valueformat": "avro", "valueschemaid": "0"}, True, "must be in 1.."),
    ({"valueformat": "avro"}, False, "give schemaRegistry"),
    ({"valueformat": "avro", "schemaregistry.user": "u"}, True, "apply to a schemaRegistry only"),
    ({"valueformat": "avro", "schemaregistry": "host:8081"}, True, "must be http"),
    ({"valueformat": "avro", "schemaregistry": "http://h:1", "schemaregistry.user": "u"}, True,
     "go together"),
    ({"schemaregistry": "http://h:1"}, True, "applies to valueFormat=avro or keyFormat=avro only"),
])
def test_options_are_refused_with_what_to_give(given, files, error):
    with pytest.raises(ValueError, match=error):
        DecodingOptions.parse(given, from_files=files)


def test_the_default_subject_is_the_one_topics():
    options = DecodingOptions.parse({"keyformat": "AVRO", "schemaregistry": "https://a:1, https://b:2/"},
                                    from_files=False)
    assert options is not None and options.registry is not None
    assert options.registry.urls == ("https://a:1", "https://b:2")
    key = options.side("key")
    assert key is not None and key.subject_for(frozenset({"orders"})) == "orders-key"
    with pytest.raises(ValueError, match="name one topic"):
        key.subject_for(frozenset({"a", "b"}))
    assert DecodingOptions.parse({"valueformat": "binary"}, from_files=True) is None
