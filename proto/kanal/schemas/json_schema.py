"""JSON Schema schemas as the registry keeps them (issue 45): parsed and checked against their meta-schema,
normalized, used to validate records, and compared for compatibility by kanal's own checker (no maintained
one exists on PyPI).

Parsing: draft-07 unless `$schema` names another dialect (draft-04, -06, -07, 2019-09, 2020-12, as
Confluent's registry accepts). A `$ref` resolves inside the document or to one of the schema's references
(the registry's `name -> text` map, each looked up by its name, relative to the document's `$id` too);
nothing is ever fetched, so a `$ref` that resolves to nothing is refused at parse time (SchemaInvalid).
Validation asserts every assertion keyword but `format`, which stays an annotation as in confluent-kafka's
Python serializer (jsonschema without a format checker).

Compatibility: `reader.incompatibilities(writer)` lists why a value valid under `writer` may be refused by
`reader` (`compatibility.py` asks it both ways for the levels). The rules are Confluent's for JSON Schema,
which turn on the *content model* of an object: open (`additionalProperties` absent or true), closed
(false) or partially open (a schema, or `patternProperties`). A property the reader declares and the writer
did not is read from what the writer allowed there, and one the writer declared and the reader dropped
is checked against what the reader allows there. Each row says when the reader reads the writer (a
BACKWARD check asks it of the new schema reading the old, a FORWARD one the other way round):

| keyword, or what changed | the reader reads the writer when |
|---|---|
| `type` | its types cover the writer's (`integer` -> `number` widens, the reverse narrows) |
| a property added | the writer's model is closed, or covers the name with a schema the new one reads, |
|   | or the new property's schema is `{}` |
| a property removed | the reader's model is open, or covers the name with a schema reading the old one, |
|   | or the old property's schema was `false` |
| `additionalProperties` | the reader's reads the writer's (open -> closed narrows, closed -> open widens) |
| `patternProperties` | the reader's read the writer's, pattern by pattern (patterns compared as text) |
| `required` | the reader requires no property the writer may leave out, unless the reader's |
|   | schema for it has a `default` (Confluent's rule: the reader fills it in) |
| `enum`, `const` | the reader accepts each value the writer may write (checked value by value) |
| `maxLength`, `maxItems`, | the reader's is absent, or at or above the writer's |
| `maxProperties`, `maximum` | (`exclusiveMaximum` likewise) |
| `minLength`, `minItems`, | the reader's is absent, or at or below the writer's |
| `minProperties`, `minimum` | (`exclusiveMinimum` likewise) |
| `multipleOf` | the reader's divides the writer's |
| `pattern` | the reader has none, or the writer's (regular expressions compared as text) |
| `uniqueItems` | the reader does not ask for it, or the writer did too |
| `items`, `prefixItems`, | each position reads the writer's (an item added to a closed tuple is fine, to an |
| `additionalItems` | open one it is not, as for properties) |
| `anyOf`, `oneOf` | one branch reads the writer, or each of the writer's own branches; for `oneOf`, no |
|   | other branch may match the same values (shown by disjoint types, by `const`/`enum` |
|   | discriminators, or by the writer's own `oneOf`) |
| `allOf` | every branch reads the writer (a branch added narrows, one removed widens) |
| `not` | the writer's `not` excludes at least as much, or the writer is disjoint from it |
| `$ref` | compared through its target; a cycle of references is assumed to hold where it repeats |
| annotations | always: `title`, `description`, `default`, `examples`, `format`, `$comment`, unknown |
|   | keywords |
| `if`/`then`/`else`, `contains`, | the reader's is the writer's, unchanged; otherwise the keyword is named |
| `dependencies`, `dependent*`, | as an incompatibility (never silently compatible) |
| `propertyNames` | |
| `unevaluated*`, `$dynamicRef`, | the whole schemas are the same (their meaning hangs on the rest) |
| `$recursiveRef` | |

The checker answers "compatible" only when it can show it: where it cannot decide, it reports an
incompatibility that names the keyword. Comparisons are bounded (`COMPARISONS_MAX`) so a pathological pair
of schemas is refused rather than compared forever, and so is a pair nested deeper than Python's recursion
allows (about a hundred levels of properties; a schema nested much deeper is refused at parse time).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urljoin

import jsonschema.exceptions
import jsonschema.validators
import referencing.exceptions
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as _META_SCHEMAS
from referencing import Registry, Specification

from kanal.schemas.schema_types import ParsedSchema, ResolvedReferences, SchemaInvalid, SchemaType

if TYPE_CHECKING:
    # referencing exports its Resolver class from its private module only.
    from referencing._core import Resolver

COMPARISONS_MAX: Final = 50_000  # schema pairs one compatibility check may compare before it gives up
_REF_HOPS_MAX: Final = 64  # a chain of `$ref`s longer than this is taken for a loop
_KINDS_DEPTH_MAX: Final = 16  # how deep the JSON types a schema may accept are looked for

_NO_REFERENCES: Final[ResolvedReferences] = MappingProxyType({})


class InstanceInvalid(ValueError):
    """A value the schema refuses (`JsonSchema.validate`): where in the value, and why."""


@dataclass(frozen=True, slots=True)
class _Dialect:
    name: str
    validator: Any  # a jsonschema validator class (jsonschema ships no type information)
    spec: Specification[Any]
    modern: bool  # 2019-09 and later: `$ref` sits beside its sibling keywords instead of replacing them


_DIALECTS: Final = (
    _Dialect("draft-04", jsonschema.validators.Draft4Validator, referencing.jsonschema.DRAFT4, False),
    _Dialect("draft-06", jsonschema.validators.Draft6Validator, referencing.jsonschema.DRAFT6, False),
    _Dialect("draft-07", jsonschema.validators.Draft7Validator, referencing.jsonschema.DRAFT7, False),
    _Dialect("2019-09", jsonschema.validators.Draft201909Validator, referencing.jsonschema.DRAFT201909, True),
    _Dialect("2020-12", jsonschema.validators.Draft202012Validator, referencing.jsonschema.DRAFT202012, True),
)
_DEFAULT_DIALECT: Final = _DIALECTS[2]  # draft-07, as Confluent's registry assumes without `$schema`


def _dialect_of(document: object, default: _Dialect, where: str) -> _Dialect:
    """The dialect `$schema` names (`default` without one); SchemaInvalid for one kanal does not know."""
    if not isinstance(document, Mapping) or "$schema" not in document:
        return default
    if not isinstance(document["$schema"], str):
        raise SchemaInvalid(f"{where}: $schema is not a string")
    validator = jsonschema.validators.validator_for(document, default=None)
    for dialect in _DIALECTS:
        if validator is dialect.validator:
            return dialect
    known = ", ".join(d.name for d in _DIALECTS)
    raise SchemaInvalid(f"{where}: $schema {document['$schema']!r} is not a dialect kanal knows ({known})")


# ---------------------------------------------------------------------------------------------- parsing


def parse(text: str, references: ResolvedReferences = _NO_REFERENCES) -> JsonSchema:
    """The schema `text` parsed and checked, with its references (name -> schema text); SchemaInvalid
    saying what is wrong and where."""
    try:
        return _parse(text, references)
    except RecursionError:
        raise SchemaInvalid("the schema nests too deeply") from None


def _parse(text: str, references: ResolvedReferences) -> JsonSchema:
    document = _load(text, "the schema")
    dialect = _dialect_of(document, _DEFAULT_DIALECT, "the schema")
    _check_against_meta_schema(document, dialect, "the schema")
    root_id = dialect.spec.create_resource(document).id() or ""
    registry: Registry[Any] = Registry()
    for name, reference_text in references.items():
        where = f"reference {name!r}"
        contents = _load(reference_text, where)
        ref_dialect = _dialect_of(contents, dialect, where)
        _check_against_meta_schema(contents, ref_dialect, where)
        resource = ref_dialect.spec.create_resource(contents)
        # The name as the main schema's `$ref` spells it, resolved against the schema's `$id` too, and the
        # reference's own `$id`.
        for uri in dict.fromkeys([name, _join(root_id, name), resource.id() or name]):
            registry = registry.with_resource(uri, resource)
    # No `retrieve` function: a URI the registry does not hold is NoSuchResource, never fetched.
    registry = _META_SCHEMAS.combine(registry)
    resolver = registry.resolver_with_root(dialect.spec.create_resource(document))
    _check_refs(_Node(document, resolver, dialect), "the schema", set())
    validator = dialect.validator(document, registry=registry)
    return JsonSchema(document, dialect, resolver, validator)


def _join(base: str, name: str) -> str:
    return urljoin(base, name) if base else name


def _load(text: str, where: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_object_without_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise SchemaInvalid(f"{where} is not valid JSON: {exc}") from None


def _object_without_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            # json would keep the last one silently; two spellings of one keyword is a schema to fix.
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _check_against_meta_schema(document: object, dialect: _Dialect, where: str) -> None:
    try:
        dialect.validator.check_schema(document)
    except jsonschema.exceptions.SchemaError as exc:
        at = _pointer(tuple(str(p) for p in exc.absolute_path))
        raise SchemaInvalid(f"{where} is not a valid {dialect.name} JSON schema at {at}: "
                            f"{exc.message}") from None


def _check_refs(node: _Node, where: str, seen: set[int]) -> None:
    """Every `$ref` (and `$dynamicRef`) in the document and in what it references resolves, so that nothing
    is looked up later that is not there."""
    contents = node.contents
    if isinstance(contents, Mapping):
        for keyword in ("$ref", "$dynamicRef"):
            ref = contents.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                target = node.resolver.lookup(ref)
            except referencing.exceptions.Unresolvable:
                raise SchemaInvalid(f"{where}: {keyword} {ref!r} resolves to nothing: it is neither in the "
                                    f"schema nor one of its references (kanal fetches no schema)") from None
            if id(target.contents) not in seen:
                seen.add(id(target.contents))
                _check_refs(node.at(target.contents, target.resolver), where, seen)
    resource = node.dialect.spec.create_resource(contents)
    for sub in resource.subresources():
        _check_refs(node.child(sub.contents), where, seen)


# ---------------------------------------------------------------------------------------------- the schema


class JsonSchema:
    """A parsed JSON schema: its normalized text, a validator compiled once, and a reader's side of the
    compatibility question."""

    __slots__ = ("_canonical", "_dialect", "_document", "_root", "_validator")

    def __init__(self, document: object, dialect: _Dialect, resolver: Resolver[Any], validator: Any) -> None:
        self._document = document
        self._dialect = dialect
        self._root = _Node(document, resolver, dialect)
        self._validator = validator
        self._canonical = json.dumps(_normalized(document), sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False)

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType.JSON

    @property
    def document(self) -> object:
        """The schema as parsed JSON (a dict, or a boolean schema); not to be changed."""
        return self._document

    @property
    def dialect(self) -> str:
        return self._dialect.name

    def canonical(self) -> str:
        return self._canonical

    def validate(self, instance: object) -> None:
        """InstanceInvalid when the schema refuses `instance` (a value as json.loads returns it)."""
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(instance))
        if error is not None:
            at = "/".join(_escape(str(p)) for p in error.absolute_path)
            raise InstanceInvalid(f"{'at /' + at if at else 'at the root'}: {error.message} "
                                  f"(schema keyword {error.validator})")

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, JsonSchema):
            return [f"the writer's schema type is {writer.schema_type}: JSON schemas read only JSON schemas"]
        comparison = _Comparison()
        try:
            found = comparison.reads(self._root, writer._root, ())
        except RecursionError:
            return ["the schemas nest too deeply to compare: refused rather than assumed compatible"]
        except _TooComplex:
            return [(f"the schemas are too complex to compare structurally (more than {COMPARISONS_MAX} "
                    f"comparisons): refused rather than assumed compatible")]
        return list(dict.fromkeys(found))

    def __repr__(self) -> str:
        text = self._canonical if len(self._canonical) <= 80 else self._canonical[:77] + "..."
        return f"<JsonSchema {self._dialect.name} {text}>"


def _normalized(value: object) -> object:
    """`value` with each integral float made an int: 1.0 and 1 mean the same number to JSON Schema."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _normalized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _pointer(path: Sequence[str]) -> str:
    return "#" + "".join("/" + _escape(token) for token in path)


# ---------------------------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class _Node:
    """A subschema where it sits: its contents, the resolver of its scope (its base URI), its dialect,
    and the keywords left out of this view of it (the parts of a schema are compared one by one)."""

    contents: object
    resolver: Resolver[Any]
    dialect: _Dialect
    omit: frozenset[str] = frozenset()

    def child(self, contents: object) -> _Node:
        """A subschema of this one (in its scope, or in the new one its `$id` opens)."""
        resolver = self.resolver
        if isinstance(contents, Mapping) and ("$id" in contents or "id" in contents):
            resolver = resolver.in_subresource(self.dialect.spec.create_resource(contents))
        return _Node(contents, resolver, self.dialect)

    def at(self, contents: object, resolver: Resolver[Any]) -> _Node:
        """A `$ref`'s target: in its own dialect when it names one, else in this one's."""
        try:
            dialect = _dialect_of(contents, self.dialect, "a referenced schema")
        except SchemaInvalid:
            dialect = self.dialect
        return _Node(contents, resolver, dialect)

    def without(self, keywords: frozenset[str]) -> _Node:
        return replace(self, omit=self.omit | keywords)

    @property
    def keywords(self) -> Mapping[str, object]:
        """The keywords of this view ({} for a boolean schema)."""
        if not isinstance(self.contents, Mapping):
            return {}
        if not self.omit:
            return self.contents
        return {k: v for k, v in self.contents.items() if k not in self.omit}

    def get(self, keyword: str) -> _Node | None:
        value = self.keywords.get(keyword)
        return None if value is None else self.child(value)

    def branches(self, keyword: str) -> list[_Node]:
        value = self.keywords.get(keyword)
        return [self.child(v) for v in value] if isinstance(value, list) else []

    def schemas(self, keyword: str) -> dict[str, _Node]:
        value = self.keywords.get(keyword)
        return {k: self.child(v) for k, v in value.items()} if isinstance(value, Mapping) else {}

    @property
    def key(self) -> tuple[int, frozenset[str]]:
        return id(self.contents), self.omit


_COMBINATORS: Final = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else"})
_BASE_OMIT: Final = _COMBINATORS | {"$ref"}
# The keywords the base comparison decides. Every other assertion keyword of the dialect is compared by
# identity (`_undecided`).
_DECIDED: Final = frozenset({
    "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "items", "prefixItems", "additionalItems", "minItems", "maxItems",
    "uniqueItems", "properties", "patternProperties", "additionalProperties", "required", "minProperties",
    "maxProperties", "allOf", "anyOf", "oneOf", "not", "if", "$ref",
})
# Keywords whose meaning depends on their siblings or on the dynamic scope: kept only when whole schemas
# are the same.
_CONTEXTUAL: Final = frozenset({"unevaluatedItems", "unevaluatedProperties", "$dynamicRef", "$recursiveRef"})
# The instances a keyword applies to: it cannot refuse a writer that never writes that kind.
_KEYWORD_KIND: Final = {
    "contains": "array", "unevaluatedItems": "array", "dependencies": "object", "dependentRequired": "object",
    "dependentSchemas": "object", "propertyNames": "object", "unevaluatedProperties": "object",
}


# The keywords validation asserts, per dialect (`format` is an annotation here, see the top).
_ASSERTIONS: Final = {d.name: frozenset(d.validator.VALIDATORS) - {"format"} for d in _DIALECTS}


def _assertions(dialect: _Dialect) -> frozenset[str]:
    return _ASSERTIONS[dialect.name]


# ---------------------------------------------------------------------------------------------- JSON types

_ALL_KINDS: Final = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})


def _covers(kinds: frozenset[str], kind: str) -> bool:
    """Whether a schema accepting the JSON types `kinds` accepts every value of `kind` ("number" holds
    the integers too)."""
    return kind in kinds or (kind == "integer" and "number" in kinds)


def _may_write(kinds: frozenset[str], kind: str) -> bool:
    return kind in kinds or (kind == "number" and "integer" in kinds)


def _intersect(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    return frozenset(k for k in a if _covers(b, k)) | frozenset(k for k in b if _covers(a, k))


def _kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _types(keywords: Mapping[str, object]) -> frozenset[str] | None:
    value = keywords.get("type")
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str))
    return None


def _finite(node: _Node) -> list[object] | None:
    """The only values a schema's own `const`/`enum` lets it accept; None when it has neither (`const`
    asserts nothing in draft-04)."""
    keywords = node.keywords
    if "const" in keywords and "const" in _assertions(node.dialect):
        return [keywords["const"]]
    values = keywords.get("enum")
    return list(values) if isinstance(values, list) else None


def _writable(node: _Node) -> list[object] | None:
    """The values a writer may write when they are few: its `const`/`enum`, or all of its types when
    those are only boolean and null."""
    values = _finite(node)
    if values is not None:
        return values
    types = _types(node.keywords)
    if types is not None and types <= {"boolean", "null"}:
        return [v for t, v in (("boolean", False), ("boolean", True), ("null", None)) if t in types]
    return None


def _json_equal(a: object, b: object) -> bool:
    """Equality as JSON Schema has it: 1 and 1.0 are equal, true and 1 are not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _number(value: object) -> Fraction | None:
    """A schema's numeric bound, exactly (0.1 as 1/10, so that multiples divide exactly)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return Fraction(value) if isinstance(value, int) else Fraction(repr(value))


def _bound(keywords: Mapping[str, object], inclusive: str, exclusive: str
           ) -> tuple[Fraction, bool, str] | None:
    """The tighter of a schema's inclusive and exclusive bound on one side: (value, exclusive, keyword).
    Draft-04 spells exclusivity as a boolean beside the inclusive keyword."""
    bounds: list[tuple[Fraction, bool, str]] = []
    value = _number(keywords.get(inclusive))
    if value is not None:
        bounds.append((value, keywords.get(exclusive) is True, inclusive))
    value = _number(keywords.get(exclusive))
    if value is not None:
        bounds.append((value, True, exclusive))
    if not bounds:
        return None
    lower = inclusive.startswith("min")
    # The tightest: the largest lower bound (or smallest upper), exclusive before inclusive at a tie.
    return max(bounds, key=lambda b: (b[0] if lower else -b[0], b[1]))


# ---------------------------------------------------------------------------------------------- comparison


class _TooComplex(Exception):
    """More comparisons than COMPARISONS_MAX: the check refuses rather than assumes."""


class _RefLoop(Exception):
    """A `$ref` chain that never reaches a schema."""


class _Comparison:
    """One compatibility check: does a reader schema accept every value a writer schema accepts?

    `reads` answers for two nodes with the reasons it could not show it (empty: it can). Pairs under
    comparison are remembered while they are, with how deep into the value they sit: meeting one again
    deeper (a cycle of `$ref`s through a property or an item) assumes it holds, which is how recursive types
    are compared; meeting one again at the same depth is a cycle that never reaches a value, refused."""

    def __init__(self) -> None:
        self._comparing: dict[tuple[tuple[int, frozenset[str]], tuple[int, frozenset[str]]], int] = {}
        self._value_depth = 0  # properties and items descended into on the way here
        self._comparisons = 0

    def _count(self) -> None:
        self._comparisons += 1
        if self._comparisons > COMPARISONS_MAX:
            raise _TooComplex

    # -- the whole of a schema

    def reads(self, reader: _Node, writer: _Node, path: tuple[str, ...]) -> list[str]:
        self._count()
        try:
            r, w = self._deref(reader), self._deref(writer)
        except _RefLoop as exc:
            return [f"{_pointer(path)}: {exc}"]
        pair = (r.key, w.key)
        depth = self._comparing.get(pair)
        if depth is not None:
            if depth < self._value_depth:
                return []
            return [f"{_pointer(path)}: a cycle of $refs that never descends into the value: not compared"]
        self._comparing[pair] = self._value_depth
        try:
            return self._reads(r, w, path)
        finally:
            del self._comparing[pair]

    def _descend(self, reader: _Node, writer: _Node, path: tuple[str, ...]) -> list[str]:
        """`reads` for a part of the value (a property, an item)."""
        self._value_depth += 1
        try:
            return self.reads(reader, writer, path)
        finally:
            self._value_depth -= 1

    def _deref(self, node: _Node) -> _Node:
        """`node`, or what its `$ref` points to when the `$ref` stands for the whole schema (before
        2019-09 its siblings are ignored; from 2019-09 on, a `$ref` with siblings is one more part)."""
        for _ in range(_REF_HOPS_MAX):
            keywords = node.keywords
            ref = keywords.get("$ref")
            if not isinstance(ref, str):
                return node
            if node.dialect.modern and (keywords.keys() & _assertions(node.dialect)) - {"$ref"}:
                return node
            node = self._lookup(node, ref)
        raise _RefLoop(f"$ref chain longer than {_REF_HOPS_MAX} (a loop?)")

    def _resolved(self, node: _Node) -> _Node:
        """`node` dereferenced, or as it is when its `$ref`s loop (it then shows no default, no values and
        accepts nothing for sure: the conservative reading)."""
        try:
            return self._deref(node)
        except _RefLoop:
            return node

    @staticmethod
    def _lookup(node: _Node, ref: str) -> _Node:
        try:
            resolved = node.resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            # parse() resolved every $ref already: this one would be a bug, reported rather than hidden.
            raise _RefLoop(f"$ref {ref!r} resolves to nothing") from None
        return node.at(resolved.contents, resolved.resolver)

    def _reads(self, r: _Node, w: _Node, path: tuple[str, ...]) -> list[str]:
        if w.contents is False or _accepts_all(r):
            return []
        if self._same(r, w):
            return []
        at = _pointer(path)
        if r.contents is False:
            return [f"{at}: the reader's schema is false: it refuses every value"]
        values = _writable(w)
        if values is not None:
            return self._values(r, values, path)
        found = self._reads_base(r.without(_BASE_OMIT), w, path)
        for i, part in enumerate(r.branches("allOf")):
            found += self.reads(part, w, (*path, "allOf", str(i)))
        ref = r.keywords.get("$ref")
        if isinstance(ref, str):  # a 2019-09+ $ref beside other keywords: one more part of the schema
            try:
                found += self.reads(self._lookup(r, ref), w, (*path, "$ref"))
            except _RefLoop as exc:
                found.append(f"{at}/$ref: {exc}")
        for keyword in ("anyOf", "oneOf"):
            branches = r.branches(keyword)
            if branches:
                found += self._reads_union(branches, keyword, w, (*path, keyword))
        excluded = r.get("not")
        if excluded is not None:
            found += self._reads_not(excluded, w, (*path, "not"))
        if ("if" in r.keywords and "if" in _assertions(r.dialect)
                and not self._same_keywords(r, w, ("if", "then", "else"))):
            found.append(f"{at}/if: the reader's if/then/else differs from the writer's: kanal does not "
                         f"compare conditionals structurally, so the change is refused")
        return found

    def _values(self, r: _Node, values: list[object], path: tuple[str, ...]) -> list[str]:
        """A writer limited to a few values (`enum`, `const`) is read when the reader accepts each one."""
        schema: object = r.keywords if r.omit else r.contents
        validator = r.dialect.validator(schema, _resolver=r.resolver)
        found: list[str] = []
        for value in values:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is not None:
                where = _pointer((*path, *(str(p) for p in error.relative_schema_path)))
                found.append(f"{where}: the writer may write {json.dumps(value)}, which the reader refuses: "
                             f"{error.message}")
        return found

    # -- the parts of a writer

    def _writer_alternatives(self, w: _Node) -> Iterator[tuple[str, list[_Node]]]:
        """Other ways to show a writer is read: through one of its `allOf` branches (the writer writes
        nothing outside it), or through all the branches of one of its unions."""
        for i, branch in enumerate(w.branches("allOf")):
            yield f"allOf/{i}", [branch]
        ref = w.keywords.get("$ref")
        if isinstance(ref, str):
            try:
                yield "$ref", [self._lookup(w, ref)]
            except _RefLoop:
                pass
        for keyword in ("anyOf", "oneOf"):
            branches = w.branches(keyword)
            if branches:
                yield keyword, branches

    def _reads_base(self, r: _Node, w: _Node, path: tuple[str, ...]) -> list[str]:
        """The reader's own keywords (no combinators) against the writer."""
        if _accepts_all(r):
            return []
        direct = self._keywords(r, w, path)
        if not direct:
            return []
        for _, parts in self._writer_alternatives(w):
            if all(not self.reads(r, part, path) for part in parts):
                return []
        return direct

    # -- keyword by keyword

    def _keywords(self, r: _Node, w: _Node, path: tuple[str, ...]) -> list[str]:
        rk = r.keywords
        w_kinds = self._kinds(w, 0)
        found = self._type(rk, w_kinds, path)
        if _finite(r) is not None:
            keyword = "enum" if "enum" in rk else "const"
            found.append(f"{_pointer((*path, keyword))}: the reader accepts only the values of its {keyword} "
                         f"and the writer is not limited to them")
        if _may_write(w_kinds, "number"):
            found += self._numbers(r, w, w_kinds, path)
        if _may_write(w_kinds, "string"):
            found += self._strings(rk, w.keywords, path)
        if _may_write(w_kinds, "array"):
            found += self._arrays(r, w, path)
        if _may_write(w_kinds, "object"):
            found += self._objects(r, w, path)
        return found + self._undecided(r, w, w_kinds, path)

    @staticmethod
    def _type(rk: Mapping[str, object], w_kinds: frozenset[str], path: tuple[str, ...]) -> list[str]:
        r_types = _types(rk)
        if r_types is None:
            return []
        missing = sorted(k for k in w_kinds if not _covers(r_types, k))
        if not missing:
            return []
        at = _pointer((*path, "type"))
        if w_kinds == _ALL_KINDS:
            return [(f"{at}: the reader accepts only {sorted(r_types)}, and the writer's schema does not "
                     f"limit the type")]
        if missing == ["number"] and "integer" in r_types:
            return [(f"{at}: narrowed from number to integer: the writer may write numbers that are not "
                    f"integers")]
        return [(f"{at}: changed: the writer may write {', '.join(missing)}, which the reader's type "
                f"{sorted(r_types)} refuses")]

    @staticmethod
    def _numbers(r: _Node, w: _Node, w_kinds: frozenset[str], path: tuple[str, ...]) -> list[str]:
        rk, wk = r.keywords, w.keywords
        found: list[str] = []
        for inclusive, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            r_bound, w_bound = _bound(rk, inclusive, exclusive), _bound(wk, inclusive, exclusive)
            if r_bound is None:
                continue
            at = _pointer((*path, r_bound[2]))
            if w_bound is None:
                found.append(f"{at}: added ({_show(r_bound)}): the writer's numbers have no such bound")
                continue
            lower = inclusive == "minimum"
            looser = w_bound[0] > r_bound[0] if lower else w_bound[0] < r_bound[0]
            if not (looser or (w_bound[0] == r_bound[0] and (w_bound[1] or not r_bound[1]))):
                found.append(f"{at}: tightened from {_show(w_bound)} to {_show(r_bound)}")
        r_multiple, w_multiple = _number(rk.get("multipleOf")), _number(wk.get("multipleOf"))
        if r_multiple is not None and not (r_multiple == 1 and w_kinds <= {"integer"}):
            at = _pointer((*path, "multipleOf"))
            if w_multiple is None:
                found.append(f"{at}: added ({r_multiple}): the writer's numbers need not be multiples of it")
            elif (w_multiple / r_multiple).denominator != 1:
                found.append(f"{at}: changed from {w_multiple} to {r_multiple}, which does not divide it")
        return found

    @staticmethod
    def _strings(rk: Mapping[str, object], wk: Mapping[str, object], path: tuple[str, ...]) -> list[str]:
        found = _counts(rk, wk, "minLength", "maxLength", path, "characters")
        pattern = rk.get("pattern")
        if isinstance(pattern, str) and wk.get("pattern") != pattern:
            how = "added" if "pattern" not in wk else f"changed from {wk['pattern']!r}"
            found.append(f"{_pointer((*path, 'pattern'))}: {how} to {pattern!r} (patterns are compared as "
                         f"text): the writer's strings need not match it")
        return found

    def _arrays(self, r: _Node, w: _Node, path: tuple[str, ...]) -> list[str]:
        r_prefix, r_rest, r_rest_keyword = _items(r)
        w_prefix, w_rest, _ = _items(w)
        found: list[str] = []
        prefix_keyword = "prefixItems" if r.dialect.name == "2020-12" else "items"
        for i in range(max(len(r_prefix), len(w_prefix))):
            r_item = r_prefix[i] if i < len(r_prefix) else r_rest
            w_item = w_prefix[i] if i < len(w_prefix) else w_rest
            keyword = prefix_keyword if i < len(r_prefix) else r_rest_keyword
            found += self._descend(r_item, w_item, (*path, keyword, str(i)))
        found += self._descend(r_rest, w_rest, (*path, r_rest_keyword))
        rk, wk = r.keywords, w.keywords
        found += _counts(rk, wk, "minItems", "maxItems", path, "items")
        if rk.get("uniqueItems") is True and wk.get("uniqueItems") is not True:
            found.append(f"{_pointer((*path, 'uniqueItems'))}: added: the writer's arrays may repeat items")
        return found

    # -- objects: the content models

    def _objects(self, r: _Node, w: _Node, path: tuple[str, ...]) -> list[str]:
        r_props, w_props = r.schemas("properties"), w.schemas("properties")
        found: list[str] = []
        for name in sorted(r_props.keys() | w_props.keys()):
            found += self._property(r, w, name, name in r_props, name in w_props, path)
        found += self._undeclared(r, w, path)
        found += self._required(r, w, r_props, path)
        found += _counts(r.keywords, w.keywords, "minProperties", "maxProperties", path, "properties")
        return found

    def _property(self, r: _Node, w: _Node, name: str, in_reader: bool, in_writer: bool,
                  path: tuple[str, ...]) -> list[str]:
        at = (*path, "properties", name)
        details = self._reads_all(_schemas_for(r, name), _schemas_for(w, name), at)
        if not details or (in_reader and in_writer):
            return details
        if not in_writer:
            model = _content_model(w)
            head = (f"{_pointer(at)}: property {name!r} added while the writer's content model is {model}: "
                    f"data it wrote may hold {name!r} with a value the reader's schema for it refuses")
        else:
            model = _content_model(r)
            head = (f"{_pointer(at)}: property {name!r} removed while the reader's content model is {model}: "
                    f"the values the writer wrote under {name!r} are refused")
        return [head] if model != "partially open" else [head, *details]

    def _undeclared(self, r: _Node, w: _Node, path: tuple[str, ...]) -> list[str]:
        """Properties neither schema declares: what the writer's `additionalProperties` and
        `patternProperties` allow must be allowed by the reader's."""
        if _content_model(r) == "open":
            return []
        r_patterns, w_patterns = r.schemas("patternProperties"), w.schemas("patternProperties")
        w_additional = w.get("additionalProperties") or w.child(True)
        r_additional = r.get("additionalProperties") or r.child(True)
        found: list[str] = []
        for pattern, r_schema in r_patterns.items():
            at = (*path, "patternProperties", pattern)
            if pattern in w_patterns:
                found += self._descend(r_schema, w_patterns[pattern], at)
                continue
            # Names matching it were written under whatever else the writer allowed.
            for label, w_schema in [("additionalProperties", w_additional),
                                    *((f"patternProperties {q!r}", s) for q, s in w_patterns.items())]:
                details = self._descend(r_schema, w_schema, at)
                if details:
                    found += [(f"{_pointer(at)}: names matching {pattern!r} may have been written under the "
                              f"writer's {label}, which allows values the reader's schema for them refuses"),
                              *details]
        if not _accepts_all(self._resolved(r_additional)):
            at = (*path, "additionalProperties")
            for label, w_schema in [("additionalProperties", w_additional),
                                    *((f"patternProperties {q!r}", s) for q, s in w_patterns.items()
                                      if q not in r_patterns)]:
                details = self._descend(r_additional, w_schema, at)
                if details:
                    found += [(f"{_pointer(at)}: the reader's content model is {_content_model(r)} and "
                               f"refuses properties the writer's {label} allows"), *details]
        return found

    def _required(self, r: _Node, w: _Node, r_props: Mapping[str, _Node], path: tuple[str, ...]
                  ) -> list[str]:
        w_required = w.keywords.get("required")
        written = set(w_required) if isinstance(w_required, list) else set()
        r_required = r.keywords.get("required")
        found: list[str] = []
        for name in r_required if isinstance(r_required, list) else []:
            if name in written:
                continue
            schema = r_props.get(name)
            if schema is not None and "default" in self._resolved(schema).keywords:
                continue  # Confluent's rule: the reader fills in a required property's default
            found.append(f"{_pointer((*path, 'required'))}: property {name!r} is required by the reader "
                         f"(with no default) and the writer may leave it out")
        return found

    def _reads_all(self, readers: list[_Node], writers: list[_Node], path: tuple[str, ...]) -> list[str]:
        """Every reader schema (all apply) reads the writer, shown through any one of the writer's
        schemas (all of them applied to what it wrote)."""
        found: list[str] = []
        for reader in readers:
            first: list[str] = []
            for writer in writers:
                details = self._descend(reader, writer, path)
                if not details:
                    break
                first = first or details
            else:
                found += first
        return found

    # -- combinators

    def _reads_union(self, branches: list[_Node], keyword: str, w: _Node, path: tuple[str, ...]) -> list[str]:
        """The writer is read by the reader's anyOf/oneOf when one branch reads it whole, or when each
        branch of one of the writer's own unions is read by one of the reader's."""
        whole = self._read_by_one(branches, keyword, w, None, -1, path)
        if whole is None:
            return []
        best: list[str] | None = None
        for w_keyword in ("anyOf", "oneOf"):
            w_branches = w.branches(w_keyword)
            if not w_branches:
                continue
            unread: list[str] = []
            for m, wb in enumerate(w_branches):
                why = self._read_by_one(branches, keyword, wb, w_branches if w_keyword == "oneOf" else None,
                                        m, path)
                if why is not None:
                    unread.append(f"{_pointer(path)}: the writer's {w_keyword} branch {m}: {why}")
            if not unread:
                return []
            best = unread if best is None or len(unread) < len(best) else best
        return best or [f"{_pointer(path)}: {whole}"]

    def _read_by_one(self, branches: list[_Node], keyword: str, w: _Node, w_one_of: list[_Node] | None,
                     m: int, path: tuple[str, ...]) -> str | None:
        """None when one of the reader's branches reads `w` (and, for oneOf, no other may match it too);
        else why not."""
        overlap = None
        closest: tuple[int, list[str]] | None = None
        for i, branch in enumerate(branches):
            details = self.reads(branch, w, (*path, str(i)))
            if details:
                closest = closest if closest is not None and len(closest[1]) <= len(details) else (i, details)
                continue
            if keyword != "oneOf":
                return None
            other = self._overlapping(branches, i, w, w_one_of, m)
            if other is None:
                return None
            overlap = (f"read by branch {i}, but branch {other} may match the same values and oneOf takes "
                       f"exactly one (not shown disjoint)")
        if overlap is not None:
            return overlap
        why = f" (the closest, branch {closest[0]}: {closest[1][0]})" if closest is not None else ""
        return f"no branch of the reader's {keyword} accepts everything the writer writes{why}"

    def _overlapping(self, branches: list[_Node], i: int, w: _Node, w_one_of: list[_Node] | None,
                     m: int) -> int | None:
        """A reader oneOf branch other than `i` that may also accept what `w` writes; None when none may:
        it is disjoint from `w`, or inside another branch of the writer's own oneOf (whose values are
        never `w`'s)."""
        for j, other in enumerate(branches):
            if j == i or self._disjoint(other, w):
                continue
            if w_one_of is not None and any(
                    n != m and not self.reads(wb, other, ()) for n, wb in enumerate(w_one_of)):
                continue
            return j
        return None

    def _reads_not(self, excluded: _Node, w: _Node, path: tuple[str, ...]) -> list[str]:
        """The reader refuses what `excluded` accepts: the writer must never write it."""
        w_excluded = w.get("not")
        if w_excluded is not None and not self.reads(w_excluded, excluded, path):
            return []  # the writer already excludes at least that much
        if self._disjoint(excluded, w):
            return []
        return [(f"{_pointer(path)}: the reader refuses values its not-schema accepts, and the writer is not "
                f"shown to exclude them")]

    def _disjoint(self, a: _Node, b: _Node) -> bool:
        """Whether no value is valid under both `a` and `b`, as far as types and discriminators show."""
        try:
            a, b = self._deref(a), self._deref(b)
        except _RefLoop:
            return False
        if not _intersect(self._kinds(a, 0), self._kinds(b, 0)):
            return True
        for one, other in ((a, b), (b, a)):
            values = _finite(one)
            if values is not None and all(self._values(other, [v], ()) for v in values):
                return True
        # An object discriminator: a property both require, with disjoint const/enum values.
        a_props, b_props = a.schemas("properties"), b.schemas("properties")
        a_required, b_required = a.keywords.get("required"), b.keywords.get("required")
        for name in a_props.keys() & b_props.keys():
            if not (isinstance(a_required, list) and name in a_required
                    and isinstance(b_required, list) and name in b_required):
                continue
            a_values = _finite(self._resolved(a_props[name]))
            b_values = _finite(self._resolved(b_props[name]))
            if a_values is not None and b_values is not None and not any(
                    _json_equal(x, y) for x in a_values for y in b_values):
                return True
        return False

    def _kinds(self, node: _Node, depth: int) -> frozenset[str]:
        """The JSON types `node` may accept (a superset: every keyword that narrows them is not read)."""
        if depth > _KINDS_DEPTH_MAX:
            return _ALL_KINDS
        try:
            node = self._deref(node)
        except _RefLoop:
            return _ALL_KINDS
        if node.contents is False:
            return frozenset()
        keywords = node.keywords
        kinds = _types(keywords) or _ALL_KINDS
        values = _finite(node)
        if values is not None:
            kinds = _intersect(kinds, frozenset(_kind_of(v) for v in values))
        for part in node.branches("allOf"):
            kinds = _intersect(kinds, self._kinds(part, depth + 1))
        ref = keywords.get("$ref")
        if isinstance(ref, str):
            try:
                kinds = _intersect(kinds, self._kinds(self._lookup(node, ref), depth + 1))
            except _RefLoop:
                pass
        for keyword in ("anyOf", "oneOf"):
            branches = node.branches(keyword)
            if branches:
                union = frozenset[str]().union(*(self._kinds(b, depth + 1) for b in branches))
                kinds = _intersect(kinds, union)
        return kinds

    # -- what is not decided structurally

    def _undecided(self, r: _Node, w: _Node, w_kinds: frozenset[str], path: tuple[str, ...]) -> list[str]:
        found: list[str] = []
        rk = r.keywords
        for keyword in sorted((rk.keys() & _assertions(r.dialect)) - _DECIDED):
            kind = _KEYWORD_KIND.get(keyword)
            if kind is not None and not _may_write(w_kinds, kind):
                continue
            at = _pointer((*path, keyword))
            if keyword in _CONTEXTUAL:
                found.append(f"{at}: kanal does not compare {keyword} structurally (its meaning depends on "
                             f"the rest of the schema): a reader that has it reads only an identical writer")
                continue
            related = ("contains", "minContains", "maxContains") if keyword == "contains" else (keyword,)
            if not self._same_keywords(r, w, related):
                found.append(f"{at}: added or changed in the reader; kanal does not compare {keyword} "
                             f"structurally, so the change is refused")
        return found

    # -- sameness

    def _same(self, a: _Node, b: _Node) -> bool:
        if a.omit != b.omit:
            return False
        return self._same_value(a, b, set())

    def _same_keywords(self, a: _Node, b: _Node, keywords: Sequence[str]) -> bool:
        ak, bk = a.keywords, b.keywords
        for keyword in keywords:
            if (keyword in ak) != (keyword in bk):
                return False
            if keyword in ak and not self._same_value(a.child(ak[keyword]), b.child(bk[keyword]), set()):
                return False
        return True

    def _same_value(self, a: _Node, b: _Node, seen: set[tuple[int, int]]) -> bool:
        """Whether two schema values are the same, `$ref`s compared by what they point to (linear in their
        size: each pair of `$ref` targets is compared once)."""
        x, y = a.contents, b.contents
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            xk, yk = a.keywords, b.keywords
            if xk.keys() != yk.keys():
                return False
            for key, value in xk.items():
                other = yk[key]
                if key == "$ref" and isinstance(value, str) and isinstance(other, str):
                    try:
                        x_target, y_target = self._lookup(a, value), self._lookup(b, other)
                    except _RefLoop:
                        if value != other:
                            return False
                        continue
                    pair = (id(x_target.contents), id(y_target.contents))
                    if pair in seen:
                        continue
                    seen.add(pair)
                    if not self._same_value(x_target, y_target, seen):
                        return False
                elif not self._same_value(a.child(value), b.child(other), seen):
                    return False
            return True
        if isinstance(x, list) and isinstance(y, list):
            return len(x) == len(y) and all(
                self._same_value(a.child(p), b.child(q), seen) for p, q in zip(x, y, strict=True))
        return _json_equal(x, y)


def _accepts_all(node: _Node) -> bool:
    """A schema that asserts nothing (`true`, `{}`, annotations only)."""
    if node.contents is True:
        return True
    if node.contents is False:
        return False
    return not (node.keywords.keys() & _assertions(node.dialect))


def _show(bound: tuple[Fraction, bool, str]) -> str:
    value = bound[0]
    number = str(value.numerator) if value.denominator == 1 else str(float(value))
    return f"{'>' if bound[2].startswith(('min', 'exclusiveMin')) else '<'}{'' if bound[1] else '='} {number}"


def _counts(rk: Mapping[str, object], wk: Mapping[str, object], min_keyword: str, max_keyword: str,
            path: tuple[str, ...], noun: str) -> list[str]:
    """A count bound (length, items, properties): the reader's minimum at most the writer's, its maximum
    at least the writer's."""
    found: list[str] = []
    r_max, w_max = _number(rk.get(max_keyword)), _number(wk.get(max_keyword))
    if r_max is not None and (w_max is None or w_max > r_max):
        how = "added" if w_max is None else f"lowered from {w_max}"
        found.append(f"{_pointer((*path, max_keyword))}: {how} to {r_max}: the writer may write more {noun}")
    r_min, w_min = _number(rk.get(min_keyword)) or 0, _number(wk.get(min_keyword)) or 0
    if r_min > w_min:
        found.append(f"{_pointer((*path, min_keyword))}: raised from {w_min} to {r_min}: the writer may "
                     f"write fewer {noun}")
    return found


def _items(node: _Node) -> tuple[list[_Node], _Node, str]:
    """An array schema as tuple positions and the schema of the items past them, with the keyword that
    holds the latter (2020-12: `prefixItems` and `items`; before: `items` as a list and
    `additionalItems`, or `items` as one schema)."""
    keywords = node.keywords
    if node.dialect.name == "2020-12":
        return node.branches("prefixItems"), node.get("items") or node.child(True), "items"
    if isinstance(keywords.get("items"), list):
        return node.branches("items"), node.get("additionalItems") or node.child(True), "additionalItems"
    return [], node.get("items") or node.child(True), "items"


def _schemas_for(node: _Node, name: str) -> list[_Node]:
    """The schemas a property of this name is validated against: its declaration and the patterns it
    matches, or else `additionalProperties`."""
    out: list[_Node] = []
    declared = node.schemas("properties").get(name)
    if declared is not None:
        out.append(declared)
    out += [schema for pattern, schema in node.schemas("patternProperties").items()
            if re.search(pattern, name) is not None]
    return out or [node.get("additionalProperties") or node.child(True)]


def _content_model(node: _Node) -> str:
    """Confluent's names: open (anything else allowed), closed (nothing else) or partially open."""
    additional = node.keywords.get("additionalProperties", True)
    if node.keywords.get("patternProperties"):
        return "partially open"
    if additional is False:
        return "closed"
    if additional is True or (isinstance(additional, Mapping) and not additional):
        return "open"
    return "partially open"
