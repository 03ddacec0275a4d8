"""ReplicationThrottle (broker/replication_throttle.py): the debt bucket, on a simulated clock."""

from __future__ import annotations

import pytest

from kanal.broker.replication_throttle import FETCH_BYTES_MIN, ReplicationThrottle


@pytest.mark.parametrize("rate, batch_bytes, round_trip_ms", [
    (100_000, 16_384, 2), (1_000_000, 65_536, 5), (50_000, 200_000, 1), (10_000_000, 1_000_000, 20),
])
def test_a_greedy_fetcher_copies_at_the_rate(rate, batch_bytes, round_trip_ms):
    """A follower with an endless backlog fetches whenever allowed; whole batches only (a fetch may
    overshoot its allowance). Over 10 s the rate holds within 5 %."""
    throttle = ReplicationThrottle(rate, now_ms=0)
    now, copied = 0, 0
    while now < 10_000:
        allowance = throttle.allowance_bytes(now)
        if not allowance:
            now += throttle.wait_ms(now)
            continue
        got = max(batch_bytes, allowance // batch_bytes * batch_bytes)  # at least one whole batch
        throttle.record(got, now)
        copied += got
        now += round_trip_ms
    assert abs(copied / (now / 1000) - rate) <= 0.05 * rate


def test_no_saved_up_burst_after_idling():
    throttle = ReplicationThrottle(1000, now_ms=0)
    assert throttle.allowance_bytes(60_000) == FETCH_BYTES_MIN
    throttle.record(5000, 60_000)  # one second of credit at most, so this puts it 4 s in debt
    assert throttle.allowance_bytes(60_000) == 0 and throttle.wait_ms(60_000) == 4001


def test_bad_rate():
    with pytest.raises(ValueError, match="rate >= 1"):
        ReplicationThrottle(0, now_ms=0)
