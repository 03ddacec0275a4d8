"""MetadataSync: wait until this broker's image holds every metadata record committed before a moment.

A broker acts on the image its metadata follower published, which trails the controllers' log by a fetch.
Most of the time that is harmless, but schema validation (schema_validation.py) must not refuse a record
for naming a schema the producer registered just before sending it: the registry answered once the
registration was committed, and the producer's request may reach the leader before the follower's next
fetch does. So before such a refusal is final, the leader asks the active controller for its committed end
offset (a FetchMetadata that does not wait and asks for one byte) and waits for its own image to reach
it: everything committed before the request arrived is then applied. Redpanda does the same before it
refuses a record (it re-reads its schemas topic).

One round trip is shared: `caught_up_since(since_s, ...)` is satisfied by any ask that *started* at or
after `since_s` (its end offset covers every record committed before then). Concurrent callers wait for an
ask in flight that started late enough instead of sending their own, so a flood of refused batches costs the
controller one call per round trip, not one per batch.

Threading: called from pool threads (service.py runs it off the event loop), never under a partition lock.
The clock, the ask and the wait are injected (tests use fakes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc

from kanal.broker.controller_client import ControllerClient
from kanal.v1 import controller_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.error_trailer import error_code_of

# ask(timeout_s) -> the controllers' committed end offset, or KanalError.
EndOffsetAsk = Callable[[float], int]
# wait(offset, timeout_s) -> whether the published image reached `offset` in time.
ImageWait = Callable[[int, float], bool]


class MetadataSync:
    def __init__(self, ask_end_offset: EndOffsetAsk, wait_for_offset: ImageWait,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ask = ask_end_offset
        self._wait = wait_for_offset
        self._clock = clock
        self._cond = threading.Condition()
        # The latest completed ask: when it started and the end offset it got (None before the first).
        self._done: tuple[float, int] | None = None
        # When the ask in flight started (None: none in flight).
        self._asking_since: float | None = None

    def __repr__(self) -> str:
        return f"<MetadataSync done={self._done} asking_since={self._asking_since}>"

    def caught_up_since(self, since_s: float, timeout_s: float) -> bool:
        """Block until the image holds every record the controllers had committed at `since_s` (this
        clock's seconds), at most `timeout_s`; False when that could not be established in time (no
        controller answered, or the follower did not get there)."""
        deadline = self._clock() + timeout_s
        target = self._end_offset_since(since_s, deadline)
        if target is None:
            return False
        return self._wait(target, max(0.0, deadline - self._clock()))

    def _end_offset_since(self, since_s: float, deadline: float) -> int | None:
        """An end offset from an ask that started at or after `since_s`: one already done, the one in flight
        if it started late enough, else a new one from this thread."""
        with self._cond:
            while True:
                if self._done is not None and self._done[0] >= since_s:
                    return self._done[1]
                if self._asking_since is None:
                    started = self._asking_since = self._clock()
                    break
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return None
                # In flight: if it started late enough its answer is ours; if not, ask again after it.
                self._cond.wait(remaining)
        end: int | None = None
        try:
            end = self._ask(max(0.0, deadline - started))
            return end
        except KanalError:  # no controller answered in time: not established, the caller's refusal stands
            return None
        finally:
            with self._cond:
                self._asking_since = None
                if end is not None and (self._done is None or started > self._done[0]):
                    self._done = (started, end)
                self._cond.notify_all()


def controllers_end_offset(controllers: ControllerClient, image_offset: Callable[[], int]) -> EndOffsetAsk:
    """The ask of a running broker: FetchMetadata at the active controller from the image's own offset,
    answering at once (max_wait_ms 0) with at most a byte of entries; its end_offset is the committed end.
    OFFSET_OUT_OF_RANGE (the image is below the log start) still carries it."""
    def ask(timeout_s: float) -> int:
        request = controller_pb2.FetchMetadataRequest(offset=image_offset(), max_bytes=1, max_wait_ms=0)
        try:
            reply = controllers.call("FetchMetadata", request, timeout_s=timeout_s)
        except grpc.RpcError as exc:
            code = error_code_of(exc) or ErrorCode.CONTROLLER_NOT_AVAILABLE
            raise KanalError(code, f"FetchMetadata for a metadata sync: {exc.details()}") from None
        return int(reply.end_offset)
    return ask
