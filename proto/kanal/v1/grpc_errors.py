"""The gRPC boundary for errors, one for every kanal server (brokers, controllers, the authenticator).

A KanalError leaves as a gRPC status (kanal.v1.error.grpc_status) with trailing metadata:

    kanal-error-code         the ErrorCode number (errors.proto), as decimal text
    kanal-error-message      the message, cleaned to printable ASCII (metadata values must be), at most 1 KiB
    kanal-active-controller  with NOT_CONTROLLER / CONTROLLER_NOT_AVAILABLE: host:port of the active
                             controller, when known

Any other exception is a bug: logged with its traceback and answered as UNKNOWN_SERVER_ERROR (INTERNAL),
never swallowed silently. `error_code_of` and `active_controller_of` read the trailer on the calling side.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from kanal.v1.error import ErrorCode, KanalError, grpc_status

log = logging.getLogger(__name__)
Handler = TypeVar("Handler", bound=Callable[..., Any])

ERROR_CODE_KEY = "kanal-error-code"
ERROR_MESSAGE_KEY = "kanal-error-message"
ACTIVE_CONTROLLER_KEY = "kanal-active-controller"
_MESSAGE_CHARS_MAX = 1024


def error_trailer(code: int, message: str, *, active_controller: str = "") -> tuple[tuple[str, str], ...]:
    """The trailing metadata of an error reply."""
    clean = (
        message.encode("ascii", "backslashreplace").decode("ascii").replace("\n", " ")[:_MESSAGE_CHARS_MAX]
    )
    trailer = ((ERROR_CODE_KEY, str(int(code))), (ERROR_MESSAGE_KEY, clean))
    return (*trailer, (ACTIVE_CONTROLLER_KEY, active_controller)) if active_controller else trailer


def error_code_of(exc: grpc.RpcError) -> int | None:
    """The kanal error code a failed call's trailer carries; None when it has none (not a kanal error)."""
    for key, value in exc.trailing_metadata() or ():
        if key == ERROR_CODE_KEY:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def active_controller_of(exc: grpc.RpcError) -> str:
    """The active controller's host:port a refusal names; "" when it names none."""
    for key, value in exc.trailing_metadata() or ():
        if key == ACTIVE_CONTROLLER_KEY:
            return str(value)
    return ""


def abort_with(
    context: grpc.ServicerContext, code: int, message: str, *, active_controller: str = ""
) -> None:
    context.set_trailing_metadata(error_trailer(code, message, active_controller=active_controller))
    context.abort(grpc_status(code), message)


def error_boundary(handler: Handler) -> Handler:
    """Wrap a servicer method so every failure leaves as a well-formed gRPC status."""

    @functools.wraps(handler)
    def wrapped(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return handler(self, request, context)
        except KanalError as exc:
            abort_with(context, exc.code, exc.message)
        except Exception as exc:  # the one place that catches everything: to report it, not to carry on
            # (Handlers raise KanalError rather than calling context.abort(), whose plain Exception
            # would land here.)
            log.exception("bug in %s", handler.__name__)
            abort_with(context, ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
        return None

    return wrapped  # type: ignore[return-value]


async def abort_with_async(context: grpc.aio.ServicerContext, code: int, message: str) -> None:
    context.set_trailing_metadata(error_trailer(code, message))
    await context.abort(grpc_status(code), message)


def async_error_boundary(handler: Handler) -> Handler:
    """error_boundary for a coroutine handler on the grpc.aio server. aio's abort() raises an exception
    of its own (AbortError) to end the call: it passes through untouched."""

    @functools.wraps(handler)
    async def wrapped(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await handler(self, request, context)
        except KanalError as exc:
            await abort_with_async(context, exc.code, exc.message)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:  # the one place that catches everything: to report it, not to carry on
            log.exception("bug in %s", handler.__name__)
            await abort_with_async(context, ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
        return None

    return wrapped  # type: ignore[return-value]
