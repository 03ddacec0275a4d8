"""MetadataFollower: keeps a broker's MetadataImage up to date by following the controllers' metadata log.

It fetches entries from its next offset (FetchMetadata, long poll, `fetch_bytes_max` per reply), applies
each batch with the same `apply_batch` the controllers use, and publishes the result. When to publish is
MetadataCatchUp's rule (metadata_catch_up.py): nothing until the image has reached the log end the
controller reported when catch-up began, then once, then after every reply that applied something. A
fetch answered OFFSET_OUT_OF_RANGE (our offset is below the log start) loads the controller's image
(DescribeMetadataImage) and fetching goes on from its offset.

A published image is never changed afterwards: the next one replaces `image` in one assignment, so readers
(gRPC handlers, the replica manager) take `follower.image` and get a consistent snapshot without locks.
Every publication calls `on_change(old, new)` on the follower's thread; the first one has the empty image
as `old`. `offset` is the published image's: what the heartbeat reports, so the controller unfences the
broker only once it acts on a caught-up image.

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
from kanal.broker.metadata_catch_up import MetadataCatchUp
from kanal.metadata import MetadataImage
from kanal.server.fatal import stop_process
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
        self._catch_up = MetadataCatchUp()
        self.image = MetadataImage()  # the published image (empty until catch-up is done)
        self.end_offset = 0  # committed end of the controllers' log, as last reported
        self._published = threading.Condition()

    def __repr__(self) -> str:
        return f"<MetadataFollower offset={self.offset} end={self.end_offset} {self._catch_up!r}>"

    @property
    def offset(self) -> int:
        """The metadata offset of the published image (exclusive): what this broker acts on."""
        return self.image.next_offset

    @property
    def caught_up(self) -> bool:
        """Whether the initial catch-up is done (the first image has been published)."""
        return self._catch_up.caught_up

    def poll_once(self) -> None:
        """Fetch what follows the offset applied so far, apply it, publish when the catch-up rule says so."""
        fetch_offset = self._catch_up.next_offset
        catching_up = not self._catch_up.caught_up
        request = controller_pb2.FetchMetadataRequest(
            offset=fetch_offset, max_bytes=self._fetch_bytes_max, max_wait_ms=self._fetch_wait_ms
        )
        attempt_s = (self._fetch_wait_ms + METADATA_FETCH_REPLY_MARGIN_MS) / 1000
        reply = self._client.call(
            "FetchMetadata",
            request,
            timeout_s=2 * attempt_s,
            attempt_timeout_s=attempt_s,
            any_controller=True,
        )
        if reply.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            snapshot = self._client.call(
                "DescribeMetadataImage", controller_pb2.DescribeMetadataImageRequest(), any_controller=True
            ).snapshot
            log.info("metadata offset %d is below the log start %d; loading the controller's image at %d",
                     fetch_offset, reply.start_offset, snapshot.next_offset)
            publish = self._catch_up.on_snapshot(snapshot, reply.end_offset)
        elif reply.error != ErrorCode.NONE:
            raise KanalError(reply.error, f"FetchMetadata at {fetch_offset}: {reply.error_message}")
        else:
            if catching_up and self._catch_up.target_offset is None:
                log.info(
                    "catching up with the metadata log: from %d to its end %d, publishing nothing before",
                    fetch_offset,
                    reply.end_offset,
                )
            publish = self._catch_up.on_entries(reply.entries, reply.end_offset)
        self.end_offset = reply.end_offset
        if publish is not None:
            if catching_up:
                log.info(
                    "caught up with the metadata log at offset %d after %d replies; publishing the image",
                    publish.next_offset,
                    self._catch_up.catch_up_replies,
                )
            self._publish(publish)

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

    def require_offset(self, offset: int) -> None:
        """Initial catch-up must reach at least `offset`: the end of this broker's own registration
        (metadata_catch_up.py), set before the follower starts."""
        self._catch_up.require_offset(offset)

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
