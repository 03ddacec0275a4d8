"""Topic config bounds (metadata/topic_config.py): what admission refuses, what -1 means, and that values an
older version admitted under a looser rule still read as they did."""

from __future__ import annotations

import pytest

from kanal.metadata.cleanup_policy import COMPACT, COMPACT_DELETE, DELETE, CleanupPolicy
from kanal.metadata.topic_config import (
    LOCAL_RETENTION_AS_TOTAL,
    TOPIC_CONFIG_KEYS,
    effective_topic_configs,
    parse_topic_config,
    read_stored_topic_config,
)
from kanal.v1.error import ErrorCode, KanalError

UNLIMITED_KEYS = ["retention.ms", "retention.bytes", "flush.messages", "flush.ms",
                  "message.timestamp.difference.max.ms"]

REFUSED = [
    ("retention.ms", "-5", "outside -1 (no limit) or [0, "),
    ("retention.ms", "-2", "outside -1 (no limit)"),
    ("retention.ms", "9223372036854775808", "outside -1 (no limit)"),
    ("retention.bytes", "-2", "outside -1 (no limit) or [0, "),
    ("flush.messages", "0", "outside -1 (no limit) or [1, "),
    ("flush.messages", "-7", "outside -1 (no limit) or [1, "),
    ("flush.ms", "-100", "outside -1 (no limit) or [0, "),
    ("message.timestamp.difference.max.ms", "-3", "outside -1 (no limit) or [0, "),
    ("segment.ms", "0", "outside [1, "),
    ("segment.ms", "-1", "outside [1, "),  # no "no limit" for keys that never had one
    ("delete.retention.ms", "-1", "outside [0, "),
    ("min.compaction.lag.ms", "-1", "outside [0, "),
    ("index.interval.bytes", "-1", "outside [0, "),
    ("segment.bytes", "-1", "outside [1024, "),
    ("segment.index.bytes", "1024", "outside [4096, "),
    ("max.message.bytes", "0", "outside [64, "),
    ("min.insync.replicas", "0", "outside [1, 1000]"),
    ("retention.ms", "1_000", "not an integer"),  # Python's int() takes these; Kafka does not
    ("retention.ms", "١٢", "not an integer"),
    ("retention.ms", "forever", "not an integer"),
    ("retention.ms", "", "not an integer"),
]


@pytest.mark.parametrize(("key", "text", "fragment"), REFUSED)
def test_out_of_range_values_are_refused_naming_the_key_and_the_range(key, text, fragment):
    with pytest.raises(KanalError) as err:
        parse_topic_config(key, text)
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert f"bad value for {key}" in err.value.message and fragment in err.value.message


@pytest.mark.parametrize("key", UNLIMITED_KEYS)
def test_minus_one_means_no_limit(key):
    assert parse_topic_config(key, "-1") is None
    assert parse_topic_config(key, " -1 ") is None


def test_bounds_themselves_are_accepted():
    assert parse_topic_config("retention.ms", "0") == 0
    assert parse_topic_config("retention.ms", "+5") == 5
    assert parse_topic_config("retention.ms", "9223372036854775807") == (1 << 63) - 1
    assert parse_topic_config("flush.messages", "1") == 1
    assert parse_topic_config("segment.bytes", str(1 << 31)) == 1 << 31


@pytest.mark.parametrize(("key", "text", "value"), [
    ("retention.ms", "-5", None),  # the old rule: anything below 0 kept forever
    ("retention.bytes", "-100", None),
    ("flush.messages", "0", None),
    ("flush.ms", "-2", None),
    ("message.timestamp.difference.max.ms", "-9", None),
    ("retention.ms", "1_000", 1000),  # the old syntax, for any integer key
    ("segment.ms", "1_000", 1000),
    ("segment.ms", "١٢", 12),
])
def test_a_value_an_older_version_admitted_is_read_as_it_was(key, text, value):
    assert read_stored_topic_config(key, text) == value
    assert effective_topic_configs({key: text})[key] == value


@pytest.mark.parametrize(("key", "text"), [("retention.ms", "forever"), ("segment.ms", "-1"),
                                           ("retention.ms", "9223372036854775808"), ("nope", "1")])
def test_reading_stored_values_still_refuses_what_no_version_admitted(key, text):
    with pytest.raises(KanalError) as err:
        read_stored_topic_config(key, text)
    assert err.value.code == ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize(("text", "policy"), [
    ("delete", DELETE),
    ("compact", COMPACT),
    ("compact,delete", COMPACT_DELETE),
    ("delete,compact", COMPACT_DELETE),  # the same policy, as in Kafka
    ("compact, delete", COMPACT_DELETE),  # Kafka tolerates spaces around the items
    (" delete ,  compact ", COMPACT_DELETE),
    ("Compact,DELETE", COMPACT_DELETE),  # case-insensitive, as the single values always were
])
def test_cleanup_policy_takes_delete_compact_or_both_in_either_order(text, policy):
    assert parse_topic_config("cleanup.policy", text) == policy
    assert effective_topic_configs({"cleanup.policy": text})["cleanup.policy"] == policy


def test_a_cleanup_policy_answers_whether_it_deletes_and_compacts():
    assert (DELETE.deletes, DELETE.compacts) == (True, False)
    assert (COMPACT.deletes, COMPACT.compacts) == (False, True)
    assert (COMPACT_DELETE.deletes, COMPACT_DELETE.compacts) == (True, True)
    # str() is the canonical text, so a default describes itself as Kafka would.
    assert [str(p) for p in (DELETE, COMPACT, COMPACT_DELETE)] == ["delete", "compact", "compact,delete"]
    assert TOPIC_CONFIG_KEYS["cleanup.policy"].default_text() == "delete"
    with pytest.raises(ValueError, match="deletes, compacts or both"):
        CleanupPolicy(deletes=False, compacts=False)


@pytest.mark.parametrize(("text", "fragment"), [
    ("compact,foo", "'foo' is not delete or compact"),
    ("shred", "'shred' is not delete or compact"),
    ("", "empty"),
    ("  ", "empty"),
    ("compact,", "an empty item is not delete or compact"),
    (",delete", "an empty item is not delete or compact"),
    ("compact;delete", "is not delete or compact"),
    ("delete,delete", "names a policy twice"),
    ("compact,delete,compact", "names a policy twice"),
])
def test_bad_cleanup_policies_are_refused_saying_why(text, fragment):
    with pytest.raises(KanalError) as err:
        parse_topic_config("cleanup.policy", text)
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert "bad value for cleanup.policy" in err.value.message and fragment in err.value.message
    with pytest.raises(KanalError):  # no looser older rule reads it either
        read_stored_topic_config("cleanup.policy", text)


# ---- tiered storage keys (issue 44, Kafka's KIP-405) ----------------------------------------------------

LOCAL_KEYS = ["local.retention.ms", "local.retention.bytes"]


def test_remote_storage_enable_is_a_boolean_off_by_default():
    assert TOPIC_CONFIG_KEYS["remote.storage.enable"].default is False
    assert TOPIC_CONFIG_KEYS["remote.storage.enable"].default_text() == "false"
    assert parse_topic_config("remote.storage.enable", "true") is True
    assert parse_topic_config("remote.storage.enable", " FALSE ") is False
    with pytest.raises(KanalError) as err:
        parse_topic_config("remote.storage.enable", "yes")
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert "bad value for remote.storage.enable" in err.value.message


@pytest.mark.parametrize("key", LOCAL_KEYS)
def test_local_retention_takes_minus_two_minus_one_or_a_bound(key):
    assert TOPIC_CONFIG_KEYS[key].default == LOCAL_RETENTION_AS_TOTAL == -2
    assert TOPIC_CONFIG_KEYS[key].default_text() == "-2"  # describe shows Kafka's default
    assert effective_topic_configs({})[key] == -2
    assert parse_topic_config(key, "-2") == -2  # as retention.*: resolved by LogConfig, not here
    assert parse_topic_config(key, "-1") is None  # no limit
    assert parse_topic_config(key, "0") == 0
    assert parse_topic_config(key, "+3600000") == 3_600_000
    assert parse_topic_config(key, "9223372036854775807") == (1 << 63) - 1
    assert read_stored_topic_config(key, "-2") == -2


@pytest.mark.parametrize("key", LOCAL_KEYS)
@pytest.mark.parametrize(("text", "fragment"), [
    ("-3", "outside -2 (as retention), -1 (no limit) or [0, "),
    ("-100", "outside -2 (as retention)"),
    ("9223372036854775808", "outside -2 (as retention)"),
    ("1_000", "not an integer"),
    ("", "not an integer"),
    ("forever", "not an integer"),
])
def test_bad_local_retention_values_are_refused(key, text, fragment):
    with pytest.raises(KanalError) as err:
        parse_topic_config(key, text)
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert f"bad value for {key}" in err.value.message and fragment in err.value.message
    with pytest.raises(KanalError):  # new keys: no older, looser rule reads them either
        read_stored_topic_config(key, text)


# ---- schema validation keys (issue 45; broker/schema_validation.py) ---------------------------------------

@pytest.mark.parametrize("key", ["value.schema.validation", "key.schema.validation"])
def test_schema_validation_keys_are_booleans_off_by_default(key):
    assert TOPIC_CONFIG_KEYS[key].default is False
    assert TOPIC_CONFIG_KEYS[key].default_text() == "false"
    assert effective_topic_configs({})[key] is False
    assert parse_topic_config(key, "true") is True
    assert parse_topic_config(key, "False") is False
    for bad in ("yes", "1", "", "on"):
        with pytest.raises(KanalError) as err:
            parse_topic_config(key, bad)
        assert err.value.code == ErrorCode.INVALID_CONFIG
        assert f"bad value for {key}" in err.value.message
    with pytest.raises(KanalError, match="unknown topic config key 'confluent.value.schema.validation'"):
        parse_topic_config("confluent.value.schema.validation", "true")  # kanal's names only
