"""kanal's error trailer: how a whole-call failure travels in gRPC, and how a caller reads it back.

A server answers a call that fails as a whole with the gRPC status of its ErrorCode (errors.proto's
`grpc_status` option; kanal.v1.error.grpc_status) and this trailing metadata:

    kanal-error-code         the ErrorCode number (errors.proto), as decimal text
    kanal-error-message      the message, cleaned to printable ASCII (metadata values must be), at most 1 KiB
    kanal-active-controller  with NOT_CONTROLLER / CONTROLLER_NOT_AVAILABLE: host:port of the active
                             controller, when known

Writing it is the servers' business (kanal.server.error_boundary); this module holds the format, which
both sides share, and `call_error`, the one translation a caller makes of a failed call into a KanalError.
A failure with no trailer did not come from kanal's handlers: the connection, the deadline, a TLS or
authentication refusal at the door of a foreign proxy, or a message over gRPC's size limit. Its gRPC status
alone then picks the code (`_CODE_BY_STATUS`), and only the statuses that mean "nothing was done or the
outcome is unknown, try again" map to retriable codes.
"""

from __future__ import annotations

import grpc

from kanal.v1.error import ErrorCode, KanalError

ERROR_CODE_KEY = "kanal-error-code"
ERROR_MESSAGE_KEY = "kanal-error-message"
ACTIVE_CONTROLLER_KEY = "kanal-active-controller"
MESSAGE_CHARS_MAX = 1024

# A failed call without kanal's trailer: the gRPC status alone says what happened.
_CODE_BY_STATUS: dict[grpc.StatusCode, int] = {
    # The peer is unreachable or went away mid-call (a restart, a failover, a refused connection, a TLS
    # handshake that failed): nothing is known to be done, another broker or a later try may succeed.
    grpc.StatusCode.UNAVAILABLE: ErrorCode.BROKER_NOT_AVAILABLE,
    # The caller's deadline ran out: the outcome is unknown (a produce may be stored), as Kafka's
    # REQUEST_TIMED_OUT says.
    grpc.StatusCode.DEADLINE_EXCEEDED: ErrorCode.REQUEST_TIMED_OUT,
    grpc.StatusCode.CANCELLED: ErrorCode.REQUEST_TIMED_OUT,
    grpc.StatusCode.UNAUTHENTICATED: ErrorCode.AUTHENTICATION_FAILED,
    grpc.StatusCode.PERMISSION_DENIED: ErrorCode.AUTHORIZATION_FAILED,
    grpc.StatusCode.INVALID_ARGUMENT: ErrorCode.INVALID_REQUEST,
    # gRPC's own message size limit: the request (or its answer) is larger than a channel carries.
    grpc.StatusCode.RESOURCE_EXHAUSTED: ErrorCode.MESSAGE_TOO_LARGE,
    # A method this server does not have (an older server): the same call cannot succeed there.
    grpc.StatusCode.UNIMPLEMENTED: ErrorCode.INVALID_REQUEST,
}


def error_trailer(code: int, message: str, *, active_controller: str = "") -> tuple[tuple[str, str], ...]:
    """The trailing metadata of an error reply."""
    clean = message.encode("ascii", "backslashreplace").decode("ascii").replace("\n", " ")[:MESSAGE_CHARS_MAX]
    trailer = ((ERROR_CODE_KEY, str(int(code))), (ERROR_MESSAGE_KEY, clean))
    return (*trailer, (ACTIVE_CONTROLLER_KEY, active_controller)) if active_controller else trailer


def _trailer_value(exc: grpc.RpcError, key: str) -> str | None:
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for item_key, value in trailing or ():
        if item_key == key:
            return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
    return None


def error_code_of(exc: grpc.RpcError) -> int | None:
    """The kanal error code a failed call's trailer carries; None when it has none (not a kanal error)."""
    value = _trailer_value(exc, ERROR_CODE_KEY)
    if value is None:
        return None
    try:
        code = int(value)
    except ValueError:
        return None
    # A number this build does not know (a newer server) is not a code it can act on.
    return code if code in ErrorCode.DESCRIPTOR.values_by_number and code != ErrorCode.NONE else None


def active_controller_of(exc: grpc.RpcError) -> str:
    """The active controller's host:port a refusal names; "" when it names none."""
    return _trailer_value(exc, ACTIVE_CONTROLLER_KEY) or ""


def _status_of(exc: grpc.RpcError) -> grpc.StatusCode | None:
    code = getattr(exc, "code", None)
    return code() if callable(code) else None


def _details_of(exc: grpc.RpcError) -> str:
    details = getattr(exc, "details", None)
    return (details() if callable(details) else None) or ""


def call_error(exc: grpc.RpcError, what: str = "") -> KanalError:
    """The KanalError a failed call stands for: the trailer's code and message when the server sent them,
    else the code its gRPC status maps to (UNKNOWN_SERVER_ERROR for a status with no mapping). `what`
    names the call in the message ("Produce to broker 2")."""
    prefix = f"{what}: " if what else ""
    code = error_code_of(exc)
    if code is not None:
        message = _trailer_value(exc, ERROR_MESSAGE_KEY) or _details_of(exc)
        return KanalError(code, prefix + message)
    status = _status_of(exc)
    mapped = _CODE_BY_STATUS.get(status, ErrorCode.UNKNOWN_SERVER_ERROR) if status is not None else (
        ErrorCode.UNKNOWN_SERVER_ERROR
    )
    status_name = status.name if status is not None else "no status"
    return KanalError(mapped, f"{prefix}{status_name}: {_details_of(exc)}")
