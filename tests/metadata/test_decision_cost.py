"""Topic decisions cost O(what they create), not O(cluster): counted, not timed.

A big image gets instrumented containers (every topic's partition list and the topic maps count how
often they are iterated or copied); a single-partition CreateTopics, decided and applied, must iterate
none of them. Timing would be flaky on a shared CI machine; a scan shows up here as a count > 0.

AlterRemoteLog likewise: with a remote log on every partition and one log of many segments, recording,
resending and moving a start iterate neither the remote-log map nor any segment list (bisection reads by
index; apply's new tuple is a pointer copy in C, O(segments of that partition), not a scan).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kanal.metadata import (
    MetadataImage,
    RemoteLog,
    apply_batch,
    decide_alter_remote_log,
    decide_create_partitions,
    decide_create_topics,
)
from kanal.metadata.remote_log import REMOTE_STORAGE_ENABLE
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

from .conftest import segment

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


class _CountingTuple(tuple):
    """A remote log's segments, counting iterations (star-unpacking and for-loops iterate; indexing,
    slicing, bisection and concatenation do not)."""

    def __iter__(self):
        SCANS["segments"] += 1
        return super().__iter__()


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


LONG_LOG_SEGMENTS = 1_000


def test_remote_log_decisions_scan_no_remote_log_and_no_segment_list() -> None:
    image = big_image()
    # Topic old.7 is tiered; every topic's partition has a remote log, old.7's holds 1,000 segments.
    records = [_record(config=metadata_pb2.ConfigRecord(
        resource_type=metadata_pb2.CONFIG_RESOURCE_TOPIC, resource_name="old.7", key=REMOTE_STORAGE_ENABLE,
        value="true"))]
    records += [_record(remote_log_segment=segment(f"id-{i}", 0, 0, 10, broker_id=i % 2))
                for i in range(BIG_TOPICS)]
    records += [_record(remote_log_segment=segment("id-7", 0, 10 * n, 10 * n + 10, broker_id=1))
                for n in range(1, LONG_LOG_SEGMENTS)]
    commit(image, records)
    instrument(image)
    key = next(k for k in image.remote_logs if k[0] == "id-7")
    image.remote_logs = _counting_dict("remote_logs", image.remote_logs)
    end = 10 * LONG_LOG_SEGMENTS

    def alter(*items) -> list[int]:
        # The long log's segments counting (apply makes a new, plain tuple: wrapped again for each call).
        log = image.remote_logs[key]
        image.remote_logs[key] = RemoteLog(_CountingTuple(log.segments), log.log_start_offset)
        SCANS.clear()
        request = controller_pb2.AlterRemoteLogRequest(
            broker_id=1, broker_epoch=image.brokers[1].broker_epoch, items=items)
        decision = decide_alter_remote_log(image, request, now_ms=1, principal="t", request_id="r")
        if decision.records:
            commit(image, decision.records)
        assert scans() == {}, f"iterated {scans()}"
        return [item.error for item in decision.reply.items]

    def upload(base: int, end: int) -> controller_pb2.AlterRemoteLogRequest.Item:
        return controller_pb2.AlterRemoteLogRequest.Item(
            topic_id="id-7", partition_id=0,
            segments_uploaded=controller_pb2.AlterRemoteLogRequest.SegmentsUploaded(
                segments=[segment("id-7", 0, base, end, broker_id=1)]))

    assert alter(upload(end, end + 10)) == [ErrorCode.NONE]  # a new segment
    assert alter(upload(5_000, 5_010)) == [ErrorCode.NONE]  # a resend of one in the middle: found
    assert alter(upload(5_000, 5_020)) == [ErrorCode.OFFSET_OUT_OF_RANGE]  # not the recorded one
    start = controller_pb2.AlterRemoteLogRequest.Item(
        topic_id="id-7", partition_id=0, new_log_start=controller_pb2.AlterRemoteLogRequest.NewLogStart(
            log_start_offset=5_005))
    assert alter(start) == [ErrorCode.NONE]
    assert image.remote_logs[key].log_start_offset == 5_005 and len(image.remote_logs[key].segments) == 501


def _rng(seed: int = 1) -> random.Random:
    return random.Random(seed)
