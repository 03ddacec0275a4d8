"""The one error vocabulary: every ErrorCode maps to a gRPC status, and the retriable ones are marked."""

from __future__ import annotations

import grpc
import pytest

from kanal.v1.error import ErrorCode, KanalError, error_name, grpc_status, is_retriable


@pytest.mark.parametrize("value", list(ErrorCode.DESCRIPTOR.values), ids=lambda v: v.name)
def test_every_code_has_a_status(value):
    status = grpc_status(value.number)
    assert isinstance(status, grpc.StatusCode)
    assert (status == grpc.StatusCode.OK) == (value.number == ErrorCode.NONE)


def test_retriable_marks_follow_kafka():
    assert is_retriable(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert is_retriable(ErrorCode.NOT_ENOUGH_REPLICAS)
    assert not is_retriable(ErrorCode.MESSAGE_TOO_LARGE)
    assert not is_retriable(ErrorCode.TOPIC_ALREADY_EXISTS)


def test_kanal_error_carries_code_and_message():
    err = KanalError(ErrorCode.OFFSET_OUT_OF_RANGE, "offset 9 is past the end")
    assert err.code == ErrorCode.OFFSET_OUT_OF_RANGE and err.name == "OFFSET_OUT_OF_RANGE"
    assert str(err) == "OFFSET_OUT_OF_RANGE: offset 9 is past the end" and not err.retriable
    assert error_name(9999) == "9999"
    with pytest.raises(ValueError):
        KanalError(ErrorCode.NONE, "not an error")


def test_a_code_this_build_does_not_know_is_not_retriable():
    # A newer peer may answer with a code added after this build: a client must not retry it forever.
    unknown = max(ErrorCode.DESCRIPTOR.values_by_number) + 1000
    assert not is_retriable(unknown)
    assert error_name(unknown) == str(unknown)
