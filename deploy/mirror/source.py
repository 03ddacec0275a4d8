"""A flow's source cluster, behind one interface: kanal (its own clients) or any Kafka-protocol cluster
(kafka_source.py, librdkafka). The target is always kanal.

A source is read without a consumer group: the flow assigns partitions and seeks them to the positions it
committed on the target, and reads read_committed (a source transaction's records are copied once it
commits, never when it aborts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer
from kanal.clients.consumer_config import ConsumerConfig
from kanal.security.channel_security import ClientSecurity
from kanal.v1 import admin_pb2, metadata_pb2

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class SourceRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]


class ReadRecord(Protocol):
    """A record as a reader's poll() returns it: a SourceRecord, or kanal's ConsumerRecord as the consumer
    made it (copying 5,000 records a poll into another object cost the flow as much as producing them).
    `headers` is None or empty when there are none."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def timestamp_ms(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]] | None: ...


class SourceReader(Protocol):
    def assign(self, positions: dict[TopicPartition, int | None]) -> None:
        """Read these partitions (only these) from these positions; None: from the log start."""

    def poll(self, timeout_s: float) -> Sequence[ReadRecord]:
        """Up to a batch of records, each partition's in offset order (both readers return a partition's
        records together, which the flow copies as one run)."""

    def position(self, tp: TopicPartition, timeout_s: float) -> int:
        """The source offset after what poll() has returned of `tp` (past control records too);
        KanalError when it is not known within `timeout_s`."""

    def close(self) -> None: ...


class SourceCluster(Protocol):
    kind: str

    def topics(self, wanted: Callable[[str], bool] | None = None) -> dict[str, int]:
        """Every topic `wanted` accepts (None: every one, internal ones too) and its partition count."""

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The configs set on the topic (not the defaults)."""

    def topic_acls(self) -> list[metadata_pb2.AccessControlEntry]:
        """The ACLs on topics (a cluster without an authorizer has none)."""

    def groups(self) -> list[str]: ...

    def group_offsets(self, group: str) -> dict[TopicPartition, int]: ...

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]: ...

    def reader(self) -> SourceReader: ...

    def close(self) -> None: ...


class KanalReader:
    def __init__(self, bootstrap: str, security: ClientSecurity | None, client_id: str) -> None:
        self._consumer = Consumer(ConsumerConfig(
            bootstrap=bootstrap, security=security, client_id=client_id, enable_auto_commit=False,
            isolation_level="read_committed", auto_offset_reset="earliest", max_poll_records=5_000))

    def assign(self, positions: dict[TopicPartition, int | None]) -> None:
        self._consumer.assign(list(positions))
        for tp, offset in positions.items():
            if offset is None:
                self._consumer.seek_to_beginning([tp])
            else:
                self._consumer.seek(tp, offset)

    def poll(self, timeout_s: float) -> Sequence[ReadRecord]:
        return self._consumer.poll(timeout_s)

    def position(self, tp: TopicPartition, timeout_s: float) -> int:
        return self._consumer.position(tp, timeout_s=timeout_s)

    def close(self) -> None:
        self._consumer.close()


class KanalSource:
    kind = "kanal"

    def __init__(self, bootstrap: str, security: ClientSecurity | None = None, *,
                 client_id: str = "kanal-mirror") -> None:
        self.bootstrap, self.security, self.client_id = bootstrap, security, client_id
        self._admin = Admin(bootstrap, request_timeout_ms=15_000, security=security)

    def topics(self, wanted: Callable[[str], bool] | None = None) -> dict[str, int]:
        # A describe per topic: only the wanted ones (a flow's refresh would otherwise pay one round trip
        # for every topic of the cluster).
        return {name: len(self._admin.describe_topic(name).partitions)
                for name in self._admin.list_topics(include_internal=True) if wanted is None or wanted(name)}

    def topic_configs(self, topic: str) -> dict[str, str]:
        entries = self._admin.describe_configs(metadata_pb2.CONFIG_RESOURCE_TOPIC, topic)
        return {e.key: e.value for e in entries if not e.is_default}

    def topic_acls(self) -> list[metadata_pb2.AccessControlEntry]:
        return self._admin.describe_acls(admin_pb2.AclFilter(resource_type=metadata_pb2.ACL_RESOURCE_TOPIC))

    def groups(self) -> list[str]:
        return sorted(self._admin.list_groups())

    def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        return self._admin.group_offsets(group)

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        out = {}
        for topic, ps in by_topic.items():
            for p, (_start, end) in self._admin.log_bounds(topic, ps).items():
                out[(topic, p)] = end
        return out

    def reader(self) -> SourceReader:
        return KanalReader(self.bootstrap, self.security, self.client_id)

    def close(self) -> None:
        self._admin.close()
