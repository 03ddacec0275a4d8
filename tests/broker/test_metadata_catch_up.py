"""MetadataCatchUp: a starting broker publishes nothing until it reaches the log end reported when catch-up
began, then once; afterwards every reply that applied something; a snapshot replaces the log below its
offset. Replies are real FetchMetadata entries (the metadata log codec) of a log written by the
controllers' own decisions."""

from __future__ import annotations

import random

import pytest

from kanal.broker.metadata_catch_up import MetadataCatchUp
from kanal.metadata import (
    MetadataImage,
    apply_batch,
    decide_broker_heartbeat,
    decide_create_topics,
    decide_delete_topics,
    decide_register_broker,
    image_to_snapshot,
)
from kanal.metadata.log_codec import encode_metadata_batch
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2
from kanal.v1.batch import frame_entry, with_broker_suffix
from kanal.v1.error import ErrorCode, KanalError


class ControllerLog:
    """The controllers' side: an image and the metadata log as framed entries, one per decision."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.entries: list[tuple[int, bytes]] = []  # (base offset, framed entry)
        self._rng = random.Random(3)
        self._requests = 0

    def commit(self, decide, request, **extra) -> None:
        self._requests += 1
        decision = decide(
            self.image, request, now_ms=1_000, principal="test", request_id=f"r{self._requests}", **extra
        )
        if not decision.records:
            raise AssertionError(f"{decide.__name__} wrote nothing: {decision.reply}")
        batch = metadata_pb2.MetadataBatch(controller_epoch=1, records=decision.records)
        base = self.image.next_offset
        apply_batch(self.image, batch, base)
        self.entries.append((base, frame_entry(with_broker_suffix(encode_metadata_batch(batch), base, 1))))

    def register(self, broker_id: int) -> None:
        self.commit(
            decide_register_broker,
            controller_pb2.RegisterBrokerRequest(
                broker_id=broker_id,
                incarnation_id=f"inc-{broker_id}-{self._requests}",
                endpoint=f"b{broker_id}:1",
            ),
        )
        self.commit(decide_broker_heartbeat, controller_pb2.BrokerHeartbeatRequest(  # unfenced: it may host
            broker_id=broker_id, broker_epoch=self.image.brokers[broker_id].broker_epoch,
            metadata_offset=self.image.next_offset))

    def create(self, name: str) -> None:
        self.commit(decide_create_topics, admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
            name=name, partitions=1, replication_factor=1)]), rng=self._rng)

    def delete(self, name: str) -> None:
        self.commit(decide_delete_topics, admin_pb2.DeleteTopicsRequest(names=[name]))

    def reply(self, offset: int, batches_max: int = 1) -> tuple[bytes, int]:
        """Entries from `offset` (at most `batches_max` whole batches), and the log end."""
        chosen = [entry for base, entry in self.entries if base >= offset][:batches_max]
        return b"".join(chosen), self.image.next_offset


@pytest.fixture
def reborn() -> ControllerLog:
    """A broker registered and unfenced; topic "t" created, deleted, and created again under the same name."""
    log = ControllerLog()
    log.register(0)
    log.create("t")
    log.delete("t")
    log.create("t")
    return log


def test_nothing_is_published_until_the_end_reported_at_the_start_then_once(reborn):
    catch_up = MetadataCatchUp()
    published = []
    replies = 0
    while not catch_up.caught_up:
        entries, end = reborn.reply(catch_up.next_offset)
        replies += 1
        image = catch_up.on_entries(entries, end)
        if image is not None:
            published.append(image)
    assert replies == 5, "one batch per reply: catch-up took one reply per decision"
    assert catch_up.catch_up_replies == 5
    [image] = published
    assert image.next_offset == reborn.image.next_offset
    assert image.topics["t"].topic_id == reborn.image.topics["t"].topic_id, "only the current topic is seen"
    assert catch_up.on_entries(b"", reborn.image.next_offset) is None, "an empty reply publishes nothing"


def test_the_target_is_the_end_reported_by_the_first_reply_not_a_moving_one(reborn):
    catch_up = MetadataCatchUp()
    entries, end = reborn.reply(0)
    assert catch_up.on_entries(entries, end) is None
    assert catch_up.target_offset == end
    reborn.create("later")  # the log grows while the broker catches up
    while not catch_up.caught_up:
        entries, _ = reborn.reply(catch_up.next_offset)
        catch_up.on_entries(entries, reborn.image.next_offset)
    assert catch_up.next_offset == end, "published at the first reported end; what came after follows"
    entries, new_end = reborn.reply(catch_up.next_offset)
    image = catch_up.on_entries(entries, new_end)
    assert image is not None and "later" in image.topics


def test_after_catch_up_each_reply_is_published_and_earlier_images_stay_as_they_were(reborn):
    catch_up = MetadataCatchUp()
    entries, end = reborn.reply(0, batches_max=100)
    first = catch_up.on_entries(entries, end)
    assert first is not None, "a reply reaching the end publishes at once"
    reborn.create("more")
    entries, end = reborn.reply(catch_up.next_offset)
    second = catch_up.on_entries(entries, end)
    assert second is not None and second is not first
    assert "more" in second.topics and "more" not in first.topics
    # A retried fetch overlapping what is applied changes nothing and publishes nothing.
    entries, end = reborn.reply(first.next_offset)
    assert catch_up.on_entries(entries, end) is None
    assert catch_up.image is second


def test_a_snapshot_replaces_the_log_below_its_offset(reborn):
    catch_up = MetadataCatchUp()
    snapshot = image_to_snapshot(reborn.image)
    image = catch_up.on_snapshot(snapshot, reborn.image.next_offset)
    assert image is not None, "a snapshot at the log end completes catch-up"
    assert image == reborn.image
    reborn.create("after-snapshot")
    entries, end = reborn.reply(catch_up.next_offset)
    followed = catch_up.on_entries(entries, end)
    assert followed is not None and "after-snapshot" in followed.topics


def test_a_snapshot_during_catch_up_stays_private_until_the_target(reborn):
    catch_up = MetadataCatchUp()
    snapshot = image_to_snapshot(reborn.image)  # taken at the log end
    reborn.create("x")
    reborn.create("y")
    assert catch_up.on_snapshot(snapshot, reborn.image.next_offset) is None
    assert catch_up.next_offset == snapshot.next_offset and not catch_up.caught_up
    entries, end = reborn.reply(catch_up.next_offset, batches_max=100)
    image = catch_up.on_entries(entries, end)
    assert image is not None and {"t", "x", "y"} <= set(image.topics)


def test_a_snapshot_that_is_not_past_our_offset_is_refused(reborn):
    catch_up = MetadataCatchUp()
    entries, end = reborn.reply(0, batches_max=100)
    catch_up.on_entries(entries, end)
    stale = image_to_snapshot(reborn.image)
    with pytest.raises(KanalError) as err:
        catch_up.on_snapshot(stale, end)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert catch_up.image.next_offset == end


def test_catch_up_reaches_at_least_the_brokers_own_registration_whatever_end_is_reported(reborn):
    """A standby that trails reports an older end; the broker's registration (its epoch is the record's
    offset) still bounds the first image from below."""
    reborn.register(7)
    registration_end = reborn.image.brokers[7].broker_epoch + 1
    catch_up = MetadataCatchUp()
    catch_up.require_offset(registration_end)
    trailing_end = 3
    while not catch_up.caught_up:
        entries, _ = reborn.reply(catch_up.next_offset)
        image = catch_up.on_entries(entries, trailing_end)
        assert image is None or image.next_offset >= registration_end
    assert 7 in catch_up.image.brokers
