"""`kanal acls add|list|remove`: access-control entries with kafka-acls' spellings.

    kanal acls add --allow-principal User:alice --operation Read --operation Describe --topic orders
    kanal acls add --allow-principal User:etl --operation Write --topic orders- \\
        --resource-pattern-type prefixed
    kanal acls add --deny-principal User:* --deny-host 10.0.0.9 --operation All --cluster
    kanal acls list [--topic orders [--resource-pattern-type match]] [--principal User:alice]
    kanal acls remove --topic orders [--allow-principal User:alice] [--operation Read]

`add` adds one entry per resource x principal x host x operation (hosts default to "*"). `list` shows
the entries a filter selects (all without flags; `--resource-pattern-type match` shows every entry that
applies to the named resource, literal, "*" and prefixed). `remove` removes every entry the given flags
select: a flag left out matches anything, so `remove --topic orders` removes all of orders' entries.
Operations are written as Kafka's (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
DescribeConfigs, AlterConfigs, IdempotentWrite, All), in any case, with or without underscores.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from itertools import product

from kanal.clients.admin import Admin, acl_text
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.wire_enum import as_enum

CLUSTER_RESOURCE_NAME = "kanal-cluster"
_OPERATIONS = {name.removeprefix("ACL_OPERATION_").replace("_", "").lower(): value
               for name, value in metadata_pb2.AclOperation.items() if value}
_PATTERNS = ("literal", "prefixed", "match", "any")


def add_acls_parser(
    sub, common: argparse.ArgumentParser, admin_for: Callable[[argparse.Namespace], Admin]
) -> None:
    """The `acls` subcommand on the `kanal` client parser; `admin_for(args)` opens an Admin with the
    command's bootstrap and security settings."""
    acls = sub.add_parser("acls", help="add, list or remove ACLs").add_subparsers(
        dest="action", required=True
    )
    for action, func, text in (("add", _add, "add access-control entries"),
                               ("list", _list, "list access-control entries"),
                               ("remove", _remove, "remove access-control entries")):
        c = acls.add_parser(action, parents=[common], help=text)
        c.add_argument(
            "--topic", action="append", default=[], metavar="NAME", help="a topic resource; repeatable"
        )
        c.add_argument(
            "--group", action="append", default=[], metavar="NAME", help="a group resource; repeatable"
        )
        c.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                       help="a transactional id resource; repeatable")
        c.add_argument("--subject", action="append", default=[], metavar="SUBJECT",
                       help="a schema registry subject resource (Read, Write, DescribeConfigs, "
                       "AlterConfigs); repeatable")
        c.add_argument("--cluster", action="store_true", help="the cluster resource")
        c.add_argument("--resource-pattern-type", choices=_PATTERNS if action != "add" else _PATTERNS[:2],
                       default="literal" if action == "add" else None,
                       help="how resource names match: literal, prefixed" + (", match (all that apply), any"
                                                                             if action != "add" else ""))
        if action == "list":
            c.add_argument("--principal", help="only the entries of this principal")
        else:
            c.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME",
                           help="a principal allowed; repeatable")
            c.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME",
                           help="a principal denied; repeatable")
            c.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                           help="a host the allow entries hold for (default *); repeatable")
            c.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                           help="a host the deny entries hold for (default *); repeatable")
            c.add_argument(
                "--operation",
                action="append",
                default=[],
                type=_operation,
                metavar="OP",
                help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                "AlterConfigs, IdempotentWrite or All; repeatable",
            )
        c.set_defaults(func=lambda args, f=func: f(args, admin_for(args)))


def _operation(text: str) -> int:
    value = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if value is None:
        raise argparse.ArgumentTypeError(
            f"unknown operation {text!r}; one of Read, Write, Create, Delete, Alter, "
            "Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All"
        )
    return value


def _resources(args) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = [(metadata_pb2.ACL_RESOURCE_TOPIC, n) for n in args.topic]
    out += [(metadata_pb2.ACL_RESOURCE_GROUP, n) for n in args.group]
    out += [(metadata_pb2.ACL_RESOURCE_TRANSACTIONAL_ID, n) for n in args.transactional_id]
    out += [(metadata_pb2.ACL_RESOURCE_SUBJECT, n) for n in args.subject]
    if args.cluster:
        out.append((metadata_pb2.ACL_RESOURCE_CLUSTER, CLUSTER_RESOURCE_NAME))
    return out


def _grants(args) -> list[tuple[int, str, str]]:
    """(permission, principal, host) for every --allow/--deny-principal and its hosts (default "*")."""
    out: list[tuple[int, str, str]] = []
    for permission, principals, hosts in (
        (metadata_pb2.ACL_PERMISSION_ALLOW, args.allow_principal, args.allow_host),
        (metadata_pb2.ACL_PERMISSION_DENY, args.deny_principal, args.deny_host),
    ):
        out += [(permission, p, h) for p, h in product(principals, hosts or ["*"])]
    return out


def _usage(message: str) -> KanalError:
    return KanalError(ErrorCode.INVALID_REQUEST, message)


def _add(args, opened: Admin) -> int:
    resources, grants = _resources(args), _grants(args)
    if not resources or not grants or not args.operation:
        raise _usage("acls add needs a resource (--topic, --group, --transactional-id, --subject or "
                     "--cluster), "
                     "--allow-principal or --deny-principal, and --operation")
    pattern = metadata_pb2.ACL_PATTERN_PREFIXED if args.resource_pattern_type == "prefixed" \
        else metadata_pb2.ACL_PATTERN_LITERAL
    entries = [
        metadata_pb2.AccessControlEntry(
            resource_type=as_enum(metadata_pb2.AclResourceType, rtype),
            resource_name=name,
            pattern_type=pattern,
            principal=principal,
            host=host,
            operation=op,
            permission=as_enum(metadata_pb2.AclPermission, permission),
        )
        for (rtype, name), (permission, principal, host), op in product(resources, grants, args.operation)
    ]
    with opened as admin:
        admin.create_acls(entries)
    if args.output == "json":
        _print_entries(args, entries)
        return 0
    for entry in entries:
        print(f"added {acl_text(entry)}")
    return 0


def _pattern_filter(args) -> int:
    return {
        "literal": admin_pb2.AclFilter.LITERAL,
        "prefixed": admin_pb2.AclFilter.PREFIXED,
        "match": admin_pb2.AclFilter.MATCH,
    }.get(args.resource_pattern_type or "any", admin_pb2.AclFilter.ANY)


def _list(args, opened: Admin) -> int:
    resources: list[tuple[int, str | None]] = [*_resources(args)] or [
        (metadata_pb2.ACL_RESOURCE_UNSPECIFIED, None)
    ]
    entries = []
    with opened as admin:
        for rtype, name in resources:
            f = admin_pb2.AclFilter(
                resource_type=as_enum(metadata_pb2.AclResourceType, rtype),
                pattern_filter=as_enum(admin_pb2.AclFilter.PatternFilter, _pattern_filter(args)),
            )
            if name is not None:
                f.resource_name = name
            if args.principal:
                f.principal = args.principal
            entries += admin.describe_acls(f)
    _print_entries(args, entries)
    return 0


def _remove(args, opened: Admin) -> int:
    resources = _resources(args)
    if not resources:
        raise _usage("acls remove needs a resource (--topic, --group, --transactional-id, --subject or "
                     "--cluster)")
    filters = []
    grants: list[tuple[int, str | None, str | None]] = [
        (perm, principal, host if (args.allow_host or args.deny_host) else None)
        for perm, principal, host in _grants(args)] or [(metadata_pb2.ACL_PERMISSION_UNSPECIFIED, None, None)]
    for (rtype, name), (permission, principal, host), op in product(resources, grants, args.operation or [0]):
        f = admin_pb2.AclFilter(
            resource_type=as_enum(metadata_pb2.AclResourceType, rtype),
            resource_name=name,
            pattern_filter=as_enum(admin_pb2.AclFilter.PatternFilter, _pattern_filter(args)),
            operation=op,
            permission=as_enum(metadata_pb2.AclPermission, permission),
        )
        if principal is not None:
            f.principal = principal
        if host is not None:
            f.host = host
        filters.append(f)
    with opened as admin:
        deleted = admin.delete_acls(filters)
    if args.output == "json":
        _print_entries(args, deleted)
        return 0
    for entry in deleted:
        print(f"removed {acl_text(entry)}")
    if not deleted:
        print("no entry matched")
    return 0


def _print_entries(args, entries) -> None:
    if args.output == "json":
        import json

        from google.protobuf import json_format

        print(
            json.dumps(
                [json_format.MessageToDict(e, preserving_proto_field_name=True) for e in entries], indent=2
            )
        )
        return
    for entry in entries:
        print(acl_text(entry))
