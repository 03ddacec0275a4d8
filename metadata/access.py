"""Access: one call's principal and host checked against one image's ACLs, and Admission: what of a
request an authorizer lets through, and how the refused items come back into the reply.

Both are pure (the servers build an Access per call from the call's principal, the gRPC peer and their
current image) and shared by the brokers' and the controllers' request checks (admin_authorization.py,
broker/request_authorization.py).

Per-item calls (Produce, CreateTopics, ...) are answered as Kafka answers them: an item the principal
may not touch gets the item's authorization error (TOPIC_AUTHORIZATION_FAILED, ...) in its place in the
reply, and the handler sees a request without it (`per_item`); a call with nothing left is not handed to
the handler at all. Calls on the cluster as a whole fail whole (`Access.require`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kanal.metadata.acl import operation_name, resource_type_name
from kanal.metadata.authorizer import AclMap, AuthorizerConfig
from kanal.v1.error import KanalError


@dataclass(frozen=True, slots=True)
class Access:
    """Who is calling (principal `User:name`, host as the server sees it) and what they may do."""

    principal: str
    host: str
    acls: AclMap
    config: AuthorizerConfig

    def allows(self, operation: int, resource_type: int, name: str) -> bool:
        return self.config.allows(self.acls, self.principal, self.host, operation, resource_type, name)

    def refusal(self, operation: int, resource_type: int, name: str) -> str:
        return (f"{self.principal} from {self.host} may not {operation_name(operation)} "
                f"{resource_type_name(resource_type).lower()} {name!r}")

    def require(self, operation: int, resource_type: int, name: str, code: int) -> None:
        """KanalError(code) unless allowed: for calls that fail whole."""
        if not self.allows(operation, resource_type, name):
            raise KanalError(code, self.refusal(operation, resource_type, name))

    def __repr__(self) -> str:
        return f"<Access {self.principal}@{self.host} {self.config!r}>"


@dataclass(frozen=True, slots=True)
class Admission:
    """`request`: what the handler gets (None: nothing is left for it; `finish(None)` is the reply).
    `finish`: turns the handler's reply into the caller's, with the refused items put back (None: the
    reply goes out as it is)."""

    request: Any
    finish: Callable[[Any], Any] | None = None

    def reply(self, handler_reply: Any) -> Any:
        return handler_reply if self.finish is None else self.finish(handler_reply)


def admitted(request: Any) -> Admission:
    """The whole request, reply unchanged."""
    return Admission(request)


def narrowed(request: Any, items_field: str, verdicts: Sequence[bool]) -> Any:
    """A copy of the request whose repeated `items_field` keeps the items with a true verdict, or None
    when none is left (never an empty list: in some calls that means "all")."""
    if not any(verdicts):
        return None
    kept = type(request)()
    kept.CopyFrom(request)
    items = getattr(kept, items_field)
    chosen = [item for item, good in zip(items, verdicts) if good]
    del items[:]
    items.extend(chosen)
    return kept


def keep_only(items: Any, wanted: Callable[[Any], bool]) -> None:
    """Drop from a repeated field (in place) the items `wanted` refuses."""
    chosen = [item for item in items if wanted(item)]
    del items[:]
    items.extend(chosen)


def per_item(
    request: Any,
    items_field: str,
    ok: Callable[[Any], bool],
    refused: Callable[[Any], Any],
    response_type: type,
    results_field: str,
) -> Admission:
    """Split a request whose reply has one result per item, in order: the handler gets the items `ok`
    accepts; `finish` puts `refused(item)` where each other item was. Needs a reply with no other fields."""
    originals: Sequence[Any] = list(getattr(request, items_field))
    verdicts = [ok(item) for item in originals]
    if all(verdicts):
        return admitted(request)
    kept = narrowed(request, items_field, verdicts)

    def finish(reply: Any) -> Any:
        answered = iter(getattr(reply, results_field) if reply is not None else ())
        out = response_type()
        results = getattr(out, results_field)
        for item, good in zip(originals, verdicts):
            results.append(next(answered) if good else refused(item))
        return out

    return Admission(kept, finish)
