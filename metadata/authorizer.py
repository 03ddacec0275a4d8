"""The authorizer: may this principal, from this host, perform this operation on this resource? A pure
function of the image's ACLs (acl.py) and the authorizer's settings, with Kafka's semantics.

`authorize(acls, principal, host, operation, resource_type, resource_name, *, super_users,
allow_everyone_if_no_acl_found)`:

1. A super user (Kafka's `super.users`) may do everything.
2. The entries that apply to the resource: LITERAL entries of its exact name, the LITERAL "*" of its
   type, and PREFIXED entries whose name is a prefix of its name. None at all (whoever they are for):
   `allow_everyone_if_no_acl_found` decides (off by default: default deny).
3. An applying DENY for the principal (or `User:*`) and the host (or "*") whose operation is the one
   asked or ALL: denied. Deny wins over every allow.
4. An applying ALLOW for the principal and host whose operation is the one asked, ALL, or one that
   implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS.
   (Implication is for allows only: a DENY READ does not deny DESCRIBE.)
5. Otherwise denied.

Cost: a lookup per prefix of the name plus two, then the entries of those resources for this principal
and for `User:*` (AclSet's index); independent of how many ACLs other resources or principals have.

`AuthorizerConfig` is the settings as the servers take them (`--authorizer`, `--super-users`,
`--allow-everyone-if-no-acl-found`); `broker_principal(id)` names a broker as it authenticates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from kanal.metadata.acl import (
    ALLOW,
    DENY,
    LITERAL,
    PREFIXED,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclResource,
    AclSet,
    check_principal,
)
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

ALL = metadata_pb2.ACL_OPERATION_ALL
DESCRIBE = metadata_pb2.ACL_OPERATION_DESCRIBE
DESCRIBE_CONFIGS = metadata_pb2.ACL_OPERATION_DESCRIBE_CONFIGS
# Operations an ALLOW of the key also grants (Kafka's implied operations).
_IMPLIED_BY: dict[int, frozenset[int]] = {
    DESCRIBE: frozenset({metadata_pb2.ACL_OPERATION_READ, metadata_pb2.ACL_OPERATION_WRITE,
                         metadata_pb2.ACL_OPERATION_DELETE, metadata_pb2.ACL_OPERATION_ALTER}),
    DESCRIBE_CONFIGS: frozenset({metadata_pb2.ACL_OPERATION_ALTER_CONFIGS}),
}
_NOTHING: frozenset[int] = frozenset()

AclMap = Mapping[AclResource, AclSet]


def authorize(
    acls: AclMap,
    principal: str,
    host: str,
    operation: int,
    resource_type: int,
    resource_name: str,
    *,
    super_users: frozenset[str],
    allow_everyone_if_no_acl_found: bool,
) -> bool:
    """Kafka's decision (module docstring); `principal` as `User:name`, `operation` and `resource_type`
    as metadata.proto enum values."""
    if principal in super_users:
        return True
    applying = _applying(acls, resource_type, resource_name)
    if not applying:
        return allow_everyone_if_no_acl_found
    allowed = False
    implying = _IMPLIED_BY.get(operation, _NOTHING)
    for group in applying:
        for entry in (*group.of(principal), *group.of(WILDCARD_PRINCIPAL)):
            if entry.host != host and entry.host != WILDCARD_HOST:
                continue
            op = entry.operation
            if entry.permission == DENY:
                if op == operation or op == ALL:
                    return False
            elif not allowed and (op == operation or op == ALL or op in implying):
                allowed = True  # keep looking: a deny among the rest still wins
    return allowed


def _applying(acls: AclMap, resource_type: int, resource_name: str) -> list[AclSet]:
    """The entry sets that apply to the resource (literal, literal "*", every prefix); the map holds no
    empty set."""
    # Plain tuples: they hash and compare as the AclResource keys do, and cost less to build (this runs
    # on every call of every client).
    get = cast(Mapping[tuple[int, int, str], AclSet], acls).get
    found = [group for group in (get((resource_type, LITERAL, resource_name)),
                                 get((resource_type, LITERAL, WILDCARD_RESOURCE))
                                 if resource_name != WILDCARD_RESOURCE else None) if group is not None]
    found.extend(group for end in range(1, len(resource_name) + 1)
                 if (group := get((resource_type, PREFIXED, resource_name[:end]))) is not None)
    return found


def has_any_allow(acls: AclMap, principal: str, host: str, operation: int, resource_type: int, *,
                  super_users: frozenset[str], allow_everyone_if_no_acl_found: bool) -> bool:
    """Whether the principal may perform `operation` on at least one resource of the type (Kafka's
    authorizeByResourceType, used by InitProducerId: WRITE on any topic): some ALLOW entry for it (or
    ALL) exists whose resource itself is not denied to it. A type with no ACLs at all follows
    `allow_everyone_if_no_acl_found`."""
    if principal in super_users:
        return True
    typed = [(resource, group) for resource, group in acls.items() if resource.resource_type == resource_type]
    if not typed:
        return allow_everyone_if_no_acl_found
    for resource, group in typed:
        for entry in group:
            if (entry.permission == ALLOW and entry.principal in (principal, WILDCARD_PRINCIPAL)
                    and entry.host in (host, WILDCARD_HOST) and entry.operation in (operation, ALL)
                    and authorize(acls, principal, host, operation, resource_type, resource.name,
                                  super_users=super_users, allow_everyone_if_no_acl_found=False)):
                return True
    return False


def broker_principal(broker_id: int) -> str:
    """How broker `broker_id` authenticates (its client certificate maps to this name): `User:broker-<id>`."""
    return f"User:broker-{broker_id}"


def controller_principal(controller_id: int) -> str:
    """How controller `controller_id` authenticates: `User:controller-<id>`."""
    return f"User:controller-{controller_id}"


def is_server_principal(principal: str) -> bool:
    """A broker's or a controller's own principal: the callers whose word is taken for another principal
    (a forwarded admin call's original caller)."""
    kind, _, name = principal.partition(":")
    for prefix in ("broker-", "controller-"):
        if kind == "User" and name.startswith(prefix) and name[len(prefix):].isdigit():
            return True
    return False


def parse_super_users(text: str) -> frozenset[str]:
    """`User:alice;User:broker-1` (Kafka's super.users: semicolon-separated) -> the set;
    INVALID_CONFIG naming the first one that is not `User:name`."""
    users = [part.strip() for part in text.split(";") if part.strip()]
    for user in users:
        try:
            check_principal(user)
        except KanalError as exc:
            raise KanalError(ErrorCode.INVALID_CONFIG, f"--super-users: {exc.message}") from None
    return frozenset(users)


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    """The authorizer's settings, the same on brokers and controllers.

    enabled: `--authorizer on` checks every call; off (the default) allows everything, as before ACLs.
    super_users: principals allowed everything (`--super-users`, semicolon-separated `User:name`s).
    allow_everyone_if_no_acl_found: a resource with no ACLs at all is open to everyone (off by default:
    once the authorizer is on, what no ACL allows is denied)."""

    enabled: bool = False
    super_users: frozenset[str] = field(default_factory=frozenset)
    allow_everyone_if_no_acl_found: bool = False

    def __post_init__(self) -> None:
        for user in self.super_users:
            check_principal(user)

    def allows(self, acls: AclMap, principal: str, host: str, operation: int, resource_type: int,
               resource_name: str) -> bool:
        """`authorize` with these settings; everything when the authorizer is off."""
        if not self.enabled:
            return True
        return authorize(acls, principal, host, operation, resource_type, resource_name,
                         super_users=self.super_users,
                         allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found)

    def require_enforced(self, method: str, node: str) -> None:
        """Refuse an ACL call (CreateAcls, DeleteAcls, DescribeAcls) at a node that does not enforce ACLs:
        an entry added there would change nothing, and an "added" that changes nothing is how users come
        to trust rules nobody checks (Kafka answers SECURITY_DISABLED without an authorizer). Raises
        SECURITY_DISABLED, nothing done; returns when the authorizer is on."""
        if self.enabled:
            return
        done = "nothing was listed" if method == "DescribeAcls" else "nothing was changed"
        raise KanalError(ErrorCode.SECURITY_DISABLED,
                         f"{node} does not enforce ACLs (--authorizer off), so an ACL there would mean "
                         f"nothing: {done}; start the brokers and controllers with --authorizer on")

    def __repr__(self) -> str:
        if not self.enabled:
            return "<Authorizer off>"
        return (f"<Authorizer on super_users={sorted(self.super_users)} "
                f"allow_everyone_if_no_acl_found={self.allow_everyone_if_no_acl_found}>")


def authorizer_config_from(
    mode: str, super_users: str, allow_everyone_if_no_acl_found: bool
) -> AuthorizerConfig:
    """The config the server flags describe (kanal.security.authorizer_flags); INVALID_CONFIG when
    malformed."""
    if mode not in ("on", "off"):
        raise KanalError(ErrorCode.INVALID_CONFIG, f"--authorizer must be on or off, got {mode!r}")
    return AuthorizerConfig(enabled=mode == "on", super_users=parse_super_users(super_users),
                            allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found)
