"""Client quota rules: which entities and keys exist and which values are legal.

A quota belongs to an entity ("user" or "client-id", by name; the empty name is the default for every
entity of that kind) and has a key: producer_byte_rate and consumer_byte_rate in bytes per second, or
request_percentage, the share of one request-handler thread in percent (it may exceed 100: a client may
use more than one thread's worth). Every value must be a finite number > 0; a quota is removed, never
set to zero.

Entities: ("user", name), ("client-id", name), and Kafka's user+client-id entity: ("user", name) with a
client id, kept apart in the image (`user_client_quotas`, keyed (user, client id)). Names follow
kanal.v1.client_id: a client id is printable ASCII, a user name printable text, both at most 255
characters; "" is the default. Which quota a call gets is the broker's business (broker/quota_policy.py).
"""

from __future__ import annotations

import math

from kanal.v1.client_id import check_client_id, check_user_name
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


def check_quota_entity_names(entity_type: str, entity_name: str, client_id: str | None) -> None:
    """Raise INVALID_QUOTA for an illegal entity name or client id, or a client id on a client-id entity."""
    try:
        if entity_type == "user":
            check_user_name(entity_name, ErrorCode.INVALID_QUOTA)
            if client_id is not None:
                check_client_id(client_id, ErrorCode.INVALID_QUOTA)
        else:
            check_client_id(entity_name, ErrorCode.INVALID_QUOTA)
            if client_id is not None:
                raise KanalError(
                    ErrorCode.INVALID_QUOTA,
                    "only a user entity takes a client id (user+client-id); "
                    "a client-id entity names its client id in entity_name",
                )
    except KanalError as exc:
        raise KanalError(
            ErrorCode.INVALID_QUOTA, f"quota entity {entity_type} {entity_name!r}: {exc.message}"
        ) from None


def check_quota_key(key: str) -> None:
    """Raise INVALID_QUOTA for an unknown quota key."""
    if key not in QUOTA_KEYS:
        raise KanalError(
            ErrorCode.INVALID_QUOTA, f"unknown quota key {key!r}; known: {', '.join(QUOTA_KEYS)}"
        )


def check_quota_value(key: str, value: float) -> None:
    """Raise INVALID_QUOTA unless the value is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise KanalError(ErrorCode.INVALID_QUOTA, f"quota {key} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise KanalError(ErrorCode.INVALID_QUOTA, f"quota {key} must be a finite number > 0, got {value}")
