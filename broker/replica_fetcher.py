"""ReplicaFetcher: the thread that copies a leader's partitions to this broker, one per leader followed.

Each round is one follower fetch (replica_id = this broker) for every partition this broker follows on
that leader, sent on the fetcher's ReplicaFetch stream (replica_stream.py: one request and its answer at
a time, many on one stream; unary Fetch to a leader without the method), from each log's end, carrying
the current leader epoch and the epoch of our last batch so the leader can report divergence, and each
topic's id (KIP-516), so the leader answers UNKNOWN_TOPIC_ID rather than data of another incarnation of
the name. Partition.apply_fetched appends, truncates or resets as the answer says.
A failed round backs off briefly (and the next one opens a new stream); leadership changes come through
the metadata image, which updates the fetcher's partition list. An expected failure to apply an answer
(a KanalError: a full disk is STORAGE_ERROR) is logged and retried by the next round; anything else is a
broken invariant and stops the broker (kanal.broker.fatal), as the metadata follower's does: a fetcher
that died quietly would leave its partitions out of the ISR for good.

A partition added to the list (a new topic, a new leader) is fetched at once: the long poll in flight
(for the old list, up to replica_fetch_wait_ms_max) is ended by closing its channel (which ends the
stream), and the next round goes out on a new stream on a new channel. Otherwise a new partition's
first records wait for that poll to expire before any follower asks for them, and acks=all produces and
consumers (who read below the high-water mark) wait with them: up to 500 ms after every topic creation
or leader change.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import grpc

from kanal.broker.config import BrokerConfig
from kanal.broker.fatal import stop_process
from kanal.broker.replica_stream import ReplicaFetchSession
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.channel_options import channel_options
from kanal.v1.channel_security import open_channel
from kanal.v1.error import KanalError

if TYPE_CHECKING:
    from kanal.broker.partition import Partition
    from kanal.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
_BACKOFF_S = 0.1


class ReplicaFetcher:
    def __init__(self, manager: ReplicaManager, leader_id: int, endpoint: str, config: BrokerConfig,
                 broker_epoch) -> None:
        self._manager = manager
        self.leader_id = leader_id
        self.endpoint = endpoint
        self._config = config
        self._broker_epoch = broker_epoch
        self._partitions: list[Partition] = []
        self._lock = threading.Lock()  # guards the partition list, the channel and the two flags below
        self._stop = threading.Event()
        self._added = threading.Event()  # set_partitions added a partition: an idle fetcher goes at once
        self._options = channel_options(config.grpc_message_bytes_max)
        self._channel = open_channel(endpoint, self._options, config.security.outbound())
        self._stub = broker_pb2_grpc.BrokerStub(self._channel)
        self._fetching = False  # a Fetch is in flight on self._channel
        self._interrupted = False  # ...and set_partitions closed its channel to end it
        # The fetcher thread's own: the open ReplicaFetch stream (replica_stream.py) and its stub.
        self._streaming = True  # False once this leader answered UNIMPLEMENTED: unary Fetch from then on
        self._session: ReplicaFetchSession | None = None
        self._session_stub: broker_pb2_grpc.BrokerStub | None = None
        self._thread = threading.Thread(target=self._run, name=f"replica-fetcher-{leader_id}", daemon=True)

    def __repr__(self) -> str:
        return f"<ReplicaFetcher leader={self.leader_id} {self.endpoint} partitions={len(self._partitions)}>"

    def set_partitions(self, partitions: list[Partition]) -> None:
        """Follow these partitions from now on. One that was not followed yet is fetched at once: a long
        poll in flight for the old list is ended (see the module docstring)."""
        interrupted = None
        with self._lock:
            old = {id(p) for p in self._partitions}
            added = any(id(p) not in old for p in partitions)
            self._partitions = list(partitions)
            if added:
                self._added.set()  # under the lock: the fetcher checks it there before each call
            if added and self._fetching and not self._interrupted:
                interrupted, self._interrupted = self._channel, True
                self._channel = open_channel(self.endpoint, self._options, self._config.security.outbound())
                self._stub = broker_pb2_grpc.BrokerStub(self._channel)
        if interrupted is not None:
            interrupted.close()  # the blocking Fetch on it ends with CANCELLED; nothing it carried is applied

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._added.set()
        self._thread.join(timeout=self._config.replica_fetch_wait_ms_max / 1000 + 5)
        with self._lock:
            channel = self._channel
        channel.close()

    def _fetch(
        self, stub: broker_pb2_grpc.BrokerStub, request: broker_pb2.FetchRequest
    ) -> broker_pb2.FetchResponse:
        """One fetch round trip: on the ReplicaFetch stream (opened on first use, replaced when it is old or
        its channel was replaced), or as a unary Fetch to a leader that has no ReplicaFetch."""
        poll_s_max = self._config.replica_fetch_wait_ms_max / 1000
        if not self._streaming:
            return stub.Fetch(request, timeout=poll_s_max + 10)
        session = self._session
        if session is not None and (session.expired or self._session_stub is not stub):
            self._end_session()
            session = None
        if session is None:
            session = self._session = ReplicaFetchSession(stub, poll_s_max)
            self._session_stub = stub
        try:
            return session.exchange(request)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            log.info("leader %d has no ReplicaFetch: fetching with unary Fetch from now on", self.leader_id)
            self._end_session()
            self._streaming = False
            return stub.Fetch(request, timeout=poll_s_max + 10)

    def _end_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = self._session_stub = None

    def _run(self) -> None:
        try:
            self._run_rounds()
        except Exception as exc:  # noqa: BLE001 - a bug: a follower that stopped fetching leaves the ISR for good
            stop_process(f"the replica fetcher from leader {self.leader_id} failed", exc)
        finally:
            self._end_session()

    def _run_rounds(self) -> None:
        while not self._stop.is_set():
            self._added.clear()
            with self._lock:
                partitions = list(self._partitions)
                stub = self._stub
            if not partitions:
                self._added.wait(_BACKOFF_S)
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
                self._added.wait(request.max_wait_ms / 1000)  # every partition is throttled: wait for credit
                continue
            with self._lock:
                # A partition added while this request was built is not in it: build it again.
                self._fetching = stub is self._stub and not self._added.is_set()
            if not self._fetching:
                continue
            try:
                reply = self._fetch(stub, request)
            except (grpc.RpcError, ValueError) as exc:  # ValueError: the channel was closed before the call
                self._end_session()
                with self._lock:
                    self._fetching = False
                    interrupted, self._interrupted = self._interrupted, False
                if interrupted:
                    continue
                if not isinstance(exc, grpc.RpcError):
                    raise
                log.debug("fetch from leader %d failed: %s", self.leader_id, exc.code().name)
                self._stop.wait(_BACKOFF_S)
                continue
            with self._lock:
                self._fetching = False
                if self._interrupted:  # the poll ended on its own before its channel was closed: fine
                    self._interrupted = False
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
                    except KanalError as exc:  # expected (a full disk: STORAGE_ERROR): the next round retries
                        log.warning("applying fetched data to %r failed: %s", fetched_part, exc)
                        errors += 1
                        continue
                    appended += copied
                    throttle = fetched_part.replication_throttle
                    if throttle is not None and copied:
                        throttle.record(copied, int(time.monotonic() * 1000))
                        self._manager.metrics.replication_throttled_bytes_in.inc(copied)
            if appended:
                # Nothing long-polls a follower's partitions (consumers read leaders), so nobody is woken.
                self._manager.metrics.replication_bytes_in.inc(appended)
            if errors and not appended:
                self._stop.wait(_BACKOFF_S)
