"""ReplicaFetcher: the task that copies a leader's partitions to this broker, one per leader followed.

Each round is one follower fetch (replica_id = this broker) for every partition this broker follows on
that leader, sent on the fetcher's ReplicaFetch stream (replica_stream.py: one request and its answer at
a time, many on one stream; unary Fetch to a leader without the method), from each log's end, carrying
the current leader epoch and the epoch of our last batch so the leader can report divergence, and each
topic's id (KIP-516), so the leader answers UNKNOWN_TOPIC_ID rather than data of another incarnation of
the name. Partition.apply_fetched appends, truncates or resets as the answer says; a reset of a tiered log
needs the state at the leader's local log start from remote storage (remote_aux_state.py), which the
fetcher reads in the remote reader's pool, never on the loop, before the partition applies it.
A failed round backs off briefly (and the next one opens a new stream); leadership changes come through
the metadata image, which updates the fetcher's partition list. An expected failure to apply an answer
(a KanalError: a full disk is STORAGE_ERROR) is logged and retried by the next round; anything else is a
broken invariant and stops the broker (kanal.server.fatal), as the metadata follower's does: a fetcher
that died quietly would leave its partitions out of the ISR for good.

Where it runs: a coroutine on the broker's gRPC event loop (the loop that serves Produce and Fetch),
over grpc.aio. Why not a thread of its own with the synchronous stream API, as before: every exchange
then woke four threads (the fetcher, gRPC's request-iterator thread twice, its channel thread), and each
wake-up is a context switch and a GIL hand-over, which on this VM cost more than the exchange's own work
(docs/benchmarks.md, issue 17). On the loop an answer arrives as one more callback among the loop's
others. Why not a loop of its own in a thread: grpc.aio wakes every event loop of a process through one
shared socket, so two loops hand each other's completions across threads. Applying an answer (CRC
checks, one pwrite per batch) runs on the loop, as a leader's append of a Produce already does.

The methods a caller uses from another thread (`start`, `set_partitions`, `stop`) only post work to the
loop and never wait on it: the metadata thread calls them holding the replica manager's lock, which the
loop's Produce handlers may need.

A partition added to the list (a new topic, a new leader) is fetched at once: the long poll in flight
(for the old list, up to replica_fetch_wait_ms_max) is cancelled, and the next round goes out on a new
stream. Otherwise a new partition's first records wait for that poll to expire before any follower asks
for them, and acks=all produces and consumers (who read below the high-water mark) wait with them: up to
500 ms after every topic creation or leader change.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import TYPE_CHECKING

import grpc

from kanal.broker.config import BrokerConfig
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.remote_aux_state import AuxStateSpec, RemoteAuxStateNeeded, read_aux_state
from kanal.broker.replica_stream import ReplicaFetchSession
from kanal.broker.storage.remote_storage import RemoteStorageError
from kanal.net.channel_options import channel_options
from kanal.security.channel_security import credentials_metadata, open_aio_channel
from kanal.server.fatal import stop_process
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.error import KanalError

if TYPE_CHECKING:
    from kanal.broker.partition import Partition
    from kanal.broker.remote_fetch import RemoteReader

log = logging.getLogger(__name__)
_BACKOFF_S = 0.1
# After a leader refused the stream but answered the same request as a unary Fetch (an older broker in a
# rolling upgrade), fetch from it with unary Fetch this long before trying a stream again.
UNARY_FALLBACK_S = 60.0
_REFUSED_STREAM = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INTERNAL)


class ReplicaFetcher:
    def __init__(self, metrics: BrokerMetrics, leader_id: int, endpoint: str, config: BrokerConfig,
                 broker_epoch, loop: asyncio.AbstractEventLoop, *,
                 remote_reader: RemoteReader | None = None) -> None:
        """`remote_reader`: the broker's remote storage reads (None without --remote-storage), for a
        follower that restarts at a tiered leader's local log start (remote_aux_state.py)."""
        self._metrics = metrics
        self._remote_reader = remote_reader
        self.leader_id = leader_id
        self.endpoint = endpoint
        self._config = config
        self._broker_epoch = broker_epoch
        self._loop = loop
        self._poll_s_max = config.replica_fetch_wait_ms_max / 1000
        self._options = channel_options(config.grpc_message_bytes_max)
        # Shared with other threads, under the lock: the partition list and whether one was added since
        # the fetcher last built a request.
        self._lock = threading.Lock()
        self._partitions: list[Partition] = []
        self._added = False
        self._stopped = False
        # The loop's own (touched on the loop only).
        self._task: asyncio.Task | None = None
        self._done: concurrent.futures.Future = concurrent.futures.Future()  # set when the task has ended
        self._wake: asyncio.Event | None = None  # set by a change of the list: an idle fetcher goes at once
        self._channel: grpc.aio.Channel | None = None
        self._session: ReplicaFetchSession | None = None
        self._unary_call: grpc.aio.UnaryUnaryCall | None = None  # a unary Fetch in flight
        self._unary_until_s = 0.0  # fetch with unary Fetch until then (monotonic seconds)
        self._interrupted = False  # set_partitions cancelled the fetch in flight
        self._requested: set[int] = set()  # ids of the partitions the fetch in flight was built for

    def __repr__(self) -> str:
        return f"<ReplicaFetcher leader={self.leader_id} {self.endpoint} partitions={len(self._partitions)}>"

    # ---- called from any thread: they post to the loop and return ----

    def start(self) -> None:
        self._post(self._spawn)

    def set_partitions(self, partitions: list[Partition]) -> None:
        """Follow these partitions from now on. One that was not followed yet is fetched at once: a long
        poll in flight for the old list is cancelled (see the module docstring)."""
        with self._lock:
            old = {id(p) for p in self._partitions}
            added = any(id(p) not in old for p in partitions)
            self._partitions = list(partitions)
            if added:
                self._added = True
        if added:
            self._post(self._on_added)

    def stop(self) -> concurrent.futures.Future:
        """Stop fetching; returns a future that is done once the fetcher's task has ended. Never waits:
        the task ends on the loop (at once unless it is applying an answer)."""
        with self._lock:
            self._stopped = True
        self._post(self._cancel)
        return self._done

    def _post(self, callback) -> None:
        try:
            self._loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop is closed: the broker is stopping and nothing runs on it any more
            if not self._done.done():
                self._done.set_result(None)

    # ---- on the loop ----

    def _spawn(self) -> None:
        if self._task is None and not self._stopped:
            self._task = self._loop.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")
        elif self._task is None:
            self._done.set_result(None)

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        elif not self._done.done():
            self._done.set_result(None)

    def _on_added(self) -> None:
        if self._wake is not None:
            self._wake.set()
        in_flight = self._session is not None and self._session.in_flight or self._unary_call is not None
        with self._lock:
            # The fetch in flight may already name every partition: a fetcher that starts reads the list
            # set_partitions gave it before this callback runs. Cancelling it then only costs a stream.
            missing = any(id(p) not in self._requested for p in self._partitions)
        if in_flight and missing and not self._interrupted:
            self._interrupted = True
            self._end_call()

    def _end_call(self) -> None:
        """Cancel the fetch in flight: the stream (a new one is opened for the next round) or the unary
        call. Nothing the cancelled fetch carried is applied."""
        if self._session is not None:
            self._session.cancel()
            self._session = None
        if self._unary_call is not None:
            self._unary_call.cancel()

    async def _run(self) -> None:
        self._wake = asyncio.Event()
        try:
            await self._run_rounds()
        except asyncio.CancelledError:
            if not self._stopped:  # only stop() ends a fetcher: one ended quietly leaves the ISR for good
                stop_process(f"the replica fetcher from leader {self.leader_id} was cancelled without a stop")
        except Exception as exc:  # noqa: BLE001 - a bug: a follower that stopped fetching leaves the ISR for good
            stop_process(f"the replica fetcher from leader {self.leader_id} failed", exc)
        finally:
            self._end_call()
            if self._channel is not None:
                await self._channel.close()
            self._done.set_result(None)

    async def _idle(self, seconds: float) -> None:
        """Wait `seconds` or until the partition list gains a partition."""
        assert self._wake is not None
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except TimeoutError:
            pass

    def _channel_now(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = open_aio_channel(self.endpoint, self._options, self._config.security.outbound())
        return self._channel

    async def _fetch(self, request: broker_pb2.FetchRequest) -> broker_pb2.FetchResponse:
        """One fetch round trip: on the ReplicaFetch stream (opened on first use, replaced when it is old or
        was cancelled), or as a unary Fetch to a leader that refused the stream."""
        if time.monotonic() < self._unary_until_s:
            return await self._unary(request)
        session = self._session
        if session is not None and session.expired:
            session.cancel()
            session = self._session = None
        if session is None:
            session = self._session = ReplicaFetchSession(
                self._channel_now(), credentials_metadata(self._config.security.outbound()), self._poll_s_max
            )
        try:
            return await session.exchange(request)
        except grpc.RpcError as exc:
            if self._session is session:
                self._session = None
            if session.answered or exc.code() not in _REFUSED_STREAM:
                raise
            # The stream failed before its first answer. A leader without the method answers UNIMPLEMENTED,
            # but a first write racing that answer fails as INTERNAL on grpc.aio: so ask the same thing with
            # unary Fetch, and if that is answered, the leader serves Fetch but not the stream.
            reply = await self._unary(request)
            log.info("leader %d did not take the ReplicaFetch stream (%s) but answered Fetch: unary Fetch "
                     "for the next %.0f s", self.leader_id, exc.code().name, UNARY_FALLBACK_S)
            self._unary_until_s = time.monotonic() + UNARY_FALLBACK_S
            return reply

    async def _unary(self, request: broker_pb2.FetchRequest) -> broker_pb2.FetchResponse:
        call = self._unary_call = broker_pb2_grpc.BrokerStub(self._channel_now()).Fetch(
            request, timeout=self._poll_s_max + 10,
            metadata=credentials_metadata(self._config.security.outbound()))
        try:
            return await call
        finally:
            self._unary_call = None

    async def _restart_from_remote(self, part: Partition, spec: AuxStateSpec) -> bool:
        """Restart `part` at the leader's local log start with the state remote storage holds there: the
        `.meta` GET runs in the remote reader's pool, off this loop; the state is applied under the
        partition's lock. A failure (storage down, an object gone or damaged) is logged and the next round
        asks again: the follower stays out of the ISR meanwhile, and never restarts empty instead."""
        reader = self._remote_reader
        if reader is None:
            log.error("%r: leader %d's local log start %d is above the whole log's start, which only remote "
                      "storage holds, and this broker has none (--remote-storage): cannot follow", part,
                      self.leader_id, spec.start)
            return False
        try:
            aux = await self._loop.run_in_executor(reader.pool, read_aux_state, reader, spec)
        except (RemoteStorageError, KanalError) as exc:
            log.warning("%r: reading the state at leader %d's local log start %d from remote storage failed "
                        "(the next round retries): %s", part, self.leader_id, spec.start, exc)
            return False
        return part.restart_from_remote(self.leader_id, aux)

    async def _run_rounds(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            with self._lock:
                partitions = list(self._partitions)
                self._added = False
            if not partitions:
                await self._idle(_BACKOFF_S)
                continue
            request = broker_pb2.FetchRequest(
                replica_id=self._config.broker_id, replica_epoch=self._broker_epoch(),
                max_wait_ms=self._config.replica_fetch_wait_ms_max, min_bytes=1,
                max_bytes=self._config.fetch_response_bytes_max,
            )
            by_key = {}
            topics: dict[str, broker_pb2.FetchRequest.TopicRequest] = {}
            now_ms = int(time.monotonic() * 1000)
            for part in partitions:
                part_bytes_max = self._config.replica_fetch_partition_bytes_max
                throttle = part.replication_throttle
                if throttle is not None:
                    allowance = throttle.allowance_bytes(now_ms)
                    if not allowance:
                        # In debt: left out of this round, which must not long-poll past the repayment.
                        request.max_wait_ms = min(request.max_wait_ms, throttle.wait_ms(now_ms))
                        continue
                    part_bytes_max = min(part_bytes_max, allowance)
                offset, epoch, last_epoch = part.fetch_position()
                topic = topics.get(part.topic) or topics.setdefault(
                    part.topic, request.topics.add(topic=part.topic, topic_id=part.topic_id))
                topic.partitions.add(
                    partition=part.partition_id,
                    fetch_offset=offset,
                    current_leader_epoch=epoch,
                    last_fetched_epoch=last_epoch,
                    max_bytes=part_bytes_max,
                )
                by_key[(part.topic, part.partition_id)] = part
            if not by_key:
                await self._idle(request.max_wait_ms / 1000)  # all throttled: wait for credit
                continue
            with self._lock:
                if self._added:  # a partition added while this request was built is not in it: build again
                    continue
            self._interrupted = False
            self._requested = {id(p) for p in partitions}
            try:
                reply = await self._fetch(request)
            except (grpc.RpcError, asyncio.CancelledError) as exc:
                task = asyncio.current_task()
                if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
                    raise  # stop() cancelled the task
                if self._interrupted:
                    continue  # set_partitions cancelled the call: go again with the new list
                # Anything else ends this call only: a CancelledError here is a call cancelled by someone
                # other than set_partitions (gRPC, a closed channel), never a reason to stop fetching.
                self._end_call()
                code = exc.code().name if isinstance(exc, grpc.RpcError) else "CANCELLED"
                log.debug("fetch from leader %d failed: %s", self.leader_id, code)
                await asyncio.sleep(_BACKOFF_S)
                continue
            appended = 0
            errors = 0
            for topic_data in reply.topics:
                for p in topic_data.partitions:
                    fetched_part = by_key.get((topic_data.topic, p.partition))
                    if fetched_part is None:
                        continue
                    if p.error:
                        errors += 1
                    try:
                        copied = fetched_part.apply_fetched(self.leader_id, p)
                    except RemoteAuxStateNeeded as needed:
                        if not await self._restart_from_remote(fetched_part, needed.spec):
                            errors += 1
                        continue
                    except KanalError as exc:  # expected (a full disk: STORAGE_ERROR): the next round retries
                        log.warning("applying fetched data to %r failed: %s", fetched_part, exc)
                        errors += 1
                        continue
                    appended += copied
                    throttle = fetched_part.replication_throttle
                    if throttle is not None and copied:
                        throttle.record(copied, int(time.monotonic() * 1000))
                        self._metrics.replication_throttled_bytes_in.inc(copied)
            if appended:
                # Nothing long-polls a follower's partitions (consumers read leaders), so nobody is woken.
                self._metrics.replication_bytes_in.inc(appended)
            if errors and not appended:
                await asyncio.sleep(_BACKOFF_S)
