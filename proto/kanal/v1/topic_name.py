"""Topic name rules (errors.proto, INVALID_TOPIC) and the names kanal reserves. Part of the contract: the
controllers refuse to create an illegal name, and clients refuse to ask for one."""

from __future__ import annotations

import re

from kanal.v1.error import ErrorCode, KanalError

TOPIC_NAME_LENGTH_MAX = 249

# A partition by name: (topic, partition index). The one spelling of the pair for every side's type hints.
TopicPartition = tuple[str, int]
_LEGAL = re.compile(r"[A-Za-z0-9._-]+")

# The metadata log's directory is `__cluster_metadata-0`; a topic of that name would share it.
METADATA_TOPIC = "__cluster_metadata"
# Internal topics: created by kanal itself, never deleted through the admin API.
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def check_topic_name(name: str) -> None:
    """Raise INVALID_TOPIC unless `name` is a legal topic name."""
    if not isinstance(name, str):
        raise KanalError(ErrorCode.INVALID_TOPIC, f"topic name must be a str, not {type(name).__name__}")
    if not name:
        raise KanalError(ErrorCode.INVALID_TOPIC, "topic name is empty")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise KanalError(
            ErrorCode.INVALID_TOPIC,
            f"topic name is {len(name)} characters, the maximum is {TOPIC_NAME_LENGTH_MAX}",
        )
    if name in (".", ".."):
        raise KanalError(ErrorCode.INVALID_TOPIC, f"topic name {name!r} is not allowed")
    if not _LEGAL.fullmatch(name):
        raise KanalError(
            ErrorCode.INVALID_TOPIC,
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'",
        )
    if name == METADATA_TOPIC:
        raise KanalError(ErrorCode.INVALID_TOPIC, f"{name!r} is reserved for the metadata log")


def collision_key(name: str) -> str:
    """Names equal up to '.' vs '_' collide (as in Kafka): both map to the same metric names."""
    return name.replace(".", "_")
