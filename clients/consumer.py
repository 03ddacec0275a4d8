"""Consumer: read records from partitions assigned by hand, or as a member of a consumer group.

    consumer = Consumer(ConsumerConfig(bootstrap="127.0.0.1:9092", auto_offset_reset="earliest"))
    consumer.assign([("orders", 0), ("orders", 1)])
    for record in consumer.poll(1.0): ...

    consumer = Consumer(ConsumerConfig(bootstrap=..., group_id="billing"))
    consumer.subscribe(["orders"], on_assign=..., on_revoke=...)   # or subscribe(pattern=r"orders-.*")
    while True:
        for record in consumer.poll(1.0): ...      # auto-commits every auto_commit_interval_ms
        consumer.commit()                          # or commit explicitly (enable_auto_commit=False)

Groups: the rebalance runs inside poll(), so on_assign / on_revoke run on the caller's thread (as in
Kafka's Java client). A heartbeat thread keeps the membership alive and notices rebalances; if poll() is
not called for max_poll_interval_ms, it leaves the group so the partitions go to members that make
progress. Eager assignors (range, roundrobin) revoke every partition before rejoining; cooperative-sticky
revokes only the partitions that move, and rejoins once more so they reach their new owner. Positions of
newly assigned partitions come from the group's committed offsets, else auto_offset_reset.

The consumer's other parts have modules of their own, and every name they export is importable from here
too: consumer_config.py (`ConsumerConfig`), consumer_decode.py (decoding fetched batches into
`ConsumerRecord`s, in Python or in C; `NATIVE`), consumer_fetcher.py (the fetcher thread, the base class
of `Consumer`).

Deserializers (`ConsumerConfig.key_deserializer` / `value_deserializer`, clients/serialization.py) run in
poll() on the records it returns, after the consumer's lock is released (a registry deserializer may fetch
a schema over the network; the fetcher thread goes on meanwhile). Without them poll() pays one attribute
check. A record a deserializer fails on is never skipped: see poll().
"""

from __future__ import annotations

import logging
import operator
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Self, SupportsIndex

from kanal.clients.call_pool import CallPool
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer_config import ISOLATION_LEVELS, ConsumerConfig
from kanal.clients.consumer_decode import (
    NATIVE,
    NATIVE_IMPORT_ERROR,
    ConsumerRecord,
    RecordListDecoder,
    TopicPartition,
    UndecodableBatch,
    decode_fetched,
    decode_fetched_until_error,
    decode_record_list_python,
    native,
)
from kanal.clients.consumer_fetcher import (
    EARLIEST,
    LATEST,
    ConsumerFetcher,
    Planned,
    ReadReplica,
    _PartitionState,
)
from kanal.clients.error_boundary import call
from kanal.clients.group_membership import REJOIN_ERRORS, GroupMembership
from kanal.clients.serialization import KEY, VALUE, RecordDeserializationError, SerializationContext
from kanal.clients.throttle import BrokerThrottles
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import check_topic_name

log = logging.getLogger(__name__)
# The names importable from here, the parts' included: users and tests import them all from this module.
__all__ = [
    "EARLIEST",
    "ISOLATION_LEVELS",
    "LATEST",
    "NATIVE",
    "NATIVE_IMPORT_ERROR",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRecord",
    "Planned",
    "RecordListDecoder",
    "TopicPartition",
    "UndecodableBatch",
    "decode_fetched",
    "decode_fetched_until_error",
    "decode_record_list_python",
    "native",
]
_OFFSET_MAX = (1 << 63) - 1  # offsets and timestamps are int64 on the wire, never negative here


def _checked_offset(value: object, what: str) -> int:
    """An offset or timestamp a caller gives, as an int in [0, 2^63 - 1], else a clear error at the call:
    a float or str let through would end the fetcher thread when it builds the request."""
    try:
        if not isinstance(value, SupportsIndex):
            raise TypeError
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}") from None
    if not 0 <= n <= _OFFSET_MAX:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"{what} {n} is outside [0, 2^63 - 1]")
    return n


def _checked_partition(tp: object) -> tuple[str, int]:
    """A (topic, partition) pair with an int partition (1.5 is not partition 1); the topic name is
    checked when its metadata is asked for."""
    if not isinstance(tp, tuple | list) or len(tp) != 2:
        raise TypeError(f"a partition is a (topic, partition) pair, not {tp!r}")
    topic, partition = tp
    try:
        return topic, operator.index(partition)
    except TypeError:
        raise TypeError(f"a partition number must be an int, not {type(partition).__name__}") from None

@dataclass(frozen=True)
class GroupMetadata:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str


class Consumer(ConsumerFetcher):
    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self.native = NATIVE and config.use_native_path
        self._decode_record_list: RecordListDecoder = (
            native.decode_into if self.native and native is not None else decode_record_list_python
        )
        self._metadata = ClusterMetadata(config.bootstrap, request_timeout_ms=config.request_timeout_ms,
                                         security=config.security, client_id=config.client_id)
        self._throttles = BrokerThrottles()  # quota throttles the brokers asked for (throttle.py)
        self._metadata.refresh()  # fail fast on an unreachable bootstrap
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._running = True
        self._failing_since: dict[TopicPartition, float] = {}
        self._read_replicas: dict[TopicPartition, ReadReplica] = {}
        self._fetch_errors = 0
        self._deserializing = config.key_deserializer is not None or config.value_deserializer is not None
        # The partition whose record a deserializer failed on: drained first by the next poll(), so that
        # poll() meets the record again (and raises again) before any other partition's records.
        self._undeserializable: TopicPartition | None = None
        # Fetches to the second and further leaders of one round (the first runs on the fetcher thread).
        self._calls = CallPool(4, "kanal-consumer-fetch")
        self._fetcher = threading.Thread(target=self._run_fetcher, name="kanal-consumer-fetcher", daemon=True)
        self._fetcher.start()
        # Group state: the subscription, the rebalance flag the heartbeat thread raises, commit bookkeeping.
        self._group: GroupMembership | None = None
        self._topics: list[str] = []
        self._pattern: re.Pattern | None = None
        self._pattern_checked = 0.0
        self._on_assign: Callable[[list[TopicPartition]], None] | None = None
        self._on_revoke: Callable[[list[TopicPartition]], None] | None = None
        self._rejoin_needed = False
        self._rebalancing = False
        self._fatal: KanalError | None = None
        self._last_poll = time.monotonic()
        self._last_auto_commit = time.monotonic()
        self._committed_positions: dict[TopicPartition, int] = {}
        self._stopping = threading.Event()
        self._commit_pool: ThreadPoolExecutor | None = None
        self._heartbeater: threading.Thread | None = None
        if config.group_id:
            self._group = GroupMembership(
                self._metadata,
                group_id=config.group_id,
                group_instance_id=config.group_instance_id,
                client_id=config.client_id,
                session_timeout_ms=config.session_timeout_ms,
                rebalance_timeout_ms=config.max_poll_interval_ms,
                assignors=config.partition_assignment_strategy,
                request_timeout_ms=config.request_timeout_ms,
            )
            self._commit_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kanal-consumer-commit")

    def __repr__(self) -> str:
        return (f"<Consumer {self.config.client_id} path={'native' if self.native else 'python'} "
                f"assigned={sorted(self._states)}>")

    def metrics(self) -> dict[str, float]:
        """fetch_error_count (a partition's fetches and offset lookups that failed, retriable or not), and
        the quota metrics: fetch_throttle_count (fetch replies that carried a throttle),
        fetch_throttle_time_ms_total / _avg / _max (Kafka's fetch-throttle-time-avg/max)."""
        return {"fetch_error_count": self._fetch_errors, **self._throttles.metrics("fetch")}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- assignment and positions ----

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read `partitions` (replacing the assignment; no group membership). A partition new to the
        consumer starts, as in Kafka, at its group's committed offset when the config has a group_id and
        one is committed, else by auto_offset_reset ("none": poll() and position() raise
        OFFSET_OUT_OF_RANGE for it until seek())."""
        wanted = [_checked_partition(tp) for tp in partitions]
        for topic, partition in wanted:
            parts = self._metadata.partitions(topic)
            if not 0 <= partition < len(parts):
                raise KanalError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}"
                )
        with self._lock:
            added = [tp for tp in wanted if tp not in self._states]
        committed = self._group.committed(added) if self._group is not None and added else {}
        with self._lock:
            self._states = {tp: self._states.get(tp) or self._starting_state(tp, committed.get(tp, -1))
                            for tp in wanted}
            self._arrived.notify_all()

    def _starting_state(self, tp: TopicPartition, committed: int) -> _PartitionState:
        """A newly assigned partition's state: at the `committed` offset (>= 0), else auto_offset_reset's
        (call with `_lock` held)."""
        state = _PartitionState()
        if committed >= 0:
            state.position = state.fetch_offset = committed
            self._committed_positions[tp] = committed
        elif self.config.auto_offset_reset == "none":
            state.fail(KanalError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                  f"{tp[0]}-{tp[1]} has no committed offset and auto_offset_reset is 'none': "
                                  "seek() to choose where to read"))
        else:
            state.reset = EARLIEST if self.config.auto_offset_reset == "earliest" else LATEST
        return state

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._states)

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get(tp)
        if state is None:
            raise KanalError(ErrorCode.INVALID_REQUEST, f"{tp[0]}-{tp[1]} is not assigned to this consumer")
        return state

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch `tp` from `offset` on (an int >= 0; past the log end, auto_offset_reset applies)."""
        offset = _checked_offset(offset, "seek offset")
        with self._lock:
            state = self._state(tp)
            self._discard(state)
            state.position = state.fetch_offset = offset
            state.reset = None
            self._arrived.notify_all()

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_special(partitions, EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_special(partitions, LATEST)

    def seek_to_timestamp(self, tp: TopicPartition, timestamp_ms: int) -> None:
        """Move to the first record at or after `timestamp_ms` (or the end when there is none)."""
        self._seek_special([tp], _checked_offset(timestamp_ms, "timestamp_ms"))

    def _seek_special(self, partitions: Iterable[TopicPartition] | None, where: int) -> None:
        with self._lock:
            for tp in list(partitions) if partitions is not None else list(self._states):
                state = self._state(tp)
                self._discard(state)
                state.position = state.fetch_offset = None
                state.reset = where
            self._arrived.notify_all()

    def position(self, tp: TopicPartition, timeout_s: float = 30.0) -> int:
        """The offset of the next record poll() returns for `tp` (resolving a pending reset first)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            state = self._state(tp)
            while state.position is None:
                if state.error is not None:
                    raise state.error
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KanalError(ErrorCode.REQUEST_TIMED_OUT, f"no position for {tp} yet")
                self._arrived.wait(remaining)
            return state.position

    # ---- polling ----

    def poll(self, timeout_s: float = 1.0) -> list[ConsumerRecord]:
        """Up to max_poll_records records, waiting up to timeout_s for the first one. In a group, this is
        also where rebalances and auto-commits happen. Raises a partition's error (when there are no
        records to return): a refusal that is not retriable (TOPIC_AUTHORIZATION_FAILED...) as soon as the
        fetcher got it, a retriable one (BROKER_NOT_AVAILABLE...) once the partition's fetches failed for
        request_timeout_ms; the partition is fetched again from the next poll() on.

        With deserializers, each record's key and value are theirs. When one fails, the records before it
        are returned (or, when it is the first, RecordDeserializationError is raised with its topic,
        partition, offset and field), and the record stays where it was: its partition's position is its
        offset, so commits never pass it, and every later poll() tries it again first, raising until a
        deserializer succeeds (a registry back up) or the application seeks past it
        (`seek(error.topic_partition, error.offset + 1)`). Kafka's Java consumer keeps the same place
        (RecordDeserializationException); confluent-kafka's Python consumer instead moves on."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            for state in self._states.values():
                if state.error_raised:
                    state.error = None
                    state.error_raised = False
                    self._arrived.notify_all()  # the fetcher may fetch the partition again
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._group is not None:
                self._last_poll = time.monotonic()
                self._maintain_group()
            with self._lock:
                out = self._drain()
                if out:
                    self._arrived.notify_all()  # buffer space freed: the fetcher may go on
                    if not self._deserializing:
                        return out
                    drained = {(r.topic, r.partition) for r in out}
                    states = {tp: (self._states[tp], self._states[tp].generation) for tp in drained}
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return out
                    if not (self._group is not None and self._rejoin_needed):
                        self._arrived.wait(remaining)
                    continue
            return self._deserialized(out, states)

    def _deserialized(self, records: list[ConsumerRecord],
                      states: dict[TopicPartition, tuple[_PartitionState, int]]) -> list[ConsumerRecord]:
        """`records` with their keys and values deserialized, up to the first that fails (see poll()):
        that one and those after it go back to the front of their partitions' buffers (`states`: each
        partition's state and generation when they were drained; a partition sought or revoked since
        takes nothing back)."""
        key_deserializer, value_deserializer = self.config.key_deserializer, self.config.value_deserializer
        for i, record in enumerate(records):
            tp = (record.topic, record.partition)
            field = KEY
            try:
                key = record.key
                if key_deserializer is not None:
                    key = key_deserializer(key, SerializationContext(record.topic, KEY, record.headers))
                field = VALUE
                value = record.value
                if value_deserializer is not None:
                    value = value_deserializer(value,
                                               SerializationContext(record.topic, VALUE, record.headers))
            except Exception as exc:  # a foreign library's error, translated at the boundary (and raised)
                error = RecordDeserializationError(tp, record.offset, field, exc)
                self._put_back(records[i:], states, tp)
                if i:
                    return records[:i]
                raise error from exc
            record.key, record.value = key, value
        return records

    def _put_back(self, records: list[ConsumerRecord],
                  states: dict[TopicPartition, tuple[_PartitionState, int]], failed: TopicPartition) -> None:
        """Return drained records, in order, to the front of their partitions' buffers, each partition's
        position back to its first such record; `failed` is drained first by the next poll()."""
        by_partition: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in records:
            by_partition.setdefault((record.topic, record.partition), []).append(record)
        with self._lock:
            for tp, returned in by_partition.items():
                state, generation = states[tp]
                if self._states.get(tp) is not state or state.generation != generation:
                    continue  # sought or revoked since: the application moved the partition on
                state.buffer.extendleft(reversed(returned))
                state.buffered_bytes += sum(len(r.value or b"") + len(r.key or b"") for r in returned)
                state.position = returned[0].offset
            self._undeserializable = failed

    def _drain(self) -> list[ConsumerRecord]:
        """Buffered records, up to max_poll_records; when there are none, a partition's error is raised
        (once: poll() clears it when it is next called, and the next fetch of that partition may set it
        again). Records a partition holds from before its error are returned first: they precede the
        failure."""
        out: list[ConsumerRecord] = []
        states: Iterable[_PartitionState] = self._states.values()
        if self._undeserializable is not None:  # poll() meets that partition's failed record first
            first = self._states.get(self._undeserializable)
            self._undeserializable = None
            if first is not None:
                states = [first, *(s for s in self._states.values() if s is not first)]
        for state in states:
            while state.buffer and len(out) < self.config.max_poll_records:
                record = state.buffer.popleft()
                state.buffered_bytes -= len(record.value or b"") + len(record.key or b"")
                out.append(record)
                state.position = record.offset + 1
            self._skip_past_hidden(state)
        if not out:
            for state in self._states.values():
                if state.error is not None and not state.error_raised:
                    state.error_raised = True
                    raise state.error
        return out

    def close(self) -> None:
        if self._group is not None and self._running:
            self._stopping.set()
            if self.config.enable_auto_commit and self._group.generation >= 0:
                self._commit_quietly(self.assignment(), "close")
            self._group.leave()
            if self._heartbeater is not None:
                self._heartbeater.join(timeout=5)
            if self._commit_pool is not None:
                self._commit_pool.shutdown(wait=True)
        self._running = False
        with self._lock:
            self._arrived.notify_all()
        self._fetcher.join(timeout=5)
        self._calls.close(wait=False)
        self._metadata.close()

    # ---- groups ----

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | re.Pattern | None = None,
                  on_assign: Callable[[list[TopicPartition]], None] | None = None,
                  on_revoke: Callable[[list[TopicPartition]], None] | None = None) -> None:
        """Join the group for `topics` (or every non-internal topic matching `pattern`); partitions are
        assigned by the group from the next poll() on. `on_assign` / `on_revoke` are called from poll()
        with the partitions gained or lost (commit there what you processed, if you commit by hand)."""
        if self._group is None:
            raise KanalError(ErrorCode.INVALID_CONFIG, "subscribe() needs a group_id in the ConsumerConfig")
        if (topics is None) == (pattern is None):
            raise KanalError(ErrorCode.INVALID_REQUEST, "subscribe() takes topics or a pattern, not both")
        if isinstance(topics, str | bytes):  # iterating "orders" would subscribe to o, r, d, e, s
            raise TypeError(f"subscribe() takes a list of topic names, not one {type(topics).__name__}: "
                            f"use [{topics!r}]")
        if topics is not None:
            topics = list(topics)  # read once: an iterator would be empty when the names are kept below
            for topic in topics:
                check_topic_name(topic)
        self._pattern = re.compile(pattern) if pattern is not None else None
        self._topics = sorted(set(topics)) if topics is not None else self._matching_topics()
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._rejoin_needed = True
        if self._heartbeater is None:
            self._heartbeater = threading.Thread(target=self._run_heartbeats, name="kanal-consumer-heartbeat",
                                                 daemon=True)
            self._heartbeater.start()

    def subscription(self) -> list[str]:
        return list(self._topics)

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (next offset to read per partition), by default the positions of every
        assigned partition. Raises KanalError; REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION /
        UNKNOWN_MEMBER_ID mean the partitions may belong to another member now: the next poll() rejoins."""
        group = self._require_group()
        if offsets is None:
            offsets = self._positions(self.assignment())
        try:
            group.commit(offsets, as_member=bool(self._topics) or self._pattern is not None)
        except KanalError as exc:
            if exc.code in REJOIN_ERRORS:
                self._request_rejoin()
            raise
        self._committed_positions.update(offsets)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: Callable[[dict[TopicPartition, int], KanalError | None], None] | None = None
                     ) -> Future:
        """commit() on a background thread; the future's result is None or the KanalError."""
        if offsets is None:
            offsets = self._positions(self.assignment())

        def run() -> None:
            try:
                self.commit(offsets)
            except KanalError as exc:
                if callback is not None:
                    callback(offsets, exc)
                raise
            if callback is not None:
                callback(offsets, None)

        return self._require_commit_pool().submit(run)

    def committed(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None where nothing is committed)."""
        found = self._require_group().committed(list(partitions) if partitions is not None else None)
        return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}

    def group_metadata(self) -> GroupMetadata:
        """This member's standing in its group (Kafka's ConsumerGroupMetadata): generation -1 and an
        empty member id while it is not in a generation."""
        group = self._require_group()
        return GroupMetadata(group.group_id, group.generation, group.member_id, group.group_instance_id)

    def _require_group(self) -> GroupMembership:
        if self._group is None:
            raise KanalError(ErrorCode.INVALID_CONFIG, "committing needs a group_id in the ConsumerConfig")
        return self._group

    def _require_commit_pool(self) -> ThreadPoolExecutor:
        self._require_group()
        if self._commit_pool is None:  # made with the membership, in __init__
            raise RuntimeError("a consumer with a group has no commit pool")
        return self._commit_pool

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        with self._lock:
            return {tp: s.position for tp in partitions if (s := self._states.get(tp)) is not None
                    and s.position is not None}

    def _request_rejoin(self) -> None:
        with self._lock:
            self._rejoin_needed = True
            self._arrived.notify_all()

    def _maintain_group(self) -> None:
        """Called by poll() after its check of _fatal."""
        if not self._topics and self._pattern is None:
            return  # assign() with a group id: commits only, no membership
        if self._pattern is not None and time.monotonic() - self._pattern_checked >= \
                self.config.metadata_max_age_ms / 1000:
            topics = self._matching_topics()
            if topics != self._topics:
                self._topics = topics
                self._rejoin_needed = True
        if self._rejoin_needed or self._require_group().generation < 0:
            self._rebalance()
        if self.config.enable_auto_commit and \
                time.monotonic() - self._last_auto_commit >= self.config.auto_commit_interval_ms / 1000:
            self._last_auto_commit = time.monotonic()
            self._commit_quietly(self.assignment(), "auto-commit")

    def _matching_topics(self) -> list[str]:
        pattern = self._pattern
        if pattern is None:
            return []
        self._pattern_checked = time.monotonic()
        # A failure is poll()'s (its code kept): the next poll() asks again.
        reply = call(self._metadata.any_stub().Metadata, broker_pb2.MetadataRequest(),
                     timeout_s=self.config.request_timeout_ms / 1000, what="listing topics for the pattern")
        return sorted(t.name for t in reply.topics if not t.is_internal and not t.error and
                      pattern.fullmatch(t.name))

    def _commit_quietly(self, partitions: list[TopicPartition], why: str) -> None:
        offsets = {
            tp: o for tp, o in self._positions(partitions).items() if self._committed_positions.get(tp) != o
        }
        try:
            self.commit(offsets)
        except KanalError as exc:
            log.warning("%s of %s failed: %s", why, sorted(offsets), exc)

    def _rebalance(self) -> None:
        group = self._require_group()
        self._rebalancing = True
        try:
            owned = self.assignment()
            if owned and not group.cooperative:
                # Eager: give up everything before rejoining, so no partition ever has two owners.
                self._revoke(owned)
                owned = []
            deadline = (
                time.monotonic()
                + self.config.max_poll_interval_ms / 1000
                + self.config.request_timeout_ms / 1000
            )
            while True:
                with self._lock:
                    self._rejoin_needed = False
                try:
                    assigned = group.join(self._topics, owned, self._partition_counts)
                except KanalError as exc:
                    if exc.code == ErrorCode.FENCED_INSTANCE_ID:
                        self._fatal = exc
                        raise
                    if exc.code not in REJOIN_ERRORS or time.monotonic() > deadline:
                        self._rejoin_needed = True
                        raise
                    log.info("rejoining group %s: %s", group.group_id, exc.message)
                    continue
                revoked = [tp for tp in owned if tp not in assigned]
                added = [tp for tp in assigned if tp not in owned]
                if revoked:
                    self._revoke(revoked)
                    owned = [tp for tp in owned if tp not in revoked]
                self._set_group_partitions(owned, added)
                if added and self._on_assign is not None:
                    self._on_assign(added)
                owned = owned + added
                if not revoked or not group.cooperative:
                    break
                # Cooperative: the partitions just given up go to their new owners in one more round.
        finally:
            self._rebalancing = False

    def _revoke(self, partitions: list[TopicPartition]) -> None:
        if self.config.enable_auto_commit:
            self._commit_quietly(partitions, "commit before revoking")
        if self._on_revoke is not None:
            self._on_revoke(partitions)
        with self._lock:
            for tp in partitions:
                self._states.pop(tp, None)
                self._committed_positions.pop(tp, None)
            self._arrived.notify_all()

    def _set_group_partitions(self, kept: list[TopicPartition], added: list[TopicPartition]) -> None:
        """Own `kept` + `added`; `added` start at the group's committed offsets, else auto_offset_reset."""
        committed = self._require_group().committed(added) if added else {}
        with self._lock:
            states = {tp: self._states[tp] for tp in kept if tp in self._states}
            for tp in added:
                states[tp] = self._starting_state(tp, committed.get(tp, -1))
            self._states = states
            self._arrived.notify_all()

    def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        view = self._metadata.refresh(topics) if topics else self._metadata.view
        return {t: len(view.topics[t]) for t in topics if t in view.topics}

    def _run_heartbeats(self) -> None:
        interval_s = self.config.heartbeat_interval_ms / 1000
        while not self._stopping.wait(interval_s):
            group = self._require_group()
            if self._rebalancing or group.generation < 0:
                continue
            if time.monotonic() - self._last_poll > self.config.max_poll_interval_ms / 1000:
                log.warning("poll() was not called for max_poll_interval_ms (%d ms): leaving group %s so its "
                            "partitions go to members that make progress", self.config.max_poll_interval_ms,
                            group.group_id)
                group.leave()
                self._request_rejoin()
                continue
            try:
                code = group.heartbeat()
            except KanalError as exc:
                log.info("heartbeat to group %s failed: %s", group.group_id, exc)
                continue
            if code == ErrorCode.FENCED_INSTANCE_ID:
                self._fatal = KanalError(code, "another consumer joined with this group_instance_id")
                self._request_rejoin()
            elif code in REJOIN_ERRORS:
                self._request_rejoin()

