"""The schema registry's reads (issue 45): pure functions of the image, one per read call of
schema_registry.proto. No records; the controller answers from its image (brokers forward to it, so an
answer never contradicts one given before). Errors come back in the reply's `error` / `error_message`.

| function | call | answers |
|---|---|---|
| `get_schema` | GetSchema | the schema with that id and the (subject, version)s holding it (soft-deleted ones with `deleted`); the schema is served while any version holds it, a soft-deleted one too (Confluent's: a soft delete keeps data written with the id decodable); SCHEMA_NOT_FOUND for an id no version holds (unknown, or every holder hard-deleted) |
| `list_subjects` | ListSubjects | subjects with a live version (any version with `deleted`), starting with `prefix`, sorted |
| `list_versions` | ListVersions | the subject's live version numbers (all with `deleted`); SUBJECT_NOT_FOUND when there are none |
| `get_version` | GetVersion | one version (-1: the latest live one) with its schema; SUBJECT_NOT_FOUND / SCHEMA_VERSION_NOT_FOUND; a soft-deleted one only with `deleted`; INVALID_REQUEST for 0 or below -1 |
| `lookup_schema` | LookupSchema | the subject's highest version holding the same schema (schema_registry_rules' sameness; normalized or not), live ones unless `deleted`; INVALID_SCHEMA when it does not parse, SUBJECT_NOT_FOUND when the subject holds no version (live, without `deleted`), SCHEMA_NOT_FOUND when none matches |
| `check_compatibility` | CheckCompatibility | compatible or not, with the reasons: against version N (live), -1 (the latest live one; none: compatible) or 0 (every live version), at the subject's level; SCHEMA_VERSION_NOT_FOUND for a version not live; INVALID_SCHEMA when the schema does not parse |
| `get_registry_config` / `get_registry_mode` | GetConfig / GetMode | the subject's own setting ("" subject: the registry's, always answered, BACKWARD / READWRITE by default); a subject without one answers the registry's with `default_to_global`, else SUBJECT_NOT_FOUND (Confluent's 40408 / 40409 have no code of their own here) |
| `get_referenced_by` | GetReferencedBy | ids of the schemas a live version holds that reference the version (-1: the latest live one), ascending; SUBJECT_NOT_FOUND / SCHEMA_VERSION_NOT_FOUND |
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

from kanal.metadata.image import GLOBAL_SUBJECT, MetadataImage, SchemaId
from kanal.metadata.schema_registry_rules import (
    LATEST_VERSION,
    SchemaParser,
    check_version_number,
    compatibility_problems,
    config_of,
    find_version,
    latest_live,
    matching_version,
    mode_of,
    parse_candidate,
    referrers,
    registered_schema,
    subject_version,
    versions_of,
)
from kanal.schemas.formats import parse_schema as _default_parser
from kanal.v1 import schema_registry_pb2 as pb
from kanal.v1.error import ErrorCode, KanalError


def get_schema(image: MetadataImage, request: pb.GetSchemaRequest) -> pb.GetSchemaResponse:
    schema_id = SchemaId(request.id)
    holders = image.schema_holders.get(schema_id)
    if not holders:
        return pb.GetSchemaResponse(error=ErrorCode.SCHEMA_NOT_FOUND,
                                    error_message=f"schema {request.id} not found")
    versions = [
        subject_version(image, subject, version, with_schema=False)
        for subject, version in sorted(holders)
        if request.deleted or not image.subjects[subject][version].deleted
    ]
    return pb.GetSchemaResponse(schema=registered_schema(image.schemas[schema_id]), versions=versions)


def list_subjects(image: MetadataImage, request: pb.ListSubjectsRequest) -> pb.ListSubjectsResponse:
    return pb.ListSubjectsResponse(subjects=[
        subject for subject in sorted(image.subjects)
        if subject.startswith(request.prefix) and versions_of(image, subject, deleted=request.deleted)
    ])


def list_versions(image: MetadataImage, request: pb.ListVersionsRequest) -> pb.ListVersionsResponse:
    versions = versions_of(image, request.subject, deleted=request.deleted)
    if not versions:
        return pb.ListVersionsResponse(error=ErrorCode.SUBJECT_NOT_FOUND,
                                       error_message=f"subject {request.subject!r} not found")
    return pb.ListVersionsResponse(versions=versions)


def get_version(image: MetadataImage, request: pb.GetVersionRequest) -> pb.GetVersionResponse:
    try:
        version = find_version(image, request.subject, request.version, deleted=request.deleted)
    except KanalError as exc:
        return pb.GetVersionResponse(error=exc.code, error_message=exc.message)
    return pb.GetVersionResponse(version=subject_version(image, request.subject, version))


def lookup_schema(image: MetadataImage, request: pb.LookupSchemaRequest, *,
                  parse: SchemaParser = _default_parser) -> pb.LookupSchemaResponse:
    subject = request.subject
    try:
        # A lookup is of what is registered: references may name soft-deleted versions (Confluent's).
        candidate = parse_candidate(image, request.schema_type, request.schema, request.references,
                                    allow_deleted=True, parse=parse)
    except KanalError as exc:
        return pb.LookupSchemaResponse(error=exc.code, error_message=exc.message)
    versions = versions_of(image, subject, deleted=request.deleted)
    if not versions:
        return pb.LookupSchemaResponse(error=ErrorCode.SUBJECT_NOT_FOUND,
                                       error_message=f"subject {subject!r} not found")
    # `normalize` changes nothing here: sameness compares the normalized forms anyway (schema_registry_rules),
    # and it only decides what a registration stores.
    try:
        found = matching_version(image, subject, candidate, versions[::-1], parse)
    except KanalError as exc:
        return pb.LookupSchemaResponse(error=exc.code, error_message=exc.message)
    if found is None:
        return pb.LookupSchemaResponse(error=ErrorCode.SCHEMA_NOT_FOUND,
                                       error_message=f"the schema is not a version of subject {subject!r}")
    return pb.LookupSchemaResponse(version=subject_version(image, subject, found))


def check_compatibility(image: MetadataImage, request: pb.CheckCompatibilityRequest, *,
                        parse: SchemaParser = _default_parser) -> pb.CheckCompatibilityResponse:
    subject, version = request.subject, request.version
    live = versions_of(image, subject, deleted=False)
    try:
        if version != 0:
            check_version_number(version)
        if version == LATEST_VERSION:
            latest = latest_live(image, subject)
            against = [latest] if latest is not None else []
        elif version > 0:
            if version not in live:
                raise KanalError(ErrorCode.SCHEMA_VERSION_NOT_FOUND,
                                 f"subject {subject!r} has no live version {version}")
            against = [version]
        else:
            against = live
        candidate = parse_candidate(image, request.schema_type, request.schema, request.references,
                                    allow_deleted=False, parse=parse)
        level = config_of(image, subject).compatibility
        problems = compatibility_problems(image, subject, candidate, against, level, parse)
    except KanalError as exc:
        return pb.CheckCompatibilityResponse(error=exc.code, error_message=exc.message)
    return pb.CheckCompatibilityResponse(compatible=not problems, messages=problems)


def get_registry_config(image: MetadataImage, request: pb.GetRegistryConfigRequest
                        ) -> pb.GetRegistryConfigResponse:
    subject = request.subject
    if subject != GLOBAL_SUBJECT and subject not in image.registry_configs and not request.default_to_global:
        return pb.GetRegistryConfigResponse(error=ErrorCode.SUBJECT_NOT_FOUND,
                                            error_message=f"subject {subject!r} has no compatibility config")
    config = config_of(image, subject)
    return pb.GetRegistryConfigResponse(compatibility=config.compatibility, normalize=config.normalize)


def get_registry_mode(image: MetadataImage, request: pb.GetRegistryModeRequest) -> pb.GetRegistryModeResponse:
    subject = request.subject
    if subject != GLOBAL_SUBJECT and subject not in image.registry_modes and not request.default_to_global:
        return pb.GetRegistryModeResponse(error=ErrorCode.SUBJECT_NOT_FOUND,
                                          error_message=f"subject {subject!r} has no mode")
    return pb.GetRegistryModeResponse(mode=mode_of(image, subject))


def get_referenced_by(image: MetadataImage, request: pb.GetReferencedByRequest) -> pb.GetReferencedByResponse:
    try:
        version = find_version(image, request.subject, request.version, deleted=True)
    except KanalError as exc:
        return pb.GetReferencedByResponse(error=exc.code, error_message=exc.message)
    return pb.GetReferencedByResponse(ids=referrers(image, request.subject, version, live_only=True))
