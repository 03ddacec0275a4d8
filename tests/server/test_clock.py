"""The servers' clock (proto/kanal/server/clock.py): wall-clock steps never move it, so a step (NTP, a VM
resume) cannot expire every group member's session or idle producer at once, or fence every broker."""

from __future__ import annotations

import time

import pytest

from kanal.broker import partition
from kanal.server.clock import PROCESS_CLOCK, Clock


def test_now_ms_follows_the_monotonic_clock_from_a_wall_clock_anchor():
    wall, mono = [1_000.0], [50.0]
    clock = Clock(wall_s=lambda: wall[0], monotonic_s=lambda: mono[0])
    assert clock.now_ms() == 1_000_000
    wall[0] -= 3600  # the wall clock steps back an hour
    mono[0] += 2.5
    assert clock.now_ms() == 1_002_500
    wall[0] += 7200  # and forward two
    assert clock.now_ms() == 1_002_500


# PROCESS_CLOCK is the coordinators' default clock (tests/broker/test_transaction_coordinator.py).
@pytest.mark.parametrize("now_ms", [PROCESS_CLOCK.now_ms, partition.wall_ms],
                         ids=["group sessions, transaction timeouts", "appends, retention, producer expiry"])
def test_the_brokers_time_does_not_jump_with_the_wall_clock(monkeypatch, now_ms):
    before = now_ms()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)  # a one-hour step forward
    after = now_ms()
    assert 0 <= after - before < 60_000
