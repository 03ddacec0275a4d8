"""Protobuf schemas (kanal/schemas/protobuf_schema.py, protobuf_text.py): compiled by protoc, normalized,
used to build message classes, and checked for compatibility.

The compatibility table's verdicts follow Confluent's Protobuf rules and Protobuf's own, as the module's
docstring lists them (with the rows where kanal decides and why):
- Confluent: https://docs.confluent.io/platform/current/schema-registry/fundamentals/schema-evolution.html
  (adding a message type is not forward compatible; its checker's rules, confluentinc/schema-registry's
  protobuf-provider `diff` package, for everything else);
- Protobuf's language guide, "Updating A Message Type": https://protobuf.dev/programming-guides/proto3/#updating
  and https://protobuf.dev/programming-guides/proto2/#updating.
"""

from __future__ import annotations

import base64
import glob
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest
from google.protobuf import timestamp_pb2

from kanal.schemas.compatibility import CompatibilityLevel, incompatibilities
from kanal.schemas.framing import FramingError
from kanal.schemas.protobuf_schema import ProtobufSchema, parse
from kanal.schemas.schema_types import SchemaInvalid, SchemaType


def p3(body: str, package: str = "t") -> str:
    return f'syntax = "proto3";\npackage {package};\n{body}\n'


def p2(body: str, package: str = "t") -> str:
    return f'syntax = "proto2";\npackage {package};\n{body}\n'


# Parsing


def test_a_proto3_file_compiles_with_its_nested_messages_in_index_order():
    schema = parse(p3("""
        message Order {
          string id = 1;
          Line line = 2;
          message Line { int64 sku = 1; Detail detail = 2; message Detail { string note = 1; } }
          message Tag { string name = 1; }
        }
        enum Status { UNKNOWN = 0; }
        message Shipment { Order order = 1; Status status = 2; }
    """, package="shop"))
    assert schema.schema_type is SchemaType.PROTOBUF
    assert (schema.syntax, schema.package) == ("proto3", "shop")
    assert schema.message_names() == ["shop.Order", "shop.Order.Line", "shop.Order.Line.Detail",
                                      "shop.Order.Tag", "shop.Shipment"]
    assert [schema.indexes_of(name) for name in schema.message_names()] == \
        [[0], [0, 0], [0, 0, 0], [0, 1], [1]]


def test_a_proto2_file_compiles_with_required_fields_defaults_groups_and_extensions():
    schema = parse(p2("""
        message User {
          required string name = 1;
          optional int32 age = 2 [default = 18];
          optional group Address = 3 { optional string city = 1; }
          extensions 100 to 199;
        }
        extend User { optional string nickname = 100; }
    """))
    assert schema.syntax == "proto2"
    assert schema.message_names() == ["t.User", "t.User.Address"]
    user = schema.message_class([0])(name="ann")
    assert user.age == 18


def test_a_file_that_names_no_syntax_is_proto2():
    assert parse("message M { optional int32 a = 1; }").syntax == "proto2"


def test_well_known_types_resolve_without_references():
    schema = parse(p3("""
        import "google/protobuf/timestamp.proto";
        import "google/protobuf/struct.proto";
        import "google/protobuf/any.proto";
        import "google/protobuf/wrappers.proto";
        message Event {
          google.protobuf.Timestamp at = 1;
          google.protobuf.Struct attributes = 2;
          google.protobuf.Any payload = 3;
          google.protobuf.StringValue note = 4;
        }
    """))
    event = schema.message_class([0])()
    event.at.seconds = 1_700_000_000
    assert event.at.seconds == 1_700_000_000
    assert schema.message_names() == ["t.Event"]  # the imported files' messages are theirs, not the schema's


def test_a_reference_is_an_imported_file_given_by_its_import_path():
    other = p3("message Money { int64 units = 1; string currency = 2; }", package="common")
    schema = parse(p3("""
        import "common/money.proto";
        message Payment { common.Money amount = 1; }
    """), {"common/money.proto": other})
    payment = schema.message_class([0])()
    payment.amount.units = 5
    assert payment.amount.currency == ""
    assert schema.message_names() == ["t.Payment"]


def test_references_chain_through_each_other():
    leaf = p3("message Leaf { string v = 1; }", package="a")
    middle = p3('import "a/leaf.proto";\nmessage Middle { a.Leaf leaf = 1; }', package="b")
    schema = parse(p3('import "b/middle.proto";\nmessage Top { b.Middle middle = 1; }'),
                   {"b/middle.proto": middle, "a/leaf.proto": leaf})
    top = schema.message_class([0])()
    top.middle.leaf.v = "x"
    assert schema.message_class([0]).FromString(top.SerializeToString()).middle.leaf.v == "x"


def test_a_base64_file_descriptor_is_accepted_as_confluent_kafkas_serializer_registers_it():
    registered = base64.standard_b64encode(timestamp_pb2.DESCRIPTOR.serialized_pb).decode("ascii")
    schema = parse(registered)
    assert schema.message_names() == ["google.protobuf.Timestamp"]
    assert schema.canonical() == parse(schema.canonical()).canonical()
    text = p3('import "google/protobuf/timestamp.proto";\nimport "money.proto";\n'
              "message Payment { common.Money amount = 1; google.protobuf.Timestamp at = 2; }")
    money = parse(p3("message Money { int64 units = 1; }", package="common"))
    as_text = parse(text, {"money.proto": money.text})
    as_descriptors = parse(as_text.serialized(), {"money.proto": money.serialized()})
    assert as_descriptors.canonical() == as_text.canonical()
    assert as_descriptors.message_class([0])(at={"seconds": 5}).at.seconds == 5
    # Older serializers register the well-known types they import as references too.
    with_known = parse(as_text.serialized(), {"money.proto": money.serialized(),
                                              "google/protobuf/timestamp.proto": registered})
    assert with_known.canonical() == as_text.canonical()


@pytest.mark.parametrize("text", ["AAAA", "bm90IGEgZGVzY3JpcHRvcg==", "bm90IGEgZGVzY3JpcHRvcg=", "!!!!"])
def test_text_that_is_neither_proto_nor_a_descriptor_is_refused(text):
    with pytest.raises(SchemaInvalid):
        parse(text)


@pytest.mark.parametrize(("text", "references", "says"), [
    (p3("message M {\n  int32 a = 1;\n  strin b = 2;\n}"), {}, 'schema.proto:5:3: "strin" is not defined'),
    (p3("message M {\n  int32 a = 1\n}"), {}, "schema.proto:5:1: Expected \";\""),
    (p3("message M { int32 a = 1; int32 b = 1; }"), {}, "schema.proto:3:"),
    (p3("message M { required int32 a = 1; }"), {}, "schema.proto:3:"),
    ("this is not a proto file", {}, "schema.proto:1:1"),
    (p3('import "other.proto";\nmessage M { other.O o = 1; }'), {}, "other.proto: File not found"),
    (p3('import "other.proto";\nmessage M { O o = 1; }'), {"other.proto": p3("message O {\n  bad }")},
     "other.proto:4:"),
], ids=["unknown type", "syntax error", "number reused", "proto3 required", "not proto", "import missing",
        "reference invalid"])
def test_an_invalid_text_is_refused_with_protocs_message_naming_the_line(text, references, says):
    with pytest.raises(SchemaInvalid) as refused:
        parse(text, references)
    assert says in str(refused.value)
    assert tempfile.gettempdir() not in str(refused.value)


@pytest.mark.parametrize("name", ["/abs.proto", "../up.proto", "a/../../b.proto", "a//b.proto", "./a.proto",
                                  "notproto.txt", "pkg/__init__.py", "a\\b.proto"])
def test_a_reference_name_that_is_not_a_relative_proto_path_is_refused(name):
    with pytest.raises(SchemaInvalid, match="not an import path"):
        parse(p3("message M { int32 a = 1; }"), {name: p3("message O {}")})


def test_a_reference_may_be_called_schema_proto():
    shared = p3("message Shared { string id = 1; }", package="common")
    schema = parse(p3('import "schema.proto";\nmessage M { common.Shared s = 1; }'), {"schema.proto": shared})
    assert schema.message_names() == ["t.M"]
    assert schema.file.name == "schema1.proto"


def test_compiles_leave_no_temporary_files():
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "kanal-protoc-*")))
    parse(p3("message NoLeak { int32 a = 1; }"))
    with pytest.raises(SchemaInvalid):
        parse(p3("message NoLeak { int32 a = ; }"))
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "kanal-protoc-*"))) == before


def test_several_threads_compile_at_once():
    texts = [p3(f"message M{i} {{ int32 f{i} = {i + 1}; }}", package=f"threads{i}") for i in range(6)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        schemas = list(pool.map(parse, texts))
    assert [s.message_names() for s in schemas] == [[f"threads{i}.M{i}"] for i in range(6)]


# Message indexes and classes


def test_a_message_built_with_its_class_round_trips_through_its_bytes():
    schema = parse(p3("""
        message Order {
          string id = 1;
          repeated Line lines = 2;
          map<string, int64> totals = 3;
          optional int32 priority = 4;
          oneof payment { string card = 5; string iban = 6; }
          message Line { int64 sku = 1; uint32 qty = 2; }
        }
    """, package="shop"))
    indexes = schema.indexes_of("shop.Order.Line")
    assert indexes == [0, 1]  # the map's entry message counts first, as confluent-kafka's serializer counts
    line_class = schema.message_class(indexes)
    order_class = schema.message_class(schema.indexes_of("shop.Order"))
    order = order_class(id="o-1", priority=0, iban="DE00")
    order.lines.add(sku=7, qty=2)
    order.totals["eur"] = 1250
    back = order_class.FromString(order.SerializeToString())
    assert back == order
    assert (back.lines[0].qty, back.totals["eur"], back.HasField("priority"), back.WhichOneof("payment")) == \
        (2, 1250, True, "iban")
    assert line_class.DESCRIPTOR.full_name == "shop.Order.Line"


def test_indexes_count_nested_messages_as_the_descriptors_nested_types_do():
    schema = parse(p3("message A { map<string, int32> m = 1; message B {} message C {} }\nmessage D {}"))
    descriptor = schema.message_class([0]).DESCRIPTOR
    for name in ("t.A.B", "t.A.C"):
        index = schema.indexes_of(name)[1]
        assert descriptor.nested_types[index].full_name == name
    assert schema.message_names() == ["t.A", "t.A.B", "t.A.C", "t.D"]
    assert schema.indexes_of("t.D") == [1]


def test_indexes_that_name_no_message_are_a_framing_error_and_an_unknown_name_a_key_error():
    schema = parse(p3("message A { message B {} }"))
    for indexes in ([1], [0, 1], [0, 0, 0], []):
        with pytest.raises(FramingError):
            schema.message_class(indexes)
    with pytest.raises(KeyError):
        schema.indexes_of("t.Missing")


def test_the_message_classes_are_the_schemas_own_not_the_default_pools():
    schema = parse(p3("message Timestamp { int64 seconds = 1; }", package="google.protobuf"))
    mine = schema.message_class([0])
    assert mine is not timestamp_pb2.Timestamp
    assert mine(seconds=3).SerializeToString() == timestamp_pb2.Timestamp(seconds=3).SerializeToString()


# The normalized form

BASE = p3("""
    import "google/protobuf/timestamp.proto";
    message Order {
      string id = 1;
      repeated int32 counts = 2;
      google.protobuf.Timestamp at = 3;
      Status status = 4;
    }
    enum Status { NEW = 0; PAID = 1; }
    message Ack { string id = 1; }
""", package="shop")


@pytest.mark.parametrize(("why", "text"), [
    ("whitespace and comments", """// the orders
syntax   =   "proto3" ;  package shop;
import "google/protobuf/timestamp.proto";
/* an order */ message Order { string id = 1; repeated int32 counts = 2;
google.protobuf.Timestamp at = 3; Status status = 4; }
enum Status { NEW = 0; PAID = 1; } // statuses
message Ack { string id = 1; }"""),
    ("field order", BASE.replace("string id = 1;\n      repeated int32 counts = 2;",
                                 "repeated int32 counts = 2;\n      string id = 1;")),
    ("enum before the messages", p3("""
        import "google/protobuf/timestamp.proto";
        enum Status { NEW = 0; PAID = 1; }
        message Order { string id = 1; repeated int32 counts = 2; google.protobuf.Timestamp at = 3;
                        Status status = 4; }
        message Ack { string id = 1; }
    """, package="shop")),
    ("absolute type names", BASE.replace("google.protobuf.Timestamp at", ".google.protobuf.Timestamp at")
                                .replace("Status status", ".shop.Status status")),
    ("options that say the default",
     BASE.replace("counts = 2;", "counts = 2 [packed = true, deprecated = false];")
         .replace("string id = 1;\n      repeated", "string id = 1 [json_name = \"id\"];\n      repeated")),
])
def test_texts_that_differ_only_in_spelling_have_one_normalized_form(why, text):
    assert parse(text).canonical() == parse(BASE).canonical(), why


@pytest.mark.parametrize(("why", "text"), [
    ("messages reordered (their indexes change)", p3("""
        import "google/protobuf/timestamp.proto";
        message Ack { string id = 1; }
        message Order { string id = 1; repeated int32 counts = 2; google.protobuf.Timestamp at = 3;
                        Status status = 4; }
        enum Status { NEW = 0; PAID = 1; }
    """, package="shop")),
    ("a field's type", BASE.replace("string id = 1;\n      repeated", "bytes id = 1;\n      repeated")),
    ("a field's number", BASE.replace("Status status = 4;", "Status status = 5;")),
    ("an option that changes the encoding", BASE.replace("counts = 2;", "counts = 2 [packed = false];")),
    ("a json name", BASE.replace("string id = 1;\n      repeated",
                                 "string id = 1 [json_name = \"ID\"];\n      repeated")),
    ("the package", BASE.replace("package shop;", "package store;")),
])
def test_texts_that_differ_in_substance_have_different_normalized_forms(why, text):
    assert parse(text).canonical() != parse(BASE).canonical(), why


def test_the_normalized_form_is_readable_proto_text():
    assert parse(BASE).canonical() == """syntax = "proto3";
package shop;

import "google/protobuf/timestamp.proto";

message Order {
  string id = 1;
  repeated int32 counts = 2;
  .google.protobuf.Timestamp at = 3;
  .shop.Status status = 4;
}

message Ack {
  string id = 1;
}

enum Status {
  NEW = 0;
  PAID = 1;
}
"""


ROUND_TRIPS = {
    "proto3 with custom options, maps, oneofs and optional": p3("""
        import "google/protobuf/descriptor.proto";
        option java_package = "dev.kanal.test";
        message Meta { string doc = 1; repeated string tags = 2; }
        extend google.protobuf.FieldOptions { Meta meta = 50000; int32 level = 50001; }
        message M {
          option deprecated = true;
          string a_b = 1 [(meta) = { doc: "hi \\"q\\"" tags: "x" tags: "y" }, (level) = 3, deprecated = true];
          repeated int32 r = 2 [packed = false];
          map<string, M> m = 3;
          message N { reserved 2, 5 to 9, 100 to max; reserved "gone"; }
          optional double o = 4;
          oneof choice { string s = 5; N n = 6; }
          map<int64, bytes> later = 7;
          message After {}
        }
        enum E { option allow_alias = true; Z = 0; B = 2; A = 1; AA = 1 [deprecated = true]; }
        service S {
          rpc Get (M) returns (stream M.N);
          rpc Put (stream M) returns (M) { option deprecated = true; }
        }
    """),
    "proto2 with defaults, groups, extensions": p2("""
        message Outer {
          required int32 id = 1 [default = -7];
          optional string s = 2 [default = "a\\"b\\n\\xc3\\xa9"];
          optional bytes b = 3 [default = "\\000\\xff"];
          optional double d = 4 [default = -inf];
          optional float f = 10 [default = 0.1];
          optional group Grp = 5 { optional int32 x = 1; }
          repeated int32 r = 6 [packed = true];
          map<string, Outer> m = 7;
          message Inner { optional E e = 1 [default = B]; }
          enum E { C = 3; A = 1; B = 2; }
          oneof choice { int32 i = 8; group G2 = 9 { optional int32 y = 1; } }
          extensions 100 to 199;
          reserved 20 to 25, 30;
        }
        extend Outer { optional int32 ext = 100; optional group EG = 101 { optional int32 z = 1; } }
        message Later {}
    """),
    "editions": """
        edition = "2023";
        package ed;
        option features.field_presence = IMPLICIT;
        message E {
          int32 x = 1 [features.field_presence = EXPLICIT];
          reserved foo, bar;
          repeated int32 r = 2;
        }
    """,
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_the_normalized_form_compiles_to_the_same_schema_with_the_same_indexes(name):
    schema = parse(ROUND_TRIPS[name])
    again = parse(schema.canonical())
    assert again.canonical() == schema.canonical()
    assert again.message_names() == schema.message_names()
    assert [again.indexes_of(n) for n in again.message_names()] == \
        [schema.indexes_of(n) for n in schema.message_names()]
    assert again.incompatibilities(schema) == [] and schema.incompatibilities(again) == []


def test_custom_options_and_defaults_are_kept_in_the_normalized_form():
    text = parse(ROUND_TRIPS["proto3 with custom options, maps, oneofs and optional"]).canonical()
    assert '(.t.meta) = { doc: "hi \\"q\\"" tags: "x" tags: "y" }' in text
    assert "(.t.level) = 3" in text and "[packed = false]" in text
    proto2 = parse(ROUND_TRIPS["proto2 with defaults, groups, extensions"]).canonical()
    assert '[default = "a\\"b\\n\\303\\251"]' in proto2 and "[default = -inf]" in proto2
    assert "repeated int32 r = 6 [packed = true];" in proto2


# Compatibility: one row per kind of change, with the verdict under BACKWARD (the new schema reads the old
# one's data), FORWARD (the old reads the new's) and FULL (both), as the module docstring's table says.

OK, NO = True, False
I_MSG = "message I { int32 x = 1; }\n"
TABLE = [
    ("field added", p3("message M { int32 a = 1; }"), p3("message M { int32 a = 1; string b = 2; }"),
     OK, OK, OK),
    ("field removed", p3("message M { int32 a = 1; string b = 2; }"), p3("message M { int32 a = 1; }"),
     OK, OK, OK),
    ("field renamed", p3("message M { int32 a = 1; }"), p3("message M { int32 renamed = 1; }"), OK, OK, OK),
    ("field renumbered", p3("message M { int32 a = 1; }"), p3("message M { int32 a = 2; }"), OK, OK, OK),
    ("int32 -> int64", p3("message M { int32 a = 1; }"), p3("message M { int64 a = 1; }"), OK, OK, OK),
    ("int32 -> uint64", p3("message M { int32 a = 1; }"), p3("message M { uint64 a = 1; }"), OK, OK, OK),
    ("uint32 -> bool", p3("message M { uint32 a = 1; }"), p3("message M { bool a = 1; }"), OK, OK, OK),
    ("enum -> int32", p3("enum E { Z = 0; }\nmessage M { E a = 1; }"), p3("message M { int32 a = 1; }"),
     OK, OK, OK),
    ("enum -> another enum", p3("enum E { Z = 0; }\nenum F { Y = 0; }\nmessage M { E a = 1; }"),
     p3("enum E { Z = 0; }\nenum F { Y = 0; }\nmessage M { F a = 1; }"), OK, OK, OK),
    ("sint32 -> sint64", p3("message M { sint32 a = 1; }"), p3("message M { sint64 a = 1; }"), OK, OK, OK),
    ("int32 -> sint32", p3("message M { int32 a = 1; }"), p3("message M { sint32 a = 1; }"), NO, NO, NO),
    ("fixed32 -> sfixed32", p3("message M { fixed32 a = 1; }"), p3("message M { sfixed32 a = 1; }"),
     OK, OK, OK),
    ("fixed64 -> sfixed64", p3("message M { fixed64 a = 1; }"), p3("message M { sfixed64 a = 1; }"),
     OK, OK, OK),
    ("fixed32 -> fixed64", p3("message M { fixed32 a = 1; }"), p3("message M { fixed64 a = 1; }"),
     NO, NO, NO),
    ("int32 -> fixed32", p3("message M { int32 a = 1; }"), p3("message M { fixed32 a = 1; }"), NO, NO, NO),
    ("float -> double", p3("message M { float a = 1; }"), p3("message M { double a = 1; }"), NO, NO, NO),
    ("string -> bytes", p3("message M { string a = 1; }"), p3("message M { bytes a = 1; }"), OK, OK, OK),
    ("int32 -> string", p3("message M { int32 a = 1; }"), p3("message M { string a = 1; }"), NO, NO, NO),
    ("message -> bytes", p3(I_MSG + "message M { I a = 1; }"), p3(I_MSG + "message M { bytes a = 1; }"),
     OK, NO, NO),
    ("scalar -> message", p3(I_MSG + "message M { int32 a = 1; }"), p3(I_MSG + "message M { I a = 1; }"),
     NO, NO, NO),
    ("message -> another message", p3(I_MSG + "message J { int32 x = 1; }\nmessage M { I a = 1; }"),
     p3(I_MSG + "message J { int32 x = 1; }\nmessage M { J a = 1; }"), NO, NO, NO),
    ("a field's message changes incompatibly", p3(I_MSG + "message M { I a = 1; }"),
     p3("message I { string x = 1; }\nmessage M { I a = 1; }"), NO, NO, NO),
    ("string singular -> repeated", p3("message M { string a = 1; }"),
     p3("message M { repeated string a = 1; }"),
     OK, OK, OK),
    ("message singular -> repeated", p3(I_MSG + "message M { I a = 1; }"),
     p3(I_MSG + "message M { repeated I a = 1; }"), OK, OK, OK),
    ("int32 singular -> repeated", p3("message M { int32 a = 1; }"),
     p3("message M { repeated int32 a = 1; }"),
     NO, NO, NO),
    ("implicit -> optional", p3("message M { int32 a = 1; }"), p3("message M { optional int32 a = 1; }"),
     OK, OK, OK),
    ("packed -> unpacked", p3("message M { repeated int32 a = 1; }"),
     p3("message M { repeated int32 a = 1 [packed = false]; }"), OK, OK, OK),
    ("field options and json name", p3("message M { int32 a = 1; }"),
     p3('message M { int32 a = 1 [deprecated = true, json_name = "A"]; }'), OK, OK, OK),
    ("map value int32 -> int64", p3("message M { map<string, int32> a = 1; }"),
     p3("message M { map<string, int64> a = 1; }"), OK, OK, OK),
    ("map value int32 -> string", p3("message M { map<string, int32> a = 1; }"),
     p3("message M { map<string, string> a = 1; }"), NO, NO, NO),
    ("map key string -> int64", p3("message M { map<string, int32> a = 1; }"),
     p3("message M { map<int64, int32> a = 1; }"), NO, NO, NO),
    ("map -> repeated entry message", p3("message M { map<string, int32> a = 1; }"),
     p3("message E { string key = 1; int32 value = 2; }\nmessage M { repeated E a = 1; }"), NO, NO, NO),
    ("message added", p3("message M { int32 a = 1; }"), p3("message M { int32 a = 1; }\nmessage N {}"),
     OK, NO, NO),
    ("message removed", p3("message M { int32 a = 1; }\nmessage N {}"), p3("message M { int32 a = 1; }"),
     NO, OK, NO),
    ("message renamed", p3("message M { int32 a = 1; }"), p3("message Renamed { int32 a = 1; }"), NO, NO, NO),
    ("nested message added", p3("message M { int32 a = 1; }"), p3("message M { int32 a = 1; message N {} }"),
     OK, NO, NO),
    ("messages reordered", p3("message A { int32 a = 1; }\nmessage B { int32 b = 1; }"),
     p3("message B { int32 b = 1; }\nmessage A { int32 a = 1; }"), OK, OK, OK),
    ("enum value added", p3("enum E { Z = 0; }\nmessage M { E a = 1; }"),
     p3("enum E { Z = 0; ONE = 1; }\nmessage M { E a = 1; }"), OK, OK, OK),
    ("enum value removed", p3("enum E { Z = 0; ONE = 1; }\nmessage M { E a = 1; }"),
     p3("enum E { Z = 0; }\nmessage M { E a = 1; }"), OK, OK, OK),
    ("enum value renumbered", p3("enum E { Z = 0; ONE = 1; }\nmessage M { E a = 1; }"),
     p3("enum E { Z = 0; ONE = 2; }\nmessage M { E a = 1; }"), OK, OK, OK),
    ("enum added", p3("message M { int32 a = 1; }"), p3("message M { int32 a = 1; }\nenum E { Z = 0; }"),
     OK, OK, OK),
    ("package changed", p3("message M { int32 a = 1; }"), p3("message M { int32 a = 1; }", package="u"),
     NO, NO, NO),
    ("syntax proto2 -> proto3", p2("message M { optional int32 a = 1; repeated int64 b = 2; }"),
     p3("message M { int32 a = 1; repeated int64 b = 2; }"), OK, OK, OK),
    ("required field added (proto2)", p2("message M { optional int32 a = 1; }"),
     p2("message M { optional int32 a = 1; required int32 b = 2; }"), NO, NO, NO),
    ("required field removed (proto2)", p2("message M { optional int32 a = 1; required int32 b = 2; }"),
     p2("message M { optional int32 a = 1; }"), NO, NO, NO),
    ("optional -> required (proto2)", p2("message M { optional int32 a = 1; }"),
     p2("message M { required int32 a = 1; }"), NO, OK, NO),
    ("required -> optional (proto2)", p2("message M { required string a = 1; }"),
     p2("message M { optional string a = 1; }"), OK, NO, NO),
    ("optional -> repeated int32 (proto2)", p2("message M { optional int32 a = 1; }"),
     p2("message M { repeated int32 a = 1; }"), NO, NO, NO),
    ("group -> message (proto2)", p2("message M { optional group G = 1 { optional int32 x = 1; } }"),
     p2("message M { message G { optional int32 x = 1; } optional G g = 1; }"), NO, NO, NO),
    ("one field moved into a new oneof", p3("message M { int32 a = 1; int32 b = 2; }"),
     p3("message M { int32 a = 1; oneof o { int32 b = 2; } }"), OK, OK, OK),
    ("two fields moved into a new oneof", p3("message M { int32 a = 1; int32 b = 2; }"),
     p3("message M { oneof o { int32 a = 1; int32 b = 2; } }"), NO, OK, NO),
    ("a field moved into an existing oneof", p3("message M { int32 a = 1; oneof o { int32 b = 2; } }"),
     p3("message M { oneof o { int32 a = 1; int32 b = 2; } }"), NO, OK, NO),
    ("a field moved out of a oneof", p3("message M { oneof o { int32 a = 1; int32 b = 2; } }"),
     p3("message M { int32 a = 1; oneof o { int32 b = 2; } }"), OK, NO, NO),
    ("a oneof added with new fields", p3("message M { int32 a = 1; }"),
     p3("message M { int32 a = 1; oneof o { int32 b = 2; string c = 3; } }"), OK, OK, OK),
    ("a oneof removed with its fields",
     p3("message M { int32 a = 1; oneof o { int32 b = 2; string c = 3; } }"),
     p3("message M { int32 a = 1; }"), OK, OK, OK),
    ("a field added to a oneof", p3("message M { oneof o { int32 a = 1; } }"),
     p3("message M { oneof o { int32 a = 1; string b = 2; } }"), OK, NO, NO),
    ("a field removed from a oneof", p3("message M { oneof o { int32 a = 1; string b = 2; } }"),
     p3("message M { oneof o { int32 a = 1; } }"), NO, OK, NO),
    ("a oneof renamed", p3("message M { oneof o { int32 a = 1; string b = 2; } }"),
     p3("message M { oneof renamed { int32 a = 1; string b = 2; } }"), OK, OK, OK),
    ("a oneof field's type changed", p3("message M { oneof o { int32 a = 1; } }"),
     p3("message M { oneof o { string a = 1; } }"), NO, NO, NO),
]


@pytest.mark.parametrize(("change", "old", "new", "backward", "forward", "full"), TABLE,
                         ids=[row[0] for row in TABLE])
def test_compatibility_table(change, old, new, backward, forward, full):
    previous, latest = parse(old), parse(new)
    for level, expected in ((CompatibilityLevel.BACKWARD, backward), (CompatibilityLevel.FORWARD, forward),
                            (CompatibilityLevel.FULL, full)):
        reasons = incompatibilities(latest, [previous], level)
        assert (reasons == []) is expected, f"{change} under {level}: {reasons}"


def test_the_reasons_name_the_message_and_the_field():
    old = parse(p3("message Order { int32 amount = 3; }", package="shop"))
    new = parse(p3("message Order { string total = 3; }", package="shop"))
    assert new.incompatibilities(old) == [
        ("message shop.Order, field 3 (amount, now total): `int32` in the writer, `string` in the reader: "
         "not wire-compatible")]
    removed = parse(p3("message Other {}", package="shop"))
    assert removed.incompatibilities(old) == [
        ("message shop.Order is missing from the reader's schema (removed or renamed): data of it cannot be "
         "read")]


def test_a_referenced_message_is_compared_through_the_field_that_uses_it():
    main = p3('import "money.proto";\nmessage Payment { common.Money amount = 1; }')
    v1 = parse(main, {"money.proto": p3("message Money { int64 units = 1; }", package="common")})
    v2 = parse(main, {"money.proto": p3("message Money { int64 units = 1; string cur = 2; }",
                                        package="common")})
    v3 = parse(main, {"money.proto": p3("message Money { double units = 1; }", package="common")})
    assert incompatibilities(v2, [v1], CompatibilityLevel.FULL) == []
    reasons = v3.incompatibilities(v1)
    assert reasons == [("message common.Money, field 1 (units): `int64` in the writer, `double` in the "
                        "reader: not wire-compatible")]


def test_transitive_levels_check_every_version():
    v1 = parse(p3("message M { int32 a = 1; }"))
    v2 = parse(p3("message M { }"))  # a removed: fine against v1
    v3 = parse(p3("message M { string a = 1; }"))  # a back as a string: fine against v2, not against v1
    assert incompatibilities(v2, [v1], CompatibilityLevel.BACKWARD) == []
    assert incompatibilities(v3, [v1, v2], CompatibilityLevel.BACKWARD) == []
    reasons = incompatibilities(v3, [v1, v2], CompatibilityLevel.BACKWARD_TRANSITIVE)
    assert len(reasons) == 1 and reasons[0].startswith("version 1 (backward")
    assert "`int32` in the writer, `string` in the reader" in reasons[0]
    assert len(incompatibilities(v3, [v1, v2], CompatibilityLevel.FULL_TRANSITIVE)) == 2


class _OtherFormat:
    """A writer's schema of another format (the ParsedSchema protocol, nothing more)."""

    schema_type = SchemaType.AVRO

    def canonical(self) -> str:
        return '"string"'

    def incompatibilities(self, writer: object) -> list[str]:
        return ["not avro"]


def test_a_writer_of_another_format_is_one_incompatibility():
    assert parse(p3("message M {}")).incompatibilities(_OtherFormat()) == [
        "the writer's schema is AVRO, not PROTOBUF"]


def test_a_schema_describes_itself():
    schema = parse(p3("message M {}\nmessage N {}", package="x"))
    assert isinstance(schema, ProtobufSchema)
    assert repr(schema) == "<ProtobufSchema proto3 package=x messages=['x.M', 'x.N']>"
