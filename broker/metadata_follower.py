"""MetadataFollower: keeps a broker's MetadataImage up to date by following the controllers' metadata log.

It fetches entries from its next offset (FetchMetadata, long poll), applies each batch with the same
`apply_batch` the controllers use, and publishes the result. Batches are applied to a copy which then
replaces `image` in one assignment: readers (gRPC handlers, the replica manager) take `follower.image`
and get a consistent snapshot without locks. Every publication calls `on_change(old, new)` on the
follower's thread.

Any controller may answer (the active one is preferred: its log is the freshest). A long poll that has no
reply METADATA_FETCH_REPLY_MARGIN_MS after its wait ended is given up at that controller and the fetch
moves to another (controller_client.py), so a hung controller cannot hold the follower.

While no controller answers, the broker keeps serving from the image it has (DESIGN: brokers keep
working through a controller election); the loop backs off and retries.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kanal.broker.config import METADATA_FETCH_REPLY_MARGIN_MS
from kanal.broker.controller_client import ControllerClient
from kanal.broker.fatal import stop_process
from kanal.metadata import MetadataImage, apply_batch
from kanal.metadata.log_codec import iter_batches
from kanal.v1 import controller_pb2
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

ImageListener = Callable[[MetadataImage, MetadataImage], None]
_RETRY_WAIT_S = 0.2


class MetadataFollower:
    def __init__(self, client: ControllerClient, *, fetch_bytes_max: int, fetch_wait_ms: int,
                 on_change: ImageListener | None = None) -> None:
        self._client = client
        self._fetch_bytes_max = fetch_bytes_max
        self._fetch_wait_ms = fetch_wait_ms
        self._on_change = on_change
        self.image = MetadataImage()
        self.end_offset = 0  # committed end of the controllers' log, as last reported
        self._published = threading.Condition()

    def __repr__(self) -> str:
        return f"<MetadataFollower offset={self.offset} end={self.end_offset}>"

    @property
    def offset(self) -> int:
        """The metadata offset this broker has applied (exclusive)."""
        return self.image.next_offset

    def poll_once(self) -> int:
        """Fetch and apply what follows our offset; returns the number of records applied."""
        request = controller_pb2.FetchMetadataRequest(
            offset=self.offset, max_bytes=self._fetch_bytes_max, max_wait_ms=self._fetch_wait_ms
        )
        attempt_s = (self._fetch_wait_ms + METADATA_FETCH_REPLY_MARGIN_MS) / 1000
        reply = self._client.call("FetchMetadata", request, timeout_s=2 * attempt_s, attempt_timeout_s=attempt_s,
                                  any_controller=True)
        if reply.error != ErrorCode.NONE:
            raise KanalError(reply.error, f"FetchMetadata at {self.offset}: {reply.error_message}")
        self.end_offset = reply.end_offset
        if not reply.entries:
            return 0
        new = self.image.copy()
        applied = 0
        for stored in iter_batches(reply.entries):
            if stored.end_offset <= new.next_offset:
                continue  # already applied (a retried fetch overlapping what we have)
            apply_batch(new, stored.metadata_batch(), stored.base_offset)
            applied += len(stored.values)
        self._publish(new)
        return applied

    def _publish(self, new: MetadataImage) -> None:
        old = self.image
        self.image = new
        if self._on_change is not None:
            self._on_change(old, new)
        with self._published:
            self._published.notify_all()

    def wait_for_offset(self, offset: int, timeout_s: float) -> bool:
        """Block until the image has applied everything below `offset` (or the timeout)."""
        with self._published:
            return self._published.wait_for(lambda: self.offset >= offset, timeout=timeout_s)

    def run(self, stop: threading.Event) -> None:
        """The follower thread: poll until `stop` is set."""
        while not stop.is_set():
            try:
                self.poll_once()
            except KanalError as exc:
                log.warning("metadata fetch failed, keeping the image at offset %d: %s", self.offset, exc)
                stop.wait(_RETRY_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - a bug: a broker that stops following is a zombie
                stop_process(f"the metadata follower failed at offset {self.offset}", exc)
