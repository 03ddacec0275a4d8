"""The schema registry's decisions (issue 45): registrations, deletions, configs and modes as metadata
records, with Confluent's semantics. Reads are in schema_registry_reads.py; the rules both use (scopes,
references, sameness, limits) in schema_registry_rules.py; the state in image.py.

Each `decide_*(image, request, *, now_ms, principal, request_id[, parse])` returns `Decision(records,
reply)`: the records are one atomic batch (none when nothing changes or the request is refused), the reply
carries `error` / `error_message`. `parse` is a `SchemaParser` (`kanal.schemas.formats.parse_schema` by
default; the controller passes a `CachingParser`).

Register (POST /subjects/{s}/versions), by mode in effect for the subject:

| mode | what happens |
|---|---|
| READONLY | REGISTRY_MODE_FORBIDS |
| READWRITE | the schema is parsed (INVALID_SCHEMA with the parser's message), its references resolved to live versions; a live version of the subject holding the same schema answers, no records (version -1: only the latest is looked at; version N: only N); a given id is refused (REGISTRY_MODE_FORBIDS) unless it is the id the schema gets anyway; a given version must be the next one (INVALID_SCHEMA, Confluent's "not one more than previous version"); the schema must be compatible with the subject's live versions at its level (INCOMPATIBLE_SCHEMA, the reasons joined); the id is one the registry holds for the same content (held ids before orphans, lowest first), else `image.next_schema_id` (a SchemaRecord) |
| IMPORT | an id is required (REGISTRY_MODE_FORBIDS without); an id that names another schema is refused (REGISTRY_MODE_FORBIDS: Confluent's "overwrite ... not permitted"), as is a version that holds another schema (INVALID_REQUEST); no compatibility check and no normalization (the text is stored as given, Confluent's IMPORT); references may name soft-deleted versions; a soft-deleted version given again with its own schema is brought back |
| all | normalize = the request's or the config's; with it the normalized text is stored and compared; the version is `next_version` (the highest held + 1); soft-deleted versions of the subject below it that hold the same id are hard-deleted in the same batch (Confluent tombstones them so a subject holds an id once), unless a schema references them |

Delete a subject (DELETE /subjects/{s}) or a version (DELETE /subjects/{s}/versions/{v}, -1 the latest
live one): READONLY refuses (REGISTRY_MODE_FORBIDS); SUBJECT_NOT_FOUND for a subject with no version;
SCHEMA_VERSION_NOT_FOUND for a version it does not hold. A soft delete marks live versions deleted (a
subject already all soft-deleted is SUBJECT_NOT_FOUND, a version already soft-deleted
SCHEMA_VERSION_NOT_FOUND: Confluent's 40404 / 40406 have no code of their own here); a permanent one
removes soft-deleted versions (NOT_SOFT_DELETED for a live one) and, when the subject is left without
versions, its config and mode (as Confluent does). SCHEMA_REFERENCED when a schema a version holds
references one being deleted: held by a live version for a soft delete, by any version for a permanent
one; a subject's delete ignores references from its own versions (Confluent's), which the batch deletes
first. The reply lists the versions deleted.

Config (PUT/DELETE /config[/{s}]): READONLY refuses; an unknown level is INVALID_CONFIG; a set without a
level keeps the scope's level (the one in effect when it has none); a delete of a subject's config it does
not have is SUBJECT_NOT_FOUND (Confluent's), of the registry's puts it back at BACKWARD; the reply is the
config set, or the one deleted.

Mode (PUT/DELETE /mode[/{s}]): an unknown mode is INVALID_CONFIG; IMPORT where it is not in effect yet
needs the scope (the registry: every subject) to hold no live version unless `force`
(REGISTRY_MODE_FORBIDS), and then hard-deletes the scope's soft-deleted versions in the same batch, so
imported versions start from nothing (Confluent's); SCHEMA_REFERENCED if a schema held outside them
references one. A delete of a subject's mode it does not have is SUBJECT_NOT_FOUND.

Where Confluent's documentation and code were silent or did not fit a replicated log, decided here:

- Ids are never reused: a hard delete leaves the schema in the image (an orphan: reads do not see it), and
  registering its text again gives the same id back; IMPORT cannot put another text under it. Confluent's
  in-memory id counter can hand out a hard-deleted id again after a restart; a metadata log cannot forget.
- IMPORT without a version takes the next one (Confluent's); a READWRITE id equal to what the schema gets
  anyway is accepted (Confluent accepts one only when the subject already holds the schema).
- Config and mode changes that change nothing write no record.
- Sameness within a subject compares normalized forms too (Confluent's lookup finds a reformatted text);
  reusing another subject's id looks the stored text up exactly (the normalized text with normalize), so two
  spellings of one schema registered without normalize under two subjects get two ids (both decode the same).
- The messages of INCOMPATIBLE_SCHEMA name the subject's version numbers, joined with "; ".
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.image import (
    DEFAULT_REGISTRY_CONFIG,
    DEFAULT_REGISTRY_MODE,
    GLOBAL_SUBJECT,
    MetadataImage,
    RegistryConfig,
    RegistryMode,
    SchemaContent,
    SchemaId,
)
from kanal.metadata.schema_registry_rules import (
    INT32_MAX,
    LATEST_VERSION,
    Candidate,
    SchemaParser,
    check_subject_name,
    check_version_number,
    compatibility_problems,
    config_of,
    deletion_order,
    ids_with_content,
    latest_live,
    level_named,
    matching_version,
    mode_named,
    mode_of,
    next_version,
    parse_candidate,
    referrers,
    refuse_read_only,
    refuse_referenced,
    same_schema,
    versions_of,
    where,
)
from kanal.schemas.formats import parse_schema as _default_parser
from kanal.schemas.schema_types import SchemaInvalid
from kanal.v1 import metadata_pb2
from kanal.v1 import schema_registry_pb2 as pb
from kanal.v1.error import ErrorCode, KanalError

_Records = list[metadata_pb2.MetadataRecord]


# -- register ------------------------------------------------------------------------------------------


def decide_register_schema(
    image: MetadataImage,
    request: pb.RegisterSchemaRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
    parse: SchemaParser = _default_parser,
) -> Decision[pb.RegisterSchemaResponse]:
    """Register a schema under a subject, or find it there (module docstring's table)."""
    stamp = Stamp(now_ms, principal, request_id)
    try:
        records, schema_id, version = _register(image, request, stamp, parse)
    except KanalError as exc:
        return Decision([], pb.RegisterSchemaResponse(error=exc.code, error_message=exc.message))
    return Decision(records, pb.RegisterSchemaResponse(id=schema_id, version=version))


def _register(image: MetadataImage, request: pb.RegisterSchemaRequest, stamp: Stamp,
              parse: SchemaParser) -> tuple[_Records, int, int]:
    subject = request.subject
    check_subject_name(subject)
    refuse_read_only(image, subject)
    importing = mode_of(image, subject) is RegistryMode.IMPORT
    if importing and request.id <= 0:
        raise KanalError(ErrorCode.REGISTRY_MODE_FORBIDS,
                         f"{where(subject)} is in IMPORT mode: a registration names its schema id")
    if request.version != 0:
        check_version_number(request.version)
    candidate = parse_candidate(image, request.schema_type, request.schema, request.references,
                                allow_deleted=importing, parse=parse)
    if importing:
        return _import(image, request, candidate, stamp, parse)
    normalize = request.normalize or config_of(image, subject).normalize
    content = candidate.content(normalize=normalize)
    explicit_id = request.id if request.id > 0 else None

    # Already there? Version -1 asks about the latest only (registering an older schema again then makes
    # it the latest, as Confluent does); a given version about that one (a resend).
    if request.version == LATEST_VERSION:
        latest = latest_live(image, subject)
        looked_at = [latest] if latest is not None else []
    elif request.version > 0:
        looked_at = [request.version] if request.version in versions_of(image, subject, deleted=False) else []
    else:
        looked_at = versions_of(image, subject, deleted=False)[::-1]
    found = matching_version(image, subject, candidate, looked_at, parse)
    if found is not None:
        found_id = image.subjects[subject][found].schema_id
        if explicit_id in (None, found_id):
            return [], found_id, found

    schema_id = _id_for(image, content)
    if explicit_id is not None and explicit_id != schema_id:
        raise KanalError(ErrorCode.REGISTRY_MODE_FORBIDS,
                         f"{where(subject)} is not in IMPORT mode: a schema id may be given only in IMPORT "
                         f"mode (this schema's id is {schema_id}, not {explicit_id})")
    version = next_version(image, subject)
    if request.version > 0 and request.version != version:
        raise SchemaInvalid(f"version {request.version} is not one more than the subject's latest "
                            f"version ({version - 1})")
    level = config_of(image, subject).compatibility
    problems = compatibility_problems(image, subject, candidate, versions_of(image, subject, deleted=False),
                                      level, parse)
    if problems:
        raise KanalError(ErrorCode.INCOMPATIBLE_SCHEMA,
                         f"the schema is not {level} compatible with {where(subject)}: "
                         + "; ".join(problems))
    return _registration_records(image, stamp, subject, version, schema_id, content), schema_id, version


def _id_for(image: MetadataImage, content: SchemaContent) -> SchemaId:
    """The id a schema gets: the one the registry holds for the same content, else a new one."""
    ids = ids_with_content(image, content)
    if ids:
        return ids[0]
    if image.next_schema_id > INT32_MAX:
        raise KanalError(ErrorCode.INVALID_REQUEST, "every schema id (up to 2^31 - 1) has been given out")
    return image.next_schema_id


def _import(image: MetadataImage, request: pb.RegisterSchemaRequest, candidate: Candidate, stamp: Stamp,
            parse: SchemaParser) -> tuple[_Records, int, int]:
    """IMPORT mode: the caller's id (and version), no compatibility check, the text as given."""
    subject, schema_id = request.subject, SchemaId(request.id)
    content = candidate.content(normalize=False)
    recorded = image.schemas.get(schema_id)
    if recorded is not None and not same_schema(image, candidate, recorded, parse):
        raise KanalError(ErrorCode.REGISTRY_MODE_FORBIDS,
                         f"schema id {schema_id} names another schema: an import does not overwrite it")
    versions = image.subjects.get(subject, {})
    version = request.version if request.version > 0 else None
    if version is None:
        # Imported already under this subject: that version answers (Confluent's).
        held = [v for v in versions_of(image, subject, deleted=False) if versions[v].schema_id == schema_id]
        if held:
            return [], schema_id, held[-1]
        version = next_version(image, subject)
    state = versions.get(version)
    if state is not None and state.schema_id != schema_id:
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"version {version} of {where(subject)} holds schema {state.schema_id}: an import "
                         f"does not overwrite a version")
    if state is not None and not state.deleted:
        return [], schema_id, version
    if state is not None:  # soft-deleted with this very schema: brought back
        record = metadata_pb2.SubjectVersionRecord(subject=subject, version=version, schema_id=schema_id)
        return [stamp.record(subject_version=record)], schema_id, version
    stored = recorded.content if recorded is not None else content
    return _registration_records(image, stamp, subject, version, schema_id, stored), schema_id, version


def _registration_records(image: MetadataImage, stamp: Stamp, subject: str, version: int,
                          schema_id: SchemaId, content: SchemaContent) -> _Records:
    records = []
    if schema_id not in image.schemas:
        records.append(stamp.record(schema=metadata_pb2.SchemaRecord(
            id=schema_id, schema_type=content.schema_type, schema=content.text,
            references=[pb.SchemaReference(name=r.name, subject=r.subject, version=r.version)
                        for r in content.references])))
    records.append(stamp.record(subject_version=metadata_pb2.SubjectVersionRecord(
        subject=subject, version=version, schema_id=schema_id)))
    # Confluent's register tombstones the subject's soft-deleted versions below the new one that hold the
    # same id, so a subject holds an id at one version; a referenced one stays (its referrer needs it).
    versions = image.subjects.get(subject, {})
    for old in sorted(versions):
        state = versions[old]
        if (state.deleted and state.schema_id == schema_id and old < version
                and not referrers(image, subject, old, live_only=False)):
            records.append(stamp.record(remove_subject_version=metadata_pb2.RemoveSubjectVersionRecord(
                subject=subject, version=old)))
    return records


# -- delete --------------------------------------------------------------------------------------------


def decide_delete_subject(
    image: MetadataImage,
    request: pb.DeleteSubjectRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[pb.DeleteSubjectResponse]:
    """Soft-delete a subject's live versions, or hard-delete a soft-deleted subject (module docstring)."""
    stamp = Stamp(now_ms, principal, request_id)
    try:
        records, deleted = _delete_subject(image, request, stamp)
    except KanalError as exc:
        return Decision([], pb.DeleteSubjectResponse(error=exc.code, error_message=exc.message))
    return Decision(records, pb.DeleteSubjectResponse(versions=deleted))


def _delete_subject(image: MetadataImage, request: pb.DeleteSubjectRequest, stamp: Stamp
                    ) -> tuple[_Records, list[int]]:
    subject = request.subject
    refuse_read_only(image, subject)
    held = versions_of(image, subject, deleted=True)
    if not held:
        raise KanalError(ErrorCode.SUBJECT_NOT_FOUND, f"subject {subject!r} not found")
    live = versions_of(image, subject, deleted=False)
    if request.permanent:
        if live:
            raise KanalError(ErrorCode.NOT_SOFT_DELETED,
                             f"subject {subject!r} has live versions {live}: soft-delete it first")
        for version in held:
            refuse_referenced(image, subject, version, live_only=False, other_subjects=True)
        order = deletion_order(image, [(subject, v) for v in held])
        records = [stamp.record(remove_subject_version=metadata_pb2.RemoveSubjectVersionRecord(
            subject=subject, version=version)) for _, version in order]
        return records + _forget_settings(image, stamp, subject), held
    if not live:
        raise KanalError(ErrorCode.SUBJECT_NOT_FOUND,
                         f"subject {subject!r} was soft-deleted already (a permanent delete removes it)")
    for version in live:
        refuse_referenced(image, subject, version, live_only=True, other_subjects=True)
    versions = image.subjects[subject]
    records = [
        stamp.record(subject_version=metadata_pb2.SubjectVersionRecord(
            subject=subject, version=version, schema_id=versions[version].schema_id, deleted=True))
        for _, version in deletion_order(image, [(subject, v) for v in live])
    ]
    return records, live


def decide_delete_version(
    image: MetadataImage,
    request: pb.DeleteVersionRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[pb.DeleteVersionResponse]:
    """Soft-delete a live version (-1: the latest), or hard-delete a soft-deleted one (module docstring)."""
    stamp = Stamp(now_ms, principal, request_id)
    try:
        records, version = _delete_version(image, request, stamp)
    except KanalError as exc:
        return Decision([], pb.DeleteVersionResponse(error=exc.code, error_message=exc.message))
    return Decision(records, pb.DeleteVersionResponse(version=version))


def _delete_version(image: MetadataImage, request: pb.DeleteVersionRequest, stamp: Stamp
                    ) -> tuple[_Records, int]:
    subject, version = request.subject, request.version
    refuse_read_only(image, subject)
    check_version_number(version)
    versions = image.subjects.get(subject)
    if not versions:
        raise KanalError(ErrorCode.SUBJECT_NOT_FOUND, f"subject {subject!r} not found")
    if version == LATEST_VERSION:
        latest = latest_live(image, subject)
        if latest is None:
            raise KanalError(ErrorCode.SCHEMA_VERSION_NOT_FOUND, f"subject {subject!r} has no live version")
        version = latest
    state = versions.get(version)
    if state is None:
        raise KanalError(ErrorCode.SCHEMA_VERSION_NOT_FOUND, f"subject {subject!r} has no version {version}")
    if request.permanent:
        refuse_referenced(image, subject, version, live_only=False)
        if not state.deleted:
            raise KanalError(ErrorCode.NOT_SOFT_DELETED,
                             f"version {version} of subject {subject!r} is live: soft-delete it first")
        record = metadata_pb2.RemoveSubjectVersionRecord(subject=subject, version=version)
        records = [stamp.record(remove_subject_version=record)]
        if len(versions) == 1:  # the subject's last version: its settings go with it (Confluent's)
            records += _forget_settings(image, stamp, subject)
        return records, version
    if state.deleted:
        raise KanalError(ErrorCode.SCHEMA_VERSION_NOT_FOUND,
                         f"version {version} of subject {subject!r} was soft-deleted already (a permanent "
                         "delete removes it)")
    refuse_referenced(image, subject, version, live_only=True)
    record = metadata_pb2.SubjectVersionRecord(subject=subject, version=version, schema_id=state.schema_id,
                                                deleted=True)
    return [stamp.record(subject_version=record)], version


def _forget_settings(image: MetadataImage, stamp: Stamp, subject: str) -> _Records:
    """Records that remove a subject's config and mode, for a subject whose last version goes."""
    records = []
    if subject in image.registry_configs:
        records.append(stamp.record(registry_config=metadata_pb2.RegistryConfigRecord(subject=subject)))
    if subject in image.registry_modes:
        records.append(stamp.record(registry_mode=metadata_pb2.RegistryModeRecord(subject=subject)))
    return records


# -- config --------------------------------------------------------------------------------------------


def decide_set_registry_config(
    image: MetadataImage,
    request: pb.SetRegistryConfigRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[pb.SetRegistryConfigResponse]:
    """Set or delete the compatibility config of a subject or ("" subject) the registry."""
    stamp = Stamp(now_ms, principal, request_id)
    try:
        records, config = _set_config(image, request, stamp)
    except KanalError as exc:
        return Decision([], pb.SetRegistryConfigResponse(error=exc.code, error_message=exc.message))
    return Decision(records, pb.SetRegistryConfigResponse(compatibility=config.compatibility,
                                                          normalize=config.normalize))


def _set_config(image: MetadataImage, request: pb.SetRegistryConfigRequest, stamp: Stamp
                ) -> tuple[_Records, RegistryConfig]:
    subject = request.subject
    if subject != GLOBAL_SUBJECT:
        check_subject_name(subject)
    refuse_read_only(image, subject)
    current = image.registry_configs.get(subject)
    if request.delete:
        if current is None:
            if subject == GLOBAL_SUBJECT:
                return [], DEFAULT_REGISTRY_CONFIG
            raise KanalError(ErrorCode.SUBJECT_NOT_FOUND, f"subject {subject!r} has no config")
        return [stamp.record(registry_config=metadata_pb2.RegistryConfigRecord(subject=subject))], current
    level = (level_named(request.compatibility) if request.compatibility
             else (current or config_of(image, subject)).compatibility)
    config = RegistryConfig(level, request.normalize)
    if config == current:
        return [], config
    record = metadata_pb2.RegistryConfigRecord(subject=subject, compatibility=level,
                                               normalize=config.normalize)
    return [stamp.record(registry_config=record)], config


# -- mode ----------------------------------------------------------------------------------------------


def decide_set_registry_mode(
    image: MetadataImage,
    request: pb.SetRegistryModeRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[pb.SetRegistryModeResponse]:
    """Set or delete the mode of a subject or ("" subject) the registry (module docstring)."""
    stamp = Stamp(now_ms, principal, request_id)
    try:
        records, mode = _set_mode(image, request, stamp)
    except KanalError as exc:
        return Decision([], pb.SetRegistryModeResponse(error=exc.code, error_message=exc.message))
    return Decision(records, pb.SetRegistryModeResponse(mode=mode))


def _set_mode(image: MetadataImage, request: pb.SetRegistryModeRequest, stamp: Stamp
              ) -> tuple[_Records, RegistryMode]:
    subject = request.subject
    if subject != GLOBAL_SUBJECT:
        check_subject_name(subject)
    current = image.registry_modes.get(subject)
    if request.delete:
        if current is None:
            if subject == GLOBAL_SUBJECT:
                return [], DEFAULT_REGISTRY_MODE
            raise KanalError(ErrorCode.SUBJECT_NOT_FOUND, f"subject {subject!r} has no mode")
        return [stamp.record(registry_mode=metadata_pb2.RegistryModeRecord(subject=subject))], current
    mode = mode_named(request.mode)
    if mode == current:
        return [], mode
    records = []
    entering_import = mode is RegistryMode.IMPORT and mode_of(image, subject) is not RegistryMode.IMPORT
    if entering_import and not request.force:
        records += _clear_for_import(image, stamp, subject)
    records.append(stamp.record(registry_mode=metadata_pb2.RegistryModeRecord(subject=subject, mode=mode)))
    return records, mode


def _clear_for_import(image: MetadataImage, stamp: Stamp, subject: str) -> _Records:
    """Confluent's switch to IMPORT: refused while the scope holds a live version; its soft-deleted
    versions are hard-deleted, so imported ids and versions do not meet leftovers."""
    if subject == GLOBAL_SUBJECT:
        scope = sorted(image.subjects)
    else:
        scope = [subject] if subject in image.subjects else []
    live = [s for s in scope if versions_of(image, s, deleted=False)]
    if live:
        raise KanalError(ErrorCode.REGISTRY_MODE_FORBIDS,
                         f"{where(subject)} cannot switch to IMPORT: subjects {live[:20]} have live versions "
                         "(force switches anyway)")
    doomed = {(s, v) for s in scope for v in image.subjects[s]}
    for s, v in sorted(doomed):
        for schema_id in referrers(image, s, v, live_only=False):
            if not image.schema_holders[schema_id] <= doomed:
                raise KanalError(ErrorCode.SCHEMA_REFERENCED,
                                 f"{where(subject)} cannot switch to IMPORT: its soft-deleted version {v} of "
                                 f"subject {s!r} is referenced by schema {schema_id}")
    return [stamp.record(remove_subject_version=metadata_pb2.RemoveSubjectVersionRecord(subject=s, version=v))
            for s, v in deletion_order(image, doomed)]
