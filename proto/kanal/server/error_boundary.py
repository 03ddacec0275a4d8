"""The servers' error boundary: the one place an exception raised by a handler becomes a gRPC status with
kanal's error trailer (kanal.v1.error_trailer has the format), for brokers and controllers, sync
(grpc.server threads) and async (grpc.aio) handlers alike, and for the authenticator at the door.

- A KanalError leaves as its code's gRPC status with the trailer.
- `Forwarded` (a peer's error answer to a call this server passed on) leaves unchanged.
- Anything else is a bug: logged with its traceback and answered as UNKNOWN_SERVER_ERROR (INTERNAL),
  never swallowed silently.

A controller's refusals name the active controller (`kanal-active-controller`): such a server passes a
`hint(servicer, error)` that returns its host:port, or "".
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from kanal.v1.error import ErrorCode, KanalError, grpc_status
from kanal.v1.error_trailer import error_trailer

log = logging.getLogger(__name__)
Handler = TypeVar("Handler", bound=Callable[..., Any])
Hint = Callable[[Any, KanalError], str]


class Forwarded(Exception):
    """A peer answered a call this server forwarded with a gRPC error: pass it on unchanged."""

    def __init__(self, status: grpc.StatusCode, details: str, trailing: tuple[tuple[str, str], ...]) -> None:
        super().__init__(details)
        self.status = status
        self.details = details
        self.trailing = trailing


def _reply_for(exc: Exception, servicer: Any, handler_name: str, hint: Hint | None) -> tuple[int, str, str]:
    """(code, message, active controller) for an exception that ends a call."""
    if isinstance(exc, KanalError):
        return exc.code, exc.message, hint(servicer, exc) if hint is not None else ""
    log.exception("bug in %s", handler_name)
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"internal error: {type(exc).__name__}: {exc}", ""


def abort_with(
    context: grpc.ServicerContext, code: int, message: str, *, active_controller: str = ""
) -> None:
    """End a sync call with `code`'s status and the trailer (context.abort raises to end it)."""
    context.set_trailing_metadata(error_trailer(code, message, active_controller=active_controller))
    context.abort(grpc_status(code), message)


async def abort_with_async(
    context: grpc.aio.ServicerContext, code: int, message: str, *, active_controller: str = ""
) -> None:
    """abort_with for grpc.aio: its abort() raises an exception of its own (AbortError) to end the call."""
    context.set_trailing_metadata(error_trailer(code, message, active_controller=active_controller))
    await context.abort(grpc_status(code), message)


def _sync_boundary(handler: Handler, hint: Hint | None) -> Handler:
    @functools.wraps(handler)
    def wrapped(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return handler(self, request, context)
        except Forwarded as fwd:
            context.set_trailing_metadata(fwd.trailing)
            context.abort(fwd.status, fwd.details)
        except Exception as exc:  # noqa: BLE001 - the boundary: a KanalError answers, anything else is reported
            # (Handlers raise KanalError rather than calling context.abort(), whose plain Exception
            # would land here.)
            code, message, active = _reply_for(exc, self, handler.__name__, hint)
            abort_with(context, code, message, active_controller=active)
        return None

    return wrapped  # type: ignore[return-value]


def _async_boundary(handler: Handler, hint: Hint | None) -> Handler:
    @functools.wraps(handler)
    async def wrapped(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await handler(self, request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Forwarded as fwd:
            context.set_trailing_metadata(fwd.trailing)
            await context.abort(fwd.status, fwd.details)
        except Exception as exc:  # noqa: BLE001 - the boundary: a KanalError answers, anything else is reported
            code, message, active = _reply_for(exc, self, handler.__name__, hint)
            await abort_with_async(context, code, message, active_controller=active)
        return None

    return wrapped  # type: ignore[return-value]


def error_boundary(handler: Handler) -> Handler:
    """Wrap a sync servicer method so every failure leaves as a well-formed gRPC status."""
    return _sync_boundary(handler, None)


def async_error_boundary(handler: Handler) -> Handler:
    """error_boundary for a coroutine handler on the grpc.aio server."""
    return _async_boundary(handler, None)


def error_boundary_with_hint(hint: Hint) -> Callable[[Handler], Handler]:
    """error_boundary (sync) for a server whose refusals name the active controller: `hint(servicer, error)`
    is that controller's host:port, or ""."""

    def decorate(handler: Handler) -> Handler:
        return _sync_boundary(handler, hint)

    return decorate
