"""A scripted broker for client tests: a real gRPC server on 127.0.0.1 (a free port chosen at run time)
serving `kanal.v1.Broker` from the generated stubs, for what the clients' error boundary needs to meet.

It answers Metadata from a `Layout` its brokers share (so a client finds the leader it names), keeps a
tiny in-memory log per partition (Produce appends stored batches, Fetch and ListOffsets read them), and
answers InitProducerId, FindCoordinator and CreateTopics. A test scripts a refusal per method
(`refuse("Produce", KanalError(...))`); it leaves through the real server boundary
(kanal.server.error_boundary), so the status and error trailer are the ones real brokers send. Every call
is counted per method, refused or not. `stop()` and `restart()` (the same port) make the broker go down
and come back; the log survives a restart.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc

from kanal.server.error_boundary import error_boundary
from kanal.v1 import admin_pb2, broker_pb2, broker_pb2_grpc
from kanal.v1.batch import NewRecord, build_batch, frame_entry, iter_entries, scan_batch, with_broker_suffix
from kanal.v1.error import ErrorCode, KanalError

EARLIEST, LATEST = -2, -1
_FETCH_WAIT_S_MAX = 0.2  # a Fetch with nothing to return waits at most this long for an append


@dataclass
class Layout:
    """What Metadata says, shared by the brokers of one test: broker id -> endpoint, topic -> the leader's
    id of each partition."""

    brokers: dict[int, str] = field(default_factory=dict)
    topics: dict[str, list[int]] = field(default_factory=dict)

    def metadata(self, topics: list[str] | None = None) -> broker_pb2.MetadataResponse:
        """The brokers and `topics` (every topic when none are named, as a broker answers)."""
        reply = broker_pb2.MetadataResponse(brokers=[
            admin_pb2.BrokerDescription(broker_id=i, endpoint=e) for i, e in sorted(self.brokers.items())])
        for name, leaders in sorted(self.topics.items()):
            if topics and name not in topics:
                continue
            reply.topics.add(name=name, topic_id=f"id-{name}", partitions=[
                broker_pb2.PartitionMetadata(partition=p, leader=leader, replicas=[leader], isr=[leader])
                for p, leader in enumerate(leaders)])
        return reply


class ScriptedBroker(broker_pb2_grpc.BrokerServicer):
    def __init__(self, broker_id: int, layout: Layout) -> None:
        self.broker_id = broker_id
        self.layout = layout
        self.calls: Counter[str] = Counter()
        self._refusals: dict[str, KanalError] = {}
        self._lock = threading.Condition()
        self._logs: dict[tuple[str, int], list[bytes]] = {}  # log entries, one per batch, in offset order
        self._ends: dict[tuple[str, int], int] = {}
        self._server: grpc.Server | None = None
        self.port = self._start(0)
        self.endpoint = f"127.0.0.1:{self.port}"
        layout.brokers[broker_id] = self.endpoint

    def __repr__(self) -> str:
        return f"<ScriptedBroker {self.broker_id} {self.endpoint} calls={dict(self.calls)}>"

    # ---- the test's side ----

    def refuse(self, method: str, error: KanalError | None) -> None:
        """Answer every later `method` call with `error` (None: answer normally again)."""
        with self._lock:
            if error is None:
                self._refusals.pop(method, None)
            else:
                self._refusals[method] = error

    def append(self, topic: str, partition: int, *values: bytes) -> int:
        """Store a batch of records as a leader would; returns its base offset."""
        return self._store((topic, partition), build_batch([NewRecord(v, None, 1_000) for v in values]))

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(10)
            self._server = None

    def restart(self) -> None:
        """Serve again on the same port (the channels clients hold reconnect to it)."""
        self.stop()
        if self._start(self.port) != self.port:
            raise RuntimeError(f"port {self.port} could not be bound again")

    def _start(self, port: int) -> int:
        server = grpc.server(ThreadPoolExecutor(max_workers=8))
        broker_pb2_grpc.add_BrokerServicer_to_server(self, server)
        bound = server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        self._server = server
        return bound

    # ---- the broker's side ----

    def _enter(self, method: str) -> None:
        """Count the call; raise the refusal scripted for it (the error boundary answers with it)."""
        with self._lock:
            self.calls[method] += 1
            refusal = self._refusals.get(method)
        if refusal is not None:
            raise refusal

    def _store(self, key: tuple[str, int], batch: bytes) -> int:
        with self._lock:
            base = self._ends.get(key, 0)
            self._logs.setdefault(key, []).append(frame_entry(with_broker_suffix(batch, base, 0)))
            self._ends[key] = base + scan_batch(batch).last_offset_delta + 1
            self._lock.notify_all()
            return base

    @error_boundary
    def Metadata(self, request, context):
        self._enter("Metadata")
        return self.layout.metadata(list(request.topics))

    @error_boundary
    def InitProducerId(self, request, context):
        self._enter("InitProducerId")
        return broker_pb2.InitProducerIdResponse(producer_id=7, producer_epoch=0)

    @error_boundary
    def FindCoordinator(self, request, context):
        self._enter("FindCoordinator")
        return broker_pb2.FindCoordinatorResponse(node_id=self.broker_id, endpoint=self.endpoint)

    @error_boundary
    def CreateTopics(self, request, context):
        self._enter("CreateTopics")
        results = []
        for topic in request.topics:
            self.layout.topics[topic.name] = [self.broker_id] * topic.partitions
            results.append(admin_pb2.CreateTopicResult(name=topic.name, topic_id=f"id-{topic.name}"))
        return admin_pb2.CreateTopicsResponse(results=results)

    @staticmethod
    def _per_partition(request, reply, answer):
        """`reply` with `answer(topic, partition request)` (the fields of its answer) for each partition
        `request` names, topic by topic."""
        for topic in request.topics:
            answers = reply.topics.add(topic=topic.topic)
            for p in topic.partitions:
                answers.partitions.add(partition=p.partition, **answer(topic.topic, p))
        return reply

    @error_boundary
    def Produce(self, request, context):
        self._enter("Produce")

        def store(topic: str, p) -> dict:
            bases = [self._store((topic, p.partition), batch) for batch in p.batches]
            return {"base_offset": bases[0], "batch_base_offsets": bases}

        return self._per_partition(request, broker_pb2.ProduceResponse(), store)

    @error_boundary
    def Fetch(self, request, context):
        self._enter("Fetch")
        wanted = [(t.topic, p.partition, p.fetch_offset) for t in request.topics for p in t.partitions]
        with self._lock:  # a long poll: wait (a little) until something is there to return
            self._lock.wait_for(lambda: any(self._ends.get((t, p), 0) > o for t, p, o in wanted),
                                min(request.max_wait_ms / 1000, _FETCH_WAIT_S_MAX))
            logs = {(t, p): list(self._logs.get((t, p), ())) for t, p, _ in wanted}
            ends = dict(self._ends)
        reply = broker_pb2.FetchResponse()
        for topic, partition, offset in wanted:
            entries = [e for e in logs[(topic, partition)]
                       if next(iter_entries(e)).suffix.last_offset >= offset]
            end = ends.get((topic, partition), 0)
            reply.topics.add(topic=topic).partitions.add(
                partition=partition, high_watermark=end, last_stable_offset=end, log_end_offset=end,
                records=b"".join(entries))
        return reply

    @error_boundary
    def ListOffsets(self, request, context):
        self._enter("ListOffsets")

        def look_up(topic: str, p) -> dict:
            if p.timestamp_ms not in (EARLIEST, LATEST):
                raise KanalError(ErrorCode.INVALID_REQUEST, "the scripted broker looks up no timestamps")
            return {"offset": 0 if p.timestamp_ms == EARLIEST else self._ends.get((topic, p.partition), 0)}

        return self._per_partition(request, broker_pb2.ListOffsetsResponse(), look_up)
