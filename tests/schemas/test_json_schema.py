"""JSON Schema schemas (kanal/schemas/json_schema.py): parsing, references, normalization, validation, and
the compatibility table per Confluent's documented rules.

The expected verdicts come from Confluent's documentation and the engineer's account of the rules it links
to (facts, in kanal's own words):
- https://docs.confluent.io/platform/current/schema-registry/fundamentals/schema-evolution.html (the levels:
  BACKWARD = the new schema reads the old one's data, FORWARD = the old reads the new's, FULL = both)
- https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/serdes-json.html
  (the drafts Confluent's registry accepts: 4, 6, 7, 2020-12)
- https://yokota.blog/2021/03/29/understanding-json-schema-compatibility/ (open, closed and partially open
  content models; why adding a property to an open model is not backward compatible)
- https://docs.streamnative.io/kafka/governance/sr/fundamentals/formats/json-schema (a Confluent-compatible
  registry's statement of the same: a property added to an open schema is refused, close the model first)
- https://github.com/confluentinc/schema-registry/blob/master/json-schema-provider/src/main/java/io/
  confluent/kafka/schemaregistry/json/diff/SchemaDiff.java (the kinds of change Confluent's checker counts
  compatible for a backward check: type extended, bounds loosened, enum extended, required-with-default
  added, optional property added to a closed model, property removed from an open one, covered by a
  partially open one, sum type extended, product type narrowed, not narrowed)

Where kanal is more cautious than Confluent (an overlapping `oneOf` branch, an `if` added), the table says so.
"""

from __future__ import annotations

import json

import pytest

from kanal.schemas.compatibility import CompatibilityLevel, incompatibilities
from kanal.schemas.json_schema import InstanceInvalid, JsonSchema, parse
from kanal.schemas.schema_types import SchemaInvalid, SchemaType

OK, NO = True, False
LEVELS = (CompatibilityLevel.BACKWARD, CompatibilityLevel.FORWARD, CompatibilityLevel.FULL)
DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema"
DRAFT_2019 = "https://json-schema.org/draft/2019-09/schema"
DRAFT_04 = "http://json-schema.org/draft-04/schema#"


def schema(document: object, references: dict[str, object] | None = None) -> JsonSchema:
    return parse(json.dumps(document), {name: json.dumps(doc) for name, doc in (references or {}).items()})


def verdicts(old: object, new: object) -> tuple[bool, bool, bool]:
    """(BACKWARD, FORWARD, FULL): may `new` follow `old`?"""
    o, n = schema(old), schema(new)
    backward, forward, full = (not incompatibilities(n, [o], level) for level in LEVELS)
    return backward, forward, full


# ---------------------------------------------------------------------------------------------- parsing


def test_a_schema_without_schema_keyword_is_draft_07():
    parsed = schema({"type": "object", "properties": {"a": {"type": "string"}}})
    assert parsed.schema_type is SchemaType.JSON
    assert parsed.dialect == "draft-07"


@pytest.mark.parametrize(("uri", "dialect"), [
    ("http://json-schema.org/draft-07/schema#", "draft-07"),
    ("http://json-schema.org/draft-07/schema", "draft-07"),
    ("http://json-schema.org/draft-06/schema#", "draft-06"),
    (DRAFT_04, "draft-04"),
    (DRAFT_2019, "2019-09"),
    (DRAFT_2020, "2020-12"),
])
def test_schema_keyword_picks_the_dialect(uri, dialect):
    assert schema({"$schema": uri, "type": "string"}).dialect == dialect


def test_2020_12_keywords_are_asserted_under_2020_12():
    tuple_of = schema({"$schema": DRAFT_2020, "type": "array",
                       "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False})
    tuple_of.validate(["a", 1])
    with pytest.raises(InstanceInvalid):
        tuple_of.validate(["a", "b"])
    with pytest.raises(InstanceInvalid):
        tuple_of.validate(["a", 1, 2])


@pytest.mark.parametrize(("text", "says"), [
    ("{", "not valid JSON"),
    ('{"type": "string",}', "not valid JSON"),
    ('{"maximum": NaN}', "not valid JSON"),
    ('{"type": "string", "type": "integer"}', "duplicate key"),
    ("[]", "not a valid draft-07"),
    ('"string"', "not a valid draft-07"),
    ('{"type": "strin"}', "#/type"),
    ('{"type": "string", "minLength": -1}', "#/minLength"),
    ('{"type": "string", "pattern": "["}', "regex"),
    ('{"patternProperties": {"[": {}}}', "regex"),
    ('{"$schema": "http://example.com/my-dialect", "type": "string"}', "not a dialect kanal knows"),
    ('{"$schema": 7}', "not a string"),
    ('{"properties": {"a": {"$ref": "#/definitions/missing"}}}', "resolves to nothing"),
    ('{"$ref": "https://example.com/schemas/remote.json"}', "fetches no schema"),
    ('{"definitions": {"unused": {"$ref": "other.json"}}}', "resolves to nothing"),
])
def test_what_is_not_a_valid_schema_is_refused_with_a_reason(text, says):
    with pytest.raises(SchemaInvalid) as refused:
        parse(text)
    assert says in str(refused.value)


def test_a_ref_resolves_to_a_referenced_schema_by_its_name():
    order = schema({"type": "object", "properties": {"ship_to": {"$ref": "address.json"}},
                    "required": ["ship_to"]},
                   {"address.json": {"type": "object", "properties": {"zip": {"type": "string"}},
                                     "required": ["zip"]}})
    order.validate({"ship_to": {"zip": "75001"}})
    with pytest.raises(InstanceInvalid, match="/ship_to"):
        order.validate({"ship_to": {"zip": 75001}})


def test_a_ref_resolves_through_two_references():
    address = {"type": "object", "properties": {"zip": {"type": "string", "maxLength": 5}}}
    customer = {"type": "object", "properties": {"home": {"$ref": "address.json"}}}
    order = schema({"properties": {"buyer": {"$ref": "customer.json"}}},
                   {"address.json": address, "customer.json": customer})
    order.validate({"buyer": {"home": {"zip": "12345"}}})
    with pytest.raises(InstanceInvalid, match="/buyer/home/zip"):
        order.validate({"buyer": {"home": {"zip": "123456"}}})


def test_a_ref_to_a_fragment_of_a_reference_and_relative_to_the_schemas_id():
    common = {"definitions": {"money": {"type": "number", "minimum": 0}}}
    order = schema({"$id": "https://example.com/schemas/order.json",
                    "properties": {"total": {"$ref": "common.json#/definitions/money"}}},
                   {"common.json": common})
    order.validate({"total": 3.5})
    with pytest.raises(InstanceInvalid):
        order.validate({"total": -1})


def test_a_reference_is_checked_like_the_schema():
    with pytest.raises(SchemaInvalid, match="reference 'address.json' is not valid JSON"):
        parse('{"$ref": "address.json"}', {"address.json": "{"})
    with pytest.raises(SchemaInvalid, match="reference 'address.json' is not a valid draft-07"):
        parse('{"$ref": "address.json"}', {"address.json": '{"type": 5}'})
    with pytest.raises(SchemaInvalid, match="resolves to nothing"):
        parse('{"$ref": "address.json"}', {"address.json": '{"$ref": "zip.json"}'})


# ---------------------------------------------------------------------------------------------- canonical


@pytest.mark.parametrize(("a", "b"), [
    ('{"type": "object", "properties": {"a": {"type": "string"}}}',
     '{ "properties" : { "a" : { "type" : "string" } } ,\n  "type" : "object" }'),
    ('{"title": "caf\\u00e9"}', '{"title": "café"}'),
    ('{"maximum": 10.0}', '{"maximum": 10}'),
    ('{"enum": [1.0, 2]}', '{"enum": [1, 2]}'),
])
def test_equivalent_spellings_have_one_canonical_form(a, b):
    assert parse(a).canonical() == parse(b).canonical()
    assert " " not in parse('{"type": "object", "required": ["a", "b"]}').canonical()


@pytest.mark.parametrize(("a", "b"), [
    ('{"type": "string"}', '{"type": "integer"}'),
    ('{"type": "string"}', '{"type": "string", "maxLength": 3}'),
    ('{"maximum": 10}', '{"maximum": 10.5}'),
    ('{"const": true}', '{"const": 1}'),
    ('{"required": ["a"]}', '{"required": ["a", "b"]}'),
    ('{"additionalProperties": true}', '{"additionalProperties": false}'),
])
def test_different_meanings_have_different_canonical_forms(a, b):
    assert parse(a).canonical() != parse(b).canonical()


def test_canonical_is_sorted_and_compact():
    assert parse('{"type": "object", "additionalProperties": false}').canonical() == (
        '{"additionalProperties":false,"type":"object"}')


# ---------------------------------------------------------------------------------------------- validate

PERSON = {"type": "object", "additionalProperties": False, "required": ["name"],
          "properties": {"name": {"type": "string", "minLength": 1},
                         "age": {"type": "integer", "minimum": 0},
                         "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
                         "email": {"type": "string", "format": "email"}}}


@pytest.mark.parametrize("instance", [
    {"name": "Ada"}, {"name": "Ada", "age": 36, "tags": ["a", "b"]}, {"name": "Ada", "age": 36.0},
    {"name": "Ada", "email": "not an address"},  # format is an annotation (see the module)
])
def test_validate_accepts_what_the_schema_allows(instance):
    schema(PERSON).validate(instance)


@pytest.mark.parametrize(("instance", "says"), [
    ({}, "at the root: 'name' is a required property"),
    ({"name": ""}, "at /name"),
    ({"name": "Ada", "age": -1}, "at /age"),
    ({"name": "Ada", "age": 1.5}, "at /age"),
    ({"name": "Ada", "tags": ["c"]}, "at /tags/0"),
    ({"name": "Ada", "nick": "A"}, "additionalProperties"),
    ([], "at the root"),
])
def test_validate_refuses_what_the_schema_does_not_allow(instance, says):
    with pytest.raises(InstanceInvalid) as refused:
        schema(PERSON).validate(instance)
    assert says in str(refused.value)
    assert isinstance(refused.value, ValueError)


# ---------------------------------------------------------------------------------------------- the table


def obj(model: str, properties: dict[str, object], required: list[str] | None = None) -> dict[str, object]:
    """An object schema in a content model: open (additionalProperties absent), closed (false), or
    partially open (additionalProperties: a string schema)."""
    out: dict[str, object] = {"type": "object", "properties": properties}
    if model == "closed":
        out["additionalProperties"] = False
    elif model == "partial":
        out["additionalProperties"] = {"type": "string"}
    if required:
        out["required"] = required
    return out


S, I, N = {"type": "string"}, {"type": "integer"}, {"type": "number"}
S_DEFAULT = {"type": "string", "default": "none"}


def tuple_of(items: list[object], closed: bool) -> dict[str, object]:
    return {"type": "array", "items": items, **({"additionalItems": False} if closed else {})}


def linked_list(value: object) -> dict[str, object]:
    return {"type": "object", "properties": {"value": value, "next": {"$ref": "#"}}}


def kind(tag: str, **properties: object) -> dict[str, object]:
    return {"type": "object", "required": ["kind"], "properties": {"kind": {"const": tag}, **properties}}


TABLE = [
    # -- types
    ("integer -> number (widening)", I, N, (OK, NO, NO)),
    ("number -> integer (narrowing)", N, I, (NO, OK, NO)),
    ("string -> integer", S, I, (NO, NO, NO)),
    ("string -> string or null", S, {"type": ["string", "null"]}, (OK, NO, NO)),
    ("property integer -> number, closed", obj("closed", {"a": I}), obj("closed", {"a": N}), (OK, NO, NO)),
    ("property string -> integer, open", obj("open", {"a": S}), obj("open", {"a": I}), (NO, NO, NO)),
    # -- adding and removing properties in each content model
    ("optional property added, open", obj("open", {"a": S}), obj("open", {"a": S, "b": S}), (NO, OK, NO)),
    ("property with empty schema added, open", obj("open", {"a": S}), obj("open", {"a": S, "b": {}}),
     (OK, OK, OK)),
    ("optional property removed, open", obj("open", {"a": S, "b": S}), obj("open", {"a": S}), (OK, NO, NO)),
    ("optional property added, closed", obj("closed", {"a": S}), obj("closed", {"a": S, "b": S}),
     (OK, NO, NO)),
    ("optional property removed, closed", obj("closed", {"a": S, "b": S}), obj("closed", {"a": S}),
     (NO, OK, NO)),
    ("false property removed, closed", obj("closed", {"a": S, "b": False}), obj("closed", {"a": S}),
     (OK, OK, OK)),
    ("property added, covered by additionalProperties", obj("partial", {"a": I}),
     obj("partial", {"a": I, "b": S}), (OK, OK, OK)),
    ("property added, not covered by additionalProperties", obj("partial", {"a": I}),
     obj("partial", {"a": I, "b": I}), (NO, NO, NO)),
    ("property removed, covered by additionalProperties", obj("partial", {"a": I, "b": S}),
     obj("partial", {"a": I}), (OK, OK, OK)),
    ("property removed, not covered by additionalProperties", obj("partial", {"a": I, "b": I}),
     obj("partial", {"a": I}), (NO, NO, NO)),
    ("property added, covered by patternProperties",
     {"properties": {"a": I}, "patternProperties": {"^x_": S}, "additionalProperties": False},
     {"properties": {"a": I, "x_b": S}, "patternProperties": {"^x_": S}, "additionalProperties": False},
     (OK, OK, OK)),
    ("property added, narrower than its patternProperties",
     {"properties": {"a": I}, "patternProperties": {"^x_": S}, "additionalProperties": False},
     {"properties": {"a": I, "x_b": {**S, "maxLength": 3}}, "patternProperties": {"^x_": S},
      "additionalProperties": False}, (NO, OK, NO)),
    # -- the content model itself
    ("open -> closed", obj("open", {"a": S}), obj("closed", {"a": S}), (NO, OK, NO)),
    ("closed -> open", obj("closed", {"a": S}), obj("open", {"a": S}), (OK, NO, NO)),
    ("closed -> partially open", obj("closed", {"a": I}), obj("partial", {"a": I}), (OK, NO, NO)),
    ("additionalProperties string -> integer", obj("partial", {}),
     {"type": "object", "properties": {}, "additionalProperties": I}, (NO, NO, NO)),
    # -- required properties and defaults
    ("required property added, no default, closed", obj("closed", {"a": S}),
     obj("closed", {"a": S, "b": S}, ["b"]), (NO, NO, NO)),
    ("required property added with default, closed", obj("closed", {"a": S}),
     obj("closed", {"a": S, "b": S_DEFAULT}, ["b"]), (OK, NO, NO)),
    ("required property added, no default, open", obj("open", {"a": S}), obj("open", {"a": S, "b": S}, ["b"]),
     (NO, OK, NO)),
    ("required property added with default, open", obj("open", {"a": S}),
     obj("open", {"a": S, "b": S_DEFAULT}, ["b"]), (NO, OK, NO)),
    ("optional property made required", obj("open", {"a": S, "b": S}), obj("open", {"a": S, "b": S}, ["b"]),
     (NO, OK, NO)),
    ("optional property with default made required", obj("open", {"a": S, "b": S_DEFAULT}),
     obj("open", {"a": S, "b": S_DEFAULT}, ["b"]), (OK, OK, OK)),
    ("required property made optional", obj("open", {"a": S}, ["a"]), obj("open", {"a": S}), (OK, NO, NO)),
    ("default changed", obj("open", {"a": S_DEFAULT}), obj("open", {"a": {**S, "default": "other"}}),
     (OK, OK, OK)),
    # -- enums
    ("enum value added", {"enum": ["red", "green"]}, {"enum": ["red", "green", "blue"]}, (OK, NO, NO)),
    ("enum value removed", {"enum": ["red", "green", "blue"]}, {"enum": ["red", "green"]}, (NO, OK, NO)),
    ("enum added to a string", S, {**S, "enum": ["red"]}, (NO, OK, NO)),
    ("enum values within the new maxLength", {"enum": ["ab", "cd"]}, {**S, "maxLength": 2}, (OK, NO, NO)),
    ("const -> enum holding it", {"const": 1}, {"enum": [1, 2]}, (OK, NO, NO)),
    # -- strings
    ("maxLength tightened", {**S, "maxLength": 10}, {**S, "maxLength": 5}, (NO, OK, NO)),
    ("maxLength loosened", {**S, "maxLength": 5}, {**S, "maxLength": 10}, (OK, NO, NO)),
    ("maxLength added", S, {**S, "maxLength": 5}, (NO, OK, NO)),
    ("maxLength removed", {**S, "maxLength": 5}, S, (OK, NO, NO)),
    ("minLength tightened", {**S, "minLength": 1}, {**S, "minLength": 3}, (NO, OK, NO)),
    ("minLength loosened", {**S, "minLength": 3}, {**S, "minLength": 1}, (OK, NO, NO)),
    ("pattern added", S, {**S, "pattern": "^[a-z]+$"}, (NO, OK, NO)),
    ("pattern removed", {**S, "pattern": "^[a-z]+$"}, S, (OK, NO, NO)),
    ("pattern changed", {**S, "pattern": "^[a-z]+$"}, {**S, "pattern": "^[a-z0-9]+$"}, (NO, NO, NO)),
    # -- numbers
    ("maximum tightened", {**I, "maximum": 100}, {**I, "maximum": 50}, (NO, OK, NO)),
    ("maximum loosened", {**I, "maximum": 50}, {**I, "maximum": 100}, (OK, NO, NO)),
    ("minimum tightened", {**I, "minimum": 0}, {**I, "minimum": 10}, (NO, OK, NO)),
    ("minimum loosened", {**I, "minimum": 10}, {**I, "minimum": 0}, (OK, NO, NO)),
    ("maximum made exclusive", {**N, "maximum": 10}, {**N, "exclusiveMaximum": 10}, (NO, OK, NO)),
    ("maximum made exclusive, draft-04", {"$schema": DRAFT_04, **N, "maximum": 10},
     {"$schema": DRAFT_04, **N, "maximum": 10, "exclusiveMaximum": True}, (NO, OK, NO)),
    ("multipleOf 10 -> 5", {**I, "multipleOf": 10}, {**I, "multipleOf": 5}, (OK, NO, NO)),
    ("multipleOf 0.5 -> 0.1", {**N, "multipleOf": 0.5}, {**N, "multipleOf": 0.1}, (OK, NO, NO)),
    # -- arrays
    ("maxItems tightened", {"type": "array", "maxItems": 10}, {"type": "array", "maxItems": 3}, (NO, OK, NO)),
    ("maxItems loosened", {"type": "array", "maxItems": 3}, {"type": "array", "maxItems": 10}, (OK, NO, NO)),
    ("minItems tightened", {"type": "array", "minItems": 0}, {"type": "array", "minItems": 1}, (NO, OK, NO)),
    ("minItems loosened", {"type": "array", "minItems": 1}, {"type": "array"}, (OK, NO, NO)),
    ("items integer -> number", {"type": "array", "items": I}, {"type": "array", "items": N}, (OK, NO, NO)),
    ("items number -> integer", {"type": "array", "items": N}, {"type": "array", "items": I}, (NO, OK, NO)),
    ("items schema added", {"type": "array"}, {"type": "array", "items": S}, (NO, OK, NO)),
    ("items schema removed", {"type": "array", "items": S}, {"type": "array"}, (OK, NO, NO)),
    ("uniqueItems added", {"type": "array"}, {"type": "array", "uniqueItems": True}, (NO, OK, NO)),
    ("tuple item added, closed tuple", tuple_of([S], closed=True), tuple_of([S, I], closed=True),
     (OK, NO, NO)),
    ("tuple item added, open tuple", tuple_of([S], closed=False), tuple_of([S, I], closed=False),
     (NO, OK, NO)),
    ("prefixItems item added, closed (2020-12)",
     {"$schema": DRAFT_2020, "prefixItems": [S], "items": False},
     {"$schema": DRAFT_2020, "prefixItems": [S, I], "items": False}, (OK, NO, NO)),
    # -- combinators
    ("anyOf branch added", {"anyOf": [S, I]}, {"anyOf": [S, I, {"type": "null"}]}, (OK, NO, NO)),
    ("anyOf branch removed", {"anyOf": [S, I, {"type": "null"}]}, {"anyOf": [S, I]}, (NO, OK, NO)),
    ("oneOf branch added", {"oneOf": [S, I]}, {"oneOf": [S, I, {"type": "null"}]}, (OK, NO, NO)),
    ("oneOf branch removed", {"oneOf": [S, I, {"type": "null"}]}, {"oneOf": [S, I]}, (NO, OK, NO)),
    ("oneOf object branch added, with a discriminator", {"oneOf": [kind("a", x=I), kind("b", y=S)]},
     {"oneOf": [kind("a", x=I), kind("b", y=S), kind("c", z=N)]}, (OK, NO, NO)),
    ("oneOf branch's property widened", {"oneOf": [kind("a", x=I), kind("b", y=S)]},
     {"oneOf": [kind("a", x=N), kind("b", y=S)]}, (OK, NO, NO)),
    ("a type -> oneOf including it", S, {"oneOf": [S, {"type": "null"}]}, (OK, NO, NO)),
    ("allOf branch added", {"allOf": [S]}, {"allOf": [S, {"maxLength": 5}]}, (NO, OK, NO)),
    ("allOf branch removed", {"allOf": [S, {"maxLength": 5}]}, {"allOf": [S]}, (OK, NO, NO)),
    ("not excludes more", {"not": S}, {"not": {"type": ["string", "null"]}}, (NO, OK, NO)),
    ("not excludes less", {"not": {"type": ["string", "null"]}}, {"not": S}, (OK, NO, NO)),
    ("not added, disjoint from the writer (same values)", I, {**I, "not": S}, (OK, OK, OK)),
    # -- references
    ("$ref target widened",
     {"definitions": {"n": I}, "type": "object", "properties": {"a": {"$ref": "#/definitions/n"}}},
     {"definitions": {"n": N}, "type": "object", "properties": {"a": {"$ref": "#/definitions/n"}}},
     (OK, NO, NO)),
    ("$ref target narrowed",
     {"definitions": {"n": {**S, "maxLength": 9}}, "properties": {"a": {"$ref": "#/definitions/n"}}},
     {"definitions": {"n": {**S, "maxLength": 3}}, "properties": {"a": {"$ref": "#/definitions/n"}}},
     (NO, OK, NO)),
    ("$ref inlined, same meaning",
     {"definitions": {"n": I}, "properties": {"a": {"$ref": "#/definitions/n"}}}, {"properties": {"a": I}},
     (OK, OK, OK)),
    ("recursive $ref, value widened", linked_list(I), linked_list(N), (OK, NO, NO)),
    ("recursive $ref, unchanged but for a title", linked_list(I), {**linked_list(I), "title": "list"},
     (OK, OK, OK)),
    ("$ref beside siblings (2020-12), sibling tightened",
     {"$schema": DRAFT_2020, "$defs": {"s": S}, "$ref": "#/$defs/s", "maxLength": 9},
     {"$schema": DRAFT_2020, "$defs": {"s": S}, "$ref": "#/$defs/s", "maxLength": 3}, (NO, OK, NO)),
    # -- annotations
    ("title and description changed", {**S, "title": "a", "description": "b"},
     {**S, "title": "c", "description": "d", "examples": ["e"]}, (OK, OK, OK)),
    ("format added (an annotation)", S, {**S, "format": "email"}, (OK, OK, OK)),
    # -- what kanal does not decide structurally: refused, naming the keyword
    ("if/then/else added", obj("open", {"a": S}),
     {**obj("open", {"a": S}), "if": {"required": ["a"]}, "then": {"required": ["b"]}}, (NO, OK, NO)),
    ("propertyNames added", {"type": "object"}, {"type": "object", "propertyNames": {"maxLength": 3}},
     (NO, OK, NO)),
    ("dependentRequired unchanged, a property widened (2020-12)",
     {"$schema": DRAFT_2020, "properties": {"a": I}, "dependentRequired": {"a": ["b"]}},
     {"$schema": DRAFT_2020, "properties": {"a": N}, "dependentRequired": {"a": ["b"]}}, (OK, NO, NO)),
]


@pytest.mark.parametrize(("old", "new", "expected"),
                         [pytest.param(old, new, expected, id=name) for name, old, new, expected in TABLE])
def test_compatibility_table(old, new, expected):
    assert verdicts(old, new) == expected


def test_every_schema_of_the_table_reads_itself():
    for _, old, new, _ in TABLE:
        for document in (old, new):
            assert incompatibilities(schema(document), [schema(document)], CompatibilityLevel.FULL) == []


def test_an_overlapping_oneof_branch_is_refused_where_confluent_would_accept_it():
    """kanal is more cautious than Confluent here: a value the old schema wrote under its first branch may
    match the new branch too, and oneOf then refuses it. A const/enum discriminator shows they are disjoint
    (see the table)."""
    old = {"oneOf": [obj("open", {"x": I}, ["x"]), obj("open", {"y": S}, ["y"])]}
    new = {"oneOf": [*old["oneOf"], obj("open", {"z": N}, ["z"])]}
    found = incompatibilities(schema(new), [schema(old)], CompatibilityLevel.BACKWARD)
    assert found and "may match the same values" in found[0]


@pytest.mark.parametrize(("old", "new", "says"), [
    (obj("open", {"name": {**S, "maxLength": 10}}), obj("open", {"name": {**S, "maxLength": 5}}),
     "#/properties/name/maxLength: lowered from 10 to 5"),
    (obj("open", {"a": S}), obj("open", {"a": S, "b": S}),
     "#/properties/b: property 'b' added while the writer's content model is open"),
    (obj("closed", {"a": S, "b": S}), obj("closed", {"a": S}),
     "#/properties/b: property 'b' removed while the reader's content model is closed"),
    (obj("open", {"a": S}), obj("open", {"a": S}, ["a"]), "#/required: property 'a' is required"),
    ({"enum": ["red", "blue"]}, {"enum": ["red"]}, '#/enum: the writer may write "blue"'),
    (N, I, "#/type: narrowed from number to integer"),
    ({"type": "array", "items": N}, {"type": "array", "items": I}, "#/items/type"),
    ({"anyOf": [S, I]}, {"anyOf": [S]}, "#/anyOf: the writer's anyOf branch 1"),
    (obj("open", {}), {**obj("open", {}), "propertyNames": {"maxLength": 3}},
     "#/propertyNames: added or changed"),
])
def test_an_incompatibility_names_the_pointer_and_the_change(old, new, says):
    found = incompatibilities(schema(new), [schema(old)], CompatibilityLevel.BACKWARD)
    assert any(says in message for message in found), found


def test_compatibility_through_references():
    old = schema({"properties": {"to": {"$ref": "address.json"}}},
                 {"address.json": {"type": "object", "properties": {"zip": {**S, "maxLength": 5}}}})
    wider = schema({"properties": {"to": {"$ref": "address.json"}}},
                   {"address.json": {"type": "object", "properties": {"zip": {**S, "maxLength": 9}}}})
    assert incompatibilities(wider, [old], CompatibilityLevel.BACKWARD) == []
    found = incompatibilities(wider, [old], CompatibilityLevel.FORWARD)
    assert found and "#/properties/to/properties/zip/maxLength" in found[0]


class _OtherFormat:
    """A schema of another type, as the registry could hand one over."""

    schema_type = SchemaType.AVRO

    def canonical(self) -> str:
        return '"string"'

    def incompatibilities(self, writer: object) -> list[str]:
        return ["not JSON"]


def test_a_writer_of_another_type_is_one_incompatibility():
    assert schema(S).incompatibilities(_OtherFormat()) == [
        "the writer's schema type is AVRO: JSON schemas read only JSON schemas"]


def test_a_ref_cycle_that_never_reaches_a_value_is_not_assumed_compatible():
    """Recursion through a property is a recursive type (the table's linked list); recursion that stays on
    the same value (jsonschema itself would recurse forever validating it) is refused, not assumed."""
    degenerate = schema({"anyOf": [{"$ref": "#"}, S]})
    assert incompatibilities(degenerate, [schema(I)], CompatibilityLevel.BACKWARD) != []


# ---------------------------------------------------------------------------------------------- transitive


def test_a_chain_of_widenings_is_transitively_backward_and_not_forward():
    versions = [schema(I), schema(N), schema({"type": ["number", "null"]})]
    new = versions[-1]
    assert incompatibilities(new, versions[:-1], CompatibilityLevel.BACKWARD_TRANSITIVE) == []
    found = incompatibilities(new, versions[:-1], CompatibilityLevel.FORWARD_TRANSITIVE)
    assert any(message.startswith("version 1 ") for message in found)
    assert any(message.startswith("version 2 ") for message in found)


def test_transitive_levels_check_versions_the_plain_levels_do_not():
    """v2 adds a required property with a default to a closed model (backward compatible: the reader fills
    it in); v3 drops the default. v3 reads v2's data (which always has the property) but not v1's."""
    v1 = schema(obj("closed", {"a": S}))
    v2 = schema(obj("closed", {"a": S, "b": S_DEFAULT}, ["b"]))
    v3 = schema(obj("closed", {"a": S, "b": S}, ["b"]))
    assert incompatibilities(v2, [v1], CompatibilityLevel.BACKWARD) == []
    assert incompatibilities(v3, [v1, v2], CompatibilityLevel.BACKWARD) == []
    found = incompatibilities(v3, [v1, v2], CompatibilityLevel.BACKWARD_TRANSITIVE)
    assert found and all(message.startswith("version 1 (backward") for message in found)
    assert "#/required: property 'b' is required" in found[0]
