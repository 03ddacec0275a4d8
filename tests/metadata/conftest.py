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


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.fixture
def cluster3() -> Harness:
    """Three live brokers 0, 1, 2 without racks."""
    h = Harness()
    h.add_brokers([0, 1, 2])
    return h
