"""kanal's error trailer (kanal.v1.error_trailer): valid metadata whatever the message; callers read back
what servers wrote, and `call_error` turns any failed call into the KanalError it stands for."""

from __future__ import annotations

import grpc

from kanal.v1.error import ErrorCode
from kanal.v1.error_trailer import (
    ACTIVE_CONTROLLER_KEY,
    ERROR_CODE_KEY,
    ERROR_MESSAGE_KEY,
    active_controller_of,
    call_error,
    error_code_of,
    error_trailer,
)


class _Failed(grpc.RpcError):
    """What a failed call offers its caller (grpc.RpcError's code, details and trailing_metadata)."""

    def __init__(self, trailer, status=grpc.StatusCode.UNKNOWN, details="") -> None:
        self._trailer = trailer
        self._status = status
        self._details = details

    def trailing_metadata(self):
        return self._trailer

    def code(self):
        return self._status

    def details(self):
        return self._details


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


def test_a_trailer_code_wins_over_the_status_and_keeps_its_retriable_option():
    refused = _Failed(error_trailer(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "User:bob may not write orders"),
                      grpc.StatusCode.PERMISSION_DENIED, "ignored")
    error = call_error(refused, "Produce to broker 2")
    assert error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not error.retriable
    assert error.message == "Produce to broker 2: User:bob may not write orders"
    moved = call_error(_Failed(error_trailer(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not me"),
                               grpc.StatusCode.FAILED_PRECONDITION))
    assert moved.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and moved.retriable


def test_without_a_trailer_the_status_decides_and_only_transport_failures_are_retriable():
    cases = {
        grpc.StatusCode.UNAVAILABLE: (ErrorCode.BROKER_NOT_AVAILABLE, True),
        grpc.StatusCode.DEADLINE_EXCEEDED: (ErrorCode.REQUEST_TIMED_OUT, True),
        grpc.StatusCode.UNAUTHENTICATED: (ErrorCode.AUTHENTICATION_FAILED, False),
        grpc.StatusCode.PERMISSION_DENIED: (ErrorCode.AUTHORIZATION_FAILED, False),
        grpc.StatusCode.INVALID_ARGUMENT: (ErrorCode.INVALID_REQUEST, False),
        grpc.StatusCode.RESOURCE_EXHAUSTED: (ErrorCode.MESSAGE_TOO_LARGE, False),
        grpc.StatusCode.INTERNAL: (ErrorCode.UNKNOWN_SERVER_ERROR, False),
    }
    for status, (code, retriable) in cases.items():
        error = call_error(_Failed((), status, "connection refused"))
        assert (error.code, error.retriable) == (code, retriable), status
        assert status.name in error.message and "connection refused" in error.message


def test_a_code_this_build_does_not_know_is_not_acted_on():
    unknown = _Failed(((ERROR_CODE_KEY, "99999"),), grpc.StatusCode.UNAVAILABLE)
    assert error_code_of(unknown) is None
    assert call_error(unknown).code == ErrorCode.BROKER_NOT_AVAILABLE
