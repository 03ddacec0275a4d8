"""PendingProduces: completion by offset, expiry by deadline, each request completed exactly once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kanal.broker.pending_produce import PendingProduces
from kanal.v1.error import ErrorCode


def test_completes_in_offset_order_up_to_the_high_watermark():
    p = PendingProduces(100)
    p.add(1, 30, 1, deadline_ms=1_000)
    p.add(2, 10, 1, deadline_ms=1_000)
    p.add(3, 20, 1, deadline_ms=1_000)
    assert [(c.request_id, c.error) for c in p.complete_up_to(20, isr_size=2)] == [(2, 0), (3, 0)]
    assert len(p) == 1
    assert p.complete_up_to(29, 2) == []
    assert [c.request_id for c in p.complete_up_to(30, 2)] == [1]


def test_isr_below_min_insync_at_completion_is_not_enough_replicas_after_append():
    p = PendingProduces(100)
    p.add(1, 10, 2, deadline_ms=1_000)
    p.add(2, 10, 3, deadline_ms=1_000)
    done = {c.request_id: c.error for c in p.complete_up_to(10, isr_size=2)}
    assert done == {1: ErrorCode.NONE, 2: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}


def test_expiry_at_the_deadline_and_only_once():
    p = PendingProduces(100)
    p.add(1, 10, 1, deadline_ms=500)
    p.add(2, 10, 1, deadline_ms=700)
    assert p.next_deadline_ms == 500
    assert p.expire(499) == []
    assert [(c.request_id, c.error) for c in p.expire(500)] == [(1, ErrorCode.REQUEST_TIMED_OUT)]
    assert p.next_deadline_ms == 700
    assert [c.request_id for c in p.complete_up_to(10, 1)] == [2]
    assert p.expire(10_000) == []
    assert p.next_deadline_ms is None


def test_a_reused_request_id_is_not_completed_by_its_predecessor_heap_items():
    p = PendingProduces(100)
    p.add(7, 10, 1, deadline_ms=100)
    assert [c.request_id for c in p.expire(100)] == [7]  # leaves a stale item in the offset heap
    p.add(7, 50, 1, deadline_ms=1_000)
    assert p.complete_up_to(10, 1) == []  # the stale (offset 10) item must not complete the new one
    assert [c.required_offset for c in p.complete_up_to(50, 1)] == [50]


def test_fail_all_in_arrival_order_and_duplicates_and_limit():
    p = PendingProduces(2)
    p.add(5, 30, 1, 100)
    with pytest.raises(ValueError):
        p.add(5, 40, 1, 100)
    p.add(6, 10, 1, 100)
    assert p.is_full
    with pytest.raises(ValueError):
        p.add(8, 40, 1, 100)
    done = p.fail_all(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert [(c.request_id, c.error) for c in done] == [(5, ErrorCode.NOT_LEADER_OR_FOLLOWER),
                                                        (6, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert len(p) == 0 and p.next_deadline_ms is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "hw", "expire"]), st.integers(0, 50), st.integers(0, 30)),
                max_size=80))
def test_every_request_completes_exactly_once_and_correctly(ops):
    p = PendingProduces(1_000)
    waiting: dict[int, tuple[int, int]] = {}
    completed: list[int] = []
    hw, now, next_id, expired_at = 0, 0, 0, -1
    for op, a, b in ops:
        if op == "add":
            next_id += 1
            p.add(next_id, hw + a + 1, 1, now + b + 1)
            waiting[next_id] = (hw + a + 1, now + b + 1)
        elif op == "hw":
            hw += a
            for c in p.complete_up_to(hw, 1):
                assert waiting.pop(c.request_id)[0] <= hw
                completed.append(c.request_id)
        else:
            now += b
            expired_at = now
            for c in p.expire(now):
                assert waiting.pop(c.request_id)[1] <= now
                completed.append(c.request_id)
        assert len(p) == len(waiting)
        assert all(off > hw and deadline > expired_at for off, deadline in waiting.values())
    assert len(completed) == len(set(completed))
