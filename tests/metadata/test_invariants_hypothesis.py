"""Random sequences of decisions, applied with `apply_batch`, keep the image's invariants.

Invariants checked after every step:
- every partition: ISR non-empty, distinct, a subset of the replicas; leader = -1 or leader in the ISR;
  a partition with a leader has only live brokers in its ISR; fenced brokers lead nothing;
- leader_epoch and partition_epoch never decrease; leader_epoch grows exactly when the leader changes;
  partition_epoch grows whenever the partition changes;
- broker epochs and the next producer id never decrease;
- deciding never changes the image; every record carries the decision's stamp;
- the snapshot round trip gives an equal image, and replaying every batch from an empty image gives the
  same image as the one built step by step;
- the image's indexes (replica / preferred-leader counts, collision keys) equal a recomputation;
- remote logs (tiered storage) belong to existing partitions, are contiguous from a start inside their
  first segment, and their start and end never go back; a recorded item's reply says where the remote
  log now is.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kanal.metadata import (
    NO_LEADER,
    MetadataImage,
    apply_batch,
    check_image,
    decide_allocate_producer_ids,
    decide_alter_configs,
    decide_alter_partition,
    decide_alter_remote_log,
    decide_broker_heartbeat,
    decide_create_partitions,
    decide_create_topics,
    decide_delete_topics,
    decide_preferred_leader_elections,
    decide_register_broker,
    decide_session_expirations,
    image_from_snapshot,
    image_to_snapshot,
)
from kanal.metadata.remote_log import REMOTE_STORAGE_ENABLE
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

BROKERS = st.integers(min_value=0, max_value=4)
TOPICS = st.sampled_from(["a", "b", "c"])
RACKS = st.sampled_from(["", "r1", "r2"])
RARELY = st.integers(0, 4).map(lambda n: n == 0)  # True one time in five


class MetadataMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.image = MetadataImage()
        self.batches: list[metadata_pb2.MetadataBatch] = []
        self.now_ms = 0
        self.requests = 0
        self.incarnations = 0
        self.seen_partitions: dict[tuple[str, int], tuple[int, int, int]] = {}
        self.seen_broker_epochs: dict[int, int] = {}
        self.seen_producer_id = 0
        # (topic id, partition) -> (start, end) of its remote log when last checked.
        self.seen_remote: dict[tuple[str, int], tuple[int, int]] = {}

    # -- plumbing ----------------------------------------------------------------------------------

    def ctx(self) -> dict:
        self.requests += 1
        self.now_ms += 100
        return {"now_ms": self.now_ms, "principal": "fuzz", "request_id": f"r{self.requests}"}

    def run(self, decide, *args, **kwargs):
        ctx = self.ctx()
        before = self.image.copy()
        decision = decide(self.image, *args, **kwargs, **ctx)
        assert self.image == before, "a decision changed the image"
        for record in decision.records:
            assert (record.time_ms, record.principal, record.request_id) == (
                ctx["now_ms"],
                ctx["principal"],
                ctx["request_id"],
            )
        if decision.records:
            batch = metadata_pb2.MetadataBatch(controller_epoch=1, records=decision.records)
            assert apply_batch(self.image, batch, self.image.next_offset)
            self.batches.append(batch)
        return decision.reply

    # -- rules -------------------------------------------------------------------------------------

    @initialize(racks=st.lists(RACKS, min_size=0, max_size=4), partitions=st.integers(1, 6))
    def start_cluster(self, racks: list[str], partitions: int) -> None:
        """Most runs start with a few live brokers and a topic, so that elections have work to do."""
        for broker_id, rack in enumerate(racks):
            self.register(broker_id, rack, new_incarnation=True)
        for broker_id in range(len(racks)):
            reg = self.image.brokers[broker_id]
            self.run(
                decide_broker_heartbeat,
                controller_pb2.BrokerHeartbeatRequest(
                    broker_id=broker_id,
                    broker_epoch=reg.broker_epoch,
                    metadata_offset=self.image.next_offset,
                ),
            )
        if racks:
            self.create_topic("a", partitions, min(len(racks), 3), unclean=False, seed=partitions,
                              tiered=True)

    @rule(broker_id=BROKERS, rack=RACKS, new_incarnation=st.booleans())
    def register(self, broker_id: int, rack: str, new_incarnation: bool) -> None:
        existing = self.image.brokers.get(broker_id)
        if existing is not None and not new_incarnation:
            incarnation, rack = existing.incarnation_id, existing.rack
        else:
            self.incarnations += 1
            incarnation = f"inc{self.incarnations}"
        reply = self.run(
            decide_register_broker,
            controller_pb2.RegisterBrokerRequest(
                broker_id=broker_id,
                incarnation_id=incarnation,
                endpoint=f"b{broker_id}:1",
                rack=rack,
            ),
        )
        assert reply.error == 0 and self.image.brokers[broker_id].broker_epoch == reply.broker_epoch

    @precondition(lambda self: self.image.brokers)
    @rule(data=st.data(), want_shutdown=st.booleans(), caught_up=st.booleans())
    def heartbeat(self, data, want_shutdown: bool, caught_up: bool) -> None:
        broker_id = data.draw(st.sampled_from(sorted(self.image.brokers)))
        reg = self.image.brokers[broker_id]
        offset = self.image.next_offset if caught_up else reg.broker_epoch
        reply = self.run(
            decide_broker_heartbeat,
            controller_pb2.BrokerHeartbeatRequest(
                broker_id=broker_id,
                broker_epoch=reg.broker_epoch,
                metadata_offset=offset,
                want_shutdown=want_shutdown,
            ),
        )
        assert reply.fenced == self.image.brokers[broker_id].fenced

    @precondition(lambda self: self.image.live_brokers())
    @rule(data=st.data())
    def expire_sessions(self, data) -> None:
        live = sorted(self.image.live_brokers())
        expired = data.draw(st.sets(st.sampled_from(live), min_size=1))
        beats = {b: (0 if b in expired else self.now_ms + 100) for b in live}
        fenced = self.run(decide_session_expirations, beats, session_timeout_ms=50)
        assert sorted(fenced) == sorted(expired)

    @rule(
        name=TOPICS,
        partitions=st.integers(min_value=0, max_value=4),
        rf=st.integers(min_value=0, max_value=3),
        unclean=st.booleans(),
        seed=st.integers(0, 1000),
        tiered=st.booleans(),
    )
    def create_topic(
        self, name: str, partitions: int, rf: int, unclean: bool, seed: int, tiered: bool
    ) -> None:
        configs = (
            [admin_pb2.ConfigEntry(key="unclean.leader.election.enable", value="true")] if unclean else []
        )
        if tiered:
            configs.append(admin_pb2.ConfigEntry(key=REMOTE_STORAGE_ENABLE, value="true"))
        reply = self.run(
            decide_create_topics,
            admin_pb2.CreateTopicsRequest(
                topics=[
                    admin_pb2.CreatableTopic(
                        name=name,
                        partitions=partitions,
                        replication_factor=rf,
                        configs=configs,
                    )
                ]
            ),
            rng=random.Random(seed),
        )
        ok = reply.results[0].error == 0
        assert ok == (
            name in self.image.topics and self.image.topics[name].topic_id == reply.results[0].topic_id
        )

    @rule(name=TOPICS)
    def delete_topic(self, name: str) -> None:
        existed = name in self.image.topics
        reply = self.run(decide_delete_topics, admin_pb2.DeleteTopicsRequest(names=[name]))
        assert (reply.results[0].error == 0) == existed and name not in self.image.topics

    @rule(name=TOPICS, count=st.integers(min_value=1, max_value=6), seed=st.integers(0, 1000))
    def create_partitions(self, name: str, count: int, seed: int) -> None:
        before = len(self.image.topics[name].partitions) if name in self.image.topics else None
        reply = self.run(
            decide_create_partitions,
            admin_pb2.CreatePartitionsRequest(
                targets=[admin_pb2.CreatePartitionsRequest.Target(name=name, count=count)]
            ),
            rng=random.Random(seed),
        )
        if reply.results[0].error == 0:
            assert before is not None and count > before
            assert len(self.image.topics[name].partitions) == count

    @precondition(lambda self: any(True for _ in self.image.iter_partitions()))
    @rule(data=st.data(), stale_leader_epoch=RARELY, stale_partition_epoch=RARELY, arbitrary=RARELY)
    def alter_partition(
        self, data, stale_leader_epoch: bool, stale_partition_epoch: bool, arbitrary: bool
    ) -> None:
        topic, p = data.draw(st.sampled_from(list(self.image.iter_partitions())))
        requester = p.leader if p.leader != NO_LEADER else p.replicas[0]
        if requester not in self.image.brokers:
            return
        if not arbitrary:
            # A proposal a real leader would make: itself plus some live replicas.
            live = [b for b in p.replicas if b != requester and self.image.is_live(b)]
            new_isr = (
                [requester] + data.draw(st.lists(st.sampled_from(live), unique=True)) if live else [requester]
            )
        else:
            new_isr = data.draw(st.lists(st.sampled_from(list(p.replicas) + [9]), unique=True, max_size=4))
        reply = self.run(
            decide_alter_partition,
            controller_pb2.AlterPartitionRequest(
                broker_id=requester,
                broker_epoch=self.image.brokers[requester].broker_epoch,
                items=[
                    controller_pb2.AlterPartitionRequest.Item(
                        topic_id=topic.topic_id,
                        partition_id=p.partition_id,
                        new_isr=new_isr,
                        new_isr_broker_epochs=[self.image.brokers[b].broker_epoch if b in self.image.brokers
                                               else -1 for b in new_isr],
                        leader_epoch=p.leader_epoch - stale_leader_epoch,
                        partition_epoch=p.partition_epoch - stale_partition_epoch,
                    )
                ],
            ),
        )
        now = self.image.partition(topic.topic_id, p.partition_id)
        if reply.items[0].error == 0:
            assert list(now.isr) == new_isr
        else:
            assert now == p

    @rule()
    def followers_catch_up(self) -> None:
        """Every leader adds its live, out-of-sync followers back to the ISR (one request per leader)."""
        by_leader: dict[int, list] = {}
        for topic, p in self.image.iter_partitions():
            missing = [b for b in p.replicas if b not in p.isr and self.image.is_live(b)]
            if p.leader != NO_LEADER and missing:
                by_leader.setdefault(p.leader, []).append(
                    controller_pb2.AlterPartitionRequest.Item(
                        topic_id=topic.topic_id,
                        partition_id=p.partition_id,
                        leader_epoch=p.leader_epoch,
                        partition_epoch=p.partition_epoch,
                        new_isr=[*p.isr, *missing],
                        new_isr_broker_epochs=[
                            self.image.brokers[b].broker_epoch for b in [*p.isr, *missing]
                        ],
                    )
                )
        for leader, items in sorted(by_leader.items()):
            reply = self.run(
                decide_alter_partition,
                controller_pb2.AlterPartitionRequest(
                    broker_id=leader,
                    broker_epoch=self.image.brokers[leader].broker_epoch,
                    items=items,
                ),
            )
            assert reply.error == 0 and all(item.error == 0 for item in reply.items)

    @rule(name=st.sampled_from(["a", "b", "c", ""]), enable=st.booleans())
    def toggle_unclean(self, name: str, enable: bool) -> None:
        kind = metadata_pb2.CONFIG_RESOURCE_BROKER if name == "" else metadata_pb2.CONFIG_RESOURCE_TOPIC
        op = admin_pb2.AlterConfigOp(
            key="unclean.leader.election.enable",
            value="true",
            op=admin_pb2.AlterConfigOp.SET if enable else admin_pb2.AlterConfigOp.DELETE,
        )
        self.run(
            decide_alter_configs,
            admin_pb2.AlterConfigsRequest(
                changes=[
                    admin_pb2.AlterConfigsRequest.Change(
                        resource=admin_pb2.ConfigResource(type=kind, name=name),
                        ops=[op],
                    )
                ]
            ),
        )

    @rule()
    def preferred_elections(self) -> None:
        self.run(decide_preferred_leader_elections)

    @precondition(lambda self: self.image.brokers)
    @rule(data=st.data())
    def allocate_producer_ids(self, data) -> None:
        broker_id = data.draw(st.sampled_from(sorted(self.image.brokers)))
        before = self.image.next_producer_id
        reply = self.run(
            decide_allocate_producer_ids,
            controller_pb2.AllocateProducerIdsRequest(
                broker_id=broker_id,
                broker_epoch=self.image.brokers[broker_id].broker_epoch,
            ),
        )
        assert reply.first_producer_id == before and self.image.next_producer_id == before + reply.block_size

    @precondition(lambda self: any(True for _ in self.image.iter_partitions()))
    @rule(data=st.data(), count=st.integers(1, 3), stale_leader_epoch=RARELY, not_leader=RARELY,
          misplaced=RARELY, resend=RARELY, new_epoch=RARELY)
    def upload_segments(self, data, count: int, stale_leader_epoch: bool, not_leader: bool,
                        misplaced: bool, resend: bool, new_epoch: bool) -> None:
        """A leader records segments it uploaded: mostly well placed, sometimes by a deposed leader, a
        follower, at a wrong offset, or a resend of what is recorded already."""
        topic, p = data.draw(st.sampled_from(list(self.image.iter_partitions())))
        requester = p.replicas[-1] if not_leader or p.leader == NO_LEADER else p.leader
        if requester not in self.image.brokers:
            return
        log = self.image.remote_log(topic.topic_id, p.partition_id)
        if resend and log is not None and log.segments:
            segments = [s.to_record(topic.topic_id, p.partition_id) for s in log.segments[-count:]]
        else:
            base = log.end_offset if log is not None else data.draw(st.integers(0, 50))
            base = max(0, base + data.draw(st.integers(-5, 5))) if misplaced else base
            last_epoch = log.segments[-1].last_epoch if log is not None and log.segments else 0
            epoch = min(p.leader_epoch, last_epoch + new_epoch)
            segments = []
            for _ in range(count):
                end = base + data.draw(st.integers(1, 40))
                segments.append(metadata_pb2.RemoteLogSegmentRecord(
                    topic_id=topic.topic_id, partition_id=p.partition_id, base_offset=base, end_offset=end,
                    size_bytes=end - base, meta_bytes=10, max_timestamp_ms=self.now_ms,
                    epochs=[metadata_pb2.RemoteLogEpochStart(epoch=epoch, start_offset=base)]))
                base = end
        leader_epoch = p.leader_epoch - stale_leader_epoch
        for s in segments:
            s.leader_epoch, s.broker_id = leader_epoch, requester
        item = controller_pb2.AlterRemoteLogRequest.Item(
            topic_id=topic.topic_id, partition_id=p.partition_id, leader_epoch=leader_epoch,
            segments_uploaded=controller_pb2.AlterRemoteLogRequest.SegmentsUploaded(segments=segments))
        self._alter_remote_log(requester, item)

    @precondition(lambda self: self.image.remote_logs)
    @rule(data=st.data())
    def move_remote_start(self, data) -> None:
        """Remote retention moves a remote log's start: inside it, at its ends, or just outside."""
        (topic_id, partition_id), log = data.draw(st.sampled_from(sorted(self.image.remote_logs.items())))
        p = self.image.partition(topic_id, partition_id)
        start = data.draw(st.one_of(st.just(log.end_offset),  # every segment goes
                                    st.integers(log.log_start_offset - 2, log.end_offset + 2)))
        if p.leader == NO_LEADER:
            return
        item = controller_pb2.AlterRemoteLogRequest.Item(
            topic_id=topic_id, partition_id=partition_id, leader_epoch=p.leader_epoch,
            new_log_start=controller_pb2.AlterRemoteLogRequest.NewLogStart(log_start_offset=start,
                                                                           reason="fuzz"))
        self._alter_remote_log(p.leader, item)

    def _alter_remote_log(self, requester: int, item: controller_pb2.AlterRemoteLogRequest.Item) -> None:
        partition = self.image.partition(item.topic_id, item.partition_id)
        reply = self.run(
            decide_alter_remote_log,
            controller_pb2.AlterRemoteLogRequest(
                broker_id=requester, broker_epoch=self.image.brokers[requester].broker_epoch, items=[item]),
        )
        answer = reply.items[0]
        if answer.error != ErrorCode.NONE:
            return
        assert partition.leader == requester and partition.leader_epoch == item.leader_epoch
        log = self.image.remote_log(item.topic_id, item.partition_id)
        where = (log.log_start_offset, log.end_offset) if log is not None else (0, 0)
        assert (answer.log_start_offset, answer.end_offset) == where

    # -- invariants --------------------------------------------------------------------------------

    @invariant()
    def remote_logs_are_contiguous_and_only_move_forward(self) -> None:
        current = {}
        for (topic_id, partition_id), log in self.image.remote_logs.items():
            assert self.image.partition(topic_id, partition_id) is not None, "a remote log outlived its topic"
            if log.segments:
                assert log.segments[0].base_offset <= log.log_start_offset < log.segments[0].end_offset, log
            for before, after in zip(log.segments, log.segments[1:]):
                assert before.end_offset == after.base_offset and before.last_epoch <= after.epochs[0].epoch
            current[(topic_id, partition_id)] = (log.log_start_offset, log.end_offset)
            old = self.seen_remote.get((topic_id, partition_id))
            if old is not None:
                assert log.log_start_offset >= old[0] and log.end_offset >= old[1], (old, log)
        self.seen_remote = current

    @invariant()
    def partitions_are_well_formed(self) -> None:
        for topic, p in self.image.iter_partitions():
            assert p.isr and len(set(p.isr)) == len(p.isr) and set(p.isr) <= set(p.replicas), p
            if p.leader != NO_LEADER:
                assert p.leader in p.isr, p
                assert all(self.image.is_live(b) for b in p.isr), (p, self.image.brokers)

    @invariant()
    def epochs_never_decrease(self) -> None:
        current = {}
        for topic, p in self.image.iter_partitions():
            key = (topic.topic_id, p.partition_id)
            current[key] = (p.leader, p.leader_epoch, p.partition_epoch, p.isr)
            old = self.seen_partitions.get(key)
            if old is None:
                continue
            old_leader, old_le, old_pe, old_isr = old
            assert p.leader_epoch >= old_le and p.partition_epoch >= old_pe
            if p.leader != old_leader:
                assert p.leader_epoch > old_le and p.partition_epoch > old_pe
            if p.isr != old_isr:
                assert p.partition_epoch > old_pe
        self.seen_partitions = current
        for broker_id, reg in self.image.brokers.items():
            assert reg.broker_epoch >= self.seen_broker_epochs.get(broker_id, -1)
            self.seen_broker_epochs[broker_id] = reg.broker_epoch
        assert self.image.next_producer_id >= self.seen_producer_id
        self.seen_producer_id = self.image.next_producer_id

    @invariant()
    def snapshot_round_trips(self) -> None:
        assert image_from_snapshot(image_to_snapshot(self.image)) == self.image

    @invariant()
    def indexes_equal_a_recomputation(self) -> None:
        check_image(self.image)

    def teardown(self) -> None:
        replayed = MetadataImage()
        for batch in self.batches:
            assert apply_batch(replayed, batch, replayed.next_offset)
        assert replayed == self.image
        assert replayed.indexes() == self.image.indexes()


MetadataMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestMetadataMachine = MetadataMachine.TestCase
