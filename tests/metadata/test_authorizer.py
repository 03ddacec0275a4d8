"""The authorizer: a table of Kafka's cases, and a Hypothesis property against a naive reference that scans
every entry (written here from the rules, not from the indexed implementation)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kanal.metadata.acl import (
    ALLOW,
    CLUSTER,
    CLUSTER_RESOURCE_NAME,
    DENY,
    GROUP,
    LITERAL,
    PREFIXED,
    TOPIC,
    AclEntry,
    build_acl_map,
)
from kanal.metadata.authorizer import (
    AuthorizerConfig,
    authorize,
    has_any_allow,
    is_server_principal,
    parse_super_users,
)
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

OP = {name[len("ACL_OPERATION_"):]: value for name, value in metadata_pb2.AclOperation.items()
      if name != "ACL_OPERATION_UNSPECIFIED"}
ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"


def acl(principal=ALICE, op="READ", permission=ALLOW, name="orders", pattern=LITERAL, rtype=TOPIC, host="*"):
    return AclEntry(rtype, name, pattern, principal, host, OP[op], permission)


def check(entries, op, name="orders", *, principal=ALICE, host=HOST, rtype=TOPIC, supers=frozenset(),
          everyone=False) -> bool:
    return authorize(build_acl_map(entries), principal, host, OP[op], rtype, name, super_users=supers,
                     allow_everyone_if_no_acl_found=everyone)


CASES = [
    # (what, entries, operation, resource name, keyword arguments, expected)
    ("no ACLs: default deny", [], "READ", "orders", {}, False),
    ("no ACLs with allow.everyone.if.no.acl.found", [], "READ", "orders", {"everyone": True}, True),
    (
        "ACLs for the resource exist (for someone else): no open door",
        [acl(BOB)],
        "READ",
        "orders",
        {"everyone": True},
        False,
    ),
    (
        "ACLs on another resource only: allow.everyone applies",
        [acl(name="other")],
        "READ",
        "orders",
        {"everyone": True},
        True,
    ),
    ("super user without ACLs", [], "ALTER", "orders", {"supers": frozenset({ALICE})}, True),
    (
        "super user beats a deny",
        [acl(op="ALL", permission=DENY)],
        "READ",
        "orders",
        {"supers": frozenset({ALICE})},
        True,
    ),
    ("literal allow", [acl()], "READ", "orders", {}, True),
    ("literal allow: other operation", [acl()], "WRITE", "orders", {}, False),
    ("literal allow: other topic", [acl()], "READ", "orders2", {}, False),
    ("literal allow: other principal", [acl()], "READ", "orders", {"principal": BOB}, False),
    ("ALL allows every operation", [acl(op="ALL")], "DELETE", "orders", {}, True),
    ("READ implies DESCRIBE", [acl(op="READ")], "DESCRIBE", "orders", {}, True),
    ("WRITE implies DESCRIBE", [acl(op="WRITE")], "DESCRIBE", "orders", {}, True),
    ("DELETE implies DESCRIBE", [acl(op="DELETE")], "DESCRIBE", "orders", {}, True),
    ("ALTER implies DESCRIBE", [acl(op="ALTER")], "DESCRIBE", "orders", {}, True),
    ("CREATE does not imply DESCRIBE", [acl(op="CREATE")], "DESCRIBE", "orders", {}, False),
    (
        "ALTER_CONFIGS implies DESCRIBE_CONFIGS",
        [acl(op="ALTER_CONFIGS")],
        "DESCRIBE_CONFIGS",
        "orders",
        {},
        True,
    ),
    ("DESCRIBE does not imply READ", [acl(op="DESCRIBE")], "READ", "orders", {}, False),
    ("deny beats allow", [acl(), acl(permission=DENY)], "READ", "orders", {}, False),
    ("deny ALL beats allow READ", [acl(), acl(op="ALL", permission=DENY)], "READ", "orders", {}, False),
    (
        "deny READ does not deny DESCRIBE (no implication for denies)",
        [acl(op="ALL"), acl(permission=DENY)],
        "DESCRIBE",
        "orders",
        {},
        True,
    ),
    ("deny WRITE leaves READ", [acl(op="ALL"), acl(op="WRITE", permission=DENY)], "READ", "orders", {}, True),
    ("wildcard principal allow", [acl(principal="User:*")], "READ", "orders", {"principal": BOB}, True),
    (
        "wildcard principal deny beats own allow",
        [acl(), acl(principal="User:*", permission=DENY)],
        "READ",
        "orders",
        {},
        False,
    ),
    ("host must match", [acl(host=OTHER_HOST)], "READ", "orders", {}, False),
    ("exact host matches", [acl(host=HOST)], "READ", "orders", {}, True),
    (
        "deny from another host does not apply",
        [acl(), acl(permission=DENY, host=OTHER_HOST)],
        "READ",
        "orders",
        {},
        True,
    ),
    ("literal * matches every topic", [acl(name="*")], "READ", "anything", {}, True),
    ("literal * is not a group ACL", [acl(name="*")], "READ", "anything", {"rtype": GROUP}, False),
    (
        "prefixed matches names that start with it",
        [acl(name="ord", pattern=PREFIXED)],
        "READ",
        "orders",
        {},
        True,
    ),
    ("prefixed matches the name itself", [acl(name="orders", pattern=PREFIXED)], "READ", "orders", {}, True),
    (
        "prefixed does not match other names",
        [acl(name="ord", pattern=PREFIXED)],
        "READ",
        "payments",
        {},
        False,
    ),
    ("prefixed longer than the name", [acl(name="orders-", pattern=PREFIXED)], "READ", "orders", {}, False),
    (
        "prefixed deny beats literal allow",
        [acl(), acl(name="or", pattern=PREFIXED, permission=DENY)],
        "READ",
        "orders",
        {},
        False,
    ),
    ("literal 'ord*' is not a pattern", [acl(name="ord*")], "READ", "orders", {}, False),
    (
        "cluster ACL",
        [acl(op="ALTER", rtype=CLUSTER, name=CLUSTER_RESOURCE_NAME)],
        "ALTER",
        CLUSTER_RESOURCE_NAME,
        {"rtype": CLUSTER},
        True,
    ),
    (
        "a topic ACL says nothing about the cluster",
        [acl(op="ALL")],
        "ALTER",
        CLUSTER_RESOURCE_NAME,
        {"rtype": CLUSTER},
        False,
    ),
    ("group READ", [acl(rtype=GROUP, name="g")], "READ", "g", {"rtype": GROUP}, True),
]


@pytest.mark.parametrize(
    ("what", "entries", "op", "name", "kwargs", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_kafka_cases(what, entries, op, name, kwargs, expected):
    assert check(entries, op, name, **kwargs) is expected, what


# -- the property: the indexed authorizer equals a scan of every entry ---------------------------------

IMPLIES = {"DESCRIBE": {"READ", "WRITE", "DELETE", "ALTER"}, "DESCRIBE_CONFIGS": {"ALTER_CONFIGS"}}
OP_NAMES = {v: k for k, v in OP.items()}


def reference(entries, principal, host, op, rtype, name, supers, everyone) -> bool:
    """The rules read literally, one entry at a time."""
    if principal in supers:
        return True

    def applies(e):
        if e.resource_type != rtype:
            return False
        if e.pattern_type == LITERAL:
            return e.resource_name == name or e.resource_name == "*"
        return name.startswith(e.resource_name)

    relevant = [e for e in entries if applies(e)]
    if not relevant:
        return everyone
    mine = [e for e in relevant if e.principal in (principal, "User:*") and e.host in (host, "*")]
    if any(e.permission == DENY and (e.operation == op or OP_NAMES[e.operation] == "ALL") for e in mine):
        return False
    wanted = OP_NAMES[op]
    return any(
        e.permission == ALLOW and (OP_NAMES[e.operation] in ({wanted, "ALL"} | IMPLIES.get(wanted, set())))
        for e in mine
    )


NAMES = st.sampled_from(["a", "ab", "abc", "abd", "b", "*", "ba"])
PRINCIPALS = st.sampled_from([ALICE, BOB, "User:*"])
HOSTS = st.sampled_from(["*", HOST, OTHER_HOST])
OPS = st.sampled_from(sorted(OP.values()))
ENTRIES = st.builds(
    lambda rtype, name, pattern, principal, host, op, perm: AclEntry(
        rtype, name, LITERAL if name == "*" else pattern, principal, host, op, perm),
    st.sampled_from([TOPIC, GROUP]), NAMES, st.sampled_from([LITERAL, PREFIXED]), PRINCIPALS, HOSTS, OPS,
    st.sampled_from([ALLOW, DENY]))


@settings(max_examples=400, deadline=None)
@given(entries=st.lists(ENTRIES, max_size=12), principal=st.sampled_from([ALICE, BOB]),
       host=st.sampled_from([HOST, OTHER_HOST]), op=OPS, rtype=st.sampled_from([TOPIC, GROUP]),
       name=st.sampled_from(["a", "ab", "abc", "abcd", "b", "ba", "c"]),
       supers=st.sets(st.sampled_from([ALICE, BOB]), max_size=1), everyone=st.booleans())
def test_authorize_equals_the_naive_reference(entries, principal, host, op, rtype, name, supers, everyone):
    got = authorize(build_acl_map(entries), principal, host, op, rtype, name, super_users=frozenset(supers),
                    allow_everyone_if_no_acl_found=everyone)
    assert got == reference(entries, principal, host, op, rtype, name, frozenset(supers), everyone)


# -- settings and helpers ------------------------------------------------------------------------------


def test_authorizer_off_allows_everything_and_on_checks():
    entries = build_acl_map([acl(permission=DENY, op="ALL")])
    assert AuthorizerConfig().allows(entries, ALICE, HOST, OP["READ"], TOPIC, "orders")
    assert not AuthorizerConfig(enabled=True).allows(entries, ALICE, HOST, OP["READ"], TOPIC, "orders")


def test_super_users_parse_as_kafka_writes_them():
    assert parse_super_users("User:alice; User:broker-1;") == frozenset({ALICE, "User:broker-1"})
    assert parse_super_users("") == frozenset()
    with pytest.raises(KanalError) as err:
        parse_super_users("User:alice;bob")
    assert err.value.code == ErrorCode.INVALID_CONFIG


def test_server_principals():
    assert is_server_principal("User:broker-3") and is_server_principal("User:controller-1")
    assert not is_server_principal("User:broker-") and not is_server_principal("User:alice")
    assert not is_server_principal("User:broker-1x") and not is_server_principal("Group:broker-1")


def test_any_topic_write_for_idempotent_producers():
    kwargs = {"super_users": frozenset(), "allow_everyone_if_no_acl_found": False}
    assert not has_any_allow(build_acl_map([acl(op="READ")]), ALICE, HOST, OP["WRITE"], TOPIC, **kwargs)
    assert has_any_allow(
        build_acl_map([acl(op="WRITE", name="x", pattern=PREFIXED)]),
        ALICE,
        HOST,
        OP["WRITE"],
        TOPIC,
        **kwargs,
    )
    denied = build_acl_map([acl(op="WRITE"), acl(op="WRITE", permission=DENY, principal="User:*")])
    assert not has_any_allow(denied, ALICE, HOST, OP["WRITE"], TOPIC, **kwargs)
