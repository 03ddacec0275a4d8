"""The rules between topic config keys (metadata/topic_config_rules.py), pure: texts in, INVALID_CONFIG out.
CreateTopics and AlterConfigs wiring is in test_topic_admin.py and test_config_admin.py."""

from __future__ import annotations

import pytest

from kanal.metadata.topic_config_rules import (
    check_defaults_change,
    check_topic_change,
    check_topic_config_rules,
    rule_values,
)
from kanal.v1.error import ErrorCode, KanalError

ON = {"remote.storage.enable": "true"}


def refused(fragment: str):
    """pytest.raises for INVALID_CONFIG with `fragment` in the message."""
    return pytest.raises(KanalError, match=fragment)


def rules(topic: str, before: dict[str, str] | None, after: dict[str, str]) -> None:
    check_topic_config_rules(topic, None if before is None else rule_values(before), rule_values(after))


def test_defaults_pass_and_so_does_a_plain_tiered_topic():
    rules("t", None, {})
    rules("t", None, ON)
    rules("t", {}, ON)  # turning it on is allowed
    rules("t", ON, {**ON, "retention.ms": "1000", "local.retention.ms": "1000"})


@pytest.mark.parametrize(
    "after", [{}, {"remote.storage.enable": "false"}, {"remote.storage.enable": "FALSE"}]
)
def test_remote_storage_cannot_be_turned_off(after):
    with pytest.raises(KanalError) as err:
        rules("t", ON, after)
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert "topic 't': remote.storage.enable cannot be turned off" in err.value.message


def test_staying_off_or_on_is_no_change():
    rules("t", {"remote.storage.enable": "false"}, {})
    rules("t", ON, {"remote.storage.enable": "TRUE"})


@pytest.mark.parametrize(("policy", "shown"), [("compact", "compact"), ("compact,delete", "compact,delete"),
                                               ("delete, compact", "compact,delete")])
def test_remote_storage_is_refused_with_a_compacting_policy(policy, shown):
    with refused(f"topic 't': remote.storage.enable=true with cleanup.policy={shown}: a compacted topic "
                 f"cannot be tiered"):
        rules("t", None, {**ON, "cleanup.policy": policy})
    rules("t", None, {"cleanup.policy": policy})  # a compacted topic without tiering is fine


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__transaction_state"])
def test_remote_storage_is_refused_on_internal_topics(topic):
    with refused(f"topic '{topic}' is internal: remote.storage.enable=true is not allowed"):
        rules(topic, None, {**ON, "cleanup.policy": "delete"})
    rules(topic, None, {"remote.storage.enable": "false", "cleanup.policy": "compact"})


@pytest.mark.parametrize(("local", "total"), [("local.retention.ms", "retention.ms"),
                                              ("local.retention.bytes", "retention.bytes")])
def test_local_retention_stays_within_the_total(local, total):
    rules("t", None, {**ON, total: "1000", local: "1000"})
    rules("t", None, {**ON, total: "1000", local: "0"})
    rules("t", None, {**ON, total: "1000", local: "-2"})  # -2 is the total itself
    rules("t", None, {**ON, total: "-1", local: "-1"})  # no limit anywhere
    rules("t", None, {**ON, total: "-1", local: "5"})  # a bounded local part of an unbounded log
    with refused(f"topic 't': {local}=1001 is above {total}=1000"):
        rules("t", None, {**ON, total: "1000", local: "1001"})
    with refused(f"topic 't': {local}=-1 \\(no limit\\) with {total}=1000"):
        rules("t", None, {**ON, total: "1000", local: "-1"})
    # As in Kafka, the local keys mean nothing without remote storage, so they are not checked then.
    rules("t", None, {total: "1000", local: "1001"})
    rules("t", None, {total: "1000", local: "-1"})


def test_local_retention_ms_is_checked_against_the_default_retention_ms():
    seven_days = 7 * 24 * 3600 * 1000
    rules("t", None, {**ON, "local.retention.ms": str(seven_days)})
    with refused(f"local.retention.ms={seven_days + 1} is above retention.ms={seven_days}"):
        rules("t", None, {**ON, "local.retention.ms": str(seven_days + 1)})
    rules("t", None, {**ON, "local.retention.bytes": "-1"})  # retention.bytes is unlimited by default


def test_a_topic_change_is_checked_in_every_scope_of_defaults():
    defaults = {"": {"retention.ms": "1000"}, "2": {"retention.ms": "500"}}
    check_topic_change("t", None, {**ON, "local.retention.ms": "500"}, defaults)
    with refused("retention.ms=800 is above retention.ms=500: .*log \\(on broker 2, with its defaults\\)$"):
        check_topic_change("t", None, {**ON, "local.retention.ms": "800"}, defaults)
    with refused("topic 't': local.retention.ms=1200 is above retention.ms=1000: [^(]*$"):
        check_topic_change("t", None, {**ON, "local.retention.ms": "1200"}, defaults)
    # Deleting its own key when a default still turns it on is no change.
    check_topic_change("t", ON, {}, {"": ON})
    with refused("cannot be turned off.*on broker 1"):
        check_topic_change("t", ON, {}, {"": ON, "1": {"remote.storage.enable": "false"}})


def test_a_default_change_is_checked_on_every_topic_it_reaches():
    topics = [("plain", {}), ("tiered", {**ON, "local.retention.ms": "1000"}),
              ("kept", {"retention.ms": "5"})]
    check_defaults_change("", {}, {"retention.ms": "2000"}, {}, topics)
    with refused("changing the cluster default: topic 'tiered': local.retention.ms=1000 is above "
                 "retention.ms=500"):
        check_defaults_change("", {}, {"retention.ms": "500"}, {}, topics)
    with refused("changing broker 3's defaults: topic 'tiered': .*\\(on broker 3, with its defaults\\)"):
        check_defaults_change("3", {}, {"retention.ms": "500"}, {}, topics)
    # A topic with its own value does not see the default.
    check_defaults_change("", {}, {"retention.ms": "500"}, {}, [("t", {**ON, "retention.ms": "1000",
                                                                         "local.retention.ms": "1000"})])


def test_a_default_cannot_turn_remote_storage_off_or_on_where_it_may_not_be():
    inherits = [("t", {})]
    with refused("changing the cluster default: topic 't': remote.storage.enable cannot be turned off"):
        check_defaults_change("", ON, {}, {"": ON}, inherits)
    with refused("changing the cluster default: topic 't': remote.storage.enable cannot be turned off"):
        check_defaults_change("", ON, {"remote.storage.enable": "false"}, {"": ON}, inherits)
    # One broker's default may never set it (the controller reads the topic and the cluster default).
    with refused("set per topic or as the cluster default, not on broker 1"):
        check_defaults_change("1", {}, {"remote.storage.enable": "false"}, {"": ON}, inherits)
    with refused("set per topic or as the cluster default, not on broker 1"):
        check_defaults_change("1", {}, ON, {}, inherits)
    with refused("topic 'c': remote.storage.enable=true with cleanup.policy=compact.*own value wins"):
        check_defaults_change("", {}, ON, {}, [("c", {"cleanup.policy": "compact"})])
    with refused("topic '__consumer_offsets' is internal"):
        check_defaults_change("", {}, ON, {}, [("__consumer_offsets", {"cleanup.policy": "delete"})])
    # Topics that say false themselves are not reached.
    pinned_off = {"cleanup.policy": "compact", "remote.storage.enable": "false"}
    check_defaults_change("", {}, ON, {}, [("c", pinned_off)])


def test_a_default_change_that_moves_no_rule_key_checks_nothing():
    # Even a topic that breaks a rule (it cannot exist; here it stands for one) is not looked at.
    broken = [("c", {**ON, "cleanup.policy": "compact"})]
    check_defaults_change("", {}, {"segment.ms": "5"}, {}, broken)
    check_defaults_change("", {"retention.ms": "5"}, {"retention.ms": "5"}, {}, broken)


# ---- schema validation (issue 45) ----

SCHEMA_KEYS = ["value.schema.validation", "key.schema.validation"]


@pytest.mark.parametrize("key", SCHEMA_KEYS)
def test_schema_validation_is_per_topic_or_the_cluster_default_never_one_brokers(key):
    topics = [("t", {}), ("__consumer_offsets", {})]
    check_topic_change("t", None, {key: "true"}, {})
    check_defaults_change("", {}, {key: "true"}, {}, topics)  # internal topics ignore it (brokers skip them)
    for change in ({key: "true"}, {key: "false"}):
        with refused(f"{key} is set per topic or as the cluster default, not on broker 1"):
            check_defaults_change("1", {}, change, {}, topics)
    check_defaults_change("1", {"retention.ms": "5"}, {"retention.ms": "6"}, {}, topics)  # other keys may


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__transaction_state"])
@pytest.mark.parametrize("key", SCHEMA_KEYS)
def test_schema_validation_is_refused_on_internal_topics(topic, key):
    with refused(f"topic '{topic}' is internal: {key}=true is not allowed on it"):
        check_topic_change(topic, None, {key: "true"}, {})
    with refused("is internal"):
        check_topic_change(topic, {}, {key: "TRUE"}, {})
    check_topic_change(topic, {}, {key: "false"}, {})
