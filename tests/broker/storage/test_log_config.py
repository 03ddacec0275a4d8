"""LogConfig's tiered-storage fields (broker/storage/log_config.py): -2 resolved to the total, -1 as None,
and the local part never above the whole log when remote storage is on."""

from __future__ import annotations

import pytest

from kanal.broker.storage.log_config import LogConfig
from kanal.v1.error import ErrorCode, KanalError

SEVEN_DAYS_MS = 7 * 24 * 3600 * 1000


def test_remote_storage_is_off_and_local_retention_is_the_total_by_default():
    config = LogConfig.from_topic_configs({})
    assert config.remote_storage_enable is False
    assert (config.local_retention_ms, config.local_retention_bytes) == (SEVEN_DAYS_MS, None)
    assert config == LogConfig()  # the field defaults are the topic defaults, resolved


def test_minus_two_resolves_to_the_total():
    config = LogConfig.from_topic_configs({
        "remote.storage.enable": "true",
        "retention.ms": "86400000", "local.retention.ms": "-2",
        "retention.bytes": "1073741824",  # local.retention.bytes left at its default, -2
    })
    assert config.remote_storage_enable is True
    assert (config.retention_ms, config.local_retention_ms) == (86_400_000, 86_400_000)
    assert (config.retention_bytes, config.local_retention_bytes) == (1 << 30, 1 << 30)
    unlimited = LogConfig.from_topic_configs({"remote.storage.enable": "true", "retention.ms": "-1"})
    assert (unlimited.retention_ms, unlimited.local_retention_ms) == (None, None)


def test_minus_one_is_none_and_values_are_kept():
    config = LogConfig.from_topic_configs({
        "remote.storage.enable": "true",
        "retention.ms": "-1", "local.retention.ms": "-1",
        "retention.bytes": "5000", "local.retention.bytes": "4096",
    })
    assert (config.retention_ms, config.local_retention_ms) == (None, None)
    assert (config.retention_bytes, config.local_retention_bytes) == (5000, 4096)


@pytest.mark.parametrize(("local", "total"), [("local.retention.ms", "retention.ms"),
                                              ("local.retention.bytes", "retention.bytes")])
@pytest.mark.parametrize("local_text", ["1001", "-1"])
def test_a_tiered_local_part_above_the_whole_log_is_refused(local, total, local_text):
    texts = {"remote.storage.enable": "true", total: "1000", local: local_text}
    with pytest.raises(KanalError) as err:
        LogConfig.from_topic_configs(texts)
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert f"{local.replace('.', '_')} must be <= {total.replace('.', '_')} with remote storage" in (
        err.value.message
    )
    # Untiered, the local keys mean nothing (as the controller's rules have it): no error.
    LogConfig.from_topic_configs({**texts, "remote.storage.enable": "false"})


def test_direct_construction_checks_the_same_bounds():
    LogConfig(remote_storage_enable=True, retention_ms=1000, local_retention_ms=1000)
    LogConfig(remote_storage_enable=True, retention_ms=None, local_retention_ms=None)
    for bad in (
        {"remote_storage_enable": True, "retention_ms": 1000, "local_retention_ms": 1001},
        {"remote_storage_enable": True, "retention_bytes": 10, "local_retention_bytes": None},
        {"local_retention_ms": -2},  # -2 is a topic-config text; a LogConfig holds it resolved
        {"local_retention_bytes": -1},
    ):
        with pytest.raises(KanalError) as err:
            LogConfig(**bad)
        assert err.value.code == ErrorCode.INVALID_CONFIG
