"""Kafka's ssl.principal.mapping.rules (kanal.security.principal_mapping), as a table of cases."""

from __future__ import annotations

import pytest

from kanal.security.principal_mapping import parse_rules

CASES = [
    # (rules, subject, expected name or None)
    ("DEFAULT", "CN=alice,OU=eng,O=Example", "CN=alice,OU=eng,O=Example"),
    ("RULE:^CN=(.*?),OU=.*$/$1/", "CN=alice,OU=eng,O=Example", "alice"),
    ("RULE:^CN=(.*?),OU=.*$/$1/", "CN=alice", None),  # the pattern must match the whole subject
    ("RULE:^CN=(.*?),OU=.*$/$1/,DEFAULT", "CN=alice", "CN=alice"),
    ("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L", "CN=Alice,OU=ENG,O=Example", "alice@eng"),
    ("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U", "CN=Alice,OU=eng,O=Example", "ALICE@ENG"),
    ("RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT", "CN=broker-1", "broker-1"),
    ("RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT", "CN=broker-1,O=kanal", "broker-1"),
    ("RULE:^OU=ops,CN=(.*)$/ops-$1/, RULE:^CN=(.*)$/$1/", "OU=ops,CN=bob", "ops-bob"),  # first rule wins
    ("RULE:^OU=ops,CN=(.*)$/ops-$1/, RULE:^CN=(.*)$/$1/", "CN=bob", "bob"),
    ("RULE:^CN=(.*)$/a\\/b-$1/", "CN=x", "a/b-x"),  # an escaped slash in the replacement
    ("RULE:^CN=a\\/(.*)$/$1/", "CN=a/x", "x"),  # ... and in the pattern
    ("RULE:^CN=(.*)$/$$$1/", "CN=x", "$x"),  # $$ is a dollar
    ("RULE:^CN=(.*)$//", "CN=x", None),  # an empty name maps to nothing
    ("RULE:^CN=([a-z]+)$/$1/", "CN=bob,O=x", None),
]


@pytest.mark.parametrize(("rules", "subject", "expected"), CASES)
def test_mapping(rules, subject, expected):
    assert parse_rules(rules).name_of(subject) == expected


@pytest.mark.parametrize(
    "rules",
    [
        "",
        "RULE:^CN=(.*)$/$1",
        "RULE:^CN=(.*)$/$1/X",
        "DEFAULT DEFAULT",
        "RULE:(/x/",
        "RULE:^CN=(.*)$/$2/",
        "default",
    ],
)
def test_malformed_rules_are_one_line_errors(rules):
    with pytest.raises(ValueError) as err:
        parse_rules(rules)
    assert "\n" not in str(err.value)
