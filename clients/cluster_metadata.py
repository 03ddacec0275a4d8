"""ClusterMetadata: a client's view of the cluster (brokers, topics, partition leaders), from the
Metadata RPC of any bootstrap broker, and a pool of gRPC channels to the brokers.

The one place a client's id goes on the wire: every call made through these channels carries the
`kanal-client-id` metadata entry (broker.proto, "Client id and quotas"), which brokers key client quotas
on. Stubs get it from a channel interceptor; the producer's hand-written Produce call, the hot path, from
a bound `metadata=` argument (no interceptor on each call).

Thread-safe: the view is replaced whole on refresh; channels are created once per endpoint.
"""

from __future__ import annotations

import collections
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from kanal.clients.config_checks import parse_bootstrap
from kanal.clients.error_boundary import call
from kanal.net.channel_options import channel_options
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.client_id import CLIENT_ID_METADATA_KEY, check_client_id
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import check_topic_name
from kanal.v1.wire_enum import as_enum

_MESSAGE_BYTES_MAX = 64 << 20
_ATTEMPT_TIMEOUT_S = 2.0  # one broker's chance to answer before the next is tried
_CHANNEL_OPTIONS = channel_options(_MESSAGE_BYTES_MAX)

_PRODUCE_METHOD = "/kanal.v1.Broker/Produce"  # the generated stub's path (broker_pb2_grpc)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    # Why the partition has no leader (only when offline): PartitionMetadata.offline_reason.
    offline_reason: str = ""


@dataclass(frozen=True)
class ClusterView:
    brokers: dict[int, str]  # broker id -> endpoint
    topics: dict[str, list[PartitionInfo]]
    topic_errors: dict[str, int]


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                            "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class _ClientIdInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Adds the client id to every unary call's metadata."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def intercept_unary_unary(self, continuation, details, request):
        details = _CallDetails(details.method, details.timeout, (*(details.metadata or ()), *self._metadata),
                               details.credentials, details.wait_for_ready, details.compression)
        return continuation(details, request)


class ClusterMetadata:
    def __init__(self, bootstrap: str, *, request_timeout_ms: int = 30_000,
                 security: ClientSecurity | None = None, client_id: str = "") -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        # TLS files and credentials for every channel (kanal.security.channel_security); None: plaintext.
        self.security = security
        check_client_id(client_id)
        self.client_id = client_id
        self._call_metadata = ((CLIENT_ID_METADATA_KEY, client_id),) if client_id else ()
        self.request_timeout_s = request_timeout_ms / 1000
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, broker_pb2_grpc.BrokerStub] = {}
        self._produce_calls: dict[str, Callable[..., broker_pb2.ProduceResponse]] = {}
        self._lock = threading.Lock()
        self.view = ClusterView({}, {}, {})
        self._wanted: set[str] = set()
        self._good: str | None = None  # the broker that answered last

    def __repr__(self) -> str:
        return f"<ClusterMetadata brokers={sorted(self.view.brokers)} topics={sorted(self.view.topics)}>"

    def stub(self, endpoint: str) -> broker_pb2_grpc.BrokerStub:
        stub = self._stubs.get(endpoint)
        if stub is None:
            with self._lock:
                stub = self._stubs.get(endpoint)
                if stub is None:
                    channel = open_channel(endpoint, _CHANNEL_OPTIONS, self.security)
                    self._channels[endpoint] = channel
                    if self._call_metadata:
                        channel = grpc.intercept_channel(channel, _ClientIdInterceptor(self._call_metadata))
                    stub = self._stubs[endpoint] = broker_pb2_grpc.BrokerStub(channel)
        return stub

    def produce_call(self, endpoint: str) -> Callable[..., broker_pb2.ProduceResponse]:
        """Broker.Produce taking an already serialized ProduceRequest (kanal.clients.produce_request), on the
        endpoint's channel: the producer writes requests by hand to copy its batches once."""
        call = self._produce_calls.get(endpoint)
        if call is None:
            self.stub(endpoint)  # makes the channel
            with self._lock:
                call = self._produce_calls.get(endpoint)
                if call is None:
                    call = self._channels[endpoint].unary_unary(
                        _PRODUCE_METHOD, request_serializer=None,
                        response_deserializer=broker_pb2.ProduceResponse.FromString)
                    if self._call_metadata:
                        call = functools.partial(call, metadata=self._call_metadata)
                    self._produce_calls[endpoint] = call
        return call

    def any_stub(self) -> broker_pb2_grpc.BrokerStub:
        """A stub to a broker that answered recently, for calls any broker can serve."""
        if self._good is None:
            self.refresh()
        if self._good is None:  # refresh() sets it or raises
            raise KanalError(ErrorCode.BROKER_NOT_AVAILABLE, "no broker answered")
        return self.stub(self._good)

    def find_coordinator(
        self, key: str, key_type: int, timeout_s: float
    ) -> broker_pb2.FindCoordinatorResponse:
        """FindCoordinator on a broker that answered recently. When that broker cannot be reached (killed,
        restarting) it is forgotten before the call's KanalError is raised, so the caller's retry asks a
        broker that answers Metadata: without that, every retry would go to the dead broker until the
        caller's deadline, and a coordinator that moved with it would never be found."""
        stub = self.any_stub()
        endpoint = self._good
        request = broker_pb2.FindCoordinatorRequest(
            key=key, key_type=as_enum(broker_pb2.CoordinatorType, key_type)
        )
        try:
            return call(stub.FindCoordinator, request, timeout_s=timeout_s,
                        what=f"FindCoordinator at {endpoint}")
        except KanalError:
            if self._good == endpoint:  # another thread may have found a better one meanwhile
                self._good = None
            raise

    def refresh(self, topics: list[str] | None = None) -> ClusterView:
        """Ask a broker for the brokers and the given topics (plus every topic asked for before); an illegal
        topic name is INVALID_TOPIC at once, and is not asked for again. Brokers are tried in turn (known
        ones first, then the bootstrap list) until one answers or the request timeout passes:
        BROKER_NOT_AVAILABLE names the ones that did not, each with its own error. A broker that refuses (a
non-retriable code: AUTHENTICATION_FAILED for credentials it does not accept) ends the search at once:
another one would refuse the same."""
        if topics:
            for topic in topics:
                # Checked before it is remembered: every later refresh asks for the wanted topics again,
                # so one bad name (not a str, not encodable) would otherwise break them all.
                check_topic_name(topic)
            self._wanted.update(topics)
        deadline = time.monotonic() + self.request_timeout_s
        problems: dict[str, str] = {}
        while True:
            candidates = list(dict.fromkeys([*(e for e in [self._good] if e), *self.view.brokers.values(),
                                             *self.bootstrap]))
            for endpoint in candidates:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    reply = call(self.stub(endpoint).Metadata,
                                 broker_pb2.MetadataRequest(topics=sorted(self._wanted)),
                                 timeout_s=min(remaining, _ATTEMPT_TIMEOUT_S))
                except KanalError as error:
                    if not error.retriable:
                        # Refused (credentials at the door, an authorization): another broker would refuse
                        # the same.
                        raise KanalError(error.code, f"{endpoint}: {error.message}") from None
                    problems[endpoint] = error.message.split("\n", 1)[0]
                    if self._good == endpoint:
                        self._good = None
                    continue
                self._good = endpoint
                self.view = _view_of(reply)
                return self.view
            if time.monotonic() >= deadline:
                detail = ", ".join(f"{e} ({why})" for e, why in problems.items()) or ", ".join(candidates)
                waited_ms = round(self.request_timeout_s * 1000)
                raise KanalError(ErrorCode.BROKER_NOT_AVAILABLE,
                                 f"no broker answered within {waited_ms} ms: {detail}")
            time.sleep(0.05)

    def partitions(self, topic: str, *, refresh_if_missing: bool = True) -> list[PartitionInfo]:
        parts = self.view.topics.get(topic)
        if parts is not None and topic not in self._wanted:
            # Known from an answer about every topic (a refresh that named none): asked for by name from now
            # on, or the next refresh that names others would drop it, and its leader with it.
            self._wanted.add(topic)
        elif parts is None and refresh_if_missing:
            parts = self.refresh([topic]).topics.get(topic)
        if parts is None:
            code = self.view.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise KanalError(code, f"topic {topic!r} is not known to the cluster")
        return parts

    def leader_endpoint(self, topic: str, partition: int) -> str | None:
        parts = self.view.topics.get(topic)
        if parts is None or partition >= len(parts):
            return None
        return self.view.brokers.get(parts[partition].leader)

    def in_sync_endpoint(self, topic: str, partition: int, broker_id: int) -> str | None:
        """The endpoint of `broker_id` when the metadata has it in the partition's ISR, else None."""
        parts = self.view.topics.get(topic)
        if parts is None or partition >= len(parts) or broker_id not in parts[partition].isr:
            return None
        return self.view.brokers.get(broker_id)

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
            self._stubs.clear()
            self._produce_calls.clear()


def _view_of(reply: broker_pb2.MetadataResponse) -> ClusterView:
    brokers = {b.broker_id: b.endpoint for b in reply.brokers}
    topics, errors = {}, {}
    for t in reply.topics:
        if t.error:
            errors[t.name] = t.error
            continue
        topics[t.name] = [
            PartitionInfo(t.name, p.partition, p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr),
                          p.offline_reason)
            for p in sorted(t.partitions, key=lambda p: p.partition)
        ]
    return ClusterView(brokers, topics, errors)
