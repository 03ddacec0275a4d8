"""One Kafka request served through the broker's own Broker service (service.py).

The Kafka listener has no logic of its own for what a call does: it translates the Kafka request into the
kanal request, calls the same BrokerService handler a gRPC call reaches (readiness refusal, ACLs, metrics,
error boundary included) and translates the reply. `KafkaCallContext` stands where the handler expects
its gRPC context: it gives the peer's address, and turns a whole-call refusal (the error boundary's
abort, with kanal's error trailer) into `CallRefused` with the kanal ErrorCode."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

from kanal.broker.kafka.batch_cache import KafkaBatchCache
from kanal.v1.error import ErrorCode
from kanal.v1.error_trailer import ERROR_CODE_KEY, ERROR_MESSAGE_KEY

# A Kafka response as its API's field names and values (wire.build makes the version's classes of it).
Response = dict[str, Any]


class CallRefused(Exception):
    """The Broker handler refused the whole call: `code` is kanal's ErrorCode."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class KafkaCallContext:
    """The part of grpc's ServicerContext the Broker handlers use."""

    __slots__ = ("_peer", "_trailer")

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self._trailer: dict[str, str] = {}

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def set_trailing_metadata(self, metadata: Iterable[tuple[str, str]]) -> None:
        self._trailer = dict(metadata)

    def abort(self, _status: object, details: str) -> NoReturn:
        """Raised at once, sync or awaited: the error boundary calls it as its last act."""
        code = int(self._trailer.get(ERROR_CODE_KEY, ErrorCode.UNKNOWN_SERVER_ERROR))
        raise CallRefused(code, self._trailer.get(ERROR_MESSAGE_KEY, details))


def grpc_peer(host: str, port: int) -> str:
    """The peer in gRPC's form (`ipv4:1.2.3.4:5`, `ipv6:[::1]:5`), which peer_host() reads."""
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


@dataclass(slots=True)
class Call:
    """A decoded Kafka request on its way through the Broker service."""

    service: Any  # BrokerService
    server: Any  # BrokerServer: config, metadata image, quotas
    api_version: int
    client_id: str
    peer: str
    batch_cache: KafkaBatchCache  # the listener's: Produce fills it, Fetch serves from it

    def _handler(self, method: str) -> Any:
        """The Broker handler, inside the client quotas of the caller (principal and Kafka client id)."""
        return self.server.quota_interceptor.wrap(getattr(self.service, method), method, self.client_id)

    async def aio(self, method: str, request: Any) -> Any:
        """A coroutine Broker handler (Produce, Fetch, Metadata, ListOffsets, JoinGroup, SyncGroup)."""
        return await self._handler(method)(request, KafkaCallContext(self.peer))

    async def blocking(self, method: str, request: Any) -> Any:
        """A plain Broker handler, which may block on the controller or a group write: on the broker's
        request threads, with this task's context (the bound principal) copied along."""
        return await asyncio.to_thread(self._handler(method), request, KafkaCallContext(self.peer))
