"""BrokerService: the Broker gRPC service (broker.proto), a thin shell over the replica manager, the
metadata image and the controller client. Handlers translate messages and errors; they hold no state.

It runs on a grpc.aio server (server.py). Coroutine handlers run on the server's event loop and never
block it for long: Produce, Fetch and ReplicaFetch (followers' fetches on one stream, each served as a
Fetch: replica_stream.py) (appends and reads are page-cache work under a partition lock; a
waiting acks=all produce or long poll is a parked coroutine woken by the partition, Kafka's purgatory),
Metadata and ListOffsets. JoinGroup and SyncGroup are admitted on a pool thread (admission may write
the group's state with acks=all) and then park as coroutines too. Every other handler is a plain
function that the server runs on its pool of `request_threads`: those may block on the controller or a
group write. So no number of waiting calls can hold every thread, and replication (followers' Fetches)
never queues behind client calls.

Until this broker has registered and caught up with the metadata log (metadata_catch_up.py), every handler
refuses its call with BROKER_NOT_AVAILABLE (retriable, gRPC UNAVAILABLE) before it does anything
(`_refuse_until_ready`, the first line of each): before then the broker's image is empty, so it would
answer from no metadata at all (unknown topics, no leaders) or, worse, act on it. gRPC health and
reflection are other services and always answer (health says NOT_SERVING until the broker is ready and
unfenced: server.py).

Authorization: `@gated` (request_authorization.py) on every handler checks the call against the ACLs when
`--authorizer on`; the handler sees only what the caller may do. Forwarded admin calls carry the
caller's principal to the controller (`kanal-forwarded-principal`), which stamps it on the records."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from kanal.broker.config import BrokerConfig
from kanal.broker.controller_client import ControllerClient
from kanal.broker.group_coordinator import GroupCoordinator, join_timed_out, sync_timed_out
from kanal.broker.lifecycle import BrokerLifecycle
from kanal.broker.metadata_follower import MetadataFollower
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.producer_ids import ProducerIdManager
from kanal.broker.replica_manager import ReplicaManager
from kanal.broker.replica_stream import serve_replica_stream
from kanal.broker.request_authorization import RequestGate, gated
from kanal.broker.transaction_coordinator import TransactionCoordinator
from kanal.metadata import MetadataImage, offline_reason
from kanal.security.call_identity import PRINCIPAL_METADATA_KEY, peer_host
from kanal.security.principal import call_principal
from kanal.server.error_boundary import async_error_boundary, error_boundary
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

_FORWARDED_ADMIN_CALLS = (
    "CreateTopics",
    "DeleteTopics",
    "CreatePartitions",
    "DescribeConfigs",
    "AlterConfigs",
    "AlterClientQuotas",
    "DescribeClientQuotas",
    "DescribeCluster",
    "CreateAcls",
    "DescribeAcls",
    "DeleteAcls",
    "AlterUserScramCredentials",
    "DescribeUserScramCredentials",
    "AlterPartitionReassignments",
    "ListPartitionReassignments",
    "ElectLeaders",
    "UnregisterBroker",
    "AddVoter",
    "RemoveVoter",
)


def metadata_response(image: MetadataImage, topics: list[str], metadata_offset: int, *, cluster_id: str,
                      controller_id: int, node_listener: bool = False) -> broker_pb2.MetadataResponse:
    """What clients see of the cluster: its id, the active controller as this broker last heard from it
    (-1 before the first heartbeat), live brokers, and each requested topic's partitions. Asked on the
    listener for other nodes (`node_listener`), the brokers' endpoints are theirs on that listener, as
    Kafka answers with the endpoints of the listener a request came in on."""
    reply = broker_pb2.MetadataResponse(cluster_id=cluster_id, controller_id=controller_id,
                                        metadata_offset=metadata_offset)
    for broker in sorted(image.live_brokers().values(), key=lambda b: b.broker_id):
        endpoint = broker.peer_endpoint if node_listener else broker.endpoint
        reply.brokers.add(broker_id=broker.broker_id, endpoint=endpoint, rack=broker.rack,
                          fenced=False, broker_epoch=broker.broker_epoch)
    live = set(image.live_brokers())
    directories = {b: reg.directory_id for b, reg in image.brokers.items()}
    for name in topics or sorted(image.topics):
        topic = image.topics.get(name)
        if topic is None:
            reply.topics.add(name=name, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        out = reply.topics.add(name=name, topic_id=topic.topic_id, is_internal=name.startswith("__"))
        for p in topic.partitions:
            out.partitions.add(
                partition=p.partition_id,
                error=ErrorCode.LEADER_NOT_AVAILABLE if p.leader < 0 else ErrorCode.NONE,
                leader=p.leader, leader_epoch=p.leader_epoch, replicas=p.replicas, isr=p.isr,
                offline_reason=offline_reason(p, live, directories) if p.leader < 0 else "",
            )
    return reply


class BrokerParts(Protocol):
    """The parts of one broker that the handlers serve from: BrokerServer (server.py), which makes the
    service, wires them and starts them in order."""

    config: BrokerConfig
    metrics: BrokerMetrics
    lifecycle: BrokerLifecycle
    metadata: MetadataFollower
    replicas: ReplicaManager
    gate: RequestGate
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    producer_ids: ProducerIdManager
    controllers: ControllerClient


class BrokerService(broker_pb2_grpc.BrokerServicer):
    def __init__(self, server: BrokerParts, *, node_listener: bool = False) -> None:
        """`node_listener`: this service answers on the listener for other nodes (--inter-node-listen), so
        the endpoints it names are the brokers' ones on that listener."""
        self._server = server
        self._node_listener = node_listener
        # Each request name's counter and latency children, looked up once: `labels()` takes the metric's
        # lock and builds a key on every call, and the data-path handlers run on the one event loop.
        self._timers: dict[str, tuple[Any, Any]] = {}
        self._purgatory: dict[str, Any] = {}

    def refuse_until_ready(self) -> None:
        """What every handler does first (below), for the broker's other services."""
        self._refuse_until_ready()

    def _refuse_until_ready(self) -> None:
        """BROKER_NOT_AVAILABLE until this broker is registered and has published its caught-up image;
        clients retry it, here later or at another broker. Once ready, a broker stays ready: a later
        re-registration keeps the image it acts on, and a fenced broker leads nothing."""
        server = self._server
        registered, caught_up = server.lifecycle.broker_epoch >= 0, server.metadata.caught_up
        if not (registered and caught_up):
            server.metrics.requests_refused_starting.inc()
            raise KanalError(
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"broker {server.config.broker_id} is starting: "
                f"{'registered' if registered else 'not registered yet'}, "
                f"{'caught up' if caught_up else 'catching up with the metadata log'} "
                f"(offset {server.metadata.offset}, log end {server.metadata.end_offset}); retry",
            )

    def _timed(self, name: str, started: float) -> None:
        timer = self._timers.get(name)
        if timer is None:
            metrics = self._server.metrics
            timer = self._timers[name] = (metrics.requests.labels(name), metrics.request_latency.labels(name))
        timer[0].inc()
        timer[1].observe(time.perf_counter() - started)

    @async_error_boundary
    @gated
    async def Produce(self, request: broker_pb2.ProduceRequest,
                      context: grpc.aio.ServicerContext) -> broker_pb2.ProduceResponse:
        self._refuse_until_ready()
        started = time.perf_counter()
        woken = LoopWaker(asyncio.get_running_loop())
        replicas = self._server.replicas
        call = replicas.begin_produce(request, woken.set)
        try:
            if call.rechecks:  # schema validation refused an id this broker's image may not know yet
                loop = asyncio.get_running_loop()
                if await loop.run_in_executor(None, replicas.sync_for_rechecks, call):
                    replicas.recheck_produce(call, woken.set)
            while not call.done:
                remaining = call.remaining_s()
                if remaining <= 0:
                    call.time_out_open()
                    break
                await woken.wait(remaining)
        finally:
            if not call.done:  # cancelled: end its waits now rather than at their deadline
                call.time_out_open()
        reply = call.finish()
        self._timed("Produce", started)
        return reply

    @async_error_boundary
    @gated
    async def Fetch(self, request: broker_pb2.FetchRequest,
                    context: grpc.aio.ServicerContext) -> broker_pb2.FetchResponse:
        self._refuse_until_ready()
        return await self._fetch(request)

    @async_error_boundary
    async def ReplicaFetch(self, request_iterator, context: grpc.aio.ServicerContext) -> None:
        """A follower's fetches on one stream (replica_stream.py), each served as a Fetch and authorized as
        one: with the authorizer on, every request must come from the broker principal of its replica_id
        with CLUSTER_ACTION (request_authorization.py's Fetch rule), or it gets nothing."""
        self._refuse_until_ready()
        gate = self._server.gate

        async def fetch(request: broker_pb2.FetchRequest) -> broker_pb2.FetchResponse:
            if not gate.enabled:
                return await self._fetch(request)
            admission = gate.admit("Fetch", request, context)
            reply = None if admission.request is None else await self._fetch(admission.request)
            return admission.reply(reply)

        await serve_replica_stream(context, fetch)

    async def _fetch(self, request: broker_pb2.FetchRequest) -> broker_pb2.FetchResponse:
        started = time.perf_counter()
        woken = LoopWaker(asyncio.get_running_loop())
        call = self._server.replicas.begin_fetch(request, woken)
        purgatory = self._purgatory.get(call.kind)
        if purgatory is None:
            purgatory = self._purgatory[call.kind] = self._server.metrics.fetch_purgatory.labels(call.kind)
        try:
            while not call.read():
                purgatory.inc()
                try:
                    await woken.wait(call.remaining_s())
                finally:
                    purgatory.dec()
            if call.remote_reads:  # tiered storage: blocking reads, never on this loop
                reader = self._server.replicas.remote_reader
                pool = reader.pool if reader is not None else None
                await asyncio.get_running_loop().run_in_executor(pool, call.complete_remote)
        finally:
            call.close()
        self._timed("FetchFollower" if call.follower is not None else "FetchConsumer", started)
        return call.reply

    @async_error_boundary
    @gated
    async def ListOffsets(self, request: broker_pb2.ListOffsetsRequest,
                          context: grpc.aio.ServicerContext) -> broker_pb2.ListOffsetsResponse:
        self._refuse_until_ready()
        reader = self._server.replicas.remote_reader
        if reader is not None:  # a lookup may read remote storage: off this loop
            return await asyncio.get_running_loop().run_in_executor(
                reader.pool, self._server.replicas.list_offsets, request)
        return self._server.replicas.list_offsets(request)

    @async_error_boundary
    @gated
    async def Metadata(self, request: broker_pb2.MetadataRequest,
                       context: grpc.aio.ServicerContext) -> broker_pb2.MetadataResponse:
        self._refuse_until_ready()
        # The image the replicas were last reconciled with: a topic is named here only once this broker
        # hosts its replicas (the follower publishes an image before the replica manager has reconciled
        # with it). Before the first reconcile the follower's image is all there is.
        lifecycle = self._server.lifecycle
        image = self._server.replicas.reconciled_image or self._server.metadata.image
        return metadata_response(
            image,
            list(request.topics),
            image.next_offset,
            cluster_id=lifecycle.cluster_id,
            controller_id=lifecycle.active_controller_id,
            node_listener=self._node_listener,
        )

    @error_boundary
    @gated
    def InitProducerId(self, request: broker_pb2.InitProducerIdRequest,
                       context: grpc.ServicerContext) -> broker_pb2.InitProducerIdResponse:
        self._refuse_until_ready()
        if request.transactional_id:
            return _in_band(
                broker_pb2.InitProducerIdResponse, self._server.transactions.init_producer_id, request
            )
        return broker_pb2.InitProducerIdResponse(
            producer_id=self._server.producer_ids.next_id(), producer_epoch=0
        )

    # ---- transactions (issue 22): whole-call failures in the reply's error field, as for groups ----

    @error_boundary
    @gated
    def AddPartitionsToTxn(self, request, context):
        self._refuse_until_ready()
        return _in_band(
            broker_pb2.AddPartitionsToTxnResponse, self._server.transactions.add_partitions, request
        )

    @error_boundary
    @gated
    def AddOffsetsToTxn(self, request, context):
        self._refuse_until_ready()
        return _in_band(broker_pb2.AddOffsetsToTxnResponse, self._server.transactions.add_offsets, request)

    @error_boundary
    @gated
    def TxnOffsetCommit(self, request, context):
        self._refuse_until_ready()
        return _in_band(broker_pb2.TxnOffsetCommitResponse, self._server.groups.txn_commit, request)

    @error_boundary
    @gated
    def EndTxn(self, request, context):
        self._refuse_until_ready()
        return _in_band(broker_pb2.EndTxnResponse, self._server.transactions.end_txn, request)

    @error_boundary
    @gated
    def WriteTxnMarkers(self, request, context):
        self._refuse_until_ready()
        return self._server.transactions.write_markers_here(request)

    @error_boundary
    @gated
    def DescribeTransactions(self, request, context):
        self._refuse_until_ready()
        return self._server.transactions.describe(request)


    # ---- groups: failures of the whole call are answered in the reply's error field, as Kafka does ----

    @error_boundary
    @gated
    def FindCoordinator(self, request, context):
        self._refuse_until_ready()
        if request.key_type == broker_pb2.COORDINATOR_TRANSACTION:
            reply = _in_band(broker_pb2.FindCoordinatorResponse, self._server.transactions.find_coordinator,
                             request.key)
        else:
            reply = _in_band(broker_pb2.FindCoordinatorResponse, self._server.groups.find_coordinator,
                             request)
        if self._node_listener and reply.endpoint:
            coordinator = self._server.metadata.image.brokers.get(reply.node_id)
            if coordinator is not None:
                reply.endpoint = coordinator.peer_endpoint
        return reply

    @async_error_boundary
    @gated
    async def JoinGroup(self, request, context):
        self._refuse_until_ready()
        host = peer_host(context.peer())
        return await _parked(broker_pb2.JoinGroupResponse, self._server.groups.start_join, join_timed_out,
                             request, host)

    @async_error_boundary
    @gated
    async def SyncGroup(self, request, context):
        self._refuse_until_ready()
        return await _parked(
            broker_pb2.SyncGroupResponse, self._server.groups.start_sync, sync_timed_out, request
        )

    @error_boundary
    @gated
    def Heartbeat(self, request, context):
        self._refuse_until_ready()
        return _in_band(broker_pb2.HeartbeatResponse, self._server.groups.heartbeat, request)

    @error_boundary
    @gated
    def LeaveGroup(self, request, context):
        self._refuse_until_ready()
        return _in_band(broker_pb2.LeaveGroupResponse, self._server.groups.leave, request)

    @error_boundary
    @gated
    def OffsetCommit(self, request, context):
        self._refuse_until_ready()
        return _in_band(broker_pb2.OffsetCommitResponse, self._server.groups.commit, request)

    @error_boundary
    @gated
    def OffsetFetch(self, request, context):
        self._refuse_until_ready()
        return _in_band(broker_pb2.OffsetFetchResponse, self._server.groups.fetch_offsets, request)

    @error_boundary
    @gated
    def DescribeGroups(self, request, context):
        self._refuse_until_ready()
        return self._server.groups.describe(request)

    @error_boundary
    @gated
    def ListGroups(self, request, context):
        self._refuse_until_ready()
        return self._server.groups.list_groups()

    @error_boundary
    @gated
    def DeleteGroups(self, request, context):
        self._refuse_until_ready()
        return self._server.groups.delete_groups(request)


class LoopWaker:
    """Wakes a coroutine on `loop` from any thread: a partition's waiter (set/clear, see fetch_call.py)
    and a produce's notify. Hashable by identity: partitions keep waiters in sets.

    Made for the data path, where every follower Fetch parks and wakes many times a second: a wait is one
    bare future and one timer (no Task, no asyncio.Event), and a wake-up from the loop's own thread (an
    append that a parked follower or acks=all produce waits for) is scheduled with `call_soon`, without
    the self-pipe write that `call_soon_threadsafe` costs."""

    __slots__ = ("_future", "_loop", "_loop_thread", "_woken")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made by a coroutine, so on the loop's thread
        self._woken = False
        self._future: asyncio.Future | None = None

    def set(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self._loop.call_soon(self._wake)
        else:
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._woken = True
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    def clear(self) -> None:
        self._woken = False

    async def wait(self, timeout_s: float) -> None:
        """Until set (at once if it already was since the last clear) or `timeout_s` passes; cleared
        again on return."""
        if not self._woken and timeout_s > 0:
            future = self._future = self._loop.create_future()
            timer = self._loop.call_later(timeout_s, _resolve_if_pending, future)
            try:
                await future
            finally:
                timer.cancel()
                self._future = None
        self._woken = False


def _resolve_if_pending(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


async def _parked(response_type, start: Callable[..., Any], timed_out: Callable[[], Any], *args):
    """A group call: admitted on a pool thread (which may write the group's state), then parked on the
    event loop until the group answers it or its time is up."""
    loop = asyncio.get_running_loop()
    try:
        call, wait_s = await loop.run_in_executor(None, start, *args)
    except KanalError as exc:
        return response_type(error=exc.code, error_message=exc.message)
    answered: asyncio.Future = loop.create_future()

    def resolve(response) -> None:
        if not answered.done():
            answered.set_result(response)

    call.add_done_callback(lambda response: loop.call_soon_threadsafe(resolve, response))
    try:
        return await asyncio.wait_for(answered, wait_s) or timed_out()
    except TimeoutError:
        return timed_out()


def _in_band(response_type, handler, *args):
    """Run a group handler; a KanalError becomes the reply's `error` and `error_message`."""
    try:
        return handler(*args)
    except KanalError as exc:
        return response_type(error=exc.code, error_message=exc.message)


# ACL calls are forwarded only by a broker that enforces ACLs itself (AuthorizerConfig.require_enforced).
_ACL_CALLS = frozenset({"CreateAcls", "DeleteAcls", "DescribeAcls"})


def _forwarder(method: str):
    def forward(self: BrokerService, request, context: grpc.ServicerContext):
        self._refuse_until_ready()
        if method in _ACL_CALLS:
            config = self._server.config
            config.authorizer.require_enforced(method, f"broker {config.broker_id}")
        # The controller stamps (and authorizes) the caller's principal, not this broker's.
        return self._server.controllers.call(method, request,
                                             metadata=((PRINCIPAL_METADATA_KEY, str(call_principal())),))

    forward.__name__ = forward.__qualname__ = method
    return error_boundary(gated(forward))


for _method in _FORWARDED_ADMIN_CALLS:
    setattr(BrokerService, _method, _forwarder(_method))
del _method
