"""The schema registry on the command line: `kanal schemas ...`, and the record formats of `kanal produce`
and `kanal consume`.

    kanal schemas list [SUBJECT] [--prefix P] [--deleted]     subjects; a subject's versions
    kanal schemas get SUBJECT [--version V]                   a version (default latest): id, type, text
    kanal schemas get --id N                                  a schema by id, and the versions holding it
    kanal schemas register SUBJECT FILE [--type T] [--reference NAME=SUBJECT:VERSION] [--normalize]
    kanal schemas delete SUBJECT [--version V] [--permanent]  soft delete (then hard, with --permanent)
    kanal schemas compatibility SUBJECT FILE [--version V]    may FILE be registered? exit 1 when not
    kanal schemas compatibility [SUBJECT] [--set LEVEL | --delete]   the level (global without SUBJECT)

    kanal produce T --value-format avro|json|protobuf [--value-schema FILE | --value-schema-id N]
    kanal consume T --value-format avro|json|protobuf       (--key-format ... alike)

The curl habits of Kafka users (`POST /subjects/orders-value/versions`, `GET /schemas/ids/3`, `PUT
/config/orders-value`) as commands, through clients/schema_registry_client.py. FILE's type is --type, else
PROTOBUF for a `.proto` file and AVRO for any other (give `--type json` for a JSON Schema).

The registry: `--schema-registry URL[,URL...]`, else $KANAL_SCHEMA_REGISTRY, else the registry of the
running `kanal dev` (its $KANAL_HOME/dev.json names it) when the command talks to that cluster (no
--bootstrap, no $KANAL_BOOTSTRAP); with none, NO_CLUSTER. TLS files and credentials are the command's own
(--command-config, the TLS flags, `kanal dev --tls`'s client config), as for the brokers: an https
registry is verified with the CA, shown the client certificate, and sent the user's password as HTTP
basic credentials.

Formats (clients/record_serializers.py): `produce` reads each line (each side of --key-separator with
--key-format) as JSON and writes it framed with its registry schema, under the subject `<topic>-value`
(`<topic>-key`): --value-schema FILE registers FILE there first (as confluent-kafka's serializers do by
default), --value-schema-id N writes with schema N, and neither writes with the subject's latest version.
`consume` prints each decoded key and value as JSON (text output: one JSON value per line; --output json:
the value in the record's object; --format: `%s` is the JSON text). A line that is not JSON, or a value
the schema refuses, ends the command with INVALID_RECORD naming the line (records before it are sent).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kanal.clients.record_serializers import RecordFormat, RegistryDeserializer, RegistrySerializer
from kanal.clients.schema_registry_client import LATEST, Schema, SchemaRegistryClient
from kanal.commands.dev_state import dev_state_path, read_dev_state
from kanal.commands.report import EXIT_FAILED, bounded_number, report_error
from kanal.schemas.schema_types import Reference
from kanal.security.channel_security import ClientSecurity
from kanal.v1.error import ErrorCode, KanalError

REGISTRY_ENV = "KANAL_SCHEMA_REGISTRY"
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE",
          "NONE")
FORMATS = tuple(str(f) for f in RecordFormat)
SCHEMA_FILE_BYTES_MAX = 16 * 1024 * 1024  # what the registry takes in one body

SecurityFor = Callable[[argparse.Namespace], ClientSecurity | None]


# ---- the registry a command talks to ----

def add_registry_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schema-registry", metavar="URL",
                        help=f"schema registry URL(s), comma-separated (default: ${REGISTRY_ENV}, else the "
                             "running `kanal dev`'s registry)")


def registry_url(args: argparse.Namespace) -> str:
    """The registry URLs of this command (module docstring); NO_CLUSTER when there are none."""
    if getattr(args, "schema_registry", None):
        return str(args.schema_registry)
    if os.environ.get(REGISTRY_ENV):
        return os.environ[REGISTRY_ENV]
    if getattr(args, "bootstrap", None) or os.environ.get("KANAL_BOOTSTRAP"):
        raise KanalError(ErrorCode.NO_CLUSTER, "no schema registry to talk to: the bootstrap names a cluster "
                                               f"but not its registry; give --schema-registry URL or "
                                               f"${REGISTRY_ENV}")
    state = read_dev_state()
    found = state.get("schema_registry") if state is not None else None
    if not isinstance(found, str) or not found:
        raise KanalError(ErrorCode.NO_CLUSTER, f"no cluster to talk to: no --schema-registry given, "
                                               f"${REGISTRY_ENV} unset, and no `kanal dev` running "
                                               f"({dev_state_path()} not found, or the kanal dev that wrote "
                                               f"it has stopped)")
    return found


def open_registry(args: argparse.Namespace, security: ClientSecurity | None) -> SchemaRegistryClient:
    return SchemaRegistryClient(registry_url(args), security=security,
                                request_timeout_ms=int(getattr(args, "request_timeout_ms", 30_000)))


# ---- produce and consume ----

def add_format_flags(parser: argparse.ArgumentParser, *, producing: bool) -> None:
    """--key-format / --value-format (and, to produce, the schema to write with) and --schema-registry."""
    group = parser.add_argument_group("schema registry formats (see kanal.clients.schemas_cli)")
    verb = "read each line's" if producing else "print each record's"
    for side in ("key", "value"):
        group.add_argument(f"--{side}-format", choices=FORMATS,
                           help=f"{verb} {side} as JSON, {'written' if producing else 'decoded'} with the "
                                f"schema registry (subject <topic>-{side})")
        if producing:
            source = group.add_mutually_exclusive_group()
            source.add_argument(f"--{side}-schema", metavar="FILE",
                                help=f"the {side} schema (registered under <topic>-{side} if new; default: "
                                     "the subject's latest version)")
            source.add_argument(f"--{side}-schema-id", metavar="N", type=bounded_number(int, 1, "positive"),
                                help=f"write {side}s with this registered schema")
    add_registry_flag(parser)


def producer_serializers(args: argparse.Namespace, security: ClientSecurity | None) -> dict[str, Any]:
    """The ProducerConfig settings of --key-format / --value-format: {} when neither is given."""
    out: dict[str, Any] = {}
    registry: SchemaRegistryClient | None = None
    for side in ("key", "value"):
        name = getattr(args, f"{side}_format", None)
        if name is None:
            for flag in ("schema", "schema_id"):
                if getattr(args, f"{side}_{flag}", None) is not None:
                    raise KanalError(ErrorCode.INVALID_REQUEST,
                                     f"--{side}-{flag.replace('_', '-')} needs --{side}-format")
            continue
        registry = registry or open_registry(args, security)
        path = getattr(args, f"{side}_schema", None)
        schema = read_schema(Path(path), name, []) if path else None
        out[f"{side}_serializer"] = RegistrySerializer(registry, name, schema=schema,
                                                       schema_id=getattr(args, f"{side}_schema_id", None))
    return out


def consumer_deserializers(args: argparse.Namespace, security: ClientSecurity | None) -> dict[str, Any]:
    """The ConsumerConfig settings of --key-format / --value-format: {} when neither is given."""
    out: dict[str, Any] = {}
    registry: SchemaRegistryClient | None = None
    for side in ("key", "value"):
        name = getattr(args, f"{side}_format", None)
        if name is not None:
            registry = registry or open_registry(args, security)
            out[f"{side}_deserializer"] = RegistryDeserializer(registry, name)
    return out


def json_line(data: bytes, side: str, number: int) -> object:
    """A line's key or value, parsed as JSON; INVALID_RECORD naming the line when it is not JSON."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise KanalError(ErrorCode.INVALID_RECORD, f"line {number}: the {side} is not JSON ({exc}): "
                                                   f"{data[:80]!r}") from None


def json_text(value: object) -> str:
    """A decoded key or value as one line of JSON."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


# ---- kanal schemas ----

def read_schema(path: Path, type_name: str | None, references: list[str]) -> Schema:
    """FILE as a Schema of `type_name` (a format or registry type name; None: by the file's extension)."""
    try:
        with open(path, "rb") as file:
            data = file.read(SCHEMA_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"schema file {path}: cannot read it: {exc.strerror}") \
            from None
    if len(data) > SCHEMA_FILE_BYTES_MAX:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"schema file {path}: over {SCHEMA_FILE_BYTES_MAX} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise KanalError(ErrorCode.INVALID_SCHEMA, f"schema file {path}: not UTF-8 text") from None
    if type_name is None:
        type_name = "protobuf" if path.suffix == ".proto" else "avro"
    return Schema(text, type_name.upper(), tuple(_reference(r) for r in references))


def _reference(text: str) -> Reference:
    name, sep, rest = text.partition("=")
    subject, sep2, version = rest.rpartition(":")
    if not (sep and sep2 and name and subject and version.isdigit() and int(version) > 0):
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"--reference {text!r}: expected NAME=SUBJECT:VERSION (orders.proto=orders-value:2)")
    return Reference(name, subject, int(version))


def _version(text: str) -> int | str:
    """A version argument: a number >= 1, or latest (-1 too, as Confluent's API takes it)."""
    if text in (LATEST, "-1"):
        return LATEST
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise KanalError(ErrorCode.INVALID_REQUEST, f"--version {text!r}: a version number or latest")


def _print(args: argparse.Namespace, lines: list[str], data: object) -> None:
    if args.output == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        for line in lines:
            print(line)


def _schema_json(schema: Schema) -> dict[str, Any]:
    return {"schema_type": schema.schema_type, "schema": schema.text,
            "references": [{"name": r.name, "subject": r.subject, "version": r.version}
                           for r in schema.references]}


def _list(args: argparse.Namespace, registry: SchemaRegistryClient) -> int:
    if args.subject:
        versions = registry.versions(args.subject, deleted=args.deleted)
        _print(args, [str(v) for v in versions], {"subject": args.subject, "versions": versions})
        return 0
    subjects = registry.subjects(prefix=args.prefix or "", deleted=args.deleted)
    _print(args, subjects, subjects)
    return 0


def _get(args: argparse.Namespace, registry: SchemaRegistryClient) -> int:
    if (args.subject is None) == (args.id is None):
        raise KanalError(ErrorCode.INVALID_REQUEST, "schemas get takes a SUBJECT or --id N")
    if args.id is not None:
        if args.version is not None:
            raise KanalError(ErrorCode.INVALID_REQUEST, "--version goes with a SUBJECT, not --id")
        schema = registry.schema(args.id)
        held = registry.schema_versions(args.id)
        _print(args, [f"id {args.id}  type {schema.schema_type}  in "
                      + (", ".join(f"{s} version {v}" for s, v in held) or "no subject"),
                      schema.text.rstrip("\n")],
               {"id": args.id, **_schema_json(schema),
                "versions": [{"subject": s, "version": v} for s, v in held]})
        return 0
    found = registry.version(args.subject, _version(args.version or LATEST), deleted=args.deleted)
    heading = (f"subject {found.subject}  version {found.version}  id {found.schema_id}  type "
               f"{found.schema.schema_type}")
    _print(args, [heading, found.schema.text.rstrip("\n")],
           {"subject": found.subject, "version": found.version, "id": found.schema_id,
            **_schema_json(found.schema)})
    return 0


def _register(args: argparse.Namespace, registry: SchemaRegistryClient) -> int:
    schema = read_schema(Path(args.file), args.type, args.reference)
    schema_id = registry.register(args.subject, schema, normalize=args.normalize)
    _print(args, [f"{args.subject}: schema id {schema_id}"], {"subject": args.subject, "id": schema_id})
    return 0


def _delete(args: argparse.Namespace, registry: SchemaRegistryClient) -> int:
    how = "permanently deleted" if args.permanent else "deleted"
    if args.version is not None:
        version = registry.delete_version(args.subject, _version(args.version), permanent=args.permanent)
        _print(args, [f"{how} {args.subject} version {version}"],
               {"subject": args.subject, "versions": [version], "permanent": args.permanent})
        return 0
    versions = registry.delete_subject(args.subject, permanent=args.permanent)
    _print(args, [f"{how} {args.subject} versions {', '.join(map(str, versions))}"],
           {"subject": args.subject, "versions": versions, "permanent": args.permanent})
    return 0


def _compatibility(args: argparse.Namespace, registry: SchemaRegistryClient) -> int:
    if args.file is not None:
        if args.set or args.delete:
            raise KanalError(ErrorCode.INVALID_REQUEST, "a compatibility check takes no --set or --delete")
        schema = read_schema(Path(args.file), args.type, args.reference)
        version = _version(args.version) if args.version is not None else None
        reasons = registry.check_compatibility(args.subject, schema, version=version,
                                               normalize=args.normalize)
        against = f"{args.subject} version {version}" if version is not None else args.subject
        _print(args, [f"compatible with {against}"] if not reasons else
               [f"incompatible with {against}:", *(f"  {r}" for r in reasons)],
               {"subject": args.subject, "version": version, "compatible": not reasons, "messages": reasons})
        if reasons:
            return report_error(ErrorCode.INCOMPATIBLE_SCHEMA,
                                f"{args.file} is not compatible with {against}: {reasons[0]}", EXIT_FAILED)
        return 0
    if args.set and args.delete:
        raise KanalError(ErrorCode.INVALID_REQUEST, "--set or --delete, not both")
    subject = args.subject or ""
    if args.set:
        level = registry.set_compatibility_level(args.set, subject)
    elif args.delete:
        if not subject:
            raise KanalError(ErrorCode.INVALID_REQUEST, "--delete removes a SUBJECT's own level: name one")
        registry.delete_compatibility_level(subject)
        level = registry.compatibility_level(subject)
    else:
        level = registry.compatibility_level(subject)
    _print(args, [f"{subject or 'global'}: {level}"], {"subject": subject or None, "compatibility": level})
    return 0


def add_schemas_parser(sub: Any, common: argparse.ArgumentParser, security_for: SecurityFor) -> None:
    """The `schemas` subcommand on the `kanal` client parser; `security_for(args)` gives the command's TLS
    files and credentials."""
    schemas = sub.add_parser("schemas", help="the schema registry: list, get, register, delete schemas; "
                                             "compatibility checks and levels") \
        .add_subparsers(dest="action", required=True, metavar="ACTION")

    def command(name: str, func: Callable[[argparse.Namespace, SchemaRegistryClient], int], text: str
                ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = schemas.add_parser(name, parents=[common], help=text)
        add_registry_flag(parser)
        # The registry is found first: a command with nowhere to go says so before checking the rest.
        parser.set_defaults(func=lambda args: func(args, open_registry(args, security_for(args))))
        return parser

    c = command("list", _list, "subjects, or one subject's versions")
    c.add_argument("subject", nargs="?", help="list this subject's versions (default: list the subjects)")
    c.add_argument("--prefix", help="only subjects starting with this")
    c.add_argument("--deleted", action="store_true", help="include soft-deleted subjects or versions")
    c = command("get", _get, "a subject's version, or a schema by id")
    c.add_argument("subject", nargs="?", help="the subject (or --id)")
    c.add_argument("--version", help="the version: a number or latest (default latest)")
    c.add_argument("--id", type=bounded_number(int, 1, "positive"), help="the schema with this id")
    c.add_argument("--deleted", action="store_true", help="a soft-deleted version too")
    for name, func, text in (("register", _register, "register FILE under SUBJECT (its id if there already)"),
                             ("compatibility", _compatibility,
                              "check FILE against SUBJECT, or show or set a compatibility level")):
        c = command(name, func, text)
        optional = name == "compatibility"
        c.add_argument("subject", nargs="?" if optional else None,
                       help="the subject" + (" (default: the global level)" if optional else ""))
        c.add_argument("file", nargs="?" if optional else None, help="the schema file"
                       + (" to check" if optional else ""))
        c.add_argument("--type", choices=("avro", "json", "protobuf"),
                       help="the schema's type (default: protobuf for .proto files, else avro)")
        c.add_argument("--reference", action="append", default=[], metavar="NAME=SUBJECT:VERSION",
                       help="a schema FILE imports by NAME, registered as SUBJECT's VERSION; repeatable")
        c.add_argument("--normalize", action="store_true", help="compare in the registry's normalized form")
        if optional:
            c.add_argument("--version", help="check against this version only (default: what the level says)")
            c.add_argument("--set", type=str.upper, choices=LEVELS, metavar="LEVEL",
                           help=f"set the level: {', '.join(LEVELS)}")
            c.add_argument("--delete", action="store_true",
                           help="remove the SUBJECT's own level (the global one applies)")
    c = command("delete", _delete, "soft-delete a subject or a version; --permanent to remove it")
    c.add_argument("subject", help="the subject")
    c.add_argument("--version", help="only this version (a number or latest)")
    c.add_argument("--permanent", action="store_true", help="hard delete (after a soft delete)")
