"""Access-control entries: their value type, the rules a well-formed entry keeps, and filters.

An `AclEntry` is one AccessControlEntry (metadata.proto) as a frozen value. The image keeps the ACLs as
`acls: dict[AclResource, AclSet]`, keyed by (resource type, pattern type, resource name), so the
authorizer finds every entry that applies to a resource with a few dictionary lookups (the literal name,
the literal "*", each prefix of the name) instead of a scan (authorizer.py); an `AclSet` is immutable
and indexes its entries by principal, so a resource with hundreds of grants (a literal "*" for every
user) costs a lookup, not a scan, per call.

Well-formed (`check_entry`, INVALID_REQUEST otherwise; apply refuses a record that is not): every enum
set; a principal `User:name` or `User:*` (Kafka's only principal type), at most PRINCIPAL_CHARS_MAX; a
host "*" or an address without spaces, at most HOST_CHARS_MAX; a resource name that is not empty and at
most RESOURCE_NAME_CHARS_MAX; "*" only with LITERAL (a prefix "*" would be a second spelling of it);
the cluster resource named CLUSTER_RESOURCE_NAME (Kafka's "kafka-cluster").

Filters (admin.proto AclFilter, for DescribeAcls and DeleteAcls): unset fields match anything; MATCH
selects the entries that would apply to one resource name, exactly as the authorizer picks them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.wire_enum import as_enum, enum_name

CLUSTER_RESOURCE_NAME = "kanal-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
PRINCIPAL_TYPE = "User"
PRINCIPAL_CHARS_MAX = 255
HOST_CHARS_MAX = 255
RESOURCE_NAME_CHARS_MAX = 255
# Entries one CreateAcls may add and filters one DeleteAcls may carry: one decision is one Raft entry.
ACL_CHANGES_PER_REQUEST_MAX = 1000

TOPIC = metadata_pb2.ACL_RESOURCE_TOPIC
GROUP = metadata_pb2.ACL_RESOURCE_GROUP
CLUSTER = metadata_pb2.ACL_RESOURCE_CLUSTER
TRANSACTIONAL_ID = metadata_pb2.ACL_RESOURCE_TRANSACTIONAL_ID
SUBJECT = metadata_pb2.ACL_RESOURCE_SUBJECT  # a schema registry subject (registry_authorization.py)
LITERAL = metadata_pb2.ACL_PATTERN_LITERAL
PREFIXED = metadata_pb2.ACL_PATTERN_PREFIXED
ALLOW = metadata_pb2.ACL_PERMISSION_ALLOW
DENY = metadata_pb2.ACL_PERMISSION_DENY

RESOURCE_TYPES = (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, SUBJECT)
PATTERN_TYPES = (LITERAL, PREFIXED)
PERMISSIONS = (ALLOW, DENY)
OPERATIONS = tuple(
    v for v in metadata_pb2.AclOperation.values() if v != metadata_pb2.ACL_OPERATION_UNSPECIFIED
)


class AclResource(NamedTuple):
    """The key the image files entries under: (resource type, pattern type, name)."""

    resource_type: int
    pattern_type: int
    name: str


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One access-control entry (metadata.proto AccessControlEntry) as a hashable value."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    @property
    def resource(self) -> AclResource:
        return AclResource(self.resource_type, self.pattern_type, self.resource_name)

    @classmethod
    def from_proto(cls, entry: metadata_pb2.AccessControlEntry) -> AclEntry:
        return cls(entry.resource_type, entry.resource_name, entry.pattern_type, entry.principal, entry.host,
                   entry.operation, entry.permission)

    def to_proto(self) -> metadata_pb2.AccessControlEntry:
        return metadata_pb2.AccessControlEntry(
            resource_type=as_enum(metadata_pb2.AclResourceType, self.resource_type),
            resource_name=self.resource_name,
            pattern_type=as_enum(metadata_pb2.AclPatternType, self.pattern_type),
            principal=self.principal,
            host=self.host,
            operation=as_enum(metadata_pb2.AclOperation, self.operation),
            permission=as_enum(metadata_pb2.AclPermission, self.permission),
        )

    def sort_key(self) -> tuple[int, str, int, str, str, int, int]:
        return (self.resource_type, self.resource_name, self.pattern_type, self.principal, self.host,
                self.operation, self.permission)

    def __repr__(self) -> str:
        return (f"<Acl {permission_name(self.permission)} {self.principal}@{self.host} "
                f"{operation_name(self.operation)} {resource_type_name(self.resource_type)}:"
                f"{pattern_name(self.pattern_type)}:{self.resource_name}>")


def _short(enum: type[int], prefix: str, value: int) -> str:
    """The short spelling of a value of a generated ACL enum (metadata_pb2.AclOperation, an int class):
    ACL_OPERATION_READ -> "READ" (messages and the CLI); the number for a value this build does not know."""
    return enum_name(enum, value).removeprefix(prefix)


def operation_name(value: int) -> str:
    return _short(metadata_pb2.AclOperation, "ACL_OPERATION_", value)


def permission_name(value: int) -> str:
    return _short(metadata_pb2.AclPermission, "ACL_PERMISSION_", value)


def pattern_name(value: int) -> str:
    return _short(metadata_pb2.AclPatternType, "ACL_PATTERN_", value)


def resource_type_name(value: int) -> str:
    return _short(metadata_pb2.AclResourceType, "ACL_RESOURCE_", value)


class AclSet:
    """The entries of one resource: an immutable set, indexed by principal ("User:*" entries apart).
    Equal when the entries are; a change makes a new set (apply's journal puts the old one back)."""

    __slots__ = ("_by_principal", "entries")

    def __init__(self, entries: Iterable[AclEntry] = ()) -> None:
        self.entries: frozenset[AclEntry] = frozenset(entries)
        by_principal: dict[str, list[AclEntry]] = {}
        for entry in self.entries:
            by_principal.setdefault(entry.principal, []).append(entry)
        self._by_principal = {p: tuple(group) for p, group in by_principal.items()}

    def of(self, principal: str) -> tuple[AclEntry, ...]:
        """The entries for exactly this principal (text as written)."""
        return self._by_principal.get(principal, ())

    def with_entry(self, entry: AclEntry) -> AclSet:
        return AclSet(self.entries | {entry})

    def without(self, entry: AclEntry) -> AclSet:
        return AclSet(self.entries - {entry})

    def __contains__(self, entry: object) -> bool:
        return entry in self.entries

    def __iter__(self) -> Iterator[AclEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AclSet) and other.entries == self.entries

    def __hash__(self) -> int:
        return hash(self.entries)

    def __repr__(self) -> str:
        return f"<AclSet {len(self.entries)} entries>"


EMPTY_ACL_SET = AclSet()


def check_principal(text: str) -> None:
    """INVALID_REQUEST unless `text` is `User:name` (name may be "*")."""
    kind, sep, name = text.partition(":")
    if (
        not sep
        or kind != PRINCIPAL_TYPE
        or not name
        or len(text) > PRINCIPAL_CHARS_MAX
        or not text.isprintable()
    ):
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"principal {text!r} is not of the form {PRINCIPAL_TYPE}:name (at most "
                         f"{PRINCIPAL_CHARS_MAX} characters)")


def check_entry(entry: AclEntry) -> None:
    """INVALID_REQUEST naming the first rule (module docstring) the entry breaks."""
    if entry.resource_type not in RESOURCE_TYPES:
        raise _invalid(f"unknown resource type {entry.resource_type}")
    if entry.pattern_type not in PATTERN_TYPES:
        raise _invalid(f"unknown pattern type {entry.pattern_type} (LITERAL or PREFIXED)")
    if entry.operation not in OPERATIONS:
        raise _invalid(f"unknown operation {entry.operation}")
    if entry.permission not in PERMISSIONS:
        raise _invalid(f"unknown permission {entry.permission} (ALLOW or DENY)")
    check_principal(entry.principal)
    if not entry.host or len(entry.host) > HOST_CHARS_MAX or any(c.isspace() or not c.isprintable()
                                                                  for c in entry.host):
        raise _invalid(f"host {entry.host!r} must be '*' or an address (at most {HOST_CHARS_MAX} characters)")
    name = entry.resource_name
    if not name or len(name) > RESOURCE_NAME_CHARS_MAX or not name.isprintable():
        raise _invalid(f"resource name {name!r} must be 1 to {RESOURCE_NAME_CHARS_MAX} printable characters")
    if name == WILDCARD_RESOURCE and entry.pattern_type == PREFIXED:
        raise _invalid("the wildcard resource name '*' is only LITERAL (a PREFIXED '' would mean the same)")
    if entry.resource_type == CLUSTER and name != CLUSTER_RESOURCE_NAME:
        raise _invalid(f"the cluster resource is named {CLUSTER_RESOURCE_NAME!r}, not {name!r}")


def _invalid(message: str) -> KanalError:
    return KanalError(ErrorCode.INVALID_REQUEST, message)


# -- filters -------------------------------------------------------------------------------------------


def check_filter(f: admin_pb2.AclFilter) -> None:
    """INVALID_REQUEST for a filter with values no entry can have."""
    if f.resource_type and f.resource_type not in RESOURCE_TYPES:
        raise _invalid(f"unknown resource type {f.resource_type}")
    if f.operation and f.operation not in OPERATIONS:
        raise _invalid(f"unknown operation {f.operation}")
    if f.permission and f.permission not in PERMISSIONS:
        raise _invalid(f"unknown permission {f.permission}")
    if f.pattern_filter not in admin_pb2.AclFilter.PatternFilter.values():
        raise _invalid(f"unknown pattern filter {f.pattern_filter}")
    if f.pattern_filter == admin_pb2.AclFilter.MATCH and not f.HasField("resource_name"):
        raise _invalid("a MATCH filter needs a resource name")


def filter_matches(f: admin_pb2.AclFilter, entry: AclEntry) -> bool:
    """Whether the (checked) filter selects the entry."""
    if f.resource_type and entry.resource_type != f.resource_type:
        return False
    if f.operation and entry.operation != f.operation:
        return False
    if f.permission and entry.permission != f.permission:
        return False
    if f.HasField("principal") and entry.principal != f.principal:
        return False
    if f.HasField("host") and entry.host != f.host:
        return False
    pattern = f.pattern_filter
    if pattern == admin_pb2.AclFilter.LITERAL and entry.pattern_type != LITERAL:
        return False
    if pattern == admin_pb2.AclFilter.PREFIXED and entry.pattern_type != PREFIXED:
        return False
    if not f.HasField("resource_name"):
        return True
    if pattern == admin_pb2.AclFilter.MATCH:
        return entry_applies_to(entry.pattern_type, entry.resource_name, f.resource_name)
    return entry.resource_name == f.resource_name


def entry_applies_to(pattern_type: int, entry_name: str, resource_name: str) -> bool:
    """Whether an entry's resource pattern covers a resource of that name (the authorizer's rule)."""
    if pattern_type == LITERAL:
        return entry_name in (resource_name, WILDCARD_RESOURCE)
    return resource_name.startswith(entry_name)


def iter_entries(acls: Mapping[AclResource, AclSet]) -> Iterator[AclEntry]:
    """Every entry, in the canonical order (sorted), for replies and snapshots."""
    entries: list[AclEntry] = [e for group in acls.values() for e in group]
    return iter(sorted(entries, key=AclEntry.sort_key))


def select(acls: Mapping[AclResource, AclSet], f: admin_pb2.AclFilter) -> list[AclEntry]:
    """The entries a checked filter selects, sorted."""
    return [e for e in iter_entries(acls) if filter_matches(f, e)]


def build_acl_map(entries: Iterable[AclEntry]) -> dict[AclResource, AclSet]:
    """The image's map for these entries (tests and references)."""
    out: dict[AclResource, set[AclEntry]] = {}
    for e in entries:
        out.setdefault(e.resource, set()).add(e)
    return {k: AclSet(v) for k, v in out.items()}
