"""Waiting for a condition with a deadline, the one way tests synchronise (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.05) -> T:
    """Poll `condition` until it returns something truthy (returned); fail the test with `what` at the
    deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
