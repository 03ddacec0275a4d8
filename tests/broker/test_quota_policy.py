"""Client quotas, the pure part (broker/quota_sampler.py, broker/quota_policy.py): precedence as a table,
the sampled rate, the throttle formula and the tracker's throttles, all with time as an argument."""

from __future__ import annotations

import pytest

from kanal.broker.quota_policy import (
    QuotaKind,
    QuotaTracker,
    entity_label,
    resolve,
    table_from_image,
    throttle_ms,
)
from kanal.broker.quota_sampler import QuotaWindows, RateSampler
from kanal.v1.error import ErrorCode, KanalError

P = "producer_byte_rate"
F = "consumer_byte_rate"

# Every level of Kafka's order set, with a value naming it.
ALL_LEVELS = {
    ("alice", "app"): {P: 1}, ("alice", ""): {P: 2}, ("alice", None): {P: 3}, ("", "app"): {P: 4},
    ("", ""): {P: 5}, ("", None): {P: 6}, (None, "app"): {P: 7}, (None, ""): {P: 8},
}


def without(*keys):
    return {k: v for k, v in ALL_LEVELS.items() if k not in keys}


@pytest.mark.parametrize(
    ("table", "user", "client_id", "value", "sensor"),
    [
        # The most specific level wins; removing it exposes the next one.
        (ALL_LEVELS, "alice", "app", 1, ("alice", "app")),
        (without(("alice", "app")), "alice", "app", 2, ("alice", "app")),
        (without(("alice", "app"), ("alice", "")), "alice", "app", 3, ("alice", "")),
        (without(("alice", "app"), ("alice", ""), ("alice", None)), "alice", "app", 4, ("alice", "app")),
        (
            without(("alice", "app"), ("alice", ""), ("alice", None), ("", "app")),
            "alice",
            "app",
            5,
            ("alice", "app"),
        ),
        ({("", None): {P: 6}, (None, "app"): {P: 7}, (None, ""): {P: 8}}, "alice", "app", 6, ("alice", "")),
        ({(None, "app"): {P: 7}, (None, ""): {P: 8}}, "alice", "app", 7, ("", "app")),
        ({(None, ""): {P: 8}}, "alice", "app", 8, ("", "app")),
        ({}, "alice", "app", None, None),
        # Another user or client id skips the named levels and lands on the defaults.
        (ALL_LEVELS, "bob", "app", 4, ("bob", "app")),
        (ALL_LEVELS, "bob", "other", 5, ("bob", "other")),
        (ALL_LEVELS, "alice", "other", 2, ("alice", "other")),
        ({("alice", None): {P: 3}, (None, "app"): {P: 7}}, "bob", "app", 7, ("", "app")),
        ({("alice", None): {P: 3}, (None, "app"): {P: 7}}, "bob", "web", None, None),
        # A user quota beats a client-id quota (user levels come first).
        ({("alice", None): {P: 3}, (None, "app"): {P: 7}}, "alice", "app", 3, ("alice", "")),
        # Per key: a level without this key is skipped.
        ({("alice", "app"): {F: 9}, (None, "app"): {P: 7}}, "alice", "app", 7, ("", "app")),
    ],
)
def test_precedence_picks_the_most_specific_quota(table, user, client_id, value, sensor) -> None:
    found = resolve(table, QuotaKind.PRODUCE, user, client_id)
    if value is None:
        assert found is None
    else:
        assert (found.value, found.sensor) == (value, sensor)


def test_table_from_image_and_labels() -> None:
    table = table_from_image({("user", "alice"): {P: 1.0}, ("client-id", ""): {F: 2.0}},
                             {("alice", "app"): {P: 3.0}})
    assert table == {("alice", None): {P: 1.0}, (None, ""): {F: 2.0}, ("alice", "app"): {P: 3.0}}
    assert entity_label(("alice", None)) == "user=alice"
    assert entity_label((None, "")) == "client-id=<default>"
    assert entity_label(("", "app")) == "user=<default>,client-id=app"


def test_sampler_floors_the_window_and_forgets_old_samples() -> None:
    s = RateSampler(QuotaWindows(window_num=11, window_size_ms=1000))
    s.record(10_000, now_ms=0)
    # 10 KB in the first millisecond is 1 KB/s over the (num - 1) x size floor, not 10 MB/s.
    assert s.rate_per_s(1) == pytest.approx(1000)
    assert s.window_ms(1) == 10_000
    s.record(10_000, now_ms=12_000)  # the first sample (started at 0) has expired (11 x 1 s)
    assert s.rate_per_s(12_000) == pytest.approx(1000)
    assert s.rate_per_s(12_000 + 11_000) == 0


def test_sampler_window_grows_past_the_floor() -> None:
    s = RateSampler(QuotaWindows(window_num=3, window_size_ms=100))
    for t in range(0, 300, 10):
        s.record(1, now_ms=t)
    assert s.window_ms(290) == 290  # oldest sample started at 0
    assert s.rate_per_s(290) == pytest.approx(30 / 0.29)


def test_throttle_formula() -> None:
    assert throttle_ms(observed=100, quota=100, window_ms=10_000, throttle_ms_max=11_000) == 0
    assert throttle_ms(observed=150, quota=100, window_ms=10_000, throttle_ms_max=11_000) == 5000
    assert throttle_ms(observed=100.001, quota=100, window_ms=10_000, throttle_ms_max=11_000) == 1  # never 0
    assert throttle_ms(observed=1000, quota=100, window_ms=10_000, throttle_ms_max=11_000) == 11_000  # capped


def test_tracker_throttles_and_delays_then_lets_go() -> None:
    t = QuotaTracker(QuotaWindows(11, 100), {(None, "app"): {P: 1000.0}})
    # The floor (1 s) allows 1,000 bytes at once; 1,500 is 1,500 B/s: throttle (1500-1000)/1000 x 1000 ms.
    outcome = t.record(QuotaKind.PRODUCE, "ANONYMOUS", "app", 1500, now_ms=0)
    assert outcome.throttle_ms == 500 and outcome.entity == (None, "app")
    assert t.delay_ms((QuotaKind.PRODUCE,), "ANONYMOUS", "app", now_ms=100) == 400
    assert t.delay_ms((QuotaKind.FETCH,), "ANONYMOUS", "app", now_ms=100) == 0  # another kind
    assert t.delay_ms((QuotaKind.PRODUCE,), "ANONYMOUS", "web", now_ms=100) == 0  # another client id
    assert t.delay_ms((QuotaKind.PRODUCE,), "ANONYMOUS", "app", now_ms=500) == 0
    assert t.record(QuotaKind.PRODUCE, "ANONYMOUS", "web", 10**9, now_ms=0) is None  # no quota


def test_user_quota_is_shared_default_quota_is_not() -> None:
    t = QuotaTracker(QuotaWindows(11, 100), {("alice", None): {P: 1000.0}, (None, ""): {P: 1000.0}})
    t.record(QuotaKind.PRODUCE, "alice", "a", 800, now_ms=0)
    assert t.record(QuotaKind.PRODUCE, "alice", "b", 800, now_ms=0).throttle_ms > 0  # one pool for alice
    t.record(QuotaKind.PRODUCE, "bob", "a", 800, now_ms=0)
    assert t.record(QuotaKind.PRODUCE, "bob", "b", 800, now_ms=0).throttle_ms == 0  # one allowance each


def test_quota_change_applies_to_the_next_call() -> None:
    t = QuotaTracker(QuotaWindows(11, 100), {(None, "app"): {P: 1000.0}})
    assert t.record(QuotaKind.PRODUCE, "u", "app", 900, now_ms=0).throttle_ms == 0
    t.set_table({(None, "app"): {P: 100.0}})  # lowered: the rate measured so far is over it at once
    assert t.record(QuotaKind.PRODUCE, "u", "app", 1, now_ms=1).throttle_ms > 0
    t.set_table({(None, "app"): {P: 10_000.0}})  # raised: under it at once
    assert t.record(QuotaKind.PRODUCE, "u", "app", 1, now_ms=2).throttle_ms == 0
    t.set_table({})
    assert not t.active and t.record(QuotaKind.PRODUCE, "u", "app", 10**9, now_ms=3) is None


def test_request_percentage_counts_handler_milliseconds_as_percent_of_a_thread() -> None:
    t = QuotaTracker(QuotaWindows(11, 100), {(None, "app"): {"request_percentage": 10.0}})
    # 100 ms of handler time over the 1 s floor is 10 % of one thread: at the quota, not over.
    assert t.record(QuotaKind.REQUEST, "u", "app", 100, now_ms=0).throttle_ms == 0
    outcome = t.record(QuotaKind.REQUEST, "u", "app", 100, now_ms=0)
    assert outcome.rate == pytest.approx(20) and outcome.throttle_ms == 1000


def test_idle_sensors_are_forgotten() -> None:
    t = QuotaTracker(QuotaWindows(2, 100), {(None, ""): {P: 1.0}})
    for i in range(100):
        t.record(QuotaKind.PRODUCE, "u", f"c{i}", 10, now_ms=0)
    t.record(QuotaKind.PRODUCE, "u", "late", 1, now_ms=10_000)
    assert "sensors=1 " in repr(t)


@pytest.mark.parametrize(("num", "size_ms"), [(1, 1000), (101, 1000), (11, 9), (11, 3_600_001)])
def test_window_bounds(num, size_ms) -> None:
    with pytest.raises(KanalError) as err:
        QuotaWindows(num, size_ms)
    assert err.value.code == ErrorCode.INVALID_CONFIG


def test_limited_says_whether_any_quota_applies() -> None:
    t = QuotaTracker(
        QuotaWindows(11, 100), {(None, "app"): {"request_percentage": 10.0}, ("bob", None): {F: 1.0}}
    )
    assert t.limited("u", "app") and t.limited("bob", "web")
    assert not t.limited("u", "web")
