"""remote.storage.enable as a topic config key for tests, until issue 44's topic-config change adds it.

`STAND_IN` is the key with Kafka's rule (a boolean, default false). In-process tests put it into the config
table with monkeypatch (tests/metadata/conftest.py `remote_storage_key`); controller processes get it from
a `sitecustomize` made of this file plus a call to `install()` (`sitecustomize_source()`), on their
PYTHONPATH (tests/raft/test_controller_remote_log.py). Both do nothing once the table has the key, and
this file can then go.
"""

from __future__ import annotations

from pathlib import Path

from kanal.metadata.remote_log import REMOTE_STORAGE_ENABLE
from kanal.metadata.topic_config import TOPIC_CONFIG_KEYS, ConfigKey


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return value == "true"


STAND_IN = ConfigKey(REMOTE_STORAGE_ENABLE, _parse_bool, False,
                     "Tiered storage (test stand-in: tests/harness/remote_storage_key.py).")


def needed() -> bool:
    """Whether the config table lacks the key."""
    return REMOTE_STORAGE_ENABLE not in TOPIC_CONFIG_KEYS


def install() -> None:
    """Put the stand-in into this process's config table for good (a controller process's start)."""
    TOPIC_CONFIG_KEYS.setdefault(REMOTE_STORAGE_ENABLE, STAND_IN)


def sitecustomize_source() -> str:
    """A sitecustomize module that installs the stand-in in every Python process started with it."""
    return Path(__file__).read_text() + "\n\ninstall()\n"
