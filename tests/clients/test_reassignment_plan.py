"""Reassignment plan files (kanal.clients.reassignment_plan): the format, its refusals, cluster checks."""

from __future__ import annotations

import json

import pytest

from kanal.clients.reassignment_plan import (
    PlanFormatError,
    PlannedPartition,
    check_plan,
    format_plan,
    parse_plan,
)


def _plan(*entries) -> str:
    return json.dumps({"version": 1, "partitions": list(entries)})


def test_round_trip():
    text = format_plan({("orders", 1): (3, 4, 5), ("orders", 0): (4, 5, 6)})
    assert parse_plan(text) == [
        PlannedPartition("orders", 0, (4, 5, 6)),
        PlannedPartition("orders", 1, (3, 4, 5)),
    ]
    assert parse_plan(format_plan({})) == []


def test_kafka_log_dirs_any_is_accepted():
    text = _plan({"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]})
    assert parse_plan(text) == [PlannedPartition("t", 0, (1, 2))]


@pytest.mark.parametrize("text, message", [
    ("{", "not JSON"),
    ("[]", "JSON object"),
    (json.dumps({"version": 2, "partitions": []}), "version must be 1"),
    (json.dumps({"version": 1, "partitions": [], "extra": 1}), "unknown key"),
    (json.dumps({"version": 1, "partitions": {}}), "must be a list"),
    (_plan({"topic": "", "partition": 0, "replicas": [1]}), "'topic' must be"),
    (_plan({"topic": "t", "partition": -1, "replicas": [1]}), "'partition' must be"),
    (_plan({"topic": "t", "partition": True, "replicas": [1]}), "'partition' must be"),
    (_plan({"topic": "t", "partition": 0, "replicas": []}), "non-empty list"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1, "2"]}), "broker ids"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1, 2, 1]}), r"duplicate replica\(s\) \[1\]"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/data"]}), "log_dirs"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1], "replica": [1]}), "unknown key"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 0, "replicas": [2]}),
     "more than once"),
])
def test_bad_plans_are_refused_with_the_entry_named(text, message):
    with pytest.raises(PlanFormatError, match=message):
        parse_plan(text)


def test_check_against_the_cluster_names_every_problem():
    plan = parse_plan(_plan({"topic": "t", "partition": 0, "replicas": [1, 9]},
                            {"topic": "t", "partition": 5, "replicas": [1, 2]},
                            {"topic": "u", "partition": 0, "replicas": [2, 1]}))
    problems = check_plan(plan, {("t", 0): (1, 2), ("u", 0): (1, 2)}, [1, 2, 3])
    assert problems == ["t-0: unknown broker(s) [9] (registered: [1, 2, 3])", "t-5: no such partition"]
