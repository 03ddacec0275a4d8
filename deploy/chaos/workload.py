"""The workloads of a chaos run, each a thread recording into the history (history.py):

- `ProducerWorkload`: an idempotent acks=all kanal Producer writing unique values `producer-N:seq` round
  robin over the partitions of the run's topic; `send` before each record, `ack` (with its offset) or
  `fail` when the producer resolves it. One more (`keyed-N`) writes keyed records to the compacted topic,
  the key in each event; another (`acks1-N`) writes to the run's topic with acks=1 and no idempotence
  (each of its events says `acks` 1): a leader cut off from its followers goes on taking and answering
  those writes while the acks=all producers time out and move to its successor, so the two logs differ
  over many offsets, the tail a consumer must never read and the deposed leader must truncate.
- `ConsumerWorkload`: consumers of one group, each living a few seconds and then closing so another starts
  (a restart); `read` for each record, `commit` for each acknowledged commit (by hand, never auto-commit),
  `committed` for the offsets a member fetches when partitions are assigned to it.
- `TransactionWorkload`: a transactional kanal Producer writing transactions of 1-4 records over the
  partitions of the transactions' topic, a third of them aborted on purpose; `txn_send` for each record it
  took, `txn_end` with whether the commit or abort was acknowledged (an unknown outcome is `ok` false).
- `StaleCommitWorkload`: rounds of two members of group `chaos-fencing` and a rebalance, then an offset
  commit in the first member's name with its older generation, which must be refused; `commit` for each
  acknowledged commit.
- `ChurnWorkload`: topics created and deleted during the faults (`chaos-churn-N`, never a name twice),
  each with a SCRAM user `chaos-user-N` and an ACL letting it read the topic, deleted with the topic.
- `Monitor`: every broker's leader and epoch for each partition of the topic and every controller's claim
  to be active, recorded when they change.
- `final_read`: after the faults, one acknowledged fence record per partition, then every partition from
  offset 0 to its high-water mark (read_committed for the transactions' topic; with each record's key).

All of them tolerate the faults: an error is recorded or retried, never raised out of the thread.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

import grpc

from kanal.clients.admin import Admin, acl_text
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.clients.transactions import TransactionAbortableError
from kanal.deploy.chaos.history import EventFields, MetadataTopic, Recorder
from kanal.metadata.acl import iter_entries
from kanal.metadata.snapshot import image_from_snapshot
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.v1 import admin_pb2, broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger("kanal.chaos.workload")

GROUP = "chaos-group"
FENCING_GROUP = "chaos-fencing"
TXN_TOPIC = "chaos-txn"
# The compacted topic: keyed records, segments small enough that the brokers' cleaner (every 30 s, and at
# each start) rewrites closed segments during a run; the checker wants each key's latest record kept.
COMPACT_TOPIC = "chaos-compact"
COMPACT_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "4096"}
COMPACT_RECORDS_PER_KEY = 4
TXN_ABORT_PROBABILITY = 1 / 3
# A transaction a stopped or fenced producer left open is aborted by the coordinator after this long, so
# the final read_committed read (60 s bound) sees its partitions' last stable offset reach the end.
TXN_TIMEOUT_MS = 10_000
PRODUCER_START_S = 60.0
CHURN_PARTITIONS = 1
RETENTION_MS = 3_600_000  # the churn topics' retention.ms (plus a number of their own): an hour, so nothing
TOPIC_RESOURCE = metadata_pb2.CONFIG_RESOURCE_TOPIC  # is deleted by retention during a run
CHURN_MECHANISM = "SCRAM-SHA-256"  # the churn users' one mechanism (each is a credential record)


class KeyField(TypedDict, total=False):
    """A keyed record's `key` field in its events (records of the compacted topic only)."""

    key: str


class AcksField(TypedDict, total=False):
    """`acks` in the events of a producer writing with acks=1 (absent for acks=all)."""

    acks: str


class Workload(threading.Thread):
    """A daemon thread that runs `step()` until stopped; the first unexpected error ends the run's check
    (it is kept in `error` and raised by `join_checked`)."""

    def __init__(self, name: str, recorder: Recorder) -> None:
        super().__init__(name=f"kanal-chaos-{name}", daemon=True)
        self.process = name
        self.recorder = recorder
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.body()
        except BaseException as exc:  # kept and raised in the runner's thread by join_checked
            log.exception("%s failed", self.process)
            self.error = exc

    def body(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopping.set()

    def join_checked(self, timeout_s: float) -> None:
        self.stop()
        self.join(timeout_s)
        if self.is_alive():
            raise RuntimeError(f"{self.process} did not stop within {timeout_s}s")
        if self.error is not None:
            raise RuntimeError(f"{self.process} failed: {self.error!r}") from self.error


class ProducerWorkload(Workload):
    """Values `producer-N:seq`, round robin over the partitions. With `records_per_key` (the compacted
    topic), values `keyed-N:seq` keyed `keyed-N:K` with K = seq // records_per_key, sent to partition K mod
    partitions: each key gets that many records in a row and then none, so once its records are in closed
    segments compaction must leave exactly its last one."""

    def __init__(self, index: int, recorder: Recorder, bootstrap: str, topic: str, partitions: int,
                 *, interval_s: float = 0.01, security: ClientSecurity | None = None,
                 records_per_key: int = 0, acks: str = "all") -> None:
        kind = "keyed" if records_per_key else "acks1" if acks == "1" else "producer"
        super().__init__(f"{kind}-{index}", recorder)
        self.records_per_key = records_per_key
        self.acks = acks
        # Each event of an acks=1 producer says so: the checker judges its records by the looser rules.
        self.marks: AcksField = {} if acks == "all" else {"acks": acks}
        self.bootstrap, self.topic, self.partitions, self.interval_s = (
            bootstrap,
            topic,
            partitions,
            interval_s,
        )
        self.security = security
        self.acked = 0

    def _start_producer(self, config: ProducerConfig) -> Producer | None:
        """A producer, once it has its producer id: retried while the cluster cannot give one (a loaded
        machine's first InitProducerId can outlast max_block_ms, which bounds each produce() call and is kept
        short for that) until `PRODUCER_START_S`; None when the workload is stopped meanwhile."""
        deadline = time.monotonic() + PRODUCER_START_S
        while not self.stopping.is_set():
            try:
                return Producer(config)
            except KanalError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                log.info("%s: no producer id yet (%s); trying again", self.process, exc)
        return None

    def body(self) -> None:
        config = ProducerConfig(
            bootstrap=self.bootstrap,
            security=self.security,
            acks=self.acks,
            enable_idempotence=self.acks == "all",
            linger_ms=5,
            request_timeout_ms=3_000,
            delivery_timeout_ms=20_000,
            max_block_ms=5_000,
            retry_backoff_ms=100,
            client_id=self.process,
        )
        producer = self._start_producer(config)
        if producer is None:
            return
        try:
            seq = 0
            while not self.stopping.is_set():
                value = f"{self.process}:{seq}"
                keyed: KeyField = {}
                partition = seq % self.partitions
                if self.records_per_key:
                    key = seq // self.records_per_key
                    keyed["key"] = f"{self.process}:{key}"
                    partition = key % self.partitions
                self.recorder.record("send", self.process, topic=self.topic, partition=partition, value=value,
                                     **keyed, **self.marks)
                try:
                    producer.produce(self.topic, value.encode(), partition=partition, key=keyed.get("key"),
                                     on_delivery=self._delivered(value, partition, keyed))
                except KanalError as exc:  # buffer full for max_block_ms, or metadata not there
                    self.recorder.record("fail", self.process, topic=self.topic, partition=partition,
                                         value=value, error=exc.name, **keyed)
                seq += 1
                self.stopping.wait(self.interval_s)
            producer.flush(25)
        finally:
            producer.close(5)

    def _delivered(self, value: str, partition: int, keyed: KeyField):
        def done(error, meta) -> None:
            if error is None:
                self.acked += 1
                self.recorder.record("ack", self.process, topic=self.topic, partition=meta.partition,
                                     value=value, offset=meta.offset, **keyed, **self.marks)
            else:
                self.recorder.record("fail", self.process, topic=self.topic, partition=partition, value=value,
                                     error=getattr(error, "name", repr(error)), **keyed)
        return done


class TransactionWorkload(Workload):
    """Transactions of 1-4 records (values `txn-N:T:I`, transaction T, record I) over the partitions of
    TXN_TOPIC, each committed, or aborted on purpose with TXN_ABORT_PROBABILITY. A transaction whose
    records or commit failed is aborted; a producer whose commit or abort raised (an outcome it cannot
    know) or that was fenced is replaced by a new one of the same transactional id, which completes or
    aborts what the old one left open. The checker wants every acknowledged commit whole in the final
    read_committed read, no record of an acknowledged abort in it, and any other transaction all or none."""

    def __init__(self, index: int, recorder: Recorder, bootstrap: str, partitions: int, rng: random.Random,
                 *, interval_s: float = 0.05, security: ClientSecurity | None = None) -> None:
        super().__init__(f"txn-{index}", recorder)
        self.bootstrap, self.partitions, self.rng, self.interval_s = bootstrap, partitions, rng, interval_s
        self.security = security

    def _producer(self) -> Producer | None:
        config = ProducerConfig(bootstrap=self.bootstrap, security=self.security, acks="all",
                                transactional_id=f"chaos-{self.process}",
                                transaction_timeout_ms=TXN_TIMEOUT_MS,
                                linger_ms=5, request_timeout_ms=3_000, delivery_timeout_ms=10_000,
                                max_block_ms=5_000, retry_backoff_ms=100, client_id=self.process)
        deadline = time.monotonic() + PRODUCER_START_S
        while not self.stopping.is_set():
            producer = None
            try:
                producer = Producer(config)
                producer.init_transactions()
                return producer
            except KanalError as exc:
                if producer is not None:
                    producer.close(1)
                if time.monotonic() > deadline:
                    raise
                log.info("%s: no transactional producer yet (%s); trying again", self.process, exc)
                self.stopping.wait(0.5)
        return None

    def body(self) -> None:
        producer = self._producer()
        txn = 0
        try:
            while producer is not None and not self.stopping.is_set():
                if not self._one(producer, txn):
                    producer.close(1)
                    producer = self._producer()
                txn += 1
                self.stopping.wait(self.interval_s)
        finally:
            if producer is not None:
                producer.close(5)

    def _one(self, producer: Producer, txn: int) -> bool:
        """One transaction; False when the producer must be replaced."""
        commit = self.rng.random() >= TXN_ABORT_PROBABILITY
        try:
            producer.begin_transaction()
        except KanalError as exc:
            log.info("%s: begin: %s", self.process, exc)
            return False
        failed = False
        for i in range(self.rng.randint(1, 4)):
            partition = self.rng.randrange(self.partitions)
            value = f"{self.process}:{txn}:{i}"
            try:
                producer.produce(TXN_TOPIC, value.encode(), partition=partition)
            except KanalError as exc:  # not taken: the transaction is aborted below
                log.info("%s: produce: %s", self.process, exc)
                failed = True
                break
            self.recorder.record("txn_send", self.process, txn=txn, topic=TXN_TOPIC, partition=partition,
                                 value=value)
        if commit and not failed:
            try:
                producer.commit_transaction(10)
                self.recorder.record("txn_end", self.process, txn=txn, action="commit", ok=True, error="")
                return True
            except TransactionAbortableError as exc:  # refused before EndTxn: abort it
                log.info("%s: commit refused: %s", self.process, exc)
            except KanalError as exc:  # EndTxn itself failed: the outcome is unknown
                self.recorder.record("txn_end", self.process, txn=txn, action="commit", ok=False,
                                     error=exc.name)
                return False
        try:
            producer.abort_transaction(10)
            self.recorder.record("txn_end", self.process, txn=txn, action="abort", ok=True, error="")
            return True
        except KanalError as exc:
            self.recorder.record("txn_end", self.process, txn=txn, action="abort", ok=False, error=exc.name)
            return False


class ConsumerWorkload(Workload):
    """Consumers of GROUP, one after another on this thread, each closing after a seeded lifetime."""

    def __init__(self, index: int, recorder: Recorder, bootstrap: str, topic: str, rng: random.Random,
                 *, lifetime_s: tuple[float, float] = (5.0, 12.0), commit_interval_s: float = 1.0,
                 security: ClientSecurity | None = None) -> None:
        super().__init__(f"consumer-{index}", recorder)
        self.bootstrap, self.topic, self.rng, self.security = bootstrap, topic, rng, security
        self.lifetime_s, self.commit_interval_s = lifetime_s, commit_interval_s

    def body(self) -> None:
        generation = 0
        while not self.stopping.is_set():
            self._one_member(f"{self.process}.{generation}")
            generation += 1

    def _start_consumer(self, config: ConsumerConfig) -> Consumer | None:
        """A consumer, once a broker answers its first metadata request: a member starting while every
        broker is down (the isr-down episode kills them all) tries again every 0.5 s; None when the workload
        is stopped meanwhile (the runner stops it once every node serves, or gives up)."""
        while not self.stopping.is_set():
            try:
                return Consumer(config)
            except KanalError as exc:
                if not exc.retriable:
                    raise
                log.info("%s: no broker answered yet (%s); trying again", config.client_id, exc)
                self.stopping.wait(0.5)
        return None

    def _one_member(self, name: str) -> None:
        config = ConsumerConfig(
            bootstrap=self.bootstrap,
            security=self.security,
            group_id=GROUP,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=1_000,
            max_poll_interval_ms=30_000,
            request_timeout_ms=5_000,
            client_id=name,
            partition_assignment_strategy=("cooperative-sticky",),
        )
        consumer = self._start_consumer(config)
        if consumer is None:
            return
        read: dict[tuple[str, int], int] = {}  # next offset to commit, per partition read since assigned

        def commit(partitions) -> None:
            offsets = {tp: read[tp] for tp in partitions if tp in read}
            if not offsets:
                return
            try:
                consumer.commit(offsets)
            except KanalError as exc:
                log.info("%s: commit refused: %s", name, exc)
                return
            for (topic, partition), offset in offsets.items():
                self.recorder.record(
                    "commit", name, group=GROUP, topic=topic, partition=partition, offset=offset
                )

        def on_assign(partitions) -> None:
            for tp in partitions:
                read.pop(tp, None)
            invoked = self.recorder.now()
            try:
                found = consumer.committed(partitions)
            except KanalError as exc:
                log.info("%s: committed offsets not fetched: %s", name, exc)
                return
            for (topic, partition), offset in found.items():
                if offset is not None:
                    self.recorder.record("committed", name, group=GROUP, topic=topic, partition=partition,
                                         offset=offset, invoked=invoked)

        def on_revoke(partitions) -> None:
            commit(partitions)
            for tp in partitions:
                read.pop(tp, None)

        try:
            consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
            end = time.monotonic() + self.rng.uniform(*self.lifetime_s)
            next_commit = time.monotonic() + self.commit_interval_s
            while not self.stopping.is_set() and time.monotonic() < end:
                try:
                    records = consumer.poll(0.5)
                except KanalError as exc:
                    log.info("%s: poll: %s", name, exc)
                    self.stopping.wait(0.2)
                    continue
                for r in records:
                    self.recorder.record("read", name, topic=r.topic, partition=r.partition, offset=r.offset,
                                         value=r.value.decode(errors="replace"), leader_epoch=r.leader_epoch)
                    read[(r.topic, r.partition)] = r.offset + 1
                if time.monotonic() >= next_commit:
                    commit(consumer.assignment())
                    next_commit = time.monotonic() + self.commit_interval_s
            commit(consumer.assignment())
        finally:
            try:
                consumer.close()
            except (KanalError, grpc.RpcError) as exc:
                log.info("%s: close: %s", name, exc)


class StaleCommitWorkload(Workload):
    """Generation fencing, round after round in group FENCING_GROUP (partition 0 of the run's topic, round
    r): member A joins and commits 3r+1; member B joins, the group moves to a newer generation (A rejoins)
    and partition 0's owner commits 3r+3; then an OffsetCommit in A's name with A's *first* generation
    asks for 3r+2, as a member paused past a rebalance sends it when it wakes. The coordinator must refuse
    it (ILLEGAL_GENERATION); acknowledged, it is recorded as a `commit` and the checker sees the committed
    offset go back below 3r+3 (`commit_backwards`). Acknowledged commits are recorded; a round a fault
    cuts short is dropped and the next one starts."""

    def __init__(self, recorder: Recorder, bootstrap: str, topic: str, *,
                 security: ClientSecurity | None = None) -> None:
        super().__init__("fencing", recorder)
        self.bootstrap, self.topic, self.security = bootstrap, topic, security
        self.refused = 0  # stale commits the coordinator refused

    def body(self) -> None:
        metadata = None
        round_ = 0
        try:
            while not self.stopping.is_set():
                members: list[Consumer] = []
                try:
                    if metadata is None:
                        metadata = ClusterMetadata(self.bootstrap, security=self.security)
                    self._round(round_, members, metadata)
                except (KanalError, grpc.RpcError) as exc:  # a fault cut the round short: start afresh
                    log.info("%s: round %d: %r", self.process, round_, exc)
                    self.stopping.wait(0.5)
                finally:
                    for member in members:
                        member.close()
                round_ += 1
        finally:
            if metadata is not None:
                metadata.close()

    def _member(self, name: str, members: list[Consumer]) -> Consumer:
        member = Consumer(ConsumerConfig(
            bootstrap=self.bootstrap, security=self.security, group_id=FENCING_GROUP,
            auto_offset_reset="latest", enable_auto_commit=False, session_timeout_ms=6_000,
            heartbeat_interval_ms=1_000, request_timeout_ms=5_000, client_id=name, max_poll_records=1))
        members.append(member)
        member.subscribe([self.topic])
        return member

    def _until(self, members: list[Consumer], done: Callable[[], bool], what: str) -> None:
        """Every member polls on a thread of its own (a member's JoinGroup waits for the others to
        rejoin, which they do only while polling) until `done()`; at most 30 s."""
        deadline = time.monotonic() + 30
        finished = threading.Event()
        failures: list[BaseException] = []

        def poll(member: Consumer) -> None:
            try:
                while not finished.is_set():
                    member.poll(0.05)
            except Exception as exc:  # noqa: BLE001 - raised on the workload's thread below
                failures.append(exc)
                finished.set()

        threads = [threading.Thread(target=poll, args=(m,), daemon=True) for m in members]
        for t in threads:
            t.start()
        try:
            while not done() and not failures:
                if self.stopping.is_set():
                    raise KanalError(ErrorCode.REQUEST_TIMED_OUT, f"stopped while waiting for {what}")
                if time.monotonic() > deadline:
                    raise KanalError(ErrorCode.REQUEST_TIMED_OUT, f"no {what} within 30 s")
                finished.wait(0.05)
        finally:
            finished.set()
            # A member may be inside a JoinGroup that waits out a rebalance: when the run is stopping, the
            # round is dropped anyway, so its threads are not waited for (they are daemons, and the members
            # are closed after this).
            for t in threads:
                t.join(0.5 if self.stopping.is_set() else 10)
        if failures:
            raise failures[0]

    def _commit(self, member: Consumer, offset: int) -> None:
        tp = (self.topic, 0)
        member.commit({tp: offset})
        self.recorder.record("commit", self.process, group=FENCING_GROUP, topic=self.topic, partition=0,
                             offset=offset)

    def _round(self, r: int, members: list[Consumer], metadata: ClusterMetadata) -> None:
        tp = (self.topic, 0)
        a = self._member(f"fencing-a.{r}", members)
        self._until(members, lambda: tp in a.assignment(), "assignment of member A")
        first = a.group_metadata()
        self._commit(a, 3 * r + 1)
        b = self._member(f"fencing-b.{r}", members)
        self._until(members, lambda: bool(b.assignment())
                    and a.group_metadata().generation_id > first.generation_id
                    and b.group_metadata().generation_id == a.group_metadata().generation_id,
                    "rebalance to a newer generation")
        owner = a if tp in a.assignment() else b
        if tp not in owner.assignment():
            raise KanalError(ErrorCode.REBALANCE_IN_PROGRESS, "partition 0 between owners")
        self._commit(owner, 3 * r + 3)
        stale = broker_pb2.OffsetCommitRequest(group_id=FENCING_GROUP, generation_id=first.generation_id,
                                               member_id=first.member_id)
        stale.topics.add(topic=self.topic).partitions.add(partition=0, offset=3 * r + 2, leader_epoch=-1)
        coordinator = metadata.find_coordinator(FENCING_GROUP, broker_pb2.COORDINATOR_GROUP, 5)
        if coordinator.error:
            raise KanalError(coordinator.error, "FindCoordinator")
        reply = metadata.stub(coordinator.endpoint).OffsetCommit(stale, timeout=5)
        errors_ = [reply.error] + [p.error for t in reply.topics for p in t.partitions]
        if not any(errors_):
            self.recorder.record("commit", self.process, group=FENCING_GROUP, topic=self.topic,
                                 partition=0, offset=3 * r + 2)
        elif reply.error == ErrorCode.ILLEGAL_GENERATION:
            self.refused += 1


class ChurnWorkload(Workload):
    """Admin operations during the faults, each recorded with what it asked for and whether the cluster
    acknowledged it (the final metadata read checks every acknowledged one on every node): creates
    `chaos-churn-N` every `interval_s` (`CHURN_PARTITIONS` partitions, a `retention.ms` of its own) with a
    SCRAM user `chaos-user-N` and an ACL letting that user read the topic, raises the previous topic to one
    partition more and sets its `retention.ms` again, and deletes the oldest topic, its ACL and its user
    once `keep` exist."""

    def __init__(self, recorder: Recorder, bootstrap: str, *, interval_s: float = 3.0, keep: int = 2,
                 replication_factor: int = 2, security: ClientSecurity | None = None) -> None:
        super().__init__("admin", recorder)
        self.bootstrap, self.interval_s, self.keep, self.rf = bootstrap, interval_s, keep, replication_factor
        self.security = security

    def body(self) -> None:
        live: list[int] = []
        n = 0
        with Admin(self.bootstrap, request_timeout_ms=5_000, security=self.security) as admin:
            while not self.stopping.wait(self.interval_s):
                name = f"chaos-churn-{n}"
                configs = {"retention.ms": str(RETENTION_MS + n + 1)}
                self._do("create_topic", lambda name=name, configs=configs: admin.create_topic(
                    name, CHURN_PARTITIONS, self.rf, configs, wait_s=5), topic=name, count=CHURN_PARTITIONS,
                    configs=configs)
                self._do("create_user", lambda n=n: admin.create_user(
                    churn_user(n), f"secret-{n}", mechanisms=[CHURN_MECHANISM]), user=churn_user(n))
                entry = churn_acl(n)
                self._do("create_acl", lambda entry=entry: admin.create_acls([entry]), acl=acl_text(entry))
                if live:
                    previous = f"chaos-churn-{live[-1]}"
                    self._do("create_partitions",
                             lambda p=previous: admin.create_partitions(p, CHURN_PARTITIONS + 1),
                             topic=previous, count=CHURN_PARTITIONS + 1)
                    value = str(RETENTION_MS + 1000 + n + 1)
                    self._do("alter_config",
                             lambda p=previous, v=value: admin.alter_configs(
                                 TOPIC_RESOURCE, p, {"retention.ms": v}),
                             topic=previous, key="retention.ms", value=value)
                live.append(n)
                n += 1
                if len(live) > self.keep:
                    old = live.pop(0)
                    self._do("delete_topic", lambda old=old: admin.delete_topic(f"chaos-churn-{old}"),
                             topic=f"chaos-churn-{old}")
                    entry = churn_acl(old)
                    self._do("delete_acl", lambda entry=entry: admin.delete_acls([_filter_of(entry)]),
                             acl=acl_text(entry))
                    self._do("delete_user", lambda old=old: admin.delete_user(
                        churn_user(old), mechanisms=[CHURN_MECHANISM]), user=churn_user(old))

    def _do(self, type_: str, call, **asked) -> None:
        try:
            call()
        except (KanalError, TimeoutError, grpc.RpcError) as exc:
            self.recorder.record(type_, self.process, ok=False, error=repr(exc)[:200], **asked)
            return
        self.recorder.record(type_, self.process, ok=True, error="", **asked)


def churn_user(n: int) -> str:
    return f"chaos-user-{n}"


def churn_acl(n: int) -> metadata_pb2.AccessControlEntry:
    """`ALLOW User:chaos-user-N@* READ TOPIC:LITERAL:chaos-churn-N`."""
    return metadata_pb2.AccessControlEntry(
        resource_type=metadata_pb2.ACL_RESOURCE_TOPIC, resource_name=f"chaos-churn-{n}",
        pattern_type=metadata_pb2.ACL_PATTERN_LITERAL, principal=f"User:{churn_user(n)}", host="*",
        operation=metadata_pb2.ACL_OPERATION_READ, permission=metadata_pb2.ACL_PERMISSION_ALLOW)


def _filter_of(entry: metadata_pb2.AccessControlEntry) -> admin_pb2.AclFilter:
    """The filter that selects exactly this entry."""
    return admin_pb2.AclFilter(
        resource_type=entry.resource_type, resource_name=entry.resource_name,
        pattern_filter=admin_pb2.AclFilter.LITERAL, principal=entry.principal, host=entry.host,
        operation=entry.operation, permission=entry.permission)


class Monitor(Workload):
    def __init__(self, recorder: Recorder, brokers: dict[int, str], controllers: dict[int, str], topic: str,
                 *, interval_s: float = 0.5, call_timeout_s: float = 0.4,
                 security: ClientSecurity | None = None) -> None:
        super().__init__("monitor", recorder)
        self.brokers, self.controllers, self.topic, self.security = brokers, controllers, topic, security
        self.interval_s, self.call_timeout_s = interval_s, call_timeout_s

    def body(self) -> None:
        channels = {
            e: open_channel(e, (), self.security)
            for e in [*self.brokers.values(), *self.controllers.values()]
        }
        seen: dict[tuple, tuple] = {}
        try:
            while not self.stopping.wait(self.interval_s):
                for broker_id, endpoint in self.brokers.items():
                    self._broker(broker_id, broker_pb2_grpc.BrokerStub(channels[endpoint]), seen)
                for controller_id, endpoint in self.controllers.items():
                    self._controller(
                        controller_id, controller_pb2_grpc.ControllerStub(channels[endpoint]), seen
                    )
        finally:
            for channel in channels.values():
                channel.close()

    def _broker(self, broker_id: int, stub, seen) -> None:
        try:
            reply = stub.Metadata(
                broker_pb2.MetadataRequest(topics=[self.topic]), timeout=self.call_timeout_s
            )
        except grpc.RpcError:
            return
        offset_key = ("metadata", broker_id)
        if seen.get(offset_key) != reply.metadata_offset:
            seen[offset_key] = reply.metadata_offset
            self.recorder.record("metadata", self.process, node=f"broker-{broker_id}",
                                 offset=reply.metadata_offset, final=False)
        for topic in reply.topics:
            for p in topic.partitions:
                key = ("leader", broker_id, topic.name, p.partition)
                now = (p.leader, p.leader_epoch, tuple(p.isr))
                if seen.get(key) != now:
                    seen[key] = now
                    self.recorder.record("leader", self.process, observer=broker_id, topic=topic.name,
                                         partition=p.partition, leader=p.leader, epoch=p.leader_epoch,
                                         isr=sorted(p.isr))

    def _controller(self, controller_id: int, stub, seen) -> None:
        try:
            reply = stub.DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=self.call_timeout_s)
        except grpc.RpcError:
            return
        # Only a controller's claim about itself: a follower's idea of the leader may lag its term.
        if reply.leader_id != controller_id:
            return
        key, now = ("controller", controller_id), reply.term
        if seen.get(key) != now:
            seen[key] = now
            self.recorder.record("controller", self.process, observer=controller_id, leader=controller_id,
                                 epoch=reply.term)


def final_metadata(recorder: Recorder, brokers: dict[int, str], controllers: dict[int, str], *,
                   timeout_s: float = 20.0, security: ClientSecurity | None = None) -> None:
    """Every node's metadata after the faults, as one `metadata` event (`final`) per node that answers:
    its applied offset and every topic it holds (a controller's committed image, with configs, users and
    ACLs; a broker's Metadata, without). Asked again until every node reaches the highest offset any node
    applied during the run (a lagging broker catches up), or `timeout_s`; the last answer of each node is
    recorded, and a node that never answers is left out (the final read and `no_recovery` speak for it)."""
    highest = max((int(e["offset"]) for e in recorder.events if e["type"] == "metadata"), default=0)
    views: dict[str, NodeMetadata] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        for controller_id, endpoint in controllers.items():
            view = _controller_metadata(endpoint, security)
            if view is not None:
                views[f"controller-{controller_id}"] = view
        for broker_id, endpoint in brokers.items():
            view = _broker_metadata(endpoint, security)
            if view is not None:
                views[f"broker-{broker_id}"] = view
        behind = len(views) < len(brokers) + len(controllers) or any(
            v.offset < highest for v in views.values())
        if not behind or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for node, view in sorted(views.items()):
        fields: EventFields = {"node": node, "offset": view.offset, "final": True, "topics": view.topics,
                               "configs_known": view.users is not None}
        if view.users is not None:
            fields["users"], fields["acls"] = view.users, view.acls or []
        recorder.record("metadata", "final", **fields)


@dataclass(frozen=True)
class NodeMetadata:
    """One node's answer to the final metadata read; users and ACLs only from a controller (None else)."""

    offset: int
    topics: dict[str, MetadataTopic]
    users: list[str] | None = None
    acls: list[str] | None = None


def _controller_metadata(endpoint: str, security: ClientSecurity | None) -> NodeMetadata | None:
    channel = open_channel(endpoint, (), security)
    try:
        reply = controller_pb2_grpc.ControllerStub(channel).DescribeMetadataImage(
            controller_pb2.DescribeMetadataImageRequest(), timeout=5)
    except grpc.RpcError as exc:
        log.info("final metadata of controller %s: %s", endpoint, exc)
        return None
    finally:
        channel.close()
    image = image_from_snapshot(reply.snapshot)
    topics: dict[str, MetadataTopic] = {name: {"partitions": len(t.partitions), "configs": dict(t.configs)}
              for name, t in image.topics.items()}
    return NodeMetadata(reply.snapshot.next_offset, topics, sorted(image.scram_credentials),
                        sorted(acl_text(e.to_proto()) for e in iter_entries(image.acls)))


def _broker_metadata(endpoint: str, security: ClientSecurity | None) -> NodeMetadata | None:
    channel = open_channel(endpoint, (), security)
    try:
        reply = broker_pb2_grpc.BrokerStub(channel).Metadata(broker_pb2.MetadataRequest(), timeout=5)
    except grpc.RpcError as exc:
        log.info("final metadata of broker %s: %s", endpoint, exc)
        return None
    finally:
        channel.close()
    topics: dict[str, MetadataTopic] = {t.name: {"partitions": len(t.partitions), "configs": {}}
                                        for t in reply.topics}
    return NodeMetadata(reply.metadata_offset, topics)


def final_read(recorder: Recorder, bootstrap: str, topic: str, partitions: int, *, timeout_s: float = 60.0,
               security: ClientSecurity | None = None, read_committed: bool = False,
               fence: bool = True) -> int:
    """Every record of every partition from 0 to its high-water mark, as `final` events and one `final_end`
    per partition; retried until `timeout_s`. With `read_committed`, what a read_committed consumer gets
    (no aborted record, no marker): the read ends when the consumer's position reaches the high-water mark,
    i.e. once every transaction below it has ended. `fence` False: no fence record first (a mirror's copy,
    which only the mirror writes; its positions show it caught up). Returns the number of records read."""
    deadline = time.monotonic() + timeout_s
    if fence:
        _fence(recorder, bootstrap, topic, partitions, deadline, security)
    ends = _end_offsets(bootstrap, topic, partitions, deadline, security)
    consumer = Consumer(ConsumerConfig(bootstrap=bootstrap, security=security, auto_offset_reset="earliest",
                                       max_poll_records=5000, request_timeout_ms=5_000, client_id="final",
                                       isolation_level="read_committed" if read_committed
                                       else "read_uncommitted"))
    count = 0
    try:
        consumer.assign([(topic, p) for p in range(partitions)])
        positions = {}
        for p in range(partitions):
            consumer.seek((topic, p), 0)
            positions[p] = 0
        while any(positions[p] < ends[p] for p in positions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"final read reached {positions} of {ends} in {timeout_s}s")
            try:
                records = consumer.poll(0.5)
            except KanalError as exc:
                log.info("final read: %s", exc)
                continue
            for r in records:
                if r.offset >= ends[r.partition]:
                    continue
                keyed: KeyField = {} if r.key is None else {"key": r.key.decode(errors="replace")}
                recorder.record("final", "final", topic=topic, partition=r.partition, offset=r.offset,
                                value=r.value.decode(errors="replace"), leader_epoch=r.leader_epoch, **keyed)
                positions[r.partition] = r.offset + 1
                count += 1
            if read_committed:  # past aborted records and markers, which no record's offset shows
                for p, at in positions.items():
                    positions[p] = max(at, consumer.position((topic, p), 5))
        for p in range(partitions):
            recorder.record("final_end", "final", topic=topic, partition=p, end_offset=ends[p])
    finally:
        consumer.close()
    return count


def _fence(recorder: Recorder, bootstrap: str, topic: str, partitions: int, deadline: float,
           security: ClientSecurity | None) -> None:
    """One acks=all record per partition, acknowledged before the end offsets are asked for: a leader
    elected late may not yet have moved its high-water mark over what an earlier leader acknowledged, but
    it has once it acknowledges a record of its own, so the final read cannot stop short of an
    acknowledged record through timing alone."""
    config = ProducerConfig(
        bootstrap=bootstrap,
        security=security,
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=5_000,
        delivery_timeout_ms=max(10_000, int((deadline - time.monotonic()) * 1000) - 5_000),
        client_id="final",
    )
    with Producer(config) as producer:
        futures = []
        for p in range(partitions):
            value = f"final:{p}"
            recorder.record("send", "final", topic=topic, partition=p, value=value)
            futures.append((p, value, producer.produce(topic, value.encode(), partition=p)))
        for p, value, future in futures:
            meta = future.result(max(0.1, deadline - time.monotonic()))
            recorder.record("ack", "final", topic=topic, partition=p, value=value, offset=meta.offset)


def _end_offsets(bootstrap: str, topic: str, partitions: int, deadline: float,
                 security: ClientSecurity | None) -> dict[int, int]:
    """Each partition's high-water mark from its leader, retried while leaders move."""
    md = ClusterMetadata(bootstrap, security=security)
    try:
        while True:
            try:
                view = md.refresh([topic])
                out = {}
                for p in range(partitions):
                    request = broker_pb2.ListOffsetsRequest()
                    request.topics.add(topic=topic).partitions.add(partition=p, timestamp_ms=-1)
                    answer = md.stub(view.brokers[view.topics[topic][p].leader]).ListOffsets(
                        request, timeout=5
                    )
                    part = answer.topics[0].partitions[0]
                    if part.error:
                        raise KanalError(part.error, "ListOffsets")
                    out[p] = part.offset
                return out
            except (KanalError, grpc.RpcError, KeyError) as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no end offsets for {topic}: {exc!r}") from exc
                time.sleep(0.5)
    finally:
        md.close()
