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

A background fetcher thread keeps a bounded buffer of records ahead of poll(): it sends one Fetch per
leader (all of that leader's assigned partitions in it, long-polling with fetch_min_bytes /
fetch_max_wait_ms), checks both CRCs of every batch, decodes it, and skips records below the position
(a fetch starts at the batch holding the offset). A leader change or a dead broker refreshes metadata;
an offset out of range follows auto_offset_reset. seek() discards what was fetched for that partition.
A batch that cannot be decoded (damaged, or stored before leaders validated records) is never skipped
silently: poll() returns the records before it, then raises UndecodableBatch (CORRUPT_MESSAGE, with the
partition and offset), again on every poll until the application seeks past it.

Decoding has two implementations with the same results and the same errors: the pure-Python one here
(upb parses each RecordList, a ConsumerRecord is built per record) and, when the optional C extension is
built, `kanal.clients._consumer_fast.decode_into` (clients/_consumer_fast.c), which reads the RecordList
bytes and builds the records in one pass, about 6x faster per record. Entry walking, CRCs, header checks
and decompression are per batch and stay here for both. `NATIVE` says whether the extension loaded
(`NATIVE_IMPORT_ERROR` why not), `Consumer.native` and the repr (`path=native|python`) which path a
consumer runs; KANAL_CONSUMER_PURE_PYTHON=1 or `ConsumerConfig(use_native_path=False)` keep Python.
"""

from __future__ import annotations

import logging
import operator
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Self, SupportsIndex

import grpc
from google.protobuf.message import DecodeError

from kanal.clients.assignors import ASSIGNORS
from kanal.clients.call_pool import CallPool
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.config_checks import check_bool, check_int, check_security, check_str, parse_bootstrap
from kanal.clients.group_membership import REJOIN_ERRORS, GroupMembership
from kanal.clients.native_ext import load_optional
from kanal.clients.throttle import BrokerThrottles
from kanal.v1 import broker_pb2, records_pb2
from kanal.v1.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, iter_entries, parse_batch
from kanal.v1.channel_security import ClientSecurity
from kanal.v1.client_id import check_client_id
from kanal.v1.codecs import decompress
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import check_topic_name

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
# Per partition of a Fetch request: the partition's generation and fetch offset when it was planned, so
# an answer is delivered only if neither changed meanwhile.
Planned = dict[TopicPartition, tuple[int, int]]
EARLIEST, LATEST = -2, -1
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

native, NATIVE_IMPORT_ERROR = load_optional("_consumer_fast", "KANAL_CONSUMER_PURE_PYTHON")


ISOLATION_LEVELS = {"read_uncommitted": broker_pb2.READ_UNCOMMITTED, "read_committed": broker_pb2.READ_COMMITTED}


@dataclass(frozen=True)
class ConsumerConfig:
    bootstrap: str
    # Where to start when a partition has no position or its position is out of range:
    # "earliest", "latest", or "none" (raise OFFSET_OUT_OF_RANGE from poll).
    auto_offset_reset: str = "latest"
    # Most records one poll() returns.
    max_poll_records: int = 500
    # A fetch waits until this many bytes are available (fetch.min.bytes)...
    fetch_min_bytes: int = 1
    # ...or this long (fetch.max.wait.ms).
    fetch_max_wait_ms: int = 500
    # Bytes one fetch may return over all partitions (fetch.max.bytes).
    fetch_max_bytes: int = 50 * 1024 * 1024
    # Bytes one fetch may return per partition (max.partition.fetch.bytes).
    partition_fetch_bytes_max: int = 1024 * 1024
    # Bytes of fetched, not yet polled records kept per partition before its fetching pauses.
    prefetch_bytes_max: int = 4 * 1024 * 1024
    request_timeout_ms: int = 30_000
    client_id: str = "kanal-consumer"
    # ---- groups (used when group_id is set) ----
    # The consumer group (group.id); empty for a consumer without a group (assign() only, no commits).
    group_id: str = ""
    # Static membership (group.instance.id): a restart within the session keeps the partitions.
    group_instance_id: str = ""
    # The coordinator removes a member that sends no heartbeat for this long (session.timeout.ms).
    session_timeout_ms: int = 45_000
    # How often the background thread heartbeats (heartbeat.interval.ms); well below the session timeout.
    heartbeat_interval_ms: int = 3_000
    # Longest time between poll() calls before this member leaves the group (max.poll.interval.ms); also
    # the rebalance timeout: how long the coordinator waits for members to rejoin.
    max_poll_interval_ms: int = 300_000
    # Commit the positions of what poll() returned, at most this often, from poll() and close().
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    # Assignors offered, preferred first (partition.assignment.strategy): range, roundrobin,
    # cooperative-sticky. The group uses the first one that every member offers.
    partition_assignment_strategy: tuple[str, ...] = ("range", "cooperative-sticky")
    # How often a pattern subscription looks for new or removed topics (metadata.max.age.ms).
    metadata_max_age_ms: int = 300_000
    # Decode fetched records in C when the extension is built (kanal.clients.consumer.NATIVE; same records
    # and errors). False keeps the pure-Python path.
    use_native_path: bool = True
    # TLS files and credentials (kanal.v1.channel_security.ClientSecurity); None: plaintext.
    security: ClientSecurity | None = None
    # "read_uncommitted": everything below the high-water mark, records of open and aborted transactions
    # included; "read_committed": only below the last stable offset, aborted transactions' records dropped
    # (isolation.level). Transaction markers are never returned either way.
    isolation_level: str = "read_uncommitted"

    def __post_init__(self) -> None:
        parse_bootstrap(self.bootstrap)
        check_security(self.security)
        for name in ("client_id", "group_id", "group_instance_id"):
            check_str(name, getattr(self, name))
        check_client_id(self.client_id)
        check_bool("enable_auto_commit", self.enable_auto_commit)
        check_bool("use_native_path", self.use_native_path)
        if self.isolation_level not in ISOLATION_LEVELS:
            raise KanalError(ErrorCode.INVALID_CONFIG,
                             f"isolation_level must be one of {sorted(ISOLATION_LEVELS)}, got {self.isolation_level!r}")
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise KanalError(ErrorCode.INVALID_CONFIG, "auto_offset_reset must be earliest, latest or none")
        for name, lo, hi in (("max_poll_records", 1, 1_000_000), ("fetch_min_bytes", 0, 1 << 30),
                             ("fetch_max_wait_ms", 0, 300_000), ("fetch_max_bytes", 1024, 1 << 30),
                             ("partition_fetch_bytes_max", 1024, 1 << 30), ("prefetch_bytes_max", 1024, 1 << 32),
                             ("request_timeout_ms", 100, 600_000), ("session_timeout_ms", 1, 3_600_000),
                             ("heartbeat_interval_ms", 1, 3_600_000), ("max_poll_interval_ms", 1, 3_600_000),
                             ("auto_commit_interval_ms", 1, 3_600_000), ("metadata_max_age_ms", 100, 86_400_000)):
            check_int(name, getattr(self, name), lo, hi)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise KanalError(ErrorCode.INVALID_CONFIG, "heartbeat_interval_ms must be below session_timeout_ms")
        unknown = [a for a in self.partition_assignment_strategy if a not in ASSIGNORS]
        if unknown or not self.partition_assignment_strategy:
            raise KanalError(ErrorCode.INVALID_CONFIG, f"partition_assignment_strategy must name assignors among "
                                                       f"{sorted(ASSIGNORS)}, got {self.partition_assignment_strategy}")
        if self.group_instance_id and not self.group_id:
            raise KanalError(ErrorCode.INVALID_CONFIG, "group_instance_id needs a group_id")


class ConsumerRecord:
    """One record as poll() returns it. Records decoded by the C path, and their headers lists, are kept
    out of the cyclic garbage collector (they hold only plain values; tracked, a consumer's buffered records
    cost a third of its CPU in collections): they are freed by refcount as usual, but a reference cycle
    made through one (a record stored in its own headers) would never be freed."""

    __slots__ = ("headers", "key", "leader_epoch", "offset", "partition", "timestamp_ms", "topic", "value")

    def __init__(self, topic, partition, offset, timestamp_ms, key, value, headers, leader_epoch) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.key = key
        self.value = value
        self.headers = headers
        self.leader_epoch = leader_epoch

    def __repr__(self) -> str:
        return f"<ConsumerRecord {self.topic}-{self.partition}@{self.offset} key={self.key!r}>"


# The C decoder fills ConsumerRecord's slots itself, without calling __init__ (which only stores its
# arguments): it checks here, once, that every field is a plain slot.
if native is not None:
    try:
        native.bind_record_class(ConsumerRecord)
    except TypeError as exc:
        native = None
        NATIVE_IMPORT_ERROR = str(exc)
NATIVE = native is not None  # whether the C decoder can be used (see clients/_consumer_fast.c)

# decode_record_list(out, record_list, topic, partition, leader_epoch, base_offset, first_timestamp_ms,
# min_offset) -> key + value bytes appended: one batch's decompressed RecordList into ConsumerRecords.
RecordListDecoder = Callable[[list[ConsumerRecord], bytes, str, int, int, int, int, int], int]


def decode_record_list_python(out: list[ConsumerRecord], record_list: bytes, topic: str, partition: int,
                              leader_epoch: int, base_offset: int, first_timestamp_ms: int, min_offset: int) -> int:
    """Append a ConsumerRecord to `out` for each record at or above `min_offset`; returns their key + value
    bytes. CORRUPT_MESSAGE, with `out` unchanged, when the bytes are not a RecordList. The reference for
    `_consumer_fast.decode_into`, which must give the same records and fail on the same input."""
    try:
        records = records_pb2.RecordList.FromString(record_list).records
    except DecodeError as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"records do not parse: {exc}") from exc
    payload_bytes = 0
    for r in records:
        offset = base_offset + r.offset_delta
        if offset < min_offset:
            continue  # a fetch starts at the batch holding the position
        key = r.key if r.HasField("key") else None
        value = r.value if r.HasField("value") else None
        out.append(ConsumerRecord(
            topic, partition, offset, first_timestamp_ms + r.timestamp_delta_ms, key, value,
            [(h.key, h.value if h.HasField("value") else None) for h in r.headers] if r.headers else [],
            leader_epoch))
        payload_bytes += len(key or b"") + len(value or b"")
    return payload_bytes


class UndecodableBatch(KanalError):
    """poll() met a batch of `topic_partition` it cannot decode (a CRC that does not match, records that do
    not parse or do not decompress): CORRUPT_MESSAGE, with `offset`, where the position stays (the batch's
    first offset, or the position when it lies inside the batch). The records before it were returned by
    earlier polls; every poll raises this again until the application seeks past the batch (or gives up:
    `kanal consume` exits non-zero)."""

    def __init__(self, topic_partition: TopicPartition, offset: int, reason: str) -> None:
        topic, partition = topic_partition
        super().__init__(ErrorCode.CORRUPT_MESSAGE,
                         f"{topic}-{partition}: the batch at offset {offset} cannot be decoded: {reason}")
        self.topic_partition = topic_partition
        self.offset = offset


def decode_fetched_until_error(tp: TopicPartition, data: bytes, min_offset: int, decode_record_list: RecordListDecoder,
                               aborted: Iterable[tuple[int, int]] | None = None,
                               ) -> tuple[list[ConsumerRecord], int, int, UndecodableBatch | None]:
    """decode_fetched that keeps what it decoded before a damaged batch: the records of the batches before
    it, the offset after the last of those (-1 when none), their key + value bytes, and the error (None when
    every batch decoded).

    Transaction markers (control batches) are never returned. `aborted`, for a read_committed fetch, is
    the reply's aborted transactions as (producer id, first offset): a TRANSACTIONAL batch of a producer
    whose aborted transaction began at or before it, and that no marker of that producer has ended since,
    is dropped (Kafka's consumer walks the same way)."""
    topic, partition = tp
    out: list[ConsumerRecord] = []
    next_offset = -1
    payload_bytes = 0
    pending = sorted(aborted or (), key=operator.itemgetter(1), reverse=True)  # pop() gives the lowest first
    aborting: set[int] = set()
    try:
        for entry in iter_entries(data, verify_crc=True):  # entry CRC and producer CRC both checked
            batch = parse_batch(entry.batch, verify_crc=False)
            while pending and pending[-1][1] <= batch.base_offset + batch.last_offset_delta:
                aborting.add(pending.pop()[0])
            if batch.attributes & ATTR_CONTROL:
                aborting.discard(batch.producer_id)  # its marker ends the producer's transaction here
                next_offset = batch.base_offset + batch.last_offset_delta + 1
                continue
            if batch.attributes & ATTR_TRANSACTIONAL and batch.producer_id in aborting:
                next_offset = batch.base_offset + batch.last_offset_delta + 1
                continue
            payload_bytes += decode_record_list(  # appends nothing when it fails
                out, decompress(batch.codec, batch.records), topic, partition, batch.partition_leader_epoch,
                batch.base_offset, batch.first_timestamp_ms, min_offset)
            next_offset = batch.base_offset + batch.last_offset_delta + 1
    except KanalError as exc:
        return out, next_offset, payload_bytes, UndecodableBatch(tp, max(next_offset, min_offset), exc.message)
    return out, next_offset, payload_bytes, None


def decode_fetched(tp: TopicPartition, data: bytes, min_offset: int, decode_record_list: RecordListDecoder,
                   aborted: Iterable[tuple[int, int]] | None = None) -> tuple[list[ConsumerRecord], int, int]:
    """The records at or above `min_offset` in one partition's fetched log entries, the offset after the
    last batch (-1 when there is none) and the key + value bytes of the records. Both CRCs and the header
    rules of every batch are checked; UndecodableBatch (CORRUPT_MESSAGE) when anything is damaged."""
    out, next_offset, payload_bytes, error = decode_fetched_until_error(tp, data, min_offset, decode_record_list,
                                                                        aborted)
    if error is not None:
        raise error
    return out, next_offset, payload_bytes


class _PartitionState:
    __slots__ = ("buffer", "buffered_bytes", "error", "fetch_offset", "generation", "position", "reset")

    def __init__(self) -> None:
        self.position: int | None = None  # next offset poll() returns
        self.fetch_offset: int | None = None  # next offset to fetch
        self.generation = 0  # bumped by seek: fetches started before it are discarded
        self.buffer: deque[ConsumerRecord] = deque()
        self.buffered_bytes = 0
        self.reset: int | None = None  # EARLIEST / LATEST / an offset to look up
        self.error: KanalError | None = None


class Consumer:
    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self.native = NATIVE and config.use_native_path
        self._decode_record_list: RecordListDecoder = native.decode_into if self.native and native is not None \
            else decode_record_list_python
        self._metadata = ClusterMetadata(config.bootstrap, request_timeout_ms=config.request_timeout_ms,
                                         security=config.security, client_id=config.client_id)
        self._throttles = BrokerThrottles()  # quota throttles the brokers asked for (throttle.py)
        self._metadata.refresh()  # fail fast on an unreachable bootstrap
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._running = True
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
                self._metadata, group_id=config.group_id, group_instance_id=config.group_instance_id,
                client_id=config.client_id, session_timeout_ms=config.session_timeout_ms,
                rebalance_timeout_ms=config.max_poll_interval_ms, assignors=config.partition_assignment_strategy,
                request_timeout_ms=config.request_timeout_ms)
            self._commit_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kanal-consumer-commit")

    def __repr__(self) -> str:
        return (f"<Consumer {self.config.client_id} path={'native' if self.native else 'python'} "
                f"assigned={sorted(self._states)}>")

    def metrics(self) -> dict[str, float]:
        """The consumer's quota metrics: fetch_throttle_count (fetch replies that carried a throttle),
        fetch_throttle_time_ms_total / _avg / _max (Kafka's fetch-throttle-time-avg/max)."""
        return self._throttles.metrics("fetch")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- assignment and positions ----

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = [_checked_partition(tp) for tp in partitions]
        for topic, partition in wanted:
            parts = self._metadata.partitions(topic)
            if not 0 <= partition < len(parts):
                raise KanalError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}")
        with self._lock:
            self._states = {tp: self._states.get(tp) or _PartitionState() for tp in wanted}
            for state in self._states.values():
                if state.position is None and state.reset is None:
                    state.reset = EARLIEST if self.config.auto_offset_reset == "earliest" else LATEST
            self._arrived.notify_all()

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

    @staticmethod
    def _discard(state: _PartitionState) -> None:
        state.generation += 1
        state.buffer.clear()
        state.buffered_bytes = 0
        state.error = None

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
        also where rebalances and auto-commits happen."""
        deadline = time.monotonic() + timeout_s
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
                    return out
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return out
                if not (self._group is not None and self._rejoin_needed):
                    self._arrived.wait(remaining)

    def _drain(self) -> list[ConsumerRecord]:
        """Buffered records, up to max_poll_records; when there are none, a partition's error is raised
        (once: the next fetch of that partition may set it again). Records a partition holds from before
        its error are returned first: they precede the failure."""
        out: list[ConsumerRecord] = []
        for state in self._states.values():
            while state.buffer and len(out) < self.config.max_poll_records:
                record = state.buffer.popleft()
                state.buffered_bytes -= len(record.value or b"") + len(record.key or b"")
                out.append(record)
                state.position = record.offset + 1
            self._skip_past_hidden(state)
        if not out:
            for state in self._states.values():
                if state.error is not None:
                    error, state.error = state.error, None
                    raise error
        return out

    @staticmethod
    def _skip_past_hidden(state: _PartitionState) -> None:
        """With nothing buffered, the position moves up to the fetch offset: what lies between was never
        to be returned (transaction markers, aborted records), so the position of a caught-up consumer is
        the end it read to, as in Kafka."""
        if (not state.buffer and state.position is not None and state.fetch_offset is not None
                and state.fetch_offset > state.position and state.reset is None):
            state.position = state.fetch_offset

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

    def committed(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None where nothing is committed)."""
        found = self._require_group().committed(list(partitions) if partitions is not None else None)
        return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}

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
        try:
            reply = self._metadata.any_stub().Metadata(broker_pb2.MetadataRequest(),
                                                       timeout=self.config.request_timeout_ms / 1000)
        except grpc.RpcError as exc:
            raise KanalError(ErrorCode.BROKER_NOT_AVAILABLE, f"listing topics for the pattern: {exc.code().name}") \
                from None
        return sorted(t.name for t in reply.topics if not t.is_internal and not t.error and
                      pattern.fullmatch(t.name))

    def _commit_quietly(self, partitions: list[TopicPartition], why: str) -> None:
        offsets = {tp: o for tp, o in self._positions(partitions).items() if self._committed_positions.get(tp) != o}
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
                time.monotonic() + self.config.max_poll_interval_ms / 1000 + self.config.request_timeout_ms / 1000
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
                state = _PartitionState()
                offset = committed.get(tp, -1)
                if offset >= 0:
                    state.position = state.fetch_offset = offset
                    self._committed_positions[tp] = offset
                else:
                    state.reset = EARLIEST if self.config.auto_offset_reset == "earliest" else LATEST
                states[tp] = state
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

    # ---- the fetcher thread ----

    def _run_fetcher(self) -> None:
        while self._running:
            try:
                self._resolve_resets()
                plan = self._plan()
                if not plan:
                    # Nothing to fetch, or every leader still throttles us: look again soon, or as soon
                    # as the first throttle ends.
                    throttle_end_s = self._throttles.next_end_s(time.monotonic())
                    with self._lock:
                        self._arrived.wait(0.05 if throttle_end_s is None else min(0.05, throttle_end_s))
                    continue
                self._fetch_all(plan)
            except KanalError as exc:
                log.warning("consumer fetcher: %s", exc)
                time.sleep(0.1)
            except Exception as exc:  # a bug: poll() raises it, where a dead fetcher would just go quiet
                log.exception("the consumer's fetcher thread failed")
                with self._lock:
                    self._fatal = KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the consumer's fetcher failed: {exc!r}")
                    self._arrived.notify_all()
                return

    def _fetch_all(self, plan: dict[str, tuple[broker_pb2.FetchRequest, Planned]]) -> None:
        """One long-poll Fetch per leader, all in flight together. The first runs as a blocking call on this
        thread and the others on the pool's long-lived threads: `Fetch.future()` would start and end a grpcio
        channel-spin thread per call (see clients/call_pool.py), which at one fetch per produced record costs
        more client CPU than decoding the records does."""
        timeout_s = self.config.fetch_max_wait_ms / 1000 + self.config.request_timeout_ms / 1000
        (first, (request, planned)), *others = plan.items()
        calls = [(endpoint, parts, self._calls.submit(self._metadata.stub(endpoint).Fetch, req, timeout_s))
                 for endpoint, (req, parts) in others]
        inline: Future = Future()
        try:
            inline.set_result(self._metadata.stub(first).Fetch(request, timeout=timeout_s))
        except grpc.RpcError as exc:
            inline.set_exception(exc)
        self._handle(first, planned, inline)
        for endpoint, parts, call in calls:
            self._handle(endpoint, parts, call)

    def _plan(self) -> dict[str, tuple[broker_pb2.FetchRequest, Planned]]:
        plan: dict[str, tuple[broker_pb2.FetchRequest, Planned]] = {}
        with self._lock:
            items = [(tp, s.fetch_offset, s.generation) for tp, s in self._states.items()
                     if s.fetch_offset is not None and s.buffered_bytes < self.config.prefetch_bytes_max
                     and s.error is None]
        refresh = False
        now = time.monotonic()
        for (topic, partition), offset, generation in items:
            endpoint = self._metadata.leader_endpoint(topic, partition)
            if endpoint is None:
                refresh = True
                continue
            if self._throttles.until_s(endpoint) > now:
                continue  # that broker throttled us (quota): nothing from it until the throttle is over
            if endpoint not in plan:
                plan[endpoint] = (broker_pb2.FetchRequest(
                    replica_id=-1, max_wait_ms=self.config.fetch_max_wait_ms, min_bytes=self.config.fetch_min_bytes,
                    max_bytes=self.config.fetch_max_bytes,
                    isolation_level=ISOLATION_LEVELS[self.config.isolation_level]), {})
            request, planned = plan[endpoint]
            topic_req = next((t for t in request.topics if t.topic == topic), None) or request.topics.add(topic=topic)
            topic_req.partitions.add(partition=partition, fetch_offset=offset,
                                     max_bytes=self.config.partition_fetch_bytes_max, current_leader_epoch=-1,
                                     last_fetched_epoch=-1)
            planned[(topic, partition)] = (generation, offset)
        if refresh:
            self._refresh()
        return plan

    def _refresh(self) -> None:
        try:
            self._metadata.refresh(sorted({t for t, _ in self._states}))
        except KanalError as exc:
            log.warning("metadata refresh failed: %s", exc)

    def _handle(self, endpoint: str, planned: Planned, call: Future) -> None:
        try:
            reply = call.result()
        except grpc.RpcError as exc:
            log.info("fetch from %s failed: %s", endpoint, exc.code().name)
            self._refresh()
            time.sleep(0.05)
            return
        self._throttles.on_reply(endpoint, reply.throttle_time_ms)
        refresh = False
        for topic_data in reply.topics:
            for p in topic_data.partitions:
                tp = (topic_data.topic, p.partition)
                if p.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(tp, planned[tp][0], p.error_message)
                    continue
                if p.error:
                    refresh = True
                    continue
                if p.records:
                    generation, fetch_offset = planned[tp]
                    records, next_offset, payload_bytes, error = decode_fetched_until_error(
                        tp, p.records, fetch_offset, self._decode_record_list,
                        [(a.producer_id, a.first_offset) for a in p.aborted_transactions])
                    self._deliver(tp, generation, fetch_offset, records, next_offset, payload_bytes, error)
        if refresh:
            self._refresh()

    def _deliver(self, tp: TopicPartition, generation: int, fetch_offset: int, records: list[ConsumerRecord],
                 next_offset: int, payload_bytes: int, error: UndecodableBatch | None = None) -> None:
        """Buffer a fetch's records, which start at `fetch_offset` (the decode skipped those below it). With
        `error`, a batch after them could not be decoded: fetching this partition stops at it, and poll()
        raises the error once the records before it are returned, instead of the fetcher retrying
        silently for ever."""
        with self._lock:
            state = self._states.get(tp)
            if state is None or state.generation != generation or state.fetch_offset != fetch_offset:
                return  # reassigned or sought meanwhile: these records may not follow the position
            state.buffer.extend(records)
            state.buffered_bytes += payload_bytes
            state.fetch_offset = max(fetch_offset, next_offset)
            if error is not None:
                state.error = error  # _plan fetches no partition that holds an error
            if not records and state.position == fetch_offset:
                self._skip_past_hidden(state)
            if records or error is not None:
                self._arrived.notify_all()

    def _out_of_range(self, tp: TopicPartition, generation: int, message: str) -> None:
        with self._lock:
            state = self._states.get(tp)
            if state is None or state.generation != generation:
                return
            if self.config.auto_offset_reset == "none":
                state.error = KanalError(ErrorCode.OFFSET_OUT_OF_RANGE, message)
                state.fetch_offset = None
            else:
                self._discard(state)
                state.position = state.fetch_offset = None
                state.reset = EARLIEST if self.config.auto_offset_reset == "earliest" else LATEST
            self._arrived.notify_all()

    def _resolve_resets(self) -> None:
        with self._lock:
            pending = [(tp, s.reset, s.generation) for tp, s in self._states.items() if s.reset is not None]
        for (topic, partition), where, generation in pending:
            endpoint = self._metadata.leader_endpoint(topic, partition)
            if endpoint is None:
                self._refresh()
                continue
            request = broker_pb2.ListOffsetsRequest(isolation_level=ISOLATION_LEVELS[self.config.isolation_level])
            request.topics.add(topic=topic).partitions.add(partition=partition, timestamp_ms=where)
            try:
                reply = self._metadata.stub(endpoint).ListOffsets(
                    request, timeout=self.config.request_timeout_ms / 1000
                )
            except grpc.RpcError:
                self._refresh()
                continue
            answer = reply.topics[0].partitions[0]
            if answer.error:
                self._refresh()
                continue
            offset = answer.offset
            if offset < 0:  # no record at or after that timestamp: the end
                request.topics[0].partitions[0].timestamp_ms = LATEST
                try:
                    offset = self._metadata.stub(endpoint).ListOffsets(
                        request, timeout=self.config.request_timeout_ms / 1000).topics[0].partitions[0].offset
                except grpc.RpcError:
                    continue
            with self._lock:
                state = self._states.get((topic, partition))
                if state is not None and state.generation == generation and state.reset is not None:
                    state.position = state.fetch_offset = offset
                    state.reset = None
                    self._arrived.notify_all()
