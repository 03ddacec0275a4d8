"""The one Python exception for kanal's ErrorCode, and the code -> (retriable, gRPC status) table.

The table is read from the `retriable` and `grpc_status` options on each ErrorCode value in
errors.proto, so the .proto stays the single source for every language.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, cast

from kanal.v1 import errors_pb2

if TYPE_CHECKING:
    import grpc

ErrorCode = errors_pb2.ErrorCode


@functools.cache
def is_retriable(code: int) -> bool:
    """Whether the same request may succeed later unchanged (errors.proto `retriable` option). A code this
    build does not know (a newer peer's) is not retriable: nothing says the same request could succeed."""
    value = ErrorCode.DESCRIPTOR.values_by_number.get(code)
    return value is not None and bool(value.GetOptions().Extensions[errors_pb2.retriable])


@functools.cache
def grpc_status(code: int) -> grpc.StatusCode:
    """The gRPC status a whole-call failure with this code maps to (errors.proto `grpc_status` option)."""
    # Imported here, not at the top: only the error boundaries need a status, and importing grpc loads its
    # whole runtime (the aio server included) into every user of the contract's codes (batch framing, a
    # Spark reader).
    import grpc

    status_by_number = {status.value[0]: status for status in grpc.StatusCode}
    options = ErrorCode.DESCRIPTOR.values_by_number[code].GetOptions()
    return status_by_number[options.Extensions[errors_pb2.grpc_status]]


def error_name(code: int) -> str:
    """The enum name of a code, for messages; the number itself when the code is unknown."""
    value = ErrorCode.DESCRIPTOR.values_by_number.get(code)
    return value.name if value is not None else str(code)


class KanalError(Exception):
    """An expected failure with an ErrorCode: raised by cores, turned into a per-item error or a gRPC
    status at the boundary. Anything that is not a KanalError is a bug and is reported as one."""

    def __init__(self, code: int, message: str) -> None:
        if code == ErrorCode.NONE:
            raise ValueError("KanalError needs a code other than NONE")
        super().__init__(f"{error_name(code)}: {message}")
        # An ErrorCode number (the generated enum's values are plain ints at run time; the cast tells the
        # type checker so, where the code goes into a reply's `error` field).
        self.code = cast(ErrorCode, code)
        self.message = message

    @property
    def retriable(self) -> bool:
        return is_retriable(self.code)

    @property
    def name(self) -> str:
        return error_name(self.code)


class ConfigError(KanalError, ValueError):
    """The one config error: a setting is missing, unknown, of the wrong type or out of bounds, wherever it
    came from (a flag, a KANAL_* variable, a TOML file, a client's config object). INVALID_CONFIG, and its
    text is the message alone, one line naming the setting: servers print it and exit 2, clients raise it
    at construction. A ValueError too, as the per-module errors it replaced were."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_CONFIG, message)

    def __str__(self) -> str:
        return self.message
