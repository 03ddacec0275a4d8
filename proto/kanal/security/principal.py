"""Principals: who a call comes from, shared by brokers and controllers.

A principal is written `Type:name` as Kafka writes it (`User:alice`, `User:broker-2`). A call on a
listener without authentication is `User:ANONYMOUS`, Kafka's name for it.

The seam between authentication and authorization: a listener's authenticator (TLS client certificate
or call credentials) binds the call's principal with `bind_principal` around the handler; handlers and
the authorizer read it with `call_principal()`. The binding is a context variable, so it holds for the
handler's own thread or task and for nothing else; where nothing was bound the call is ANONYMOUS.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kanal.v1.error import ErrorCode, KanalError

PRINCIPAL_TYPE_USER = "User"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated identity: `type` (always "User" today) and `name`."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


ANONYMOUS = Principal(PRINCIPAL_TYPE_USER, "ANONYMOUS")


def parse_principal(text: str) -> Principal:
    """`User:alice` → Principal("User", "alice"); anything else is INVALID_REQUEST."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"principal {text!r} is not of the form Type:name")
    return Principal(kind, name)


_CURRENT: contextvars.ContextVar[Principal] = contextvars.ContextVar(
    "kanal_call_principal", default=ANONYMOUS
)


def call_principal() -> Principal:
    """The principal of the call being served on this thread or task (ANONYMOUS when none is bound)."""
    return _CURRENT.get()


@contextmanager
def bind_principal(principal: Principal) -> Iterator[None]:
    """Serve the enclosed handler as `principal`; the previous binding comes back afterwards."""
    token = _CURRENT.set(principal)
    try:
        yield
    finally:
        _CURRENT.reset(token)
