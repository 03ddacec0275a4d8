"""BrokerThrottles (clients/throttle.py): a throttled broker gets nothing until its throttle ends, other
brokers are not affected, and the throttle times are the client's quota metrics."""

from __future__ import annotations

from kanal.clients.throttle import BrokerThrottles


def test_a_throttle_holds_one_broker_until_it_ends() -> None:
    t = BrokerThrottles()
    t.on_reply("a:1", 0, now_s=10.0)  # not throttled: nothing changes
    assert t.next_end_s(10.0) is None and t.until_s("a:1") == 0.0
    t.on_reply("a:1", 250, now_s=10.0)
    assert abs(t.wait_s("a:1", 10.1) - 0.15) < 1e-9
    assert t.wait_s("b:1", 10.1) == 0.0
    assert abs(t.next_end_s(10.1) - 0.15) < 1e-9
    t.on_reply("a:1", 50, now_s=10.1)  # a shorter throttle never cuts a longer one short
    assert abs(t.until_s("a:1") - 10.25) < 1e-9
    assert t.wait_s("a:1", 10.25) == 0.0 and t.next_end_s(10.25) is None


def test_metrics_count_throttled_replies() -> None:
    t = BrokerThrottles()
    assert t.metrics("produce") == {"produce_throttle_count": 0, "produce_throttle_time_ms_total": 0,
                                    "produce_throttle_time_ms_avg": 0.0, "produce_throttle_time_ms_max": 0}
    for ms in (0, 100, 300):
        t.on_reply("a:1", ms, now_s=0.0)
    assert t.metrics("fetch") == {"fetch_throttle_count": 2, "fetch_throttle_time_ms_total": 400,
                                  "fetch_throttle_time_ms_avg": 200.0, "fetch_throttle_time_ms_max": 300}
