"""Waiter: what a parked long poll is woken through.

A Fetch that parks (fetch_call.py) registers a waiter on each partition it read; the partition
(partition.py) calls `set()` when its log end or high-water mark moves. On the broker's gRPC event loop
the waiter wakes the call's coroutine (service.py); a caller on its own thread uses a threading.Event.
`set()` may be called from any thread, `clear()` only from the call's own.
"""

from __future__ import annotations

from typing import Protocol


class Waiter(Protocol):
    def set(self) -> None: ...

    def clear(self) -> None: ...
