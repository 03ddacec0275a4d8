"""The gRPC boundary for errors: KanalError -> gRPC status with `kanal-error-code` / `kanal-error-message`
trailing metadata; any other exception is a bug, logged with its traceback and answered as
UNKNOWN_SERVER_ERROR (INTERNAL), never swallowed silently."""

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


def abort_with(context: grpc.ServicerContext, code: int, message: str) -> None:
    context.set_trailing_metadata((("kanal-error-code", str(int(code))), ("kanal-error-message", message)))
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
    context.set_trailing_metadata((("kanal-error-code", str(int(code))), ("kanal-error-message", message)))
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
