"""Avro schemas (kanal/schemas/avro_schema.py): parsing with references, the normalized form, the
compatibility rules over a subject's versions, and encoding.

The expected verdicts of the compatibility table come from two sources:
- Confluent's "Schema Evolution and Compatibility" page
  (https://docs.confluent.io/platform/current/schema-registry/fundamentals/schema-evolution.html):
  BACKWARD allows deleting fields and adding optional ones (a field with a default), FORWARD allows adding
  fields and deleting optional ones, FULL allows only adding and deleting optional fields; the _TRANSITIVE
  levels check every earlier version, the others the latest only.
- The Avro specification's "Schema Resolution" section (https://avro.apache.org/docs/1.12.0/specification/),
  which Confluent's Avro rules are: a reader reads a writer's data when the names of records, enums and
  fixed match (or the reader lists the writer's name as an alias); int widens to long, float and double,
  long to float and double, float to double, and string and bytes read each other; a reader's field the
  writer lacks needs a default, a writer's field the reader lacks is skipped; a field is matched by name or
  by one of the reader's aliases; a writer's enum symbol the reader lacks is an error unless the reader's
  enum has a default; each branch a writer's union may write must be readable by the reader.
BACKWARD asks whether the new schema reads the old one's data, FORWARD the reverse, FULL both.
"""

from __future__ import annotations

import json

import pytest

from kanal.schemas.avro_schema import AvroSchema, DatumInvalid, parse
from kanal.schemas.compatibility import CompatibilityLevel, incompatibilities
from kanal.schemas.schema_types import SchemaInvalid, SchemaType


def record(*fields: dict, name: str = "User", namespace: str = "com.acme", **extra: object) -> str:
    schema = {"type": "record", "name": name, "namespace": namespace, "fields": list(fields), **extra}
    return json.dumps(schema)


def field(name: str, type_: object, **extra: object) -> dict:
    return {"name": name, "type": type_, **extra}


def enum(symbols: list[str], **extra: object) -> dict:
    return {"type": "enum", "name": "Color", "symbols": symbols, **extra}


ID = field("id", "long")


# -- parsing -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    record(ID, field("name", "string"), field("tags", {"type": "array", "items": "string"}),
           field("scores", {"type": "map", "values": "double"}), field("color", enum(["RED", "BLUE"])),
           field("hash", {"type": "fixed", "name": "Md5", "size": 16}),
           field("born", {"type": "int", "logicalType": "date"}),
           field("nick", ["null", "string"], default=None)),
    json.dumps(enum(["A", "B"], default="A")),
    json.dumps({"type": "fixed", "name": "Id", "size": 8}),
    '"string"', '{"type": "int"}', '["null", "string"]',
    '{"type": "array", "items": "long"}', '{"type": "map", "values": "bytes"}',
    json.dumps({"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}),
])
def test_every_kind_of_avro_schema_parses(text):
    schema = parse(text)
    assert schema.schema_type is SchemaType.AVRO
    assert parse(schema.canonical()).canonical() == schema.canonical()  # the normalized form is a schema


ADDRESS = record(field("street", "string"), name="Address")
COUNTRY = json.dumps({"type": "enum", "name": "Country", "namespace": "com.geo", "symbols": ["FR", "NO"]})
PLACE = record(field("street", "string"), field("country", "com.geo.Country"), name="Place")


def test_a_record_uses_a_type_a_reference_defines():
    schema = parse(record(ID, field("home", "com.acme.Address")), {"Address": ADDRESS})
    # The reference stays a reference in the normalized form, and is defined in the standalone one.
    assert '"type":"com.acme.Address"' in schema.canonical()
    assert json.loads(schema.inline_json())["fields"][1]["type"]["name"] == "com.acme.Address"
    datum = {"id": 1, "home": {"street": "Storgata 1"}}
    assert schema.decode(schema.encode(datum)) == datum


def test_references_may_use_each_other_and_come_in_any_order():
    # Place (listed first) needs Country: parsed once Country is known.
    schema = parse(record(ID, field("at", "com.acme.Place")), {"Place": PLACE, "Country": COUNTRY})
    datum = {"id": 1, "at": {"street": "Rue 2", "country": "FR"}}
    assert schema.decode(schema.encode(datum)) == datum


def test_the_whole_schema_may_be_a_referenced_type():
    assert parse('"com.acme.Address"', {"Address": ADDRESS}).canonical() == '"com.acme.Address"'


@pytest.mark.parametrize(("text", "references", "says"), [
    ("{not json", {}, "not JSON"),
    ("42", {}, "invalid Avro schema"),
    ("{}", {}, "invalid Avro schema"),
    ('"strng"', {}, "unknown type 'strng' at /"),
    (record(ID, field("home", "com.acme.Address")), {}, "unknown type 'com.acme.Address' at /fields/1/type"),
    (record(field("a", {"type": "array", "items": "Nope"})), {},
     "unknown type 'Nope' at /fields/0/type/items"),
    (record(field("a", ["null", "Nope"])), {}, "at /fields/0/type/1"),
    (record(field("at", "com.acme.Place")), {"Place": PLACE},
     "reference 'Place': unknown type 'com.geo.Country'"),
    (record(ID), {"Broken": '{"type": "record"}'}, "reference 'Broken'"),
    (record(field("a", "int", default="x")), {}, 'com.acme.User.a: the default "x"'),
    (record(field("a", "int", default=1 << 31)), {}, "not a value of its type"),
    (record(field("a", "long", default=1.5)), {}, "not a value of its type"),
    (record(field("a", "string", default=None)), {}, "not a value of its type"),
    (record(field("a", "boolean", default=0)), {}, "not a value of its type"),
    (record(field("a", "bytes", default="\u0100")), {}, "not a value of its type"),
    (record(field("a", {"type": "fixed", "name": "F", "size": 2}, default="abc")), {}, "not a value"),
    (record(field("a", enum(["RED"]), default="BLUE")), {}, "not a value of its type"),
    (record(field("a", {"type": "array", "items": "int"}, default=["x"])), {}, "not a value of its type"),
    (record(field("a", {"type": "map", "values": "int"}, default={"k": "x"})), {}, "not a value"),
    (record(field("a", ["null", "int"], default="x")), {}, "not a value of its type"),
    (record(field("a", {"type": "record", "name": "In", "fields": [field("b", "int")]}, default={})), {},
     "not a value of its type"),
    (json.dumps(enum(["A"], default="B")), {}, "invalid Avro schema"),
    (json.dumps(enum(["A", "A"])), {}, "Duplicate symbol"),
    (record(field("a", "int"), field("a", "long")), {}, "already in use"),
    (record(ID, name="1User"), {}, "not a valid Avro name"),
    ('["int", "int"]', {}, "already in Union"),
    ('["int", ["null", "string"]]', {}, "Unions cannot contain other unions"),
    ('{"type": "fixed", "name": "F"}', {}, "size"),
    (record(field("a", "int", order="sideways")), {}, "order"),
    ('{"type": "record", "name": "R", "fields": [1]}', {}, "invalid Avro schema"),
    ("[" * 100_000 + "]" * 100_000, {}, "nested deeper than"),
    ('{"type": "array", "items": ' * 2000 + '"int"' + "}" * 2000, {}, "nested deeper than"),
])
def test_invalid_schemas_are_refused_saying_what_and_where(text, references, says):
    with pytest.raises(SchemaInvalid) as refused:
        parse(text, references)
    assert says in refused.value.message


@pytest.mark.parametrize("text", [
    record(field("a", ["null", "int"], default=None)),
    # Avro 1.12's rule: a union's default may be a value of any branch, not only the first.
    record(field("a", ["null", "int"], default=3)),
    record(field("a", "double", default=1)),
    record(field("a", "bytes", default="\u00ff")),
    record(field("a", {"type": "record", "name": "In", "fields": [field("b", "int", default=1)]},
                 default={})),
    record(field("a", {"type": "int", "logicalType": "date"}, default=0)),
])
def test_valid_defaults_are_accepted(text):
    parse(text)


# -- the normalized form -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("one", "other"), [
    pytest.param(record(ID, field("n", "int")),
                 '{ "fields" : [ {"type": "long", "name": "id"}, {"name":"n","type":"int"} ],\n'
                 '  "namespace": "com.acme", "type": "record", "name": "User" }',
                 id="whitespace and key order"),
    pytest.param(record(field("n", "int")), record(field("n", {"type": "int"})),
                 id="a primitive as an object"),
    pytest.param(record(ID), json.dumps({"type": "record", "name": "com.acme.User", "fields": [ID]}),
                 id="namespace on the name"),
    pytest.param(record(field("home", {"type": "record", "name": "Address", "fields": []})),
                 record(field("home", {"type": "record", "name": "com.acme.Address", "fields": []})),
                 id="namespace inherited or spelled out"),
    pytest.param(record(ID, aliases=["Person"]), record(ID, aliases=["com.acme.Person"]),
                 id="an alias relative to the namespace"),
    pytest.param(record(field("n", "int", order="ascending")), record(field("n", "int")), id="default order"),
])
def test_equivalent_spellings_normalize_to_one_text(one, other):
    assert parse(one).canonical() == parse(other).canonical()


@pytest.mark.parametrize(("one", "other"), [
    pytest.param(record(field("n", "int", default=1)), record(field("n", "int", default=2)), id="default"),
    pytest.param(record(field("n", "int", default=1)), record(field("n", "int")), id="a default or none"),
    pytest.param(record(field("n", "int", aliases=["m"])), record(field("n", "int")), id="a field alias"),
    pytest.param(record(ID, aliases=["Person"]), record(ID), id="a record alias"),
    pytest.param(record(field("n", "int")), record(field("n", {"type": "int", "logicalType": "date"})),
                 id="a logical type"),
    pytest.param(record(ID, field("n", "int")), record(field("n", "int"), ID), id="field order"),
    pytest.param(record(field("n", "int", order="descending")), record(field("n", "int")), id="sort order"),
    pytest.param(json.dumps(enum(["A", "B"])), json.dumps(enum(["B", "A"])), id="enum symbol order"),
    pytest.param('["null", "int"]', '["int", "null"]', id="union branch order"),
    pytest.param(record(ID, namespace="com.acme"), record(ID, namespace="org.acme"), id="namespace"),
    # Kept on purpose (the module's docstring says why): a doc-only change is a new text to register.
    pytest.param(record(ID, doc="a user"), record(ID), id="doc"),
])
def test_anything_that_changes_meaning_keeps_texts_apart(one, other):
    assert parse(one).canonical() != parse(other).canonical()


# -- compatibility -----------------------------------------------------------------------------------------

OK, NO = True, False

# (change, old schema, new schema, BACKWARD, FORWARD, FULL)
COMPATIBILITY_TABLE = [
    ("add a field with a default", record(ID), record(ID, field("name", "string", default="")), OK, OK, OK),
    ("add a field without a default", record(ID), record(ID, field("name", "string")), NO, OK, NO),
    ("add an optional field (null union)", record(ID),
     record(ID, field("nick", ["null", "string"], default=None)), OK, OK, OK),
    ("remove a field with a default", record(ID, field("name", "string", default="")), record(ID),
     OK, OK, OK),
    ("remove a field without a default", record(ID, field("name", "string")), record(ID), OK, NO, NO),
    ("rename a field, no alias", record(ID, field("name", "string")),
     record(ID, field("full_name", "string")),
     NO, NO, NO),
    ("rename a field, alias to the old name", record(ID, field("name", "string")),
     record(ID, field("full_name", "string", aliases=["name"])), OK, NO, NO),
    ("rename a field with a default, no alias", record(ID, field("name", "string", default="")),
     record(ID, field("full_name", "string", default="")), OK, OK, OK),
    ("int to long", record(field("n", "int")), record(field("n", "long")), OK, NO, NO),
    ("long to int", record(field("n", "long")), record(field("n", "int")), NO, OK, NO),
    ("int to float", record(field("n", "int")), record(field("n", "float")), OK, NO, NO),
    ("int to double", record(field("n", "int")), record(field("n", "double")), OK, NO, NO),
    ("long to double", record(field("n", "long")), record(field("n", "double")), OK, NO, NO),
    ("float to double", record(field("n", "float")), record(field("n", "double")), OK, NO, NO),
    ("double to float", record(field("n", "double")), record(field("n", "float")), NO, OK, NO),
    ("string to bytes", record(field("s", "string")), record(field("s", "bytes")), OK, OK, OK),
    ("bytes to string", record(field("s", "bytes")), record(field("s", "string")), OK, OK, OK),
    ("array items int to long", record(field("a", {"type": "array", "items": "int"})),
     record(field("a", {"type": "array", "items": "long"})), OK, NO, NO),
    ("add an enum symbol", record(field("c", enum(["RED", "BLUE"]))),
     record(field("c", enum(["RED", "BLUE", "GREEN"]))), OK, NO, NO),
    ("remove an enum symbol", record(field("c", enum(["RED", "BLUE"]))), record(field("c", enum(["RED"]))),
     NO, OK, NO),
    ("add an enum symbol, enum default in both", record(field("c", enum(["RED", "BLUE"], default="RED"))),
     record(field("c", enum(["RED", "BLUE", "GREEN"], default="RED"))), OK, OK, OK),
    ("remove an enum symbol, enum default in the new", record(field("c", enum(["RED", "BLUE"]))),
     record(field("c", enum(["RED"], default="RED"))), OK, OK, OK),
    ("make a field a union with null", record(field("n", "int")),
     record(field("n", ["null", "int"], default=None)), OK, NO, NO),
    ("make a union field plain", record(field("n", ["null", "int"], default=None)), record(field("n", "int")),
     NO, OK, NO),
    ("add a union branch", record(field("n", ["null", "int"])), record(field("n", ["null", "int", "string"])),
     OK, NO, NO),
    ("remove a union branch", record(field("n", ["null", "int", "string"])),
     record(field("n", ["null", "int"])),
     NO, OK, NO),
    ("int to string", record(field("n", "int")), record(field("n", "string")), NO, NO, NO),
    ("string to a record", record(field("n", "string")),
     record(field("n", {"type": "record", "name": "N", "fields": []})), NO, NO, NO),
    ("fixed size", record(field("h", {"type": "fixed", "name": "H", "size": 16})),
     record(field("h", {"type": "fixed", "name": "H", "size": 32})), NO, NO, NO),
    ("rename the record, no alias", record(ID), record(ID, name="Customer"), NO, NO, NO),
    ("rename the record, alias to the old name", record(ID), record(ID, name="Customer", aliases=["User"]),
     OK, NO, NO),
    ("nested record: add a field with a default",
     record(field("home", {"type": "record", "name": "Address", "fields": [field("street", "string")]})),
     record(field("home", {"type": "record", "name": "Address",
                           "fields": [field("street", "string"), field("zip", "string", default="")]})),
     OK, OK, OK),
    ("nested record: add a field without a default",
     record(field("home", {"type": "record", "name": "Address", "fields": [field("street", "string")]})),
     record(field("home", {"type": "record", "name": "Address",
                           "fields": [field("street", "string"), field("zip", "string")]})),
     NO, OK, NO),
    ("change a doc", record(ID, doc="old"), record(ID, doc="new"), OK, OK, OK),
]


@pytest.mark.parametrize(("change", "old", "new", "backward", "forward", "full"), COMPATIBILITY_TABLE,
                         ids=[row[0] for row in COMPATIBILITY_TABLE])
def test_compatibility_table(change, old, new, backward, forward, full):
    previous = [parse(old)]
    for level, expected in ((CompatibilityLevel.BACKWARD, backward), (CompatibilityLevel.FORWARD, forward),
                            (CompatibilityLevel.FULL, full)):
        found = incompatibilities(parse(new), previous, level)
        assert (found == []) is expected, f"{change} under {level}: {found}"
        assert all(why.startswith("version 1 (") for why in found)


def test_a_transitive_level_checks_every_version_not_only_the_latest():
    v1 = parse(record(ID))
    v2 = parse(record(ID, field("name", "string", default="")))
    v3 = parse(record(ID, field("name", "string")))  # reads v2's data (which has name), not v1's
    assert incompatibilities(v3, [v1, v2], CompatibilityLevel.BACKWARD) == []
    found = incompatibilities(v3, [v1, v2], CompatibilityLevel.BACKWARD_TRANSITIVE)
    assert found == [("version 1 (backward: the new schema reading its data): com.acme.User/name: the "
                      "reader's field has no default and the writer has no field of that name or alias")]


def test_reasons_name_the_place_that_fails():
    old = parse(record(field("home", {"type": "record", "name": "Address",
                                      "fields": [field("zip", "int"), field("tags", {"type": "array",
                                                                                     "items": "string"})]})))
    new = parse(record(field("home", {"type": "record", "name": "Address",
                                      "fields": [field("zip", "string"), field("tags", {"type": "array",
                                                                                       "items": "int"})]})))
    found = new.incompatibilities(old)
    assert [why.split(":")[0] for why in found] == ["com.acme.User/home/zip", "com.acme.User/home/tags/items"]
    assert "type mismatch" in found[0] and "string" in found[0] and "int" in found[0]


def test_recursive_types_are_compared_without_looping():
    def linked(value_type: str) -> AvroSchema:
        return parse(record(field("value", value_type), field("next", ["null", "Node"], default=None),
                            name="Node"))
    assert linked("long").incompatibilities(linked("int")) == []
    assert linked("int").incompatibilities(linked("long")) != []


class JsonStandIn:
    """Another format's schema, as far as the interface goes."""

    schema_type = SchemaType.JSON

    def canonical(self) -> str:
        return "{}"

    def incompatibilities(self, writer: object) -> list[str]:
        return []


def test_a_writer_of_another_format_is_one_incompatibility():
    found = parse(record(ID)).incompatibilities(JsonStandIn())
    assert len(found) == 1 and "JSON" in found[0]


# -- data --------------------------------------------------------------------------------------------------


def test_a_datum_round_trips_through_the_schemaless_binary():
    schema = parse(record(ID, field("name", "string"), field("nick", ["null", "string"], default=None),
                          field("tags", {"type": "array", "items": "string"}),
                          field("c", enum(["RED", "BLUE"])), field("raw", "bytes")))
    datum = {"id": 7, "name": "Ada", "nick": None, "tags": ["x", "y"], "c": "BLUE", "raw": b"\x00\xff"}
    data = schema.encode(datum)
    assert data[:1] == b"\x0e"  # Avro binary: the first field first, 7 as a zigzag varint; no header
    assert schema.decode(data) == datum


def test_a_new_reader_fills_an_old_writers_data_with_the_default():
    old = parse(record(ID))
    new = parse(record(ID, field("name", "string", default="unknown")))
    assert new.decode_with(old, old.encode({"id": 1})) == {"id": 1, "name": "unknown"}


@pytest.mark.parametrize("datum", [{"id": "one"}, {}, {"id": 1 << 63}, 5])
def test_a_datum_that_is_not_a_value_of_the_schema_is_refused(datum):
    with pytest.raises(DatumInvalid):
        parse(record(ID)).encode(datum)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\x02\x00"])
def test_bytes_that_are_not_exactly_one_datum_are_refused(data):
    with pytest.raises(DatumInvalid):
        parse(record(ID)).decode(data)
