"""The consumer's fetcher thread, a base class of `Consumer` (consumer.py) that works on the consumer's
partition states under the consumer's lock (`Consumer.__init__` sets the attributes declared below and starts
`_run_fetcher` on its thread).

A background fetcher thread keeps a bounded buffer of records ahead of poll(): it sends one Fetch per
leader (all of that leader's assigned partitions in it, long-polling with fetch_min_bytes /
fetch_max_wait_ms), checks both CRCs of every batch, decodes it, and skips records below the position
(a fetch starts at the batch holding the offset). seek() discards what was fetched for that partition.

Failures: a failed call is the KanalError it stands for (clients/error_boundary.py: kanal's error
trailer, else the gRPC status), and a partition's error in a reply one too; each is the partition's
(`_fetch_failed`). A retriable one (a broker down or starting, a leader that moved) refreshes metadata and
is tried again after retry_backoff_ms; once a partition's fetches have failed for request_timeout_ms in a
row, poll() raises the last error, with its code, and fetching goes on after it. One that is not
retriable (TOPIC_AUTHORIZATION_FAILED, INVALID_REQUEST...) is raised by the next poll() at once, and the
partition is not fetched again until the poll after that. An offset out of range follows
auto_offset_reset. A batch that cannot be decoded (damaged, or stored before leaders validated records)
is never skipped silently: poll() returns the records before it, then raises UndecodableBatch
(CORRUPT_MESSAGE, with the partition and offset), again on every poll until the application seeks past it.

Follower fetching (KIP-392): with `client_rack` set, every Fetch names the rack, and a leader whose broker
selects replicas by rack may answer a partition with `preferred_read_replica`. The partition is then
fetched from that replica (`_read_replicas`) until metadata_max_age_ms passes, the metadata no longer
has it in the ISR, or it answers anything but records: an error of the call (a replica stopped: after
the request timeout) or of the partition (even OFFSET_OUT_OF_RANGE, which there means only that the
replica is behind) sends the partition back to its leader at once, without counting as a failure and
without an offset reset; the leader decides again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from kanal.clients.call_pool import CallPool
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer_config import ISOLATION_LEVELS, ConsumerConfig
from kanal.clients.consumer_decode import (
    ConsumerRecord,
    RecordListDecoder,
    TopicPartition,
    UndecodableBatch,
    decode_fetched_until_error,
)
from kanal.clients.error_boundary import call
from kanal.clients.throttle import BrokerThrottles
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)
# Per partition of a Fetch request: the partition's generation and fetch offset when it was planned, so
# an answer is delivered only if neither changed meanwhile.
Planned = dict[TopicPartition, tuple[int, int]]
EARLIEST, LATEST = -2, -1


@dataclass(frozen=True, slots=True)
class ReadReplica:
    """The replica a partition's leader told this consumer to read from (preferred_read_replica)."""

    broker_id: int
    endpoint: str
    until_s: float  # time.monotonic() after which the leader is asked again


class _PartitionState:
    __slots__ = ("buffer", "buffered_bytes", "error", "error_raised", "fetch_offset", "generation",
                 "position", "reset")

    def __init__(self) -> None:
        self.position: int | None = None  # next offset poll() returns
        self.fetch_offset: int | None = None  # next offset to fetch
        self.generation = 0  # bumped by seek: fetches started before it are discarded
        self.buffer: deque[ConsumerRecord] = deque()
        self.buffered_bytes = 0
        self.reset: int | None = None  # EARLIEST / LATEST / an offset to look up
        # An error for poll() to raise; the partition is not fetched while it holds one. Once poll() raised
        # it (error_raised), the next poll() clears it and fetching resumes.
        self.error: KanalError | None = None
        self.error_raised = False

    def fail(self, error: KanalError) -> None:
        self.error = error
        self.error_raised = False


class ConsumerFetcher:
    """Fetching for a `Consumer`: the thread's loop (`_run_fetcher`) and what it shares with poll() and seek()
    (`_discard`, `_skip_past_hidden`). Every field is the consumer's; `_states` and the partition states in
    it change only with `_lock` held."""

    config: ConsumerConfig
    _metadata: ClusterMetadata
    _throttles: BrokerThrottles
    _calls: CallPool
    _decode_record_list: RecordListDecoder
    _states: dict[TopicPartition, _PartitionState]
    _lock: threading.Lock
    _arrived: threading.Condition
    _running: bool
    _fatal: KanalError | None
    # The fetcher thread's alone: since when (time.monotonic()) each partition's fetches or offset lookups
    # have failed with retriable errors, without a success between.
    _failing_since: dict[TopicPartition, float]
    _fetch_errors: int  # failed fetches and offset lookups, per partition (metrics(): fetch_error_count)
    _read_replicas: dict[TopicPartition, ReadReplica]  # the fetcher thread's alone: follower fetching

    @staticmethod
    def _discard(state: _PartitionState) -> None:
        state.generation += 1
        state.buffer.clear()
        state.buffered_bytes = 0
        state.error = None
        state.error_raised = False

    @staticmethod
    def _skip_past_hidden(state: _PartitionState) -> None:
        """With nothing buffered, the position moves up to the fetch offset: what lies between was never
        to be returned (transaction markers, aborted records), so the position of a caught-up consumer is
        the end it read to, as in Kafka."""
        if (not state.buffer and state.position is not None and state.fetch_offset is not None
                and state.fetch_offset > state.position and state.reset is None):
            state.position = state.fetch_offset

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
                    self._fatal = KanalError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, f"the consumer's fetcher failed: {exc!r}"
                    )
                    self._arrived.notify_all()
                return

    def _fetch_all(self, plan: dict[str, tuple[broker_pb2.FetchRequest, Planned]]) -> None:
        """One long-poll Fetch per leader, all in flight together. The first runs as a blocking call on this
        thread and the others on the pool's long-lived threads: `Fetch.future()` would start and end a grpcio
        channel-spin thread per call (see clients/call_pool.py), which at one fetch per produced record costs
        more client CPU than decoding the records does."""
        timeout_s = self.config.fetch_max_wait_ms / 1000 + self.config.request_timeout_ms / 1000
        (first, (request, planned)), *others = plan.items()
        calls = [(endpoint, parts, self._calls.submit(self._metadata.stub(endpoint).Fetch, req, timeout_s,
                                                      what=f"Fetch from {endpoint}"))
                 for endpoint, (req, parts) in others]
        inline: Future = Future()
        try:
            inline.set_result(call(self._metadata.stub(first).Fetch, request, timeout_s=timeout_s,
                                   what=f"Fetch from {first}"))
        except KanalError as error:
            inline.set_exception(error)
        self._handle(first, planned, inline)
        for endpoint, parts, outcome in calls:
            self._handle(endpoint, parts, outcome)

    def _plan(self) -> dict[str, tuple[broker_pb2.FetchRequest, Planned]]:
        plan: dict[str, tuple[broker_pb2.FetchRequest, Planned]] = {}
        with self._lock:
            items = [(tp, s.fetch_offset, s.generation) for tp, s in self._states.items()
                     if s.fetch_offset is not None and s.buffered_bytes < self.config.prefetch_bytes_max
                     and s.error is None]
        refresh = False
        now = time.monotonic()
        for (topic, partition), offset, generation in items:
            endpoint = self._read_endpoint((topic, partition), now)
            if endpoint is None:
                refresh = True
                continue
            if self._throttles.until_s(endpoint) > now:
                continue  # that broker throttled us (quota): nothing from it until the throttle is over
            if endpoint not in plan:
                plan[endpoint] = (
                    broker_pb2.FetchRequest(
                        replica_id=-1,
                        max_wait_ms=self.config.fetch_max_wait_ms,
                        min_bytes=self.config.fetch_min_bytes,
                        max_bytes=self.config.fetch_max_bytes,
                        isolation_level=ISOLATION_LEVELS[self.config.isolation_level],
                        rack_id=self.config.client_rack,
                    ),
                    {},
                )
            request, planned = plan[endpoint]
            topic_req = next((t for t in request.topics if t.topic == topic), None) or request.topics.add(
                topic=topic
            )
            topic_req.partitions.add(partition=partition, fetch_offset=offset,
                                     max_bytes=self.config.partition_fetch_bytes_max, current_leader_epoch=-1,
                                     last_fetched_epoch=-1)
            planned[(topic, partition)] = (generation, offset)
        if refresh:
            self._refresh()
        return plan

    def _read_endpoint(self, tp: TopicPartition, now: float) -> str | None:
        """Where to fetch `tp`: the replica its leader preferred while that holds (not expired, still in
        the ISR in our metadata), else its leader (None: unknown, refresh the metadata)."""
        preferred = self._read_replicas.get(tp)
        if preferred is not None:
            if now < preferred.until_s and self._metadata.in_sync_endpoint(*tp, preferred.broker_id):
                return preferred.endpoint
            del self._read_replicas[tp]
        return self._metadata.leader_endpoint(*tp)

    def _from_read_replica(self, tp: TopicPartition, endpoint: str) -> bool:
        """Whether this fetch of `tp` went to a preferred read replica; if so, forget it: something went
        wrong there, and the leader is asked next."""
        preferred = self._read_replicas.get(tp)
        if preferred is None or preferred.endpoint != endpoint:
            return False
        del self._read_replicas[tp]
        return True

    def _prefer(self, tp: TopicPartition, broker_id: int) -> None:
        endpoint = self._metadata.in_sync_endpoint(*tp, broker_id)
        if endpoint is None:  # a broker or ISR our metadata does not have yet: stay with the leader
            self._refresh()
            return
        self._read_replicas[tp] = ReadReplica(broker_id, endpoint,
                                              time.monotonic() + self.config.metadata_max_age_ms / 1000)

    def _refresh(self) -> None:
        try:
            self._metadata.refresh(sorted({t for t, _ in self._states}))
        except KanalError as exc:
            log.warning("metadata refresh failed: %s", exc)

    def _handle(self, endpoint: str, planned: Planned, outcome: Future) -> None:
        try:
            reply = outcome.result()
        except KanalError as failed:  # the whole call failed: every partition it asked for did
            log.info("%s", failed)
            for tp, (generation, _) in planned.items():
                if not self._from_read_replica(tp, endpoint):
                    self._fetch_failed(tp, generation, failed)
            if failed.retriable:
                self._refresh()
                time.sleep(self.config.retry_backoff_ms / 1000)  # a retry backoff, not a synchronisation
            return
        self._throttles.on_reply(endpoint, reply.throttle_time_ms)
        refresh = False
        for topic_data in reply.topics:
            for p in topic_data.partitions:
                tp = (topic_data.topic, p.partition)
                if p.error and self._from_read_replica(tp, endpoint):
                    log.info("Fetch of %s-%d from read replica %s: %s; back to the leader", *tp, endpoint,
                             p.error_message or ErrorCode.Name(p.error))
                    continue
                if p.HasField("preferred_read_replica"):
                    self._prefer(tp, p.preferred_read_replica)
                    continue
                if p.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(tp, planned[tp][0], p.error_message)
                    continue
                if p.error:
                    self._fetch_failed(tp, planned[tp][0], KanalError(
                        p.error, f"Fetch of {tp[0]}-{tp[1]} from {endpoint}: {p.error_message}"))
                    refresh = True
                    continue
                if self._failing_since:
                    self._failing_since.pop(tp, None)
                if p.records:
                    generation, fetch_offset = planned[tp]
                    records, next_offset, payload_bytes, error = decode_fetched_until_error(
                        tp, p.records, fetch_offset, self._decode_record_list,
                        [(a.producer_id, a.first_offset) for a in p.aborted_transactions])
                    self._deliver(tp, generation, fetch_offset, records, next_offset, payload_bytes, error)
        if refresh:
            self._refresh()

    def _fetch_failed(self, tp: TopicPartition, generation: int, error: KanalError) -> None:
        """A fetch or offset lookup of `tp` failed with `error`. Not retriable: poll() raises it now.
        Retriable: the caller tries again (after refreshing metadata), and poll() raises it only once the
        partition has failed for request_timeout_ms in a row, when it is the last error of that run."""
        self._fetch_errors += 1
        now = time.monotonic()
        since = self._failing_since.setdefault(tp, now)
        if error.retriable and now - since < self.config.request_timeout_ms / 1000:
            return
        del self._failing_since[tp]
        with self._lock:
            state = self._states.get(tp)
            if state is None or state.generation != generation:
                return  # reassigned or sought meanwhile: the failure was of a fetch nobody waits for
            state.fail(error)
            self._arrived.notify_all()

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
                state.fail(error)  # _plan fetches no partition that holds an error
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
                state.fail(KanalError(ErrorCode.OFFSET_OUT_OF_RANGE, message))
                state.fetch_offset = None
            else:
                self._discard(state)
                state.position = state.fetch_offset = None
                state.reset = EARLIEST if self.config.auto_offset_reset == "earliest" else LATEST
            self._arrived.notify_all()

    def _resolve_resets(self) -> None:
        with self._lock:
            pending = [(tp, s.reset, s.generation) for tp, s in self._states.items()
                       if s.reset is not None and s.error is None]
        for (topic, partition), where, generation in pending:
            endpoint = self._metadata.leader_endpoint(topic, partition)
            if endpoint is None:
                self._refresh()
                continue
            request = broker_pb2.ListOffsetsRequest(
                isolation_level=ISOLATION_LEVELS[self.config.isolation_level]
            )
            request.topics.add(topic=topic).partitions.add(partition=partition, timestamp_ms=where)
            try:
                offset = self._list_offset(endpoint, request)
                if offset < 0:  # no record at or after that timestamp: the end
                    request.topics[0].partitions[0].timestamp_ms = LATEST
                    offset = self._list_offset(endpoint, request)
            except KanalError as error:
                self._fetch_failed((topic, partition), generation, error)
                if error.retriable:
                    self._refresh()
                continue
            self._failing_since.pop((topic, partition), None)
            with self._lock:
                state = self._states.get((topic, partition))
                if state is not None and state.generation == generation and state.reset is not None:
                    state.position = state.fetch_offset = offset
                    state.reset = None
                    self._arrived.notify_all()

    def _list_offset(self, endpoint: str, request: broker_pb2.ListOffsetsRequest) -> int:
        """The offset a one-partition ListOffsets answers; its error (of the call, or the partition's) as a
        KanalError."""
        reply = call(self._metadata.stub(endpoint).ListOffsets, request,
                     timeout_s=self.config.request_timeout_ms / 1000, what=f"ListOffsets at {endpoint}")
        answer, asked = reply.topics[0].partitions[0], request.topics[0]
        if answer.error:
            raise KanalError(answer.error, f"ListOffsets of {asked.topic}-{asked.partitions[0].partition} at "
                                           f"{endpoint}")
        return answer.offset
