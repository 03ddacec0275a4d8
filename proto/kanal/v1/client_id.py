"""The client id: how a client names itself to brokers, and the names quota entities may have.

A client sends its client id with every call as the gRPC metadata entry `kanal-client-id` (broker.proto,
"Client id"). A call without it has the empty client id. Brokers key client quotas on it, so its rules are
part of the contract:

- a client id is at most CLIENT_ID_LENGTH_MAX characters of printable ASCII (0x20-0x7e): it travels as
  gRPC metadata, whose text values are ASCII;
- a user name (the principal's name, for example `alice` of `User:alice`) is at most
  CLIENT_ID_LENGTH_MAX printable characters (any script, no control or format characters).

The empty name is a quota entity's *default* (every user, every client id), never a real one: a quota
set on `client-id ""` applies to each client id that has no quota of its own.
"""

from __future__ import annotations

from kanal.v1.error import ErrorCode, KanalError

CLIENT_ID_METADATA_KEY = "kanal-client-id"
CLIENT_ID_LENGTH_MAX = 255


def check_client_id(client_id: object, code: ErrorCode = ErrorCode.INVALID_CONFIG) -> None:
    """Raise `code` (INVALID_CONFIG for a client's setting) unless `client_id` is a legal client id."""
    if not isinstance(client_id, str):
        raise KanalError(code, f"client id must be a str, not {type(client_id).__name__}")
    if len(client_id) > CLIENT_ID_LENGTH_MAX:
        raise KanalError(
            code, f"client id is {len(client_id)} characters, the maximum is {CLIENT_ID_LENGTH_MAX}"
        )
    if not all(" " <= ch <= "~" for ch in client_id):
        raise KanalError(code, f"client id {client_id!r} has characters other than printable ASCII")


def check_user_name(name: object, code: ErrorCode) -> None:
    """Raise `code` unless `name` is a legal user name for a quota entity (the empty default included)."""
    if not isinstance(name, str):
        raise KanalError(code, f"user name must be a str, not {type(name).__name__}")
    if len(name) > CLIENT_ID_LENGTH_MAX:
        raise KanalError(code, f"user name is {len(name)} characters, the maximum is {CLIENT_ID_LENGTH_MAX}")
    if not name.isprintable():
        raise KanalError(code, f"user name {name!r} has control or other unprintable characters")
