"""Waiting for a condition with a deadline, the one way tests synchronise (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    tolerate: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll `condition` until it returns something truthy (returned); fail the test with `what` at the
    deadline. An exception of a `tolerate` type counts as "not yet" (a process that is starting or
    stopping), and the last one is named if the deadline passes."""
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except tolerate as exc:
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error is not None else ""
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{detail}")
        time.sleep(interval_s)
