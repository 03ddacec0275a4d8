"""MetadataCatchUp: the pure core of a broker's metadata follower. It builds the broker's MetadataImage from
FetchMetadata replies (and snapshots) and says when that image may be published to the parts that act on
it (the replica manager, the group coordinator, the Metadata handler).

The catch-up rule (KRaft's initial catch-up). A starting broker applies the metadata log to a private
image and publishes nothing until that image reaches the end offset the controller reported in the first
reply, the log's committed end when catch-up began (or later). Then it publishes once, and from then on
after every reply that applied something, as before. So nothing on a broker ever acts on an image of a
moment before the broker started: a restarting broker never leads a partition it led long ago with the ISR
of then, never creates a topic that was deleted since, and never replays the deletion of a topic that was
later created again under the same name (which would delete the current topic's files). A FetchMetadata
reply holds at most a few MiB, so without this rule a broker whose log is longer walks through old images
one reply at a time.

Any controller may answer a fetch, and a standby's log end may trail the active controller's. So the
target is also at least the end of this broker's own registration (`require_offset`: the broker epoch
is the offset of its RegisterBrokerRecord, written by the active controller after the broker started):
however far behind the controller that answers, the first image published is never older than the
broker's start.

Snapshots. A fetch below the log start is answered OFFSET_OUT_OF_RANGE; the follower then loads the
controller's image (DescribeMetadataImage: the committed image in snapshot form, its next_offset saying
which records it holds) and fetches on from the snapshot's offset. A snapshot counts as applied records:
private during catch-up, published after it (the replica manager reconciles from the image it had to the
snapshot's in one step, so a broker that fell behind past the log start also skips the images between). A
snapshot that is not past the offset we have is refused (it was taken by a controller further behind than
the one that answered the fetch): the follower retries.

Published images are never changed: during catch-up batches are applied to the private image in place;
after it each reply is applied to a copy, which then replaces the published one in one assignment.
No I/O, no clock, no threads: metadata_follower.py fetches and publishes.
"""

from __future__ import annotations

from kanal.metadata import MetadataImage, apply_batch, image_from_snapshot
from kanal.metadata.log_codec import iter_batches
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError


class MetadataCatchUp:
    def __init__(self) -> None:
        # Everything applied so far: private until `caught_up`, the published image after.
        self.image = MetadataImage()
        # The log's end as the first reply reported it: the offset catch-up must reach (None before it).
        self.target_offset: int | None = None
        self.caught_up = False
        # FetchMetadata replies and snapshots taken before the first publication.
        self.catch_up_replies = 0
        # The least target: the end of this broker's own registration (require_offset).
        self._required_offset = 0

    def __repr__(self) -> str:
        state = "caught up" if self.caught_up else f"catching up to {self.target_offset}"
        return f"<MetadataCatchUp offset={self.next_offset} {state} after {self.catch_up_replies} replies>"

    @property
    def next_offset(self) -> int:
        """The offset to fetch from: everything below it is applied (published or not)."""
        return self.image.next_offset

    def require_offset(self, offset: int) -> None:
        """Catch-up must reach at least `offset` (the end of this broker's registration), whatever end the
        controller that answers reports."""
        self._required_offset = max(self._required_offset, offset)
        if self.target_offset is not None:
            self.target_offset = max(self.target_offset, offset)

    def on_entries(self, entries: bytes, end_offset: int) -> MetadataImage | None:
        """Apply a reply's entries (batches we already have are skipped: a retried fetch may overlap);
        returns the image to publish now, or None."""
        self._begin(end_offset)
        batches = [stored for stored in iter_batches(entries) if stored.end_offset > self.image.next_offset]
        if batches:
            working = self.image.copy() if self.caught_up else self.image
            for stored in batches:
                apply_batch(working, stored.metadata_batch(), stored.base_offset)
            self.image = working
        return self._publication(applied=bool(batches))

    def on_snapshot(self, snapshot: metadata_pb2.MetadataSnapshot, end_offset: int) -> MetadataImage | None:
        """Take a snapshot in place of the log below its offset (after OFFSET_OUT_OF_RANGE); returns the
        image to publish now, or None. OFFSET_OUT_OF_RANGE when the snapshot is not past our offset."""
        self._begin(end_offset)
        if snapshot.next_offset <= self.image.next_offset:
            raise KanalError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"the snapshot at {snapshot.next_offset} is not past the metadata offset "
                             f"{self.image.next_offset} this broker has; asking again")
        self.image = image_from_snapshot(snapshot)
        return self._publication(applied=True)

    def _begin(self, end_offset: int) -> None:
        if self.target_offset is None:
            self.target_offset = max(end_offset, self._required_offset)
        if not self.caught_up:
            self.catch_up_replies += 1

    def _publication(self, *, applied: bool) -> MetadataImage | None:
        if self.caught_up:
            return self.image if applied else None
        if self.target_offset is None or self.image.next_offset < self.target_offset:
            return None
        self.caught_up = True
        return self.image
