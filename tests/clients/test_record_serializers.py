"""kanal's registry serializers (clients/record_serializers.py, clients/avro_json.py) against a stand-in
registry: JSON values framed as every registry client frames them and read back equal, for Avro, JSON
Schema and Protobuf; the schema chosen per subject (given and registered or looked up, by id, the latest);
mismatches and bad values as one-line KanalErrors."""

from __future__ import annotations

import io
import json

import fastavro
import pytest
from google.protobuf import json_format

from kanal.clients.record_serializers import RegistryDeserializer, RegistrySerializer
from kanal.clients.schema_registry_client import Schema, SchemaRegistryClient
from kanal.clients.serialization import KEY, VALUE, SerializationContext
from kanal.schemas.framing import unframe, unframe_message_indexes
from kanal.schemas.protobuf_schema import parse as parse_protobuf
from kanal.v1.error import ErrorCode, KanalError

from .fake_registry import FakeRegistry

ORDER = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 2}},
        {"name": "raw", "type": "bytes"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["NEW", "OLD"]}},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"},
                                                          {"name": "qty", "type": "int"}]}}},
        {"name": "extra", "type": {"type": "map", "values": ["null", "double", "Tag"]}},
        {"name": "parent", "type": ["null", "Order"], "default": None},
    ],
}
ORDER_JSON = {
    "id": 7, "note": "first", "tag": "ab", "raw": "\u0000\u00ff\u0010", "at": 1_700_000_000_123,
    "day": 19_000, "price": "12.30", "ref": "1b4e28ba-2fa1-11d2-883f-0016d3cca427", "kind": "OLD",
    "lines": [{"sku": "a-1", "qty": 2}], "extra": {"x": 1.5, "t": "zz", "n": None},
    "parent": {"id": 6, "note": None, "tag": "cd", "raw": "", "at": 0, "day": 0, "price": "-0.01",
               "ref": "00000000-0000-0000-0000-000000000000", "kind": "NEW", "lines": [], "extra": {},
               "parent": None},
}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"]}
POINTS = """syntax = "proto3";
package geo;
message Point { int64 x = 1; int64 y = 2; string label = 3; repeated int32 tags = 4; }
message Path { repeated Point points = 1; message Hop { int32 n = 1; } Hop hop = 2; }
"""
VALUE_CTX = SerializationContext("orders", VALUE, [])


@pytest.fixture
def fake():
    registry = FakeRegistry()
    yield registry
    registry.stop()


@pytest.fixture
def client(fake):
    return SchemaRegistryClient(fake.url)


def test_avro_json_values_round_trip_through_confluents_framing(client, fake):
    serializer = RegistrySerializer(client, "avro", schema=Schema(json.dumps(ORDER)))
    data = serializer(ORDER_JSON, VALUE_CTX)
    schema_id, payload = unframe(data)
    assert data[0] == 0 and fake.subjects == {"orders-value": [schema_id]}
    # The payload is fastavro's schemaless encoding of the datum (what confluent-kafka writes).
    datum = fastavro.schemaless_reader(io.BytesIO(bytes(payload)), fastavro.parse_schema(ORDER))
    assert datum["raw"] == b"\x00\xff\x10" and datum["tag"] == b"ab" and str(datum["price"]) == "12.30"
    assert RegistryDeserializer(client, "avro")(data, VALUE_CTX) == ORDER_JSON
    assert serializer(None, VALUE_CTX) is None and RegistryDeserializer(client)(None, VALUE_CTX) is None


def test_avro_values_that_do_not_fit_are_invalid_record(client):
    serializer = RegistrySerializer(client, "avro", schema=Schema('{"type": "record", "name": "R", "fields": '
                                                                  '[{"name": "n", "type": "int"}]}'))
    for value in ({"n": "seven"}, {"n": 2**40}, {}, [1]):
        with pytest.raises(KanalError) as err:
            serializer(value, VALUE_CTX)
        assert err.value.code == ErrorCode.INVALID_RECORD


def test_json_schema_values_are_validated_both_ways(client, fake):
    serializer = RegistrySerializer(client, "json", schema=Schema(json.dumps(PERSON), "JSON"))
    data = serializer({"name": "Ada", "age": 36}, SerializationContext("people", KEY, []))
    assert fake.subjects.keys() == {"people-key"}
    _, payload = unframe(data)
    assert json.loads(bytes(payload)) == {"name": "Ada", "age": 36}
    assert RegistryDeserializer(client, "json")(data, VALUE_CTX) == {"name": "Ada", "age": 36}
    with pytest.raises(KanalError) as err:
        serializer({"age": 1}, VALUE_CTX)
    assert err.value.code == ErrorCode.INVALID_RECORD and "name" in err.value.message
    forged = data[:5] + b'{"age": "x"}'  # framed with the id, but not valid under it
    with pytest.raises(KanalError) as err:
        RegistryDeserializer(client)(forged, VALUE_CTX)
    assert err.value.code == ErrorCode.INVALID_RECORD


def test_protobuf_json_in_message_out_with_message_indexes(client):
    first = RegistrySerializer(client, "protobuf", schema=Schema(POINTS, "PROTOBUF"))
    point = {"x": 1, "y": -2, "label": "a", "tags": [3, 4]}
    data = first(point, VALUE_CTX)
    _, payload = unframe(data)
    indexes, body = unframe_message_indexes(payload)
    assert indexes == [0] and payload[0] == 0  # the first message: the single byte 0
    parsed = parse_protobuf(POINTS)
    message = parsed.message_class([0]).FromString(bytes(body))
    assert json_format.MessageToDict(message, preserving_proto_field_name=True)["label"] == "a"
    assert RegistryDeserializer(client, "protobuf")(data, VALUE_CTX) == point  # int64 as numbers
    hop = RegistrySerializer(client, "protobuf", schema=Schema(POINTS, "PROTOBUF"), message="geo.Path.Hop")
    data = hop({"n": 5}, VALUE_CTX)
    assert unframe_message_indexes(unframe(data)[1])[0] == [1, 0]
    assert RegistryDeserializer(client)(data, VALUE_CTX) == {"n": 5}
    # A message object of the written type is taken as it is; another type is refused.
    assert first(message, VALUE_CTX) == first(point, VALUE_CTX)
    with pytest.raises(KanalError) as err:
        hop(message, VALUE_CTX)
    assert err.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(KanalError) as err:
        first({"x": "not a number"}, VALUE_CTX)
    assert err.value.code == ErrorCode.INVALID_RECORD


def test_the_schema_comes_from_an_id_the_latest_version_or_a_lookup(client, fake):
    person = Schema(json.dumps(PERSON), "JSON")
    schema_id = client.register("people-value", person)
    ctx = SerializationContext("people", VALUE, [])
    by_id = RegistrySerializer(client, "json", schema_id=schema_id)
    latest = RegistrySerializer(client, "json")
    looked_up = RegistrySerializer(client, "json", schema=person, auto_register=False)
    for serializer in (by_id, latest, looked_up):
        assert unframe(serializer({"name": "x"}, ctx))[0] == schema_id
    assert fake.count("POST", "/subjects/people-value/versions") == 1  # none registered again
    assert fake.count("GET", "/subjects/people-value/versions/latest") == 1
    latest({"name": "y"}, ctx)  # decided once per subject
    assert fake.count("GET", "/subjects/people-value/versions/latest") == 1
    with pytest.raises(KanalError) as err:  # the subject does not hold it: not registered either
        RegistrySerializer(client, "json", schema=person, auto_register=False)({"name": "x"}, VALUE_CTX)
    assert err.value.code == ErrorCode.SCHEMA_NOT_FOUND
    with pytest.raises(KanalError) as err:
        RegistrySerializer(client, "json")({"name": "x"}, VALUE_CTX)  # no orders-value subject
    assert err.value.code == ErrorCode.SUBJECT_NOT_FOUND


def test_formats_and_schema_types_must_agree(client):
    avro_id = client.register("a-value", Schema('"string"'))
    with pytest.raises(KanalError) as err:
        RegistrySerializer(client, "json", schema=Schema('"string"'))
    assert err.value.code == ErrorCode.INVALID_SCHEMA
    with pytest.raises(KanalError) as err:
        RegistrySerializer(client, "protobuf", schema_id=avro_id)("x", VALUE_CTX)
    assert err.value.code == ErrorCode.INVALID_SCHEMA and "AVRO" in err.value.message
    data = RegistrySerializer(client, "avro", schema_id=avro_id)("x", VALUE_CTX)
    with pytest.raises(KanalError) as err:
        RegistryDeserializer(client, "json")(data, VALUE_CTX)
    assert err.value.code == ErrorCode.INVALID_RECORD and "not JSON" in err.value.message
    with pytest.raises(KanalError) as err:
        RegistrySerializer(client, "xml")
    assert err.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KanalError) as err:
        RegistrySerializer(client, "avro", schema=Schema('{"type": "nope"}'))  # parsed at once
    assert err.value.code == ErrorCode.INVALID_SCHEMA


def test_the_deserializer_parses_each_id_once_and_refuses_unframed_bytes(client, fake):
    serializer = RegistrySerializer(client, "avro", schema=Schema('"long"'))
    deserializer = RegistryDeserializer(client, parsed_cached_max=1)
    values = [deserializer(serializer(n, VALUE_CTX), VALUE_CTX) for n in range(5)]
    assert values == list(range(5)) and fake.count("GET", "/schemas/ids/1") == 1
    for data in (b"plain text", b"\x00\x00\x00", b"\x00\x00\x00\x00\x00rest"):
        with pytest.raises(KanalError) as err:
            deserializer(data, VALUE_CTX)
        assert err.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(KanalError) as err:
        deserializer(b"\x00\x00\x00\x00\x09\x02", VALUE_CTX)  # an id the registry does not have
    assert err.value.code == ErrorCode.SCHEMA_NOT_FOUND
