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
import secrets
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kanal.broker.kafka import admin_apis, data_apis, errors, group_apis, txn_apis, wire
from kanal.broker.kafka.batch_cache import KafkaBatchCache
from kanal.broker.kafka.call import Call, CallRefused, Response, grpc_peer
from kanal.broker.kafka.errors import kafka_code
from kanal.broker.kafka.sasl import PLAIN, SCRAM_MECHANISMS, SaslFailed, ScramExchange, parse_plain
from kanal.security.principal import PRINCIPAL_TYPE_USER, Principal, bind_principal
from kanal.v1.error import KanalError

log = logging.getLogger(__name__)

Handler = Callable[[Call, Any], Awaitable[Response | None]]

# api key -> (name, lowest version, highest version, handler). Produce and Fetch stop below v13 (topic ids
# only); JoinGroup starts at v4 (members get their id from MEMBER_ID_REQUIRED, KIP-394).
API_VERSIONS: dict[int, tuple[str, int, int, Handler | None]] = {
    0: ("Produce", 3, 12, data_apis.produce),
    1: ("Fetch", 4, 12, data_apis.fetch),
    2: ("ListOffsets", 1, 9, data_apis.list_offsets),  # v8: -4 earliest local; v9: -5 latest tiered
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
    23: ("OffsetForLeaderEpoch", 2, 4, data_apis.offset_for_leader_epoch),
    19: ("CreateTopics", 2, 7, admin_apis.create_topics),
    20: ("DeleteTopics", 1, 6, admin_apis.delete_topics),
    24: ("AddPartitionsToTxn", 0, 3, txn_apis.add_partitions_to_txn),
    25: ("AddOffsetsToTxn", 0, 4, txn_apis.add_offsets_to_txn),
    26: ("EndTxn", 0, 4, txn_apis.end_txn),
    28: ("TxnOffsetCommit", 0, 4, txn_apis.txn_offset_commit),
    29: ("DescribeAcls", 1, 3, admin_apis.describe_acls),
    30: ("CreateAcls", 1, 3, admin_apis.create_acls),
    31: ("DeleteAcls", 1, 3, admin_apis.delete_acls),
    32: ("DescribeConfigs", 1, 4, admin_apis.describe_configs),
    33: ("AlterConfigs", 0, 2, admin_apis.alter_configs),
    37: ("CreatePartitions", 0, 3, admin_apis.create_partitions),
    17: ("SaslHandshake", 1, 1, None),  # answered by the connection itself, as is SaslAuthenticate
    36: ("SaslAuthenticate", 0, 2, None),
    42: ("DeleteGroups", 0, 2, group_apis.delete_groups),
    44: ("IncrementalAlterConfigs", 0, 1, admin_apis.incremental_alter_configs),
    60: ("DescribeCluster", 0, 1, admin_apis.describe_cluster),
}
_API_VERSIONS_TABLE = tuple(
    {"api_key": key, "min_version": low, "max_version": high}
    for key, (_, low, high, _h) in sorted(API_VERSIONS.items())
)


def api_versions_response(error_code: int = 0) -> Response:
    return {"error_code": error_code, "api_keys": _API_VERSIONS_TABLE, "throttle_time": 0}


def served(api_key: int, version: int) -> bool:
    entry = API_VERSIONS.get(api_key)
    return entry is not None and entry[1] <= version <= entry[2]


def unsupported_response(api_key: int, version: int, correlation_id: int) -> bytearray | None:
    """UNSUPPORTED_VERSION for a request kanal does not serve, when the API's response at that version has
    a top-level error code to carry it (None otherwise: the connection is closed)."""
    if api_key == wire.API_VERSIONS_KEY:
        return wire.encode_response(
            api_key, 0, correlation_id, api_versions_response(errors.UNSUPPORTED_VERSION)
        )
    try:
        cls = wire.response_class(api_key, version)
    except Exception:  # noqa: BLE001 - kio knows no such API or version
        return None
    if "error_code" not in cls.__dataclass_fields__:
        return None
    return wire.encode_response(api_key, version, correlation_id, {"error_code": errors.UNSUPPORTED_VERSION})


class KafkaListener:
    def __init__(
        self, broker: Any, service: Any, host: str, port: int, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._broker = broker
        self._service = service
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        config = broker.config
        self._frame_bytes_max = config.kafka_request_bytes_max
        self._in_flight_max = config.kafka_requests_in_flight_max
        self.batch_cache = KafkaBatchCache(config.kafka_batch_cache_bytes)

    def __repr__(self) -> str:
        return f"<KafkaListener {self._host}:{self._port}>"

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, ssl=self._ssl, reuse_address=True
        )

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
        session = self._open_session(peer, writer)
        if session is None:
            writer.close()
            self._connections.discard(task)
            return
        responses: asyncio.Queue[asyncio.Task[Any] | None] = asyncio.Queue()
        slots = asyncio.Semaphore(self._in_flight_max)
        sender = asyncio.create_task(self._send(responses, writer, slots))
        try:
            while not sender.done():
                size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                if size < 8 or size > self._frame_bytes_max:
                    log.warning(
                        "Kafka client %s sent a frame of %d bytes (allowed 8..%d): closing",
                        peer,
                        size,
                        self._frame_bytes_max,
                    )
                    break
                admitted = self._admit(await reader.readexactly(size), peer)
                await slots.acquire()
                await responses.put(asyncio.create_task(self._handle(admitted, session)))
                if admitted is _CLOSE:
                    break  # nothing after a frame that closes the connection is read, let alone served
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        except asyncio.CancelledError:  # the listener stops: the connection ends here, quietly
            sender.cancel()
        finally:
            await responses.put(None)
            if not sender.done():
                try:
                    await sender
                except (ConnectionError, ssl.SSLError, asyncio.CancelledError) as exc:  # client gone first
                    log.debug("Kafka client %s went away: %s", peer, exc)
            writer.close()
            self._connections.discard(task)

    async def _send(
        self,
        responses: asyncio.Queue[asyncio.Task[Any] | None],
        writer: asyncio.StreamWriter,
        slots: asyncio.Semaphore,
    ) -> None:
        """Write each response in request order; stop at the first request that closes the connection.
        However it ends (a client gone mid-write included), it frees a slot, so a reader waiting for one
        wakes and sees the writer is done."""
        try:
            await self._send_in_order(responses, writer, slots)
        finally:
            slots.release()

    async def _send_in_order(
        self,
        responses: asyncio.Queue[asyncio.Task[Any] | None],
        writer: asyncio.StreamWriter,
        slots: asyncio.Semaphore,
    ) -> None:
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
            if isinstance(frame, _CloseAfter):
                writer.write(frame.frame)
                await writer.drain()
                writer.close()
                return
            if frame is not None:
                writer.write(frame)
                await writer.drain()

    def _open_session(self, peer: str, writer: asyncio.StreamWriter) -> _Session | None:
        """The connection's principal from its TLS client certificate or the listener's modes; None
        (close) when it has none and may not authenticate with SASL either."""
        ssl_object = writer.get_extra_info("ssl_object")
        auth_context: dict[str, list[bytes]] = {}
        if ssl_object is not None:
            auth_context["transport_security_type"] = [b"ssl"]
            der = ssl_object.getpeercert(binary_form=True)
            if der:
                auth_context["x509_pem_cert"] = [ssl.DER_cert_to_PEM_cert(der).encode()]
        authenticator = self._broker.authenticator
        try:
            return _Session(peer, authenticator.authenticate(auth_context, None), ssl_object is not None)
        except KanalError as exc:
            if "password" in authenticator.security.authentication:
                return _Session(peer, None, ssl_object is not None)  # SASL first
            log.info("Kafka client %s refused: %s", peer, exc.message)
            return None

    def _admit(self, frame: bytes, peer: str) -> wire.Request | bytearray | object:
        """A frame as read: its decoded request; the UNSUPPORTED_VERSION answer for an API or version not
        served; or _CLOSE for a frame that cannot be parsed or answered. Decided before the next frame is
        read: Kafka's brokers read nothing after a frame that closes the connection."""
        try:
            api_key, version, correlation_id = wire.peek_header(frame)
        except wire.FrameError:
            return _CLOSE
        if not served(api_key, version):
            answer = unsupported_response(api_key, version, correlation_id)
            return _CLOSE if answer is None else answer
        try:
            return wire.decode_request(frame)
        except wire.FrameError as exc:
            log.info("Kafka client %s: %s: closing", peer, exc)
            return _CLOSE

    async def _handle(self, admitted: wire.Request | bytearray | object, session: _Session) -> object:
        peer = session.peer
        if not isinstance(admitted, wire.Request):
            return admitted  # an answer made at admission, or _CLOSE
        request = admitted
        api_key, version, correlation_id = request.api_key, request.api_version, request.correlation_id
        if session.principal is None and api_key not in _BEFORE_AUTHENTICATION:
            log.info("Kafka client %s sent %s before authenticating: closing", peer, API_VERSIONS[api_key][0])
            return _CLOSE
        if api_key == wire.API_VERSIONS_KEY:
            return wire.encode_response(api_key, version, correlation_id, api_versions_response())
        if api_key in (_SASL_HANDSHAKE, _SASL_AUTHENTICATE):
            exchanged, close = await self._sasl(session, api_key, request.body)
            answer = wire.encode_response(api_key, version, correlation_id, exchanged)
            return _CloseAfter(answer) if close else answer
        handler = API_VERSIONS[api_key][3]
        assert handler is not None and session.principal is not None
        call = Call(self._service, self._broker, version, request.client_id, peer, self.batch_cache)
        with bind_principal(session.principal):
            try:
                data = await handler(call, request.body)
            except CallRefused as exc:
                data = _whole_call_error(api_key, version, kafka_code(exc.code), exc.message)
            except Exception:
                log.exception("bug serving Kafka %s v%d for %s", API_VERSIONS[api_key][0], version, peer)
                data = _whole_call_error(api_key, version, errors.UNKNOWN_SERVER_ERROR, "internal error")
        if data is None:
            return None
        return wire.encode_response(api_key, version, correlation_id, data)

    async def _sasl(self, session: _Session, api_key: int, body: Any) -> tuple[Response, bool]:
        """SaslHandshake or SaslAuthenticate: (the response, whether the connection closes after it)."""
        authenticator = self._broker.authenticator
        mechanisms = [*SCRAM_MECHANISMS, *((PLAIN,) if session.tls else ())]
        if api_key == _SASL_HANDSHAKE:
            if session.principal is not None or session.mechanism:
                return {"error_code": errors.ILLEGAL_SASL_STATE, "mechanisms": mechanisms}, True
            if body.mechanism not in mechanisms:
                return {"error_code": errors.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}, True
            session.mechanism = body.mechanism
            if body.mechanism != PLAIN:
                session.scram = ScramExchange(body.mechanism, secrets.token_urlsafe(24))
            return {"error_code": 0, "mechanisms": mechanisms}, False
        if session.principal is not None or not session.mechanism:
            return {
                "error_code": errors.ILLEGAL_SASL_STATE,
                "error_message": "no SaslHandshake before",
                "auth_bytes": b"",
            }, True
        try:
            if session.mechanism == PLAIN:
                user, password = parse_plain(body.auth_bytes)
                session.principal = await asyncio.to_thread(authenticator.password_principal, user, password)
                reply = b""
            else:
                assert session.scram is not None
                if not session.scram.user:
                    return {
                        "error_code": 0,
                        "auth_bytes": session.scram.first(body.auth_bytes, authenticator.scram_credentials),
                    }, False
                reply = session.scram.final(body.auth_bytes)
                session.principal = Principal(PRINCIPAL_TYPE_USER, session.scram.user)
        except (SaslFailed, KanalError, UnicodeDecodeError) as exc:
            message = exc.message if isinstance(exc, KanalError) else str(exc)
            log.info("Kafka client %s failed SASL %s: %s", session.peer, session.mechanism, message)
            return {
                "error_code": errors.SASL_AUTHENTICATION_FAILED,
                "error_message": message,
                "auth_bytes": b"",
            }, True
        log.info(
            "Kafka client %s authenticated as %s (SASL %s)",
            session.peer,
            session.principal,
            session.mechanism,
        )
        return {"error_code": 0, "auth_bytes": reply, "session_lifetime": 0}, False


@dataclass(slots=True)
class _Session:
    """One connection's authentication: its principal (None until SASL completes), and the exchange."""

    peer: str
    principal: Principal | None
    tls: bool
    mechanism: str = ""
    scram: ScramExchange | None = None


@dataclass(frozen=True, slots=True)
class _CloseAfter:
    """A response after which the connection closes (a failed authentication)."""

    frame: bytearray


_CLOSE = object()
_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36
_BEFORE_AUTHENTICATION = frozenset({wire.API_VERSIONS_KEY, _SASL_HANDSHAKE, _SASL_AUTHENTICATE})


def _whole_call_error(api_key: int, version: int, code: int, message: str) -> Response:
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
        security.client_auth, ssl.CERT_NONE
    )
    return context
