"""One flow A->B running: copy, commit, translate. The decisions are in naming.py, offset_sync.py and
plans.py; this is the loop that reads, writes and calls them.

Exactly once. The flow writes the target in transactions (transactional id `kanal-mirror-A-to-B`). Each
holds the copied records, the offset syncs that map the copies of the transaction before (a sync needs
the target offsets, known once those were acknowledged), due heartbeats and checkpoints, and, as the
transaction's consumer-group offsets, the source positions after them: group `kanal-mirror-A-to-B.positions`
on the target, keyed by remote topic and partition. A commit makes all of it visible at once; an abort or a
crash none of it. A flow that starts (again) calls init_transactions, which fences any older instance and
aborts what it left open, then reads the positions back and seeks the source there: a record is copied
again only when the transaction that copied it never committed, and then its first copy is invisible to
read_committed readers.

Failures: a record, a commit or the source failing aborts the transaction and rewinds the source to the
committed positions (then the loop goes on, after `RETRY_BACKOFF_S`); the flow's producer being fenced
(another instance took over) ends the flow.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer
from kanal.clients.consumer_config import ConsumerConfig
from kanal.clients.latency_histogram import LatencyHistogram
from kanal.clients.producer import Producer, RecordFuture
from kanal.clients.producer_config import ProducerConfig
from kanal.clients.transactions import TransactionFatalError
from kanal.deploy.mirror.config import FlowConfig
from kanal.deploy.mirror.naming import HEARTBEATS_TOPIC, PATH_HEADER
from kanal.deploy.mirror.offset_sync import (
    SYNCS_RETENTION_MS,
    OffsetSync,
    OffsetTranslator,
    checkpoint_record,
    heartbeat_record,
    parse_sync,
    sync_record,
    syncs_for,
)
from kanal.deploy.mirror.plans import plan_acls, plan_configs, plan_group_offsets, plan_topics
from kanal.deploy.mirror.source import ReadRecord, SourceCluster, SourceReader, TopicPartition
from kanal.security.channel_security import ClientSecurity
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger("kanal.mirror")

RETRY_BACKOFF_S = 0.5
END_SYNC_INTERVAL_S = 1.0  # offset_sync.py: a transaction's end gets a sync when the last is this old
SYNCS_TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": str(SYNCS_RETENTION_MS)}
CHECKPOINTS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}  # the latest per group and partition is enough
FENCED = (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
          ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
_PARTITION_OF = operator.attrgetter("topic", "partition")
_OFFSET, _TIMESTAMP = operator.attrgetter("offset"), operator.attrgetter("timestamp_ms")
_KEY, _VALUE = operator.attrgetter("key"), operator.attrgetter("value")


@dataclass(slots=True)
class CopiedPartition:
    """What the open transaction copied of one source partition, in order: each record's source offset
    and the future of its copy. A future is asked for its target offset only where a sync needs it
    (syncs_for); a copy that failed fails the commit (commit_transaction), waited for or not."""

    offsets: list[int] = field(default_factory=list)
    futures: list[RecordFuture] = field(default_factory=list)

    def target_offset(self, i: int) -> int:
        return self.futures[i].result().offset  # raises for a failed record: abort


@dataclass
class FlowMetrics:
    """What `kanal mirror`'s metrics endpoint and log lines show of a flow."""

    records: int = 0  # copied and committed
    bytes: int = 0  # keys and values of those
    skipped: int = 0  # dropped by the loop rule (identity policy)
    transactions: int = 0
    aborted: int = 0
    # From a source record's timestamp to the commit that made its copy visible, and to when it was read.
    replication_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    record_age: LatencyHistogram = field(default_factory=LatencyHistogram)
    lag: dict[TopicPartition, int] = field(default_factory=dict)  # source end - committed position


class Flow:
    def __init__(self, config: FlowConfig, source: SourceCluster, target_security: ClientSecurity | None, *,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.config, self.source, self.target_security = config, source, target_security
        self.policy = config.policy
        self.metrics = FlowMetrics()
        self._wall_ms, self._monotonic = wall_ms, monotonic
        self._admin: Admin | None = None
        self._producer: Producer | None = None
        self._reader: SourceReader | None = None
        self._translator = OffsetTranslator()
        self._remote: dict[str, str] = {}  # mirrored source topic -> remote topic
        self._last_sync_at: dict[TopicPartition, float] = {}  # source partition -> monotonic time
        self._committed: dict[TopicPartition, int | None] = {}  # source partition -> committed position
        self._in_txn = False
        self._txn_started = 0.0
        self._copied: dict[TopicPartition, CopiedPartition] = {}
        self._copied_timestamps: Counter[int] = Counter()  # source timestamp (ms) -> records copied with it
        self._copied_bytes = 0  # keys and values
        self._checkpoints: list[tuple[bytes, bytes]] = []
        # Syncs of committed copies that no committed transaction holds yet: each transaction opens with
        # them (see _commit), so they are added to the translator only when that one commits.
        self._syncs_due: list[tuple[str, int, OffsetSync]] = []
        self._syncs_due_since = 0.0  # monotonic time the oldest of them was made
        self._syncs_in_txn = 0  # how many of them the open transaction holds
        self._group_commits: dict[str, dict[TopicPartition, int]] = {}
        self._next_refresh = self._next_checkpoint = self._next_heartbeat = 0.0
        self._acls_off_logged = False
        self.ready = threading.Event()  # set once the flow has started copying

    # ---- the loop ----

    def run(self, stop: threading.Event) -> None:
        try:
            self._start()
            self.ready.set()
            while not stop.is_set():
                try:
                    self._step()
                except TransactionFatalError:
                    raise
                except KanalError as exc:
                    if exc.code in FENCED:
                        raise
                    log.warning("%s: %s; aborting the transaction and rewinding", self.config.name, exc)
                    self._recover()
                    stop.wait(RETRY_BACKOFF_S)
            if self._in_txn:
                self._commit()
            if self._syncs_due:  # the last commit's syncs: one transaction more
                self._commit()
        finally:
            self.close()

    def close(self) -> None:
        for closer in (self._reader, self._producer, self._admin):
            if closer is not None:
                try:
                    closer.close()
                except Exception as exc:  # noqa: BLE001 - closing what a failed flow left
                    log.info("%s: closing: %r", self.config.name, exc)
        self._reader = self._producer = self._admin = None

    def _start(self) -> None:
        target = self.config.target
        self._admin = Admin(target.bootstrap, request_timeout_ms=15_000, security=self.target_security)
        for topic, configs in ((self.policy.offset_syncs_topic(), SYNCS_TOPIC_CONFIGS),
                               (self.policy.checkpoints_topic(), CHECKPOINTS_TOPIC_CONFIGS),
                               (HEARTBEATS_TOPIC, {})):
            self._ensure_topic(topic, 1, configs)
        self._producer = self._new_producer()
        self._load_syncs()
        self._refresh()

    def _new_producer(self) -> Producer:
        producer = Producer(ProducerConfig(
            bootstrap=self.config.target.bootstrap, security=self.target_security,
            transactional_id=self.policy.transactional_id(self.config.id),
            client_id=f"kanal-mirror-{self.config.id}", linger_ms=2, acks="all"))
        producer.init_transactions()  # fences an older instance of the flow, aborts what it left open
        return producer

    def _step(self) -> None:
        now = self._monotonic()
        if not self._in_txn and now >= self._next_refresh:
            self._refresh()
        if now >= self._next_checkpoint and self.config.groups:
            self._prepare_checkpoints()
            self._next_checkpoint = now + self.config.checkpoint_interval_ms / 1000
        assert self._reader is not None and self._producer is not None
        # In a transaction the poll does not wait: a poll that finds nothing means the flow has copied all
        # the reader had, and then waiting for more (up to the commit interval) would only delay what is
        # copied (MirrorMaker 2's exactly-once source tasks commit each poll's batch too). A flow that does
        # not catch up commits every commit_interval_ms.
        records = self._reader.poll(0.0 if self._in_txn else 0.1)
        if records:
            self._copy(records)
        now = self._monotonic()
        heartbeat_due = now >= self._next_heartbeat
        txn_due = self._in_txn and (not records
                                    or now - self._txn_started >= self.config.commit_interval_ms / 1000)
        syncs_waiting = (bool(self._syncs_due) and not self._in_txn
                         and now - self._syncs_due_since >= END_SYNC_INTERVAL_S)
        if txn_due or heartbeat_due or syncs_waiting or self._checkpoints or (records and not self._in_txn):
            self._commit()

    def _copy(self, records: Sequence[ReadRecord]) -> None:
        """Produce the copies of a poll's records, one partition's run at a time: the per-record work is a
        produce() call (kanal's C path when there are no headers), as in a plain consume-produce loop;
        what the commit needs is kept per run (offsets, futures) or counted (timestamps, bytes)."""
        assert self._producer is not None
        produce = self._producer.produce
        read_ms = self._wall_ms()
        for (topic, partition), run in groupby(records, _PARTITION_OF):
            remote = self._remote.get(topic)
            if remote is None:
                continue
            if self.policy.tracks_path:
                kept, futures = self._copy_with_paths(remote, partition, run)
            else:
                kept = list(run)
                self._begin()
                futures = [produce(remote, r.value, key=r.key, partition=partition, headers=r.headers or None,
                                   timestamp=r.timestamp_ms) for r in kept]
            if not kept:
                continue
            copied = self._copied.get((topic, partition))
            if copied is None:
                copied = self._copied[(topic, partition)] = CopiedPartition()
            copied.offsets.extend(map(_OFFSET, kept))
            copied.futures.extend(futures)
            timestamps = Counter(map(_TIMESTAMP, kept))
            self._copied_timestamps.update(timestamps)
            for timestamp_ms, count in timestamps.items():
                self.metrics.record_age.add(max(0, read_ms - timestamp_ms) / 1000, count)
            self._copied_bytes += (sum(map(len, filter(None, map(_KEY, kept))))
                                   + sum(map(len, filter(None, map(_VALUE, kept)))))

    def _copy_with_paths(self, remote: str, partition: int, run: Iterable[ReadRecord]
                         ) -> tuple[list[ReadRecord], list[RecordFuture]]:
        """Identity policy: each copy gets the path header; a record whose path names the target is
        dropped (the loop rule)."""
        assert self._producer is not None
        kept: list[ReadRecord] = []
        futures: list[RecordFuture] = []
        for r in run:
            path = self.policy.path_after(r.headers)
            if path is None:
                self.metrics.skipped += 1
                continue
            self._begin()
            headers = [h for h in r.headers or () if h[0] != PATH_HEADER] + [(PATH_HEADER, path)]
            futures.append(self._producer.produce(remote, r.value, key=r.key, partition=partition,
                                                  headers=headers, timestamp=r.timestamp_ms))
            kept.append(r)
        return kept, futures

    def _begin(self) -> None:
        """Open a transaction if none is: the syncs due go first, so that their partition joins it in the
        same AddPartitionsToTxn as the copies' and no round trip of the commit waits for them."""
        if not self._in_txn:
            assert self._producer is not None
            self._producer.begin_transaction()
            self._in_txn, self._txn_started = True, self._monotonic()
            for remote, partition, sync in self._syncs_due:
                key, value = sync_record(remote, partition, sync)
                self._producer.produce(self.policy.offset_syncs_topic(), value, key=key, partition=0)
            self._syncs_in_txn = len(self._syncs_due)

    def _commit(self) -> None:
        """Everything copied since the last commit, the syncs of the transaction before, and the source
        positions, in one transaction.

        Round trips, in order: the offsets (AddOffsetsToTxn, TxnOffsetCommit) go while the producer's
        sender adds the copies' partitions and sends them (AddPartitionsToTxn, Produce): the positions are
        the source's, known without the target's answer. Then EndTxn. Syncs name target offsets, known
        only from the acknowledgements: waiting for those and sending the syncs after them would put two
        round trips more in every commit, so the syncs of this transaction's copies go into the next one
        (_begin), MirrorMaker 2's way too (its syncs follow the acknowledgements). A sync only ever
        names committed copies; one lost to a crash leaves the translator an older sync, and a group
        translated with it re-reads more, never skips (offset_sync.py)."""
        assert self._producer is not None and self._reader is not None
        self._begin()
        positions = self._positions()
        for key, value in self._checkpoints:
            self._producer.produce(self.policy.checkpoints_topic(), value, key=key, partition=0)
        if self._monotonic() >= self._next_heartbeat:
            key, value = heartbeat_record(self.config.source.alias, self.config.target.alias, self._wall_ms())
            self._producer.produce(HEARTBEATS_TOPIC, value, key=key, partition=0)
            self._next_heartbeat = self._monotonic() + self.config.heartbeat_interval_ms / 1000
        if positions:
            self._producer.send_offsets_to_transaction(
                {(self._remote[t], p): offset for (t, p), offset in positions.items()},
                self.policy.positions_group(self.config.id))
        self._producer.commit_transaction()
        visible_ms = self._wall_ms()
        self._in_txn = False
        for remote, partition, sync in self._syncs_due[:self._syncs_in_txn]:
            self._translator.add(remote, partition, sync)
        del self._syncs_due[:self._syncs_in_txn]
        self._syncs_in_txn = 0
        self._make_syncs(positions)
        self._committed.update(positions)
        m = self.metrics
        m.transactions += 1
        m.records += sum(len(copied.offsets) for copied in self._copied.values())
        m.bytes += self._copied_bytes
        for timestamp_ms, count in self._copied_timestamps.items():
            m.replication_latency.add(max(0, visible_ms - timestamp_ms) / 1000, count)
        self._forget_copies()
        self._checkpoints = []
        self._sync_group_offsets()

    def _make_syncs(self, positions: dict[TopicPartition, int]) -> None:
        """The syncs of the copies just committed (every future is answered: the commit waited for them),
        due in the next transaction."""
        now = self._monotonic()
        for tp, position in positions.items():
            topic, partition = tp
            remote = self._remote[topic]
            copied = self._copied.get(tp) or CopiedPartition()
            end_due = now - self._last_sync_at.get(tp, 0.0) >= END_SYNC_INTERVAL_S
            syncs = syncs_for(copied.offsets, copied.target_offset, position,
                              self._latest_sync(remote, partition), self.config.offset_lag_max,
                              end_due=end_due)
            if syncs:
                if not self._syncs_due:
                    self._syncs_due_since = now
                self._syncs_due.extend((remote, partition, sync) for sync in syncs)
                self._last_sync_at[tp] = now

    def _latest_sync(self, remote: str, partition: int) -> OffsetSync | None:
        """The partition's latest sync, committed or due."""
        for due_remote, due_partition, sync in reversed(self._syncs_due):
            if (due_remote, due_partition) == (remote, partition):
                return sync
        return self._translator.latest(remote, partition)

    def _positions(self) -> dict[TopicPartition, int]:
        """The source positions the open transaction moves: after what the reader returned (control
        records and skipped records included) and never behind a record it copied."""
        assert self._reader is not None
        positions: dict[TopicPartition, int] = {}
        for tp in self._committed:
            copied = self._copied.get(tp)
            try:
                position = self._reader.position(tp, timeout_s=0)
            except KanalError:  # not known yet: nothing read of it, or only what `copied` shows
                if not copied:
                    continue
                position = -1
            if copied:  # never behind a record copied in this transaction (it would be copied again)
                position = max(position, copied.offsets[-1] + 1)
            if position != self._committed[tp]:
                positions[tp] = position
        return positions

    def _forget_copies(self) -> None:
        self._copied.clear()
        self._copied_timestamps.clear()
        self._copied_bytes = 0

    def _recover(self) -> None:
        """After a failure: the open transaction aborted (or the producer replaced, which aborts it), the
        source rewound to the committed positions."""
        self.metrics.aborted += 1
        self._syncs_in_txn = 0  # the syncs the aborted transaction held are due again
        self._forget_copies()
        self._checkpoints = []
        if self._in_txn and self._producer is not None:
            try:
                self._producer.abort_transaction(timeout_s=30)
            except KanalError as exc:
                if exc.code in FENCED or isinstance(exc, TransactionFatalError):
                    raise
                log.warning("%s: abort failed (%s): a new producer aborts it", self.config.name, exc)
                self._producer.close(timeout_s=5)
                self._producer = None
        self._in_txn = False
        if self._producer is None:
            self._producer = self._new_producer()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._next_refresh = 0.0  # the next step reassigns from the committed positions

    # ---- topics, configs, ACLs ----

    def _target_topics(self) -> dict[str, int]:
        """The remote topics that exist on the target and their partition counts (a describe each: only
        these, which is all plan_topics looks at)."""
        assert self._admin is not None
        remote = set(self._remote.values())
        return {name: len(self._admin.describe_topic(name).partitions)
                for name in self._admin.list_topics(include_internal=True) if name in remote}

    def _ensure_topic(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        assert self._admin is not None
        if topic in self._admin.list_topics(include_internal=True):
            return
        try:
            self._admin.create_topic(topic, partitions, self._replication_factor(), configs)
        except KanalError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    def _replication_factor(self) -> int:
        if self.config.replication_factor > 0:
            return self.config.replication_factor
        assert self._admin is not None
        return min(3, len(self._admin.describe_cluster().brokers))

    def _refresh(self) -> None:
        """New source topics and partitions (created on the target and assigned), configs and ACLs."""
        assert self._admin is not None
        mirrored = self.source.topics(lambda t: self.policy.mirrors(t, self.config.topics_pattern))
        self._remote = {t: self.policy.remote_topic(t) for t in mirrored}
        target_topics = self._target_topics()
        for change in plan_topics(mirrored, target_topics, self._remote):
            if change.create:
                log.info("%s: creating %s (%d partitions)", self.config.name, change.remote_topic,
                         change.partitions)
                try:
                    self._admin.create_topic(change.remote_topic, change.partitions,
                                             self._replication_factor())
                except KanalError as exc:
                    if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                        raise
            else:
                self._admin.create_partitions(change.remote_topic, change.partitions)
        if self.config.sync_topic_configs:
            for topic, remote in self._remote.items():
                set_on_target = {e.key: e.value for e in self._admin.describe_configs(
                    metadata_pb2.CONFIG_RESOURCE_TOPIC, remote) if not e.is_default}
                changes = plan_configs(self.source.topic_configs(topic), set_on_target)
                if changes:
                    log.info("%s: %s configs %s", self.config.name, remote, changes)
                    self._admin.alter_configs(metadata_pb2.CONFIG_RESOURCE_TOPIC, remote, changes)
        if self.config.sync_topic_acls:
            self._sync_acls()
        self._assign(mirrored)
        try:
            self.lag()
        except KanalError as exc:  # only a metric: the next refresh tries again
            log.info("%s: lag not measured: %s", self.config.name, exc)
        self._next_refresh = self._monotonic() + self.config.refresh_interval_ms / 1000

    def _sync_acls(self) -> None:
        assert self._admin is not None
        try:
            source_acls = self.source.topic_acls()
            target_acls = self._admin.describe_acls(
                admin_pb2.AclFilter(resource_type=metadata_pb2.ACL_RESOURCE_TOPIC))
            created = plan_acls(source_acls, target_acls, self._remote)
            if created:
                log.info("%s: creating %d ACLs", self.config.name, len(created))
                self._admin.create_acls(created)
        except KanalError as exc:
            if exc.code != ErrorCode.SECURITY_DISABLED:
                raise
            # No authorizer on the target: an ACL there would change nothing (logged once).
            if not self._acls_off_logged:
                log.info("%s: the target has no authorizer: ACLs not synced", self.config.name)
                self._acls_off_logged = True

    def _assign(self, mirrored: dict[str, int]) -> None:
        """Every partition of the mirrored topics, from the committed positions (a partition never copied:
        its log start)."""
        wanted = [(t, p) for t, n in sorted(mirrored.items()) for p in range(n)]
        if self._reader is not None and set(wanted) == set(self._committed):
            return
        assert self._admin is not None
        stored = self._admin.group_offsets(self.policy.positions_group(self.config.id))
        committed: dict[TopicPartition, int | None] = {}
        for topic, partition in wanted:
            offset = stored.get((self._remote[topic], partition), -1)
            committed[(topic, partition)] = offset if offset >= 0 else None
        self._committed = committed
        if self._reader is not None:
            self._reader.close()
        self._reader = self.source.reader()
        if committed:
            self._reader.assign(committed)

    # ---- offsets: syncs, checkpoints, group offsets ----

    def _load_syncs(self) -> None:
        """The syncs committed so far (read_committed, from the start of the flow's syncs topic)."""
        assert self._admin is not None
        topic = self.policy.offset_syncs_topic()
        (_start, end), = self._admin.log_bounds(topic, [0]).values()
        if end == 0:
            return
        consumer = Consumer(ConsumerConfig(
            bootstrap=self.config.target.bootstrap, security=self.target_security, enable_auto_commit=False,
            isolation_level="read_committed", auto_offset_reset="earliest"))
        try:
            consumer.assign([(topic, 0)])
            consumer.seek_to_beginning([(topic, 0)])
            deadline = self._monotonic() + 60
            while consumer.position((topic, 0)) < end:
                if self._monotonic() > deadline:
                    raise KanalError(ErrorCode.REQUEST_TIMED_OUT, f"{topic}: not read to {end} within 60 s")
                for record in consumer.poll(0.5):
                    try:
                        remote, partition, sync = parse_sync(record.key, record.value)
                    except (ValueError, KeyError, TypeError) as exc:
                        log.warning("%s: %s offset %d is not a sync (%r): skipped", self.config.name, topic,
                                    record.offset, exc)
                        continue
                    self._translator.add(remote, partition, sync)
        finally:
            consumer.close()

    def _prepare_checkpoints(self) -> None:
        """The source groups' committed offsets, translated: checkpoint records for the next transaction,
        and the commits group offset sync makes after it."""
        self._group_commits = {}
        for group in self.source.groups():
            if not self.config.groups_pattern.fullmatch(group) or group.startswith("kanal-mirror-"):
                continue
            translated: dict[TopicPartition, int] = {}
            for (topic, partition), upstream in self.source.group_offsets(group).items():
                remote = self._remote.get(topic)
                if remote is None or upstream < 0:
                    continue
                downstream = self._translator.translate(remote, partition, upstream)
                if downstream is None:
                    continue
                translated[(remote, partition)] = downstream
                self._checkpoints.append(checkpoint_record(group, remote, partition, upstream, downstream))
            if translated:
                self._group_commits[group] = translated

    def _sync_group_offsets(self) -> None:
        if not self.config.sync_group_offsets or not self._group_commits:
            return
        assert self._admin is not None
        for group, translated in self._group_commits.items():
            try:
                info = self._admin.describe_group(group)
                active = bool(info.members)
                current = self._admin.group_offsets(group) if not active else {}
            except KanalError as exc:
                if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
                    raise
                active, current = False, {}
            commits = plan_group_offsets(translated, current, active)
            if commits:
                self._admin.alter_group_offsets(group, commits)
        self._group_commits = {}

    def lag(self) -> dict[TopicPartition, int]:
        ends = self.source.end_offsets(list(self._committed))
        self.metrics.lag = {tp: max(0, end - (self._committed.get(tp) or 0)) for tp, end in ends.items()}
        return self.metrics.lag
