"""A small harness for metadata tests: an image, a clock, a seeded rng, and `commit` (decide -> apply)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import pytest

from kanal.metadata import (
    Decision,
    MetadataImage,
    TopicImage,
    apply_batch,
    decide_alter_remote_log,
    decide_broker_heartbeat,
    decide_create_topics,
    decide_register_broker,
    decide_session_expirations,
)
from kanal.metadata.recovery_election import LogEndReports, merge_reports
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2

R = TypeVar("R")


class Harness:
    """Decides against `image` and applies the records the way the controller shell would."""

    def __init__(self, seed: int = 7) -> None:
        self.image = MetadataImage()
        self.controller_epoch = 1
        self.rng = random.Random(seed)
        self.now_ms = 1_000
        self._requests = 0
        self.last_heartbeat_ms: dict[int, int] = {}
        # What the active controller keeps of the brokers' log-end reports (raft/broker_sessions.py).
        self.log_end_reports: LogEndReports = {}

    def ctx(self, principal: str = "test-admin") -> dict[str, Any]:
        self._requests += 1
        return {"now_ms": self.now_ms, "principal": principal, "request_id": f"req-{self._requests}"}

    def commit(self, decision: Decision[R]) -> R:
        if decision.records:
            batch = metadata_pb2.MetadataBatch(
                controller_epoch=self.controller_epoch, records=decision.records
            )
            applied = apply_batch(self.image, batch, self.image.next_offset)
            assert applied
        return decision.reply

    # -- brokers -----------------------------------------------------------------------------------

    def register(
        self, broker_id: int, rack: str = "", incarnation: str | None = None, directory: str = "",
        unclean_shutdown: bool = False,
    ) -> int:
        reply = self.commit(
            decide_register_broker(
                self.image,
                controller_pb2.RegisterBrokerRequest(
                    broker_id=broker_id,
                    incarnation_id=incarnation or f"inc-{broker_id}-{self._requests}",
                    endpoint=f"broker{broker_id}:9092",
                    rack=rack,
                    directory_id=directory or f"dir-{broker_id}",
                    unclean_shutdown=unclean_shutdown,
                ),
                **self.ctx(f"broker-{broker_id}"),
            )
        )
        assert reply.error == 0, reply.error_message
        self.last_heartbeat_ms[broker_id] = self.now_ms
        return reply.broker_epoch

    def heartbeat(self, broker_id: int, *, want_shutdown: bool = False, metadata_offset: int | None = None,
                  log_ends: Sequence[controller_pb2.ReplicaLogEnd] = ()):
        reg = self.image.brokers[broker_id]
        self.last_heartbeat_ms[broker_id] = self.now_ms
        decision = decide_broker_heartbeat(
            self.image,
            controller_pb2.BrokerHeartbeatRequest(
                broker_id=broker_id,
                broker_epoch=reg.broker_epoch,
                metadata_offset=self.image.next_offset if metadata_offset is None else metadata_offset,
                want_shutdown=want_shutdown,
                recovery_log_ends=log_ends,
            ),
            log_end_reports=self.log_end_reports,
            **self.ctx(f"broker-{broker_id}"),
        )
        if decision.reply.error == 0:
            self.log_end_reports = merge_reports(self.log_end_reports, broker_id, reg.broker_epoch, log_ends)
        return self.commit(decision)

    def add_brokers(self, ids: Iterable[int], racks: Sequence[str] | None = None) -> None:
        ids = list(ids)
        for i, broker_id in enumerate(ids):
            self.register(broker_id, rack=racks[i] if racks else "")
        for broker_id in ids:
            reply = self.heartbeat(broker_id)
            assert not reply.fenced

    def fence(self, *broker_ids: int) -> list[metadata_pb2.MetadataRecord]:
        """Fence by session timeout: every other live broker heartbeats now, these ones long ago."""
        self.now_ms += 10_000
        beats = {b: self.now_ms for b in self.image.live_brokers()}
        beats.update({b: self.now_ms - 10_000 for b in broker_ids})
        decision = decide_session_expirations(
            self.image,
            beats,
            now_ms=self.now_ms,
            session_timeout_ms=5_000,
            request_id=f"expire-{self.now_ms}",
        )
        assert sorted(decision.reply) == sorted(broker_ids)
        self.commit(decision)
        return decision.records

    # -- topics ------------------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str] | None = None
    ) -> TopicImage:
        reply = self.commit(
            decide_create_topics(
                self.image,
                admin_pb2.CreateTopicsRequest(
                    topics=[
                        admin_pb2.CreatableTopic(
                            name=name,
                            partitions=partitions,
                            replication_factor=replication_factor,
                            configs=[
                                admin_pb2.ConfigEntry(key=k, value=v) for k, v in (configs or {}).items()
                            ],
                        )
                    ]
                ),
                rng=self.rng,
                **self.ctx(),
            )
        )
        assert reply.results[0].error == 0, reply.results[0].error_message
        return self.image.topics[name]


    # -- remote logs (tiered storage) ---------------------------------------------------------------

    def alter_remote_log(
        self, name: str, partition: int, *, segments: Sequence[tuple[int, int]] = (),
        start: int | None = None, broker_id: int | None = None, leader_epoch: int | None = None,
        **segment_fields: Any,
    ) -> controller_pb2.AlterRemoteLogResponse:
        """One AlterRemoteLog item from the partition's leader (or `broker_id`) at its leader epoch (or
        `leader_epoch`): the segments [base, end) (each one epoch entry, the leader epoch, at its base;
        `segment_fields` override), or a new start. Decided and committed; returns the reply."""
        topic = self.image.topics[name]
        state = topic.partitions[partition]
        broker = state.leader if broker_id is None else broker_id
        epoch = state.leader_epoch if leader_epoch is None else leader_epoch
        item = controller_pb2.AlterRemoteLogRequest.Item(
            topic_id=topic.topic_id, partition_id=partition, leader_epoch=epoch
        )
        if start is not None:
            item.new_log_start.log_start_offset = start
            item.new_log_start.reason = "retention.ms"
        else:
            item.segments_uploaded.segments.extend(
                segment(topic.topic_id, partition, base, end, leader_epoch=epoch, broker_id=broker,
                        **segment_fields)
                for base, end in segments
            )
        return self.commit(
            decide_alter_remote_log(
                self.image,
                controller_pb2.AlterRemoteLogRequest(
                    broker_id=broker, broker_epoch=self.image.brokers[broker].broker_epoch, items=[item]
                ),
                **self.ctx(f"broker-{broker}"),
            )
        )


def segment(
    topic_id: str, partition: int, base: int, end: int, *, leader_epoch: int = 0, broker_id: int = 0,
    epochs: Sequence[tuple[int, int]] | None = None, size_bytes: int | None = None, meta_bytes: int = 300,
    max_timestamp_ms: int = 1_700_000_000_000, aborted: Sequence[tuple[int, int, int]] = (),
    open_at_end: Sequence[tuple[int, int]] = (),
) -> metadata_pb2.RemoteLogSegmentRecord:
    """A well-formed RemoteLogSegmentRecord: one epoch entry (the leader epoch at `base`) unless `epochs`
    says otherwise, 100 bytes per offset unless `size_bytes` does."""
    return metadata_pb2.RemoteLogSegmentRecord(
        topic_id=topic_id,
        partition_id=partition,
        base_offset=base,
        end_offset=end,
        size_bytes=100 * (end - base) if size_bytes is None else size_bytes,
        meta_bytes=meta_bytes,
        max_timestamp_ms=max_timestamp_ms,
        leader_epoch=leader_epoch,
        broker_id=broker_id,
        epochs=[metadata_pb2.RemoteLogEpochStart(epoch=e, start_offset=o)
                for e, o in (epochs if epochs is not None else [(leader_epoch, base)])],
        aborted_transactions=[metadata_pb2.RemoteLogAbortedTransaction(producer_id=p, first_offset=f,
                                                                       last_offset=last)
                              for p, f, last in aborted],
        open_transactions=[metadata_pb2.RemoteLogOpenTransaction(producer_id=p, first_offset=f)
                           for p, f in open_at_end],
    )


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.fixture
def cluster3() -> Harness:
    """Three live brokers 0, 1, 2 without racks."""
    h = Harness()
    h.add_brokers([0, 1, 2])
    return h
