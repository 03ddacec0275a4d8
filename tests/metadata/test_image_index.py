"""The image's indexes (per-broker replica and preferred-leader counts, topic names by collision key)
always equal a recomputation from the topics: after random decisions, failed batches, snapshot reloads
and copies. Plus the cases a random walk reaches rarely: a log that holds a collision, a broken index.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kanal.metadata import (
    MetadataImage,
    MetadataInvariantError,
    apply,
    apply_batch,
    check_image,
    decide_broker_heartbeat,
    decide_create_partitions,
    decide_create_topics,
    decide_delete_topics,
    decide_register_broker,
    decide_unregister_broker,
    image_from_snapshot,
    image_to_snapshot,
)
from kanal.metadata.image import build_indexes
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode
from kanal.v1.topic_name import collision_key

# Names that collide in groups: {a.b, a_b}, {c.d.e, c_d.e, c.d_e, c_d_e}; "a-b" and "f" collide with none.
NAMES = st.sampled_from(["a.b", "a_b", "a-b", "c.d.e", "c_d.e", "c.d_e", "c_d_e", "f"])
RARELY = st.integers(0, 4).map(lambda n: n == 0)


def assert_indexes_fresh(image: MetadataImage) -> None:
    """The test helper the task asks for: indexes == a from-scratch recomputation (and check_image agrees)."""
    assert image.indexes() == build_indexes(image.topics.values())
    check_image(image)


class IndexMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.image = MetadataImage()
        self.requests = 0
        self.incarnations = 0

    def ctx(self) -> dict:
        self.requests += 1
        return {"now_ms": self.requests, "principal": "fuzz", "request_id": f"r{self.requests}"}

    def run(self, decide, *args, **kwargs):
        before = tuple(dict(m) for m in self.image.indexes())
        decision = decide(self.image, *args, **kwargs, **self.ctx())
        assert tuple(self.image.indexes()) == before, "a decision changed the indexes"
        if decision.records:
            batch = metadata_pb2.MetadataBatch(controller_epoch=1, records=decision.records)
            assert apply_batch(self.image, batch, self.image.next_offset)
        return decision

    # -- rules -------------------------------------------------------------------------------------

    @initialize(racks=st.lists(st.sampled_from(["", "r1", "r2"]), min_size=1, max_size=5))
    def start(self, racks: list[str]) -> None:
        for broker_id, rack in enumerate(racks):
            self.register(broker_id, rack)
        for broker_id in range(len(racks)):
            self.heartbeat(broker_id, want_shutdown=False)

    @rule(broker_id=st.integers(0, 5), rack=st.sampled_from(["", "r1", "r2"]))
    def register(self, broker_id: int, rack: str) -> None:
        self.incarnations += 1
        request = controller_pb2.RegisterBrokerRequest(
            broker_id=broker_id, incarnation_id=f"i{self.incarnations}", endpoint=f"b{broker_id}:1", rack=rack
        )
        assert self.run(decide_register_broker, request).reply.error == 0

    @precondition(lambda self: self.image.brokers)
    @rule(data=st.data(), want_shutdown=st.booleans())
    def heartbeat(self, broker_id: int | None = None, *, want_shutdown: bool, data=None) -> None:
        """Fences (leaders move, assignments do not) or unfences a broker."""
        if broker_id is None:
            broker_id = data.draw(st.sampled_from(sorted(self.image.brokers)))
        reg = self.image.brokers[broker_id]
        request = controller_pb2.BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=reg.broker_epoch,
            metadata_offset=self.image.next_offset,
            want_shutdown=want_shutdown,
        )
        self.run(decide_broker_heartbeat, request)

    @precondition(lambda self: self.image.brokers)
    @rule(data=st.data())
    def unregister(self, data) -> None:
        broker_id = data.draw(st.sampled_from(sorted(self.image.brokers)))
        self.run(decide_unregister_broker, broker_id)

    @rule(
        names=st.lists(NAMES, min_size=1, max_size=3),
        partitions=st.integers(0, 5),
        rf=st.integers(0, 4),
        validate_only=RARELY,
        seed=st.integers(0, 1000),
    )
    def create_topics(
        self, names: list[str], partitions: int, rf: int, validate_only: bool, seed: int
    ) -> None:
        existing = dict(self.image.topics)
        request = admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreatableTopic(name=n, partitions=partitions, replication_factor=rf) for n in names
            ],
            validate_only=validate_only,
        )
        reply = self.run(decide_create_topics, request, rng=random.Random(seed)).reply
        # The collision verdict, recomputed the slow way: against every existing topic and every name
        # this request created before.
        claimed: list[str] = []
        for i, (name, result) in enumerate(zip(names, reply.results, strict=True)):
            rivals = [
                n for n in [*existing, *claimed] if n != name and collision_key(n) == collision_key(name)
            ]
            if name in existing or name in names[:i]:
                assert result.error == ErrorCode.TOPIC_ALREADY_EXISTS
            elif rivals:
                assert result.error == ErrorCode.INVALID_TOPIC and "collides" in result.error_message
            if result.error == 0:
                claimed.append(name)

    @rule(name=NAMES, count=st.integers(1, 8), seed=st.integers(0, 1000))
    def create_partitions(self, name: str, count: int, seed: int) -> None:
        request = admin_pb2.CreatePartitionsRequest(
            targets=[admin_pb2.CreatePartitionsRequest.Target(name=name, count=count)]
        )
        self.run(decide_create_partitions, request, rng=random.Random(seed))

    @rule(names=st.lists(NAMES, min_size=1, max_size=3, unique=True))
    def delete_topics(self, names: list[str]) -> None:
        self.run(decide_delete_topics, admin_pb2.DeleteTopicsRequest(names=names))

    @rule(name=NAMES, partitions=st.integers(1, 4), seed=st.integers(0, 1000))
    def failed_batch_rolls_back(self, name: str, partitions: int, seed: int) -> None:
        """A create (or nothing), then removal of an existing topic, then a record that does not fit."""
        before = self.image.copy()
        request = admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name=name, partitions=partitions, replication_factor=1)]
        )
        records = list(
            decide_create_topics(self.image, request, rng=random.Random(seed), **self.ctx()).records
        )
        for topic in list(self.image.topics.values())[:1]:
            records.append(
                metadata_pb2.MetadataRecord(
                    remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=topic.topic_id)
                )
            )
        records.append(
            metadata_pb2.MetadataRecord(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id="no-such-id"))
        )
        batch = metadata_pb2.MetadataBatch(controller_epoch=1, records=records)
        with pytest.raises(MetadataInvariantError, match="unknown topic id"):
            apply_batch(self.image, batch, self.image.next_offset)
        assert self.image == before
        assert self.image.indexes() == before.indexes()

    @rule()
    def reload_from_snapshot(self) -> None:
        """Carry on from a restored image: its indexes must be maintained as well as the original's."""
        restored = image_from_snapshot(image_to_snapshot(self.image))
        assert restored == self.image and restored.indexes() == self.image.indexes()
        self.image = restored

    @rule(name=NAMES, seed=st.integers(0, 1000))
    def copies_are_independent(self, name: str, seed: int) -> None:
        """Changing a copy leaves the original's indexes alone (and the copy's stay right)."""
        original = self.image.indexes()
        frozen = tuple(dict(m) for m in original)
        copy = self.image.copy()
        assert copy.indexes() == original
        request = admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name=name, partitions=2, replication_factor=1)]
        )
        decision = decide_create_topics(copy, request, rng=random.Random(seed), **self.ctx())
        if decision.records:
            assert apply_batch(
                copy,
                metadata_pb2.MetadataBatch(controller_epoch=1, records=decision.records),
                copy.next_offset,
            )
        delete = decide_delete_topics(
            copy, admin_pb2.DeleteTopicsRequest(names=sorted(copy.topics)[:1]), **self.ctx()
        )
        if delete.records:
            assert apply_batch(
                copy, metadata_pb2.MetadataBatch(controller_epoch=1, records=delete.records), copy.next_offset
            )
        assert tuple(self.image.indexes()) == frozen
        assert_indexes_fresh(copy)

    # -- invariants --------------------------------------------------------------------------------

    @invariant()
    def indexes_equal_a_recomputation(self) -> None:
        assert_indexes_fresh(self.image)

    @invariant()
    def decisions_never_let_a_collision_in(self) -> None:
        assert all(len(names) == 1 for names in self.image.collision_names.values())
        assert sum(self.image.preferred_leader_counts.values()) == self.image.partition_count()


IndexMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestIndexMachine = IndexMachine.TestCase


# -- cases a random walk reaches rarely ----------------------------------------------------------------


def topic(name: str, topic_id: str) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name=name, topic_id=topic_id))


def partition(topic_id: str, pid: int, replicas: list[int]) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        partition=metadata_pb2.PartitionRecord(
            topic_id=topic_id, partition_id=pid, replicas=replicas, isr=replicas, leader=replicas[0]
        )
    )


def remove(topic_id: str) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=topic_id))


def test_counts_follow_assignments_not_current_leaders(cluster3) -> None:
    h = cluster3
    t = h.create_topic("t", 6, 3)
    assert h.image.preferred_leader_counts == {0: 2, 1: 2, 2: 2}
    assert h.image.replica_counts == {0: 6, 1: 6, 2: 6}
    h.fence(0)  # its leaderships move; its replicas stay assigned
    assert all(p.leader != 0 for p in t.partitions)
    assert h.image.preferred_leader_counts == {0: 2, 1: 2, 2: 2}
    assert h.image.replica_counts == {0: 6, 1: 6, 2: 6}
    assert_indexes_fresh(h.image)


def test_removing_a_topic_drops_its_counts_and_name(cluster3) -> None:
    h = cluster3
    h.create_topic("a.b", 3, 2)
    h.commit(decide_delete_topics(h.image, admin_pb2.DeleteTopicsRequest(names=["a.b"]), **h.ctx()))
    assert (h.image.replica_counts, h.image.preferred_leader_counts, h.image.collision_names) == ({}, {}, {})


def test_a_log_that_holds_a_collision_keeps_both_names(harness) -> None:
    """Decisions never write one, but apply accepts it: the index must track both names."""
    h = harness
    h.add_brokers([0])
    image = h.image
    apply_batch(
        image,
        metadata_pb2.MetadataBatch(
            controller_epoch=1,
            records=[
                topic("c_d_e", "t1"),
                partition("t1", 0, [0]),
                topic("c.d.e", "t2"),
                partition("t2", 0, [0]),
            ],
        ),
        image.next_offset,
    )
    assert image.collision_names == {"c_d_e": ("c.d.e", "c_d_e")}
    assert_indexes_fresh(image)
    request = admin_pb2.CreateTopicsRequest(
        topics=[admin_pb2.CreatableTopic(name="c.d_e", partitions=1, replication_factor=1)]
    )
    reply = decide_create_topics(image, request, rng=h.rng, **h.ctx()).reply
    assert reply.results[0].error == ErrorCode.INVALID_TOPIC and "'c.d.e'" in reply.results[0].error_message
    apply(image, remove("t2"))
    assert image.collision_names == {"c_d_e": ("c_d_e",)}
    reply = decide_create_topics(image, request, rng=h.rng, **h.ctx()).reply
    assert reply.results[0].error == ErrorCode.INVALID_TOPIC and "'c_d_e'" in reply.results[0].error_message
    apply(image, remove("t1"))
    assert image.collision_names == {}
    assert decide_create_topics(image, request, rng=h.rng, **h.ctx()).reply.results[0].error == 0
    assert_indexes_fresh(image)


def test_topic_created_and_removed_in_one_batch_leaves_no_trace(harness) -> None:
    h = harness
    h.add_brokers([0, 1])
    before = h.image.copy()
    records = [
        topic("x", "t1"),
        partition("t1", 0, [0, 1]),
        remove("t1"),
        topic("y", "t2"),
        partition("t2", 0, [1]),
    ]
    assert apply_batch(
        h.image, metadata_pb2.MetadataBatch(controller_epoch=1, records=records), h.image.next_offset
    )
    assert h.image.replica_counts == {**before.replica_counts, 1: 1}
    assert h.image.preferred_leader_counts == {1: 1}
    assert h.image.collision_names == {"y": ("y",)}
    assert_indexes_fresh(h.image)


def test_single_records_keep_the_indexes_too(harness) -> None:
    """apply (record by record, as image_from_snapshot does) folds counts in per record."""
    h = harness
    h.add_brokers([0, 1])
    apply(h.image, topic("x", "t1"))
    assert h.image.collision_names == {"x": ("x",)} and h.image.replica_counts == {}
    apply(h.image, partition("t1", 0, [1, 0]))
    assert h.image.replica_counts == {0: 1, 1: 1} and h.image.preferred_leader_counts == {1: 1}
    assert_indexes_fresh(h.image)


def test_failed_single_record_leaves_the_indexes(harness) -> None:
    h = harness
    h.add_brokers([0])
    h.create_topic("t", 2, 1)
    before = tuple(dict(m) for m in h.image.indexes())
    with pytest.raises(MetadataInvariantError, match="not a live broker"):
        apply(h.image, partition(h.image.topics["t"].topic_id, 2, [0, 7]))
    assert tuple(h.image.indexes()) == before


@pytest.mark.parametrize("field", ["replica_counts", "preferred_leader_counts", "collision_names"])
def test_check_image_catches_a_drifted_index(cluster3, field: str) -> None:
    h = cluster3
    h.create_topic("t", 3, 2)
    check_image(h.image)
    index = getattr(h.image, field)
    if field == "collision_names":
        index["zzz"] = ("zzz",)
    else:
        index[0] += 1
    with pytest.raises(MetadataInvariantError, match=f"index {field}"):
        check_image(h.image)


def test_snapshot_restores_the_indexes(cluster3) -> None:
    h = cluster3
    h.create_topic("a.b", 4, 2)
    h.create_topic("c", 5, 3)
    h.fence(1)
    restored = image_from_snapshot(image_to_snapshot(h.image))
    assert restored.indexes() == h.image.indexes() == build_indexes(h.image.topics.values())
