"""Topic decisions cost O(what they create), not O(cluster): counted, not timed.

A big image gets instrumented containers (every topic's partition list and the topic maps count how
often they are iterated or copied); a single-partition CreateTopics, decided and applied, must iterate
none of them. Timing would be flaky on a shared CI machine; a scan shows up here as a count > 0.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kanal.metadata import (
    MetadataImage,
    apply_batch,
    decide_create_partitions,
    decide_create_topics,
)
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

BIG_TOPICS = 2_000
SCANS: Counter[str] = Counter()


class _CountingList(list):
    """A topic's partition list that counts iterations (list(...) and for-loops both iterate)."""

    def __iter__(self):
        SCANS[f"partitions of {self.topic}"] += 1
        return super().__iter__()


class _CountingDict(dict):
    """A topic map that counts iterations; dict(...) of a subclass with its own __iter__ iterates too."""

    def __iter__(self):
        SCANS[self.what] += 1
        return super().__iter__()

    def keys(self):
        SCANS[self.what] += 1
        return super().keys()

    def values(self):
        SCANS[self.what] += 1
        return super().values()

    def items(self):
        SCANS[self.what] += 1
        return super().items()


def scans() -> dict[str, int]:
    """What was iterated, briefly: the topic maps by name, partition lists as one total."""
    lists = sum(n for k, n in SCANS.items() if k.startswith("partitions of "))
    summary = {k: n for k, n in SCANS.items() if n and not k.startswith("partitions of ")}
    return {**summary, "partition lists": lists} if lists else summary


def _counting_dict(what: str, items: dict) -> _CountingDict:
    d = _CountingDict(items)
    d.what = what
    return d


def _record(**body) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(time_ms=1, principal="test", request_id="big", **body)


def big_image(leader_of=lambda i: i % 2) -> MetadataImage:
    """Brokers 0, 1, 2 live; BIG_TOPICS one-partition topics "old.<i>", replication factor 1, on
    `leader_of(i)`."""
    image = MetadataImage()
    records = [
        _record(
            register_broker=metadata_pb2.RegisterBrokerRecord(
                broker_id=b, incarnation_id=f"i{b}", broker_epoch=b, endpoint="e:1"
            )
        )
        for b in range(3)
    ]
    for i in range(BIG_TOPICS):
        b = leader_of(i)
        records.append(_record(topic=metadata_pb2.TopicRecord(name=f"old.{i}", topic_id=f"id-{i}")))
        records.append(
            _record(
                partition=metadata_pb2.PartitionRecord(
                    topic_id=f"id-{i}", partition_id=0, replicas=[b], isr=[b], leader=b
                )
            )
        )
    assert apply_batch(image, metadata_pb2.MetadataBatch(controller_epoch=1, records=records), 0)
    return image


def instrument(image: MetadataImage) -> None:
    for topic in image.topics.values():
        topic.partitions = _CountingList(topic.partitions)
        topic.partitions.topic = topic.name
    image.topics = _counting_dict("topics", image.topics)
    image.topics_by_id = _counting_dict("topics_by_id", image.topics_by_id)
    SCANS.clear()


def commit(image: MetadataImage, records) -> None:
    assert apply_batch(
        image, metadata_pb2.MetadataBatch(controller_epoch=1, records=records), image.next_offset
    )


@pytest.fixture(scope="module")
def pristine() -> MetadataImage:
    return big_image()


@pytest.fixture
def image(pristine: MetadataImage) -> MetadataImage:
    image = pristine.copy()
    instrument(image)
    return image


def test_the_instruments_see_a_scan(image: MetadataImage) -> None:
    """The counters work: the things a scanning decision would do are counted."""
    list(image.iter_partitions())
    set(image.topics_by_id)
    assert SCANS["topics"] == 1 and SCANS["topics_by_id"] == 1 and SCANS["partitions of old.7"] == 1


def test_creating_a_topic_scans_no_partition_and_no_topic(image: MetadataImage) -> None:
    request = admin_pb2.CreateTopicsRequest(
        topics=[admin_pb2.CreatableTopic(name="new", partitions=1, replication_factor=3)]
    )
    decision = decide_create_topics(image, request, now_ms=1, principal="t", request_id="r1", rng=_rng())
    assert decision.reply.results[0].error == 0
    commit(image, decision.records)
    assert "new" in image.topics
    assert scans() == {}, f"decide + apply of one topic iterated {scans()}"


def test_a_name_collision_is_found_without_a_scan(image: MetadataImage) -> None:
    request = admin_pb2.CreateTopicsRequest(
        topics=[admin_pb2.CreatableTopic(name="old_7", partitions=1, replication_factor=1)]
    )
    decision = decide_create_topics(image, request, now_ms=1, principal="t", request_id="r1", rng=_rng())
    result = decision.reply.results[0]
    assert result.error == ErrorCode.INVALID_TOPIC and "collides with 'old.7'" in result.error_message
    assert scans() == {}, f"iterated {scans()}"


def test_growing_a_topic_reads_only_that_topic(image: MetadataImage) -> None:
    request = admin_pb2.CreatePartitionsRequest(
        targets=[admin_pb2.CreatePartitionsRequest.Target(name="old.7", count=4)]
    )
    decision = decide_create_partitions(image, request, now_ms=1, principal="t", request_id="r1", rng=_rng())
    assert decision.reply.results[0].error == 0
    commit(image, decision.records)
    assert len(image.topics["old.7"].partitions) == 4
    others = {k: n for k, n in SCANS.items() if n and k != "partitions of old.7"}
    assert others == {}, f"iterated {scans()}"


def test_the_index_still_steers_new_replicas_to_the_light_broker() -> None:
    """Brokers 0 and 1 lead every existing partition: a new one goes to broker 2, for any seed."""
    image = big_image()
    for seed in range(10):
        request = admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name="new", partitions=1, replication_factor=1)]
        )
        records = decide_create_topics(
            image, request, now_ms=1, principal="t", request_id="r", rng=_rng(seed)
        ).records
        assert [r.partition.replicas for r in records if r.HasField("partition")] == [[2]]


def _rng(seed: int = 1) -> random.Random:
    return random.Random(seed)
