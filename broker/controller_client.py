"""ControllerClient: how a broker reaches the controller quorum over gRPC.

Calls go to the controller believed active. A NOT_CONTROLLER answer (with or without a hint of the
active controller's address) or an unreachable controller moves the call to the next candidate, until the
call's deadline; the answer that finally comes back is returned as it is. Brokers never import raft: this
gRPC client is the only path (DESIGN §2).

Thread-safe: gRPC channels are; the current-leader guess is a single attribute swapped atomically.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from kanal.v1 import controller_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

_RETRY_BACKOFF_S = 0.05


class ControllerClient:
    def __init__(self, endpoints: list[str], *, request_timeout_ms: int, message_bytes_max: int = 64 << 20) -> None:
        if not endpoints:
            raise ValueError("no controller endpoints")
        self._endpoints = list(endpoints)
        self._timeout_s = request_timeout_ms / 1000
        options = [("grpc.max_receive_message_length", message_bytes_max),
                   ("grpc.max_send_message_length", message_bytes_max)]
        self._channels = {ep: grpc.insecure_channel(ep, options=options) for ep in endpoints}
        self._stubs = {ep: controller_pb2_grpc.ControllerStub(ch) for ep, ch in self._channels.items()}
        self._active = endpoints[0]

    def __repr__(self) -> str:
        return f"<ControllerClient active={self._active} endpoints={self._endpoints}>"

    @property
    def active_endpoint(self) -> str:
        return self._active

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def call(self, method: str, request: Any, *, timeout_s: float | None = None,
             rpc_timeout_s: float | None = None) -> Any:
        """Call `method` on the active controller, following NOT_CONTROLLER and failures until the
        deadline (`timeout_s`, default the configured request timeout). CONTROLLER_NOT_AVAILABLE when no
        controller answered in time."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self._timeout_s)
        candidates = self._candidates()
        last_problem = "no attempt"
        while True:
            endpoint = candidates[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE,
                                 f"no active controller answered {method} in time ({last_problem})")
            per_call = min(remaining, rpc_timeout_s) if rpc_timeout_s else remaining
            rpc: Callable[..., Any] = getattr(self._stubs[endpoint], method)
            try:
                reply = rpc(request, timeout=per_call)
            except grpc.RpcError as exc:
                code = _kanal_code(exc)
                last_problem = f"{endpoint}: {exc.code().name} {exc.details()}"
                if code not in (None, ErrorCode.NOT_CONTROLLER, ErrorCode.CONTROLLER_NOT_AVAILABLE) and \
                        exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise KanalError(code, exc.details() or exc.code().name) from None
                candidates = self._rotate(candidates, hint=_hint_from_metadata(exc))
                time.sleep(min(_RETRY_BACKOFF_S, max(0.0, deadline - time.monotonic())))
                continue
            hint = getattr(reply, "active_controller", None)
            if getattr(reply, "error", ErrorCode.NONE) == ErrorCode.NOT_CONTROLLER:
                last_problem = f"{endpoint}: NOT_CONTROLLER"
                candidates = self._rotate(candidates, hint=hint.endpoint if hint is not None else "")
                time.sleep(min(_RETRY_BACKOFF_S, max(0.0, deadline - time.monotonic())))
                continue
            self._active = endpoint
            return reply

    def _candidates(self) -> list[str]:
        active = self._active
        return [active] + [ep for ep in self._endpoints if ep != active]

    def _rotate(self, candidates: list[str], *, hint: str) -> list[str]:
        if hint and hint in self._stubs and hint != candidates[0]:
            return [hint] + [ep for ep in candidates if ep != hint]
        return candidates[1:] + candidates[:1]


def _kanal_code(exc: grpc.RpcError) -> int | None:
    for key, value in exc.trailing_metadata() or ():
        if key == "kanal-error-code":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _hint_from_metadata(exc: grpc.RpcError) -> str:
    for key, value in exc.trailing_metadata() or ():
        if key == "kanal-active-controller":
            return str(value)
    return ""
