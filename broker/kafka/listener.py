"""The Kafka wire-protocol listener: `kanal broker --kafka-listen HOST:PORT`.

An asyncio server on the broker's event loop (the one grpc.aio serves on), beside the gRPC listener, over
the same partitions, groups, ACLs and transactions: every request is translated and served by the same
BrokerService handler a gRPC call reaches (call.py), so a record produced by one protocol is read by the
other byte for byte and a group's offsets are one set.

Per connection: frames are read one after another (`length i32` then the request); each request becomes a
task at once, so a client's pipelined requests are served concurrently (a produce appends before its
first await, so the order of appends is the order of requests), and a writer sends the responses in
request order, as Kafka's protocol requires. Bounds: a frame longer than `kafka_request_bytes_max`, or one
that does not parse, closes the connection before anything of it is served (Kafka does the same); at most
`kafka_requests_in_flight_max` requests are served at once per connection, after which reading waits.

APIs and versions served are in `API_VERSIONS`; ApiVersions lists exactly those. A request for anything
else is answered UNSUPPORTED_VERSION when its response has a top-level error code (ApiVersions itself is
then answered at v0, with the versions served, as Kafka's brokers do); otherwise the connection closes."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from kanal.broker.kafka import data_apis, errors, group_apis, wire
from kanal.broker.kafka.call import Call, CallRefused, grpc_peer
from kanal.broker.kafka.errors import kafka_code
from kanal.security.principal import ANONYMOUS, bind_principal

log = logging.getLogger(__name__)

Handler = Callable[[Call, Any], Awaitable[dict | None]]

# api key -> (name, lowest version, highest version, handler). Produce and Fetch stop below v13 (topic ids
# only); JoinGroup starts at v4 (members get their id from MEMBER_ID_REQUIRED, KIP-394).
API_VERSIONS: dict[int, tuple[str, int, int, Handler | None]] = {
    0: ("Produce", 3, 12, data_apis.produce),
    1: ("Fetch", 4, 12, data_apis.fetch),
    2: ("ListOffsets", 1, 7, data_apis.list_offsets),
    3: ("Metadata", 0, 12, data_apis.metadata),
    8: ("OffsetCommit", 2, 9, group_apis.offset_commit),
    9: ("OffsetFetch", 1, 9, group_apis.offset_fetch),
    10: ("FindCoordinator", 0, 5, group_apis.find_coordinator),
    11: ("JoinGroup", 4, 9, group_apis.join_group),
    12: ("Heartbeat", 0, 4, group_apis.heartbeat),
    13: ("LeaveGroup", 0, 5, group_apis.leave_group),
    14: ("SyncGroup", 0, 5, group_apis.sync_group),
    15: ("DescribeGroups", 0, 5, group_apis.describe_groups),
    16: ("ListGroups", 0, 4, group_apis.list_groups),
    18: ("ApiVersions", 0, 4, None),  # answered by the connection itself
    22: ("InitProducerId", 0, 4, data_apis.init_producer_id),
    42: ("DeleteGroups", 0, 2, group_apis.delete_groups),
}
_API_VERSIONS_TABLE = tuple(
    {"api_key": key, "min_version": low, "max_version": high} for key, (_, low, high, _h) in sorted(API_VERSIONS.items())
)


def api_versions_response(error_code: int = 0) -> dict:
    return {"error_code": error_code, "api_keys": _API_VERSIONS_TABLE, "throttle_time": 0}


def served(api_key: int, version: int) -> bool:
    entry = API_VERSIONS.get(api_key)
    return entry is not None and entry[1] <= version <= entry[2]


def unsupported_response(api_key: int, version: int, correlation_id: int) -> bytearray | None:
    """UNSUPPORTED_VERSION for a request kanal does not serve, when the API's response at that version has
    a top-level error code to carry it (None otherwise: the connection is closed)."""
    if api_key == wire.API_VERSIONS_KEY:
        return wire.encode_response(api_key, 0, correlation_id, api_versions_response(errors.UNSUPPORTED_VERSION))
    try:
        cls = wire.response_class(api_key, version)
    except Exception:  # noqa: BLE001 - kio knows no such API or version
        return None
    if "error_code" not in cls.__dataclass_fields__:
        return None
    return wire.encode_response(api_key, version, correlation_id, {"error_code": errors.UNSUPPORTED_VERSION})


class KafkaListener:
    def __init__(self, broker: Any, service: Any, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._broker = broker
        self._service = service
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        config = broker.config
        self._frame_bytes_max = config.kafka_request_bytes_max
        self._in_flight_max = config.kafka_requests_in_flight_max

    def __repr__(self) -> str:
        return f"<KafkaListener {self._host}:{self._port}>"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port, ssl=self._ssl,
                                                  reuse_address=True)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peername = writer.get_extra_info("peername") or ("", 0)
        peer = grpc_peer(peername[0], peername[1])
        responses: asyncio.Queue[asyncio.Task | None] = asyncio.Queue()
        slots = asyncio.Semaphore(self._in_flight_max)
        sender = asyncio.create_task(self._send(responses, writer, slots))
        try:
            while not sender.done():
                size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                if size < 8 or size > self._frame_bytes_max:
                    log.warning("Kafka client %s sent a frame of %d bytes (allowed 8..%d): closing", peer, size,
                                self._frame_bytes_max)
                    break
                frame = await reader.readexactly(size)
                await slots.acquire()
                await responses.put(asyncio.create_task(self._handle(frame, peer)))
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            sender.cancel()
            raise
        finally:
            await responses.put(None)
            if not sender.done():
                try:
                    await sender
                except Exception:  # noqa: BLE001 - the connection is going away
                    pass
            writer.close()
            self._connections.discard(task)

    async def _send(self, responses: asyncio.Queue, writer: asyncio.StreamWriter, slots: asyncio.Semaphore) -> None:
        """Write each response in request order; stop at the first request that closes the connection."""
        while True:
            task = await responses.get()
            if task is None:
                return
            try:
                frame = await task
            finally:
                slots.release()
            if frame is _CLOSE:
                writer.close()
                return
            if frame is not None:
                writer.write(frame)
                await writer.drain()

    async def _handle(self, frame: bytes, peer: str) -> bytearray | None | object:
        try:
            api_key, version, correlation_id = wire.peek_header(frame)
        except wire.FrameError:
            return _CLOSE
        if not served(api_key, version):
            answer = unsupported_response(api_key, version, correlation_id)
            return _CLOSE if answer is None else answer
        try:
            request = wire.decode_request(frame)
        except wire.FrameError as exc:
            log.info("Kafka client %s: %s: closing", peer, exc)
            return _CLOSE
        if api_key == wire.API_VERSIONS_KEY:
            return wire.encode_response(api_key, version, correlation_id, api_versions_response())
        handler = API_VERSIONS[api_key][3]
        assert handler is not None
        call = Call(self._service, self._broker, version, request.client_id, peer)
        with bind_principal(self._principal()):
            try:
                data = await handler(call, request.body)
            except CallRefused as exc:
                data = _whole_call_error(api_key, version, kafka_code(exc.code), exc.message)
            except Exception:  # noqa: BLE001 - a bug: logged, answered as Kafka's UNKNOWN_SERVER_ERROR
                log.exception("bug serving Kafka %s v%d for %s", API_VERSIONS[api_key][0], version, peer)
                data = _whole_call_error(api_key, version, errors.UNKNOWN_SERVER_ERROR, "internal error")
        if data is None:
            return None
        return wire.encode_response(api_key, version, correlation_id, data)

    def _principal(self):
        return ANONYMOUS


_CLOSE = object()


def _whole_call_error(api_key: int, version: int, code: int, message: str) -> dict:
    """A response that says `code` for the whole call: in its top-level error code where the API has one,
    else in every error code of what it would have answered (left empty: clients retry the call)."""
    return {"error_code": code, "error_message": message, "throttle_time": 0}


def kafka_ssl_context(security: Any) -> ssl.SSLContext | None:
    """The Kafka listener's TLS, from the broker's listener security (the files --listen uses): None for a
    plaintext broker. Client certificates as --tls-client-auth says."""
    if not security.tls:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(security.cert_file, security.key_file)
    if security.ca_file:
        context.load_verify_locations(security.ca_file)
    context.verify_mode = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL}.get(
        security.client_auth, ssl.CERT_NONE)
    return context
