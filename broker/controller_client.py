"""ControllerClient: how a broker reaches the controller quorum over gRPC.

Every call has two deadlines: the whole call's (`timeout_s`, default the configured request timeout) and
one attempt's, at one controller (`attempt_timeout_s`, default the smaller of the request timeout and
kanal.broker.config.CONTROLLER_ATTEMPT_TIMEOUT_MS_MAX). A controller that
neither answers nor closes its connection (SIGSTOPped, hung, cut off) therefore holds a call for one
attempt deadline at most; then the call moves on. Which controller comes next is ControllerChooser's rule
(controller_chooser.py): follow NOT_CONTROLLER / CONTROLLER_NOT_AVAILABLE answers and their hints of the
active controller, avoid a controller that was just silent for as long as it was given, and start the next
call where the last broker call succeeded. The answer that finally comes back is returned as it is;
CONTROLLER_NOT_AVAILABLE when none came by the call's deadline. Brokers never import raft: this gRPC client
is the only path (DESIGN §2).

Broker calls (RegisterBroker, BrokerHeartbeat, AlterPartition, AllocateProducerIds, admin writes) are
answered by the active controller only; reads (`any_controller=True`: FetchMetadata) by any controller,
and their answers say nothing about which one is active.

A write whose attempt ran out of time may still be applied by the controller that was silent, even after
the retry and later writes (a cut link that heals delivers the request late). Broker writes are safe to
repeat: a heartbeat, an AlterPartition carrying its partition epoch, a registration with the same
incarnation id. Admin writes are not (a create carried out after its topic's deletion brings it back), so
a request with a `request_id` field gets one id before its first attempt and keeps it in every attempt:
the controllers refuse an id the metadata log already holds (DUPLICATE_REQUEST, metadata/request_ids.py).

Thread-safe: gRPC channels are; the chooser is guarded by one lock held only around its (pure) calls.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc

from kanal.broker.config import CONTROLLER_ATTEMPT_TIMEOUT_MS_MAX
from kanal.broker.controller_chooser import ControllerChooser
from kanal.net.channel_options import channel_options
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.v1 import controller_pb2_grpc, schema_registry_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.error_trailer import active_controller_of, error_code_of

log = logging.getLogger(__name__)

# Pause between attempts that were answered at once (NOT_CONTROLLER while an election runs), so a call
# polls the controllers instead of spinning on them.
RETRY_BACKOFF_MS = 50
# Errors that mean "this controller is not (or not yet) the active one; nothing was applied".
_NOT_ACTIVE = (ErrorCode.NOT_CONTROLLER, ErrorCode.CONTROLLER_NOT_AVAILABLE)
# Transport failures: the controller did not answer (closed, refused, or silent past the deadline).
_SILENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

# protoc's generated stub classes are untyped; one name for it keeps that to one place.
_REGISTRY_STUB: Any = schema_registry_pb2_grpc.SchemaRegistryStub

class ControllerClient:
    def __init__(self, endpoints: list[str], *, request_timeout_ms: int, message_bytes_max: int = 64 << 20,
                 security: ClientSecurity | None = None) -> None:
        if not endpoints:
            raise ValueError("no controller endpoints")
        self._timeout_s = request_timeout_ms / 1000
        self.attempt_timeout_ms = min(request_timeout_ms, CONTROLLER_ATTEMPT_TIMEOUT_MS_MAX)
        options = channel_options(message_bytes_max)
        self._options, self._security = options, security
        self._channels = {ep: open_channel(ep, options, security) for ep in endpoints}
        self._stubs = {ep: controller_pb2_grpc.ControllerStub(ch) for ep, ch in self._channels.items()}
        # The schema registry's calls (schema_registry.proto), on the same channels.
        self._registry_stubs = {ep: _REGISTRY_STUB(ch) for ep, ch in self._channels.items()}
        self._lock = threading.Lock()
        self._chooser = ControllerChooser(endpoints)

    def __repr__(self) -> str:
        with self._lock:
            return f"<ControllerClient {self._chooser!r}>"

    @property
    def active_endpoint(self) -> str | None:
        """The controller believed active; None while unknown."""
        with self._lock:
            return self._chooser.active

    def close(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
        for channel in channels:
            channel.close()

    @property
    def endpoints(self) -> tuple[str, ...]:
        with self._lock:
            return self._chooser.endpoints

    def set_endpoints(self, endpoints: list[str]) -> None:
        """The controller quorum is now `endpoints` (a VoterSetRecord in the metadata log: a quorum change).
        Channels to controllers no longer listed stay open for calls in flight; they are just not chosen."""
        with self._lock:
            if tuple(endpoints) == self._chooser.endpoints:
                return
            for ep in endpoints:
                self._open(ep)
            self._chooser.set_endpoints(endpoints)
        log.info("controller quorum is now %s", endpoints)

    def _open(self, endpoint: str) -> None:
        # Under self._lock.
        if endpoint not in self._channels:
            self._channels[endpoint] = open_channel(endpoint, self._options, self._security)
            self._stubs[endpoint] = controller_pb2_grpc.ControllerStub(self._channels[endpoint])
            self._registry_stubs[endpoint] = _REGISTRY_STUB(self._channels[endpoint])

    def call(self, method: str, request: Any, *, timeout_s: float | None = None,
             attempt_timeout_s: float | None = None, any_controller: bool = False,
             metadata: tuple[tuple[str, str], ...] = (), registry: bool = False) -> Any:
        """Call `method` on the active controller (on any controller with `any_controller`), with gRPC call
        `metadata` (a forwarded admin call's principal), moving to
        another controller on NOT_CONTROLLER, CONTROLLER_NOT_AVAILABLE, a failed connection or an attempt
        past `attempt_timeout_s`, until `timeout_s` (`registry`: a SchemaRegistry call, not a Controller
        one). CONTROLLER_NOT_AVAILABLE when no controller answered in time; any other error a controller
        gives is raised (gRPC status) or returned (reply field)."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self._timeout_s)
        if _has_request_id(request) and not request.request_id:
            request.request_id = f"call-{uuid.uuid4().hex}"  # one id for every attempt (module docstring)
        attempt_s = attempt_timeout_s if attempt_timeout_s is not None else self.attempt_timeout_ms / 1000
        with self._lock:
            endpoint = self._chooser.first(_now_ms())
        last_problem = "no attempt"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE,
                                 f"no active controller answered {method} in time ({last_problem})")
            per_attempt = min(remaining, attempt_s)
            with self._lock:
                stub = (self._registry_stubs if registry else self._stubs)[endpoint]
            rpc: Callable[..., Any] = getattr(stub, method)
            started = time.monotonic()
            try:
                reply = rpc(request, timeout=per_attempt, metadata=metadata or None)
            except grpc.RpcError as exc:
                code = error_code_of(exc)
                last_problem = f"{endpoint}: {exc.code().name} {exc.details()}"
                if code in _NOT_ACTIVE:
                    with self._lock:
                        endpoint = self._follow_hint(endpoint, active_controller_of(exc))
                    _pause(deadline)
                    continue
                if code is None and exc.code() in _SILENT:
                    silent_ms = max(1, int((time.monotonic() - started) * 1000))
                    with self._lock:
                        following = self._chooser.on_silent(endpoint, silent_ms, _now_ms())
                    log.info("controller %s gave no answer to %s for %d ms (%s); trying %s", endpoint, method,
                             silent_ms, exc.code().name, following)
                    endpoint = following
                    _pause(deadline)
                    continue
                with self._lock:
                    self._chooser.on_answer(endpoint, is_active=False)
                raise KanalError(code if code is not None else ErrorCode.UNKNOWN_SERVER_ERROR,
                                 exc.details() or exc.code().name) from None
            error = getattr(reply, "error", ErrorCode.NONE)
            if error in _NOT_ACTIVE:
                hint = getattr(reply, "active_controller", None)
                last_problem = f"{endpoint}: {ErrorCode.Name(error)}"
                with self._lock:
                    endpoint = self._follow_hint(endpoint, hint.endpoint if hint is not None else "")
                _pause(deadline)
                continue
            with self._lock:
                self._chooser.on_answer(endpoint, is_active=not any_controller)
            return reply

    def _follow_hint(self, endpoint: str, hint: str) -> str:
        """Under self._lock: `endpoint` is not active and names `hint` as the active controller. A hint
        this client does not know yet is a voter added since (a quorum change the broker's image has not
        reached): it is learned, so the call follows it."""
        if hint and hint not in self._chooser.endpoints:
            self._open(hint)
            self._chooser.set_endpoints([*self._chooser.endpoints, hint])
            log.info("learned controller %s from a hint", hint)
        return self._chooser.on_not_controller(endpoint, hint, _now_ms())


def _has_request_id(request: Any) -> bool:
    descriptor = getattr(request, "DESCRIPTOR", None)
    return descriptor is not None and "request_id" in descriptor.fields_by_name


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _pause(deadline: float) -> None:
    time.sleep(min(RETRY_BACKOFF_MS / 1000, max(0.0, deadline - time.monotonic())))


