"""The one gRPC error boundary (kanal.v1.grpc_errors): its trailer is valid metadata whatever the message,
and callers read back what servers wrote."""

from __future__ import annotations

from kanal.v1.error import ErrorCode
from kanal.v1.grpc_errors import (
    ACTIVE_CONTROLLER_KEY,
    ERROR_CODE_KEY,
    ERROR_MESSAGE_KEY,
    active_controller_of,
    error_code_of,
    error_trailer,
)


class _Failed:
    """What a failed call offers its caller (grpc.RpcError's trailing_metadata)."""

    def __init__(self, trailer) -> None:
        self._trailer = trailer

    def trailing_metadata(self):
        return self._trailer


def test_the_trailer_is_printable_ascii_and_bounded():
    trailer = dict(error_trailer(ErrorCode.INVALID_TOPIC, "topic 'töpic\u2603'\nis invalid" + "x" * 5000))
    assert trailer[ERROR_CODE_KEY] == str(int(ErrorCode.INVALID_TOPIC))
    message = trailer[ERROR_MESSAGE_KEY]
    assert message.isascii() and message.isprintable() and len(message) == 1024
    assert message.startswith("topic 't\\xf6pic\\u2603' is invalid")
    assert ACTIVE_CONTROLLER_KEY not in trailer


def test_callers_read_back_the_code_and_the_active_controller():
    failed = _Failed(error_trailer(ErrorCode.NOT_CONTROLLER, "not me", active_controller="10.0.0.7:9091"))
    assert error_code_of(failed) == ErrorCode.NOT_CONTROLLER
    assert active_controller_of(failed) == "10.0.0.7:9091"
    assert error_code_of(_Failed(None)) is None and active_controller_of(_Failed(())) == ""
    assert error_code_of(_Failed(((ERROR_CODE_KEY, "seven"),))) is None
