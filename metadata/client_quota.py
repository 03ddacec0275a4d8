"""Client quota rules: which entities and keys exist and which values are legal.

A quota belongs to an entity ("user" or "client-id", by name; the empty name is the default for every
entity of that kind) and has a key: producer_byte_rate and consumer_byte_rate in bytes per second, or
request_percentage, the share of one request-handler thread in percent (it may exceed 100: a client may
use more than one thread's worth). Every value must be a finite number > 0; a quota is removed, never
set to zero.
"""

from __future__ import annotations

import math

from kanal.v1.error import ErrorCode, KanalError

QUOTA_ENTITY_TYPES = ("user", "client-id")
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


def check_quota_entity(entity_type: str) -> None:
    """Raise INVALID_QUOTA for an unknown entity type."""
    if entity_type not in QUOTA_ENTITY_TYPES:
        raise KanalError(
            ErrorCode.INVALID_QUOTA,
            f"unknown quota entity type {entity_type!r}; known: {', '.join(QUOTA_ENTITY_TYPES)}",
        )


def check_quota_key(key: str) -> None:
    """Raise INVALID_QUOTA for an unknown quota key."""
    if key not in QUOTA_KEYS:
        raise KanalError(
            ErrorCode.INVALID_QUOTA, f"unknown quota key {key!r}; known: {', '.join(QUOTA_KEYS)}"
        )


def check_quota_value(key: str, value: float) -> None:
    """Raise INVALID_QUOTA unless the value is a finite number > 0."""
    if not math.isfinite(value) or value <= 0:
        raise KanalError(ErrorCode.INVALID_QUOTA, f"quota {key} must be a finite number > 0, got {value}")
