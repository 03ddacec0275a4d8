"""What the schema registry's decisions and reads share: scopes, names, references, parsing, sameness.

Pure functions of a MetadataImage (the registry's part: image.py's table); parsing goes through a
`SchemaParser` the caller passes (`kanal.schemas.formats.parse_schema` by default; the controller may pass a
`CachingParser`, tests a fake one), so nothing here holds state.

| rule | how |
|---|---|
| a subject's config | its own, else the registry's (""), else BACKWARD without normalize (`config_of`) |
| a subject's mode | its own, else the registry's, else READWRITE (`mode_of`) |
| level and mode names | Confluent's, any case (`level_named`, `mode_named`; INVALID_CONFIG otherwise) |
| a subject name | 1..`SUBJECT_NAME_CHARS_MAX` characters, no control characters (INVALID_REQUEST) |
| references | each names a subject and version (-1: its latest live one) that exists, live for a new schema (soft-deleted too for IMPORT and for parsing what is stored); resolved depth first, a reference's own references before it, the first use of a name winning (Confluent's order); at most `REFERENCE_DEPTH_MAX` deep (INVALID_SCHEMA) |
| the same schema | same type, same references, and the same text or the same normalized text (`canonical()`): what Confluent's lookup calls equivalent, so a reformatted text finds its version |
| a schema's size | at most `SCHEMA_TEXT_BYTES_MAX` bytes of UTF-8 and `REFERENCES_PER_SCHEMA_MAX` references (INVALID_SCHEMA): every registration is a metadata record on every node |
| versions of a subject | live ones unless deleted ones are asked for; the latest is the highest live one |
| referrers | the held schemas whose references name a version (`referrers`): the reason a delete is refused |
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from kanal.metadata.image import (
    DEFAULT_REGISTRY_CONFIG,
    DEFAULT_REGISTRY_MODE,
    GLOBAL_SUBJECT,
    MetadataImage,
    RegistryConfig,
    RegistryMode,
    SchemaContent,
    SchemaId,
    StoredSchema,
    reference_to_proto,
)
from kanal.schemas.compatibility import CompatibilityLevel, incompatibilities
from kanal.schemas.formats import parse_schema, schema_type_of
from kanal.schemas.schema_types import ParsedSchema, Reference, ResolvedReferences, SchemaInvalid, SchemaType
from kanal.v1 import schema_registry_pb2 as pb
from kanal.v1.error import ErrorCode, KanalError

# Parses one schema text with its references resolved (name -> text); SchemaInvalid when it is not valid.
SchemaParser = Callable[[SchemaType, str, ResolvedReferences], ParsedSchema]

# Every registration is a metadata record replicated to and kept by every node (and in every snapshot):
# Confluent's registry keeps schemas in a Kafka topic whose default message limit is 1 MB; the same bound.
SCHEMA_TEXT_BYTES_MAX = 1024 * 1024
REFERENCES_PER_SCHEMA_MAX = 1000
# A chain of references deeper than this is refused rather than resolved (each level is a recursion).
REFERENCE_DEPTH_MAX = 64
SUBJECT_NAME_CHARS_MAX = 1000
# Ids and versions travel as int32 (schema_registry.proto).
INT32_MAX = (1 << 31) - 1
LATEST_VERSION = -1

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# -- names and scopes ----------------------------------------------------------------------------------


def check_subject_name(subject: str) -> None:
    """INVALID_REQUEST unless `subject` can name a subject (not the registry's "")."""
    if not subject or len(subject) > SUBJECT_NAME_CHARS_MAX or _CONTROL.search(subject):
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"a subject name is 1..{SUBJECT_NAME_CHARS_MAX} characters without control "
                         f"characters, got {subject[:80]!r}")


def where(subject: str) -> str:
    """How messages name a scope."""
    return f"subject {subject!r}" if subject != GLOBAL_SUBJECT else "the registry"


def level_named(name: str) -> CompatibilityLevel:
    try:
        return CompatibilityLevel(name.upper())
    except ValueError:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"invalid compatibility level {name!r}: one of "
                                                   f"{', '.join(CompatibilityLevel)}") from None


def mode_named(name: str) -> RegistryMode:
    try:
        return RegistryMode(name.upper())
    except ValueError:
        raise KanalError(ErrorCode.INVALID_CONFIG,
                         f"invalid mode {name!r}: one of {', '.join(RegistryMode)}") from None


def config_of(image: MetadataImage, subject: str) -> RegistryConfig:
    """The config in effect for `subject` (module docstring)."""
    config = image.registry_configs.get(subject) or image.registry_configs.get(GLOBAL_SUBJECT)
    return config or DEFAULT_REGISTRY_CONFIG


def mode_of(image: MetadataImage, subject: str) -> RegistryMode:
    """The mode in effect for `subject` (module docstring)."""
    mode = image.registry_modes.get(subject) or image.registry_modes.get(GLOBAL_SUBJECT)
    return mode or DEFAULT_REGISTRY_MODE


def refuse_read_only(image: MetadataImage, subject: str) -> None:
    if mode_of(image, subject) is RegistryMode.READONLY:
        raise KanalError(ErrorCode.REGISTRY_MODE_FORBIDS, f"{where(subject)} is in READONLY mode")


# -- versions ------------------------------------------------------------------------------------------


def versions_of(image: MetadataImage, subject: str, *, deleted: bool) -> list[int]:
    """The subject's version numbers, ascending: live ones, and soft-deleted ones too with `deleted`."""
    versions = image.subjects.get(subject, {})
    return sorted(v for v, state in versions.items() if deleted or not state.deleted)


def latest_live(image: MetadataImage, subject: str) -> int | None:
    live = versions_of(image, subject, deleted=False)
    return live[-1] if live else None


def next_version(image: MetadataImage, subject: str) -> int:
    """One more than the highest version the subject holds, soft-deleted or live. A hard-deleted number
    above every remaining one comes back, as in Confluent's registry (its register takes the highest stored
    version + 1, and a hard delete removes the version from the store); a soft-deleted one never does."""
    versions = image.subjects.get(subject)
    version = max(versions) + 1 if versions else 1
    if version > INT32_MAX:  # only after an IMPORT of version 2^31 - 1
        raise KanalError(ErrorCode.INVALID_REQUEST, f"subject {subject!r} has used every version number")
    return version


def check_version_number(version: int) -> None:
    """INVALID_REQUEST unless `version` is -1 (latest) or 1.. (Confluent's 42202)."""
    if version != LATEST_VERSION and not 1 <= version <= INT32_MAX:
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"version {version} is not a valid version: 1..{INT32_MAX}, or -1 for the latest")


def find_version(image: MetadataImage, subject: str, version: int, *, deleted: bool) -> int:
    """The version a read asks for (-1: the latest live one): SUBJECT_NOT_FOUND when the subject holds no
    version (no live one, without `deleted`), SCHEMA_VERSION_NOT_FOUND when it does not hold that one."""
    check_version_number(version)
    held = versions_of(image, subject, deleted=deleted)
    if not held:
        raise KanalError(ErrorCode.SUBJECT_NOT_FOUND, f"subject {subject!r} not found")
    if version == LATEST_VERSION:
        latest = latest_live(image, subject)
        if latest is None:
            raise KanalError(ErrorCode.SCHEMA_VERSION_NOT_FOUND, f"subject {subject!r} has no live version")
        return latest
    if version not in held:
        raise KanalError(ErrorCode.SCHEMA_VERSION_NOT_FOUND,
                         f"subject {subject!r} has no version {version}"
                         + (" (it is soft-deleted)" if version in image.subjects[subject] else ""))
    return version


# -- references ----------------------------------------------------------------------------------------


def resolve_references(
    image: MetadataImage, references: Iterable[Reference], *, allow_deleted: bool
) -> tuple[tuple[Reference, ...], dict[str, str]]:
    """The references with -1 made the latest live version, and every referenced text by name (the
    references' own references included, each before its referrer); SchemaInvalid for one that names no
    version (no live one unless `allow_deleted`)."""
    texts: OrderedDict[str, str] = OrderedDict()
    pinned = tuple(_resolve(image, list(references), texts, set(), allow_deleted, 0))
    return pinned, dict(texts)


def _resolve(image: MetadataImage, references: list[Reference], texts: OrderedDict[str, str],
             visited: set[str], allow_deleted: bool, depth: int) -> list[Reference]:
    if depth > REFERENCE_DEPTH_MAX:
        raise SchemaInvalid(f"references nest deeper than {REFERENCE_DEPTH_MAX} levels")
    pinned = []
    for ref in references:
        if not ref.name or not ref.subject:
            raise SchemaInvalid(f"a reference needs a name and a subject: {ref}")
        version = ref.version
        if version == LATEST_VERSION:
            latest = latest_live(image, ref.subject)
            if latest is None:
                raise SchemaInvalid(f"reference {ref.name!r}: subject {ref.subject!r} has no live version")
            version = latest
        state = image.subjects.get(ref.subject, {}).get(version)
        if state is None or (state.deleted and not allow_deleted):
            raise SchemaInvalid(f"reference {ref.name!r}: no schema registered as version {ref.version} of "
                                f"subject {ref.subject!r}")
        pinned.append(Reference(ref.name, ref.subject, version))
        if ref.name in visited:  # Confluent's rule: a name's first resolution stands
            continue
        visited.add(ref.name)
        schema = image.schemas[state.schema_id]
        _resolve(image, list(schema.references), texts, visited, True, depth + 1)
        texts[ref.name] = schema.text
    return pinned


def references_from_proto(refs: Iterable[pb.SchemaReference]) -> list[Reference]:
    return [Reference(r.name, r.subject, r.version) for r in refs]


def referrers(image: MetadataImage, subject: str, version: int, *, live_only: bool,
              other_subjects: bool = False) -> list[SchemaId]:
    """The ids of schemas that reference the version and that a version holds (a live one with
    `live_only`; one of another subject with `other_subjects`): what a delete of it must not leave behind."""
    found = []
    for schema_id in image.referenced_by.get((subject, version), ()):
        for holder_subject, holder_version in image.schema_holders.get(schema_id, ()):
            if other_subjects and holder_subject == subject:
                continue
            if live_only and image.subjects[holder_subject][holder_version].deleted:
                continue
            found.append(schema_id)
            break
    return found


def refuse_referenced(image: MetadataImage, subject: str, version: int, *, live_only: bool,
                      other_subjects: bool = False) -> None:
    ids = referrers(image, subject, version, live_only=live_only, other_subjects=other_subjects)
    if ids:
        raise KanalError(ErrorCode.SCHEMA_REFERENCED,
                         f"version {version} of subject {subject!r} is referenced by schemas {ids}")


def deletion_order(image: MetadataImage, keys: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The (subject, version)s in an order that deletes a referrer before what it references (so each
    record finds its version unreferenced, as apply checks); the highest version first otherwise.
    References only point at versions registered before, so there is no cycle."""
    pending = set(keys)
    # For each version, the versions it references (through the schema it holds) among those deleted.
    needs: dict[tuple[str, int], set[tuple[str, int]]] = {key: set() for key in pending}
    for subject, version in pending:
        schema = image.schemas[image.subjects[subject][version].schema_id]
        needs[(subject, version)] = {(r.subject, r.version) for r in schema.references} & pending
    order = []
    while pending:
        # Versions no pending version references can go now.
        referenced: set[tuple[str, int]] = set()
        for key in pending:
            referenced |= needs[key]
        free = sorted(pending - referenced, key=lambda key: (-key[1], key[0]))
        if not free:
            raise RuntimeError(f"reference cycle among {sorted(pending)}")  # a broken image; never expected
        order.extend(free)
        pending.difference_update(free)
    return order


# -- schemas -------------------------------------------------------------------------------------------


@dataclass
class Candidate:
    """A schema a request brings: checked, its references resolved, parsed."""

    schema_type: SchemaType
    text: str
    references: tuple[Reference, ...]
    parsed: ParsedSchema

    @cached_property
    def canonical(self) -> str:
        return self.parsed.canonical()

    def content(self, *, normalize: bool) -> SchemaContent:
        """What it is stored as: its normalized text with `normalize`, else the text as given."""
        return SchemaContent(self.schema_type, self.canonical if normalize else self.text, self.references)


def parse_candidate(image: MetadataImage, schema_type: str, text: str, refs: Iterable[pb.SchemaReference],
                    *, allow_deleted: bool, parse: SchemaParser) -> Candidate:
    """The request's schema parsed (SchemaInvalid: INVALID_SCHEMA, with the parser's message)."""
    kind = schema_type_of(schema_type)
    if not text.strip():
        raise SchemaInvalid("empty schema")
    size = len(text.encode())
    if size > SCHEMA_TEXT_BYTES_MAX:
        raise SchemaInvalid(f"the schema is {size} bytes, more than {SCHEMA_TEXT_BYTES_MAX}")
    references = references_from_proto(refs)
    if len(references) > REFERENCES_PER_SCHEMA_MAX:
        raise SchemaInvalid(f"{len(references)} references, more than {REFERENCES_PER_SCHEMA_MAX}")
    pinned, texts = resolve_references(image, references, allow_deleted=allow_deleted)
    return Candidate(kind, text, pinned, parse(kind, text, texts))


def parse_stored(image: MetadataImage, schema: StoredSchema, parse: SchemaParser) -> ParsedSchema:
    """A recorded schema parsed; its references resolve to soft-deleted versions too (apply keeps every
    version a held schema references)."""
    _, texts = resolve_references(image, schema.references, allow_deleted=True)
    try:
        return parse(schema.schema_type, schema.text, texts)
    except SchemaInvalid as exc:
        raise SchemaInvalid(f"registered schema {schema.schema_id} no longer parses: {exc.message}") from None


def same_schema(image: MetadataImage, candidate: Candidate, schema: StoredSchema, parse: SchemaParser
                ) -> bool:
    """The same schema (module docstring): type and references equal, and the texts or their normalized
    forms. The recorded one is parsed only when the texts differ."""
    if schema.schema_type != candidate.schema_type or schema.references != candidate.references:
        return False
    if schema.text in (candidate.text, candidate.canonical):
        return True
    return parse_stored(image, schema, parse).canonical() == candidate.canonical


def matching_version(image: MetadataImage, subject: str, candidate: Candidate, versions: Sequence[int],
                     parse: SchemaParser) -> int | None:
    """The first of `versions` that holds the candidate's schema."""
    held = image.subjects.get(subject, {})
    for version in versions:
        if same_schema(image, candidate, image.schemas[held[version].schema_id], parse):
            return version
    return None


def ids_with_content(image: MetadataImage, content: SchemaContent) -> list[SchemaId]:
    """The ids recorded with exactly this content: those a version holds first, then orphans, each
    ascending (a registration reuses the first)."""
    ids = image.schema_ids_by_content.get(content, ())
    return sorted(ids, key=lambda schema_id: (schema_id not in image.schema_holders, schema_id))


def compatibility_problems(image: MetadataImage, subject: str, candidate: Candidate, against: Sequence[int],
                           level: CompatibilityLevel, parse: SchemaParser) -> list[str]:
    """Why the candidate may not follow the subject's `against` versions (ascending) at `level`; [] when it
    may. kanal.schemas.compatibility numbers the versions it names 1.. among those given; the messages
    here name the subject's version numbers."""
    if level is CompatibilityLevel.NONE or not against:
        return []
    held = image.subjects[subject]
    previous = [parse_stored(image, image.schemas[held[v].schema_id], parse) for v in against]
    messages = incompatibilities(candidate.parsed, previous, level)
    return [_renumbered(message, against) for message in messages]


_VERSION_PREFIX = re.compile(r"^version (\d+) ")


def _renumbered(message: str, versions: Sequence[int]) -> str:
    match = _VERSION_PREFIX.match(message)
    if match is None or not 1 <= int(match.group(1)) <= len(versions):
        return message
    return f"version {versions[int(match.group(1)) - 1]} {message[match.end():]}"


# -- replies -------------------------------------------------------------------------------------------


def registered_schema(schema: StoredSchema) -> pb.RegisteredSchema:
    return pb.RegisteredSchema(id=schema.schema_id, schema_type=schema.schema_type, schema=schema.text,
                               references=[reference_to_proto(ref) for ref in schema.references])


def subject_version(image: MetadataImage, subject: str, version: int, *, with_schema: bool = True
                    ) -> pb.SubjectVersion:
    state = image.subjects[subject][version]
    schema = registered_schema(image.schemas[state.schema_id]) if with_schema else None
    return pb.SubjectVersion(subject=subject, version=version, schema=schema, deleted=state.deleted)


# -- parsing with a memory ---------------------------------------------------------------------------


@dataclass
class CachingParser:
    """A SchemaParser that remembers its last `entries_max` results (by type, text and referenced texts),
    for the controller: a registration parses the subject's versions, which rarely change. Parsing is a
    pure function of those arguments, so a remembered result is the one a new parse would give. Not
    thread-safe: one decision at a time uses it, like the image."""

    entries_max: int = 1000
    parse: SchemaParser = parse_schema
    _entries: OrderedDict[tuple[SchemaType, str, tuple[tuple[str, str], ...]], ParsedSchema] = field(
        default_factory=OrderedDict)

    def __call__(self, schema_type: SchemaType, text: str, references: ResolvedReferences) -> ParsedSchema:
        key = (schema_type, text, tuple(references.items()))
        parsed = self._entries.get(key)
        if parsed is not None:
            self._entries.move_to_end(key)
            return parsed
        parsed = self.parse(schema_type, text, references)  # SchemaInvalid is not remembered
        self._entries[key] = parsed
        if len(self._entries) > self.entries_max:
            self._entries.popitem(last=False)
        return parsed
