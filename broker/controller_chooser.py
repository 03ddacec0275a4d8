"""ControllerChooser: which controller a broker asks next (pure; time is an argument).

A broker must keep reaching the *active* controller through an election, a crash and a controller that
hangs without closing its sockets (SIGSTOP, a long GC pause, a cut-off machine). What it learns from each
attempt, and what it does next:

- an answer (success, or any error other than the two below) from `ep`: `ep` is talking. For a broker
  call (register, heartbeat, AlterPartition, ...) it is also the active controller from now on;
- NOT_CONTROLLER / CONTROLLER_NOT_AVAILABLE from `ep`, with or without a hint of the active controller:
  follow the hint unless it names `ep` itself or a controller that was just silent; otherwise the next
  controller in the list after `ep`;
- silence (the attempt's deadline passed, or the connection failed) from `ep`: `ep` is *avoided* for as
  long as it was given (`silent_ms`): it is only chosen again when every controller is avoided, or once
  that time is over. If it was the active controller, the active controller is unknown until an answer
  or a hint says who it is.

Why avoid a silent controller rather than forget it: right after the active controller hangs, the other
controllers still name it as active (until their Raft election timeout passes), so following their hints
blindly would send every retry back to the hung process and wait out a whole deadline each time. Avoiding
it for the time just spent waiting costs a controller that was only slow one retry of that length.

Reads (FetchMetadata) may go to any controller: the chooser's `first` picks the active one when it is
known and not avoided (its log is the freshest), else the first one that is not avoided.
"""

from __future__ import annotations

from collections.abc import Sequence


class ControllerChooser:
    def __init__(self, endpoints: Sequence[str]) -> None:
        if not endpoints:
            raise ValueError("no controller endpoints")
        if len(set(endpoints)) != len(endpoints):
            raise ValueError(f"controller endpoints must be distinct, got {list(endpoints)}")
        self._endpoints = tuple(endpoints)
        # The controller believed active; None when unknown (start-up, or it fell silent).
        self.active: str | None = self._endpoints[0]
        # Endpoint -> now_ms until which it is avoided (it was silent).
        self._avoid_until_ms: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<ControllerChooser active={self.active} avoided={sorted(self._avoid_until_ms)}>"

    @property
    def endpoints(self) -> tuple[str, ...]:
        return self._endpoints

    def set_endpoints(self, endpoints: Sequence[str]) -> None:
        """The controllers are now `endpoints` (a quorum change, learned from the metadata log or a hint):
        avoidances and the active one are kept for those still listed."""
        endpoints = tuple(dict.fromkeys(endpoints))
        if not endpoints:
            raise ValueError("no controller endpoints")
        self._endpoints = endpoints
        self._avoid_until_ms = {ep: t for ep, t in self._avoid_until_ms.items() if ep in endpoints}
        if self.active not in endpoints:
            self.active = None

    def avoided(self, endpoint: str, now_ms: int) -> bool:
        return self._avoid_until_ms.get(endpoint, now_ms) > now_ms

    def first(self, now_ms: int) -> str:
        """Where a call starts: the active controller unless avoided, else the first not avoided."""
        if self.active is not None and not self.avoided(self.active, now_ms):
            return self.active
        return self._next_after(self.active or self._endpoints[-1], now_ms)

    def on_answer(self, endpoint: str, *, is_active: bool) -> None:
        """`endpoint` answered; `is_active`: the call was one only the active controller answers."""
        self._avoid_until_ms.pop(endpoint, None)
        if is_active:
            self.active = endpoint

    def on_not_controller(self, endpoint: str, hint: str, now_ms: int) -> str:
        """`endpoint` is not the active controller (and talks); `hint` names the active one or is "".
        Returns the controller to try next."""
        self._avoid_until_ms.pop(endpoint, None)
        if hint in self._endpoints and hint != endpoint and not self.avoided(hint, now_ms):
            self.active = hint
            return hint
        if self.active == endpoint:
            self.active = None
        return self._next_after(endpoint, now_ms)

    def on_silent(self, endpoint: str, silent_ms: int, now_ms: int) -> str:
        """`endpoint` gave no answer within `silent_ms` (or refused the connection). Returns the
        controller to try next."""
        self._avoid_until_ms[endpoint] = now_ms + max(1, silent_ms)
        if self.active == endpoint:
            self.active = None
        return self._next_after(endpoint, now_ms)

    def _next_after(self, endpoint: str, now_ms: int) -> str:
        """The first controller after `endpoint` in list order (wrapping) that is not avoided; when all
        are, the one whose avoidance ends first."""
        i = self._endpoints.index(endpoint) if endpoint in self._endpoints else -1
        n = len(self._endpoints)
        ring = [self._endpoints[(i + k) % n] for k in range(1, n + 1)]
        for candidate in ring:
            if not self.avoided(candidate, now_ms):
                return candidate
        return min(ring, key=lambda ep: self._avoid_until_ms[ep])
