"""Remote topic names, the loop rules and what a flow changes on its target (naming.py, plans.py)."""

from __future__ import annotations

import re

import pytest

from kanal.deploy.mirror.naming import PATH_HEADER, ReplicationPolicy, is_internal
from kanal.deploy.mirror.plans import (
    TopicChange,
    plan_acls,
    plan_configs,
    plan_group_offsets,
    plan_topics,
)
from kanal.v1 import metadata_pb2 as m

EVERYTHING = re.compile(".*")


def test_the_default_policy_names_the_source_and_never_sends_a_topic_home():
    a_to_b = ReplicationPolicy("default", "A", "B")
    assert a_to_b.remote_topic("orders") == "A.orders"
    assert a_to_b.mirrors("orders", EVERYTHING)
    assert not a_to_b.mirrors("B.orders", EVERYTHING)  # B's data, copied to A by B->A: not back to B
    assert a_to_b.mirrors("C.orders", EVERYTHING)  # C's data goes on (A.C.orders on B)
    assert a_to_b.mirrors("heartbeats", EVERYTHING)
    for internal in ("__consumer_offsets", "__schemas", "A.checkpoints.internal",
                     "mm2-offset-syncs.B.internal", "kanal-mirror.A.offset-syncs.internal"):
        assert is_internal(internal) and not a_to_b.mirrors(internal, EVERYTHING)
    assert not a_to_b.mirrors("orders", re.compile("pay.*"))
    assert a_to_b.path_after([("h", b"1")]) == b""  # names stop loops: no header added


def test_the_identity_policy_keeps_names_and_stops_loops_with_the_path_header():
    a_to_b, b_to_a = ReplicationPolicy("identity", "A", "B"), ReplicationPolicy("identity", "B", "A")
    assert a_to_b.remote_topic("orders") == "orders" and not a_to_b.mirrors("heartbeats", EVERYTHING)
    path = a_to_b.path_after([("h", b"x")])
    assert path == b"A"
    assert b_to_a.path_after([("h", b"x"), (PATH_HEADER, path)]) is None  # back to A: dropped
    c_to_d = ReplicationPolicy("identity", "C", "D")
    assert c_to_d.path_after([(PATH_HEADER, b"A,B")]) == b"A,B,C"


@pytest.mark.parametrize(("policy", "source", "target"), [("mirror", "A", "B"), ("default", "A", "A"),
                                                          ("default", "A.x", "B"), ("default", "", "B")])
def test_a_bad_policy_or_alias_is_refused(policy, source, target):
    with pytest.raises(ValueError):
        ReplicationPolicy(policy, source, target)


def test_topics_are_created_and_grown_never_shrunk():
    remote = {"a": "S.a", "b": "S.b", "c": "S.c"}
    changes = plan_topics({"a": 3, "b": 4, "c": 2}, {"S.b": 2, "S.c": 5}, remote)
    assert changes == [TopicChange("S.a", 3, create=True), TopicChange("S.b", 4, create=False)]


def test_configs_set_on_the_source_are_copied_but_the_excluded_ones():
    source = {"retention.ms": "1000", "cleanup.policy": "compact", "min.insync.replicas": "2",
              "message.timestamp.type": "LogAppendTime"}
    target = {"cleanup.policy": "compact", "segment.bytes": "1024"}
    assert plan_configs(source, target) == {"retention.ms": "1000"}
    assert plan_configs(source, {}, excluded=()) == source


def _acl(name, operation, permission=m.ACL_PERMISSION_ALLOW, pattern=m.ACL_PATTERN_LITERAL,
         resource=m.ACL_RESOURCE_TOPIC):
    return m.AccessControlEntry(resource_type=resource, resource_name=name, pattern_type=pattern,
                                principal="User:alice", host="*", operation=operation, permission=permission)


def test_acls_follow_kafkas_rule_literal_topics_renamed_no_allow_write_all_becomes_read():
    remote = {"orders": "A.orders"}
    source = [_acl("orders", m.ACL_OPERATION_READ), _acl("orders", m.ACL_OPERATION_WRITE),
              _acl("orders", m.ACL_OPERATION_ALL),
              _acl("orders", m.ACL_OPERATION_WRITE, m.ACL_PERMISSION_DENY),
              _acl("ord", m.ACL_OPERATION_READ, pattern=m.ACL_PATTERN_PREFIXED),
              _acl("other", m.ACL_OPERATION_READ),
              _acl("g", m.ACL_OPERATION_READ, resource=m.ACL_RESOURCE_GROUP)]
    created = plan_acls(source, [], remote)
    assert [(a.resource_name, a.operation, a.permission) for a in created] == [
        ("A.orders", m.ACL_OPERATION_READ, m.ACL_PERMISSION_ALLOW),
        ("A.orders", m.ACL_OPERATION_WRITE, m.ACL_PERMISSION_DENY)]  # ALL -> READ is the same entry as READ
    assert plan_acls(source, created, remote) == []  # present ones are not created again


def test_group_offsets_move_only_forward_and_only_for_an_idle_group():
    translated = {("A.t", 0): 10, ("A.t", 1): 5}
    assert plan_group_offsets(translated, {("A.t", 0): 12}, target_group_active=False) == {("A.t", 1): 5}
    assert plan_group_offsets(translated, {}, target_group_active=True) == {}
