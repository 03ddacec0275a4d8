"""CallPool: blocking calls on pooled threads; a call submitted from a callback runs next on the same
thread; a failed call reaches its callback and its future as the KanalError it stands for."""

from __future__ import annotations

import threading

import grpc
import pytest

from kanal.clients.call_pool import CallPool
from kanal.v1.error import ErrorCode, KanalError


class Refused(grpc.RpcError):
    """A call that failed without kanal's trailer: its gRPC status alone names the error."""

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "connection refused"


def echo(request, timeout):
    return (request, threading.get_ident())


def refuse(request, timeout):
    raise Refused(request)


def test_a_call_submitted_from_a_callback_runs_next_on_the_same_thread():
    pool = CallPool(4, "test")
    follow_on = {}

    def first_done(reply, error):
        follow_on["future"] = pool.submit(echo, "second", 1.0)

    try:
        first_request, first_thread = pool.submit(echo, "first", 1.0, first_done).result(5)
        second_request, second_thread = follow_on["future"].result(5)
    finally:
        pool.close()
    assert (first_request, second_request) == ("first", "second")
    assert second_thread == first_thread


def test_only_the_first_call_of_a_callback_stays_on_its_thread_and_every_one_completes():
    pool = CallPool(4, "test")
    futures = []

    def fan_out(reply, error):
        futures.extend(pool.submit(echo, n, 1.0) for n in range(3))

    try:
        _, thread = pool.submit(echo, "first", 1.0, fan_out).result(5)
        results = [f.result(5) for f in futures]
    finally:
        pool.close()
    assert [r for r, _ in results] == [0, 1, 2]
    assert results[0][1] == thread


def test_a_follow_on_failure_reaches_its_callback_and_its_future():
    pool = CallPool(2, "test")
    seen = []
    follow_on = {}

    def first_done(reply, error):
        follow_on["future"] = pool.submit(refuse, "no", 1.0, lambda reply, error: seen.append((reply, error)),
                                          what="Produce to broker 2")

    try:
        pool.submit(echo, "first", 1.0, first_done).result(5)
        with pytest.raises(KanalError) as err:
            follow_on["future"].result(5)
    finally:
        pool.close()
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and err.value.retriable
    assert err.value.message == "Produce to broker 2: UNAVAILABLE: connection refused"
    assert len(seen) == 1 and seen[0][0] is None and seen[0][1] is err.value


def test_chains_of_follow_ons_run_to_the_end_before_close_returns():
    pool = CallPool(2, "test")
    done = []

    def again(reply, error):
        request, _ = reply
        done.append(request)
        if request < 50:
            pool.submit(echo, request + 1, 1.0, again)

    pool.submit(echo, 0, 1.0, again)
    pool.close(wait=True)
    assert done == list(range(51))
