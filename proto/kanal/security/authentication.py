"""Authentication at a listener's door: every call gets its principal before its handler runs.

`Authenticator.authenticate(auth_context, metadata)` decides a call's principal from what gRPC knows of
the connection (its TLS peer certificate) and the call's metadata, in this order:

1. A user name and password in the metadata (put there by kanal.security.channel_security): refused on a
   plaintext connection and on a listener without `password` authentication; else checked against the
   user's SCRAM credentials in the metadata image (kanal.security.scram.verify_password, any of the user's
   mechanisms) -> User:<name>. A wrong password, an unknown user and a user without credentials get the
   same answer, so the door does not tell which names exist.
2. A client certificate (the TLS handshake verified its chain and dates), on a listener with `mtls`
   authentication: refused when its serial is on --tls-crl-file; else its subject (RFC 4514) mapped by
   the listener's rules (principal_mapping.py) -> User:<name>; no rule applying refuses it.
3. Nothing: User:ANONYMOUS on a listener without authentication, else refused.

Refusals are AUTHENTICATION_FAILED (gRPC UNAUTHENTICATED, with the kanal-error-code trailer), before the
handler runs. Unauthenticated calls are refused on every service of the listener but gRPC health (a
probe carries no credentials).

Caches: a certificate's outcome is cached by its PEM bytes (parsing and the CRL lookup happen once per
certificate; the cache is dropped when the CRL file changes); a verified password is cached as an HMAC of
user and password under a per-process random key, valid while the user's credential is the one it was
checked against (changing or deleting the credential invalidates it at once). A wrong password is never
cached: each try costs a PBKDF2, as with Kafka.

Binding: `server_interceptor` (grpc.server, the controllers) and `aio_server_interceptor` (grpc.aio, the
brokers) wrap every handler so that it runs inside `bind_principal(principal)`; a sync handler on the aio
server runs on the migration thread pool, so the binding is made there, in the handler's own thread.
kanal's RPCs are all unary; the streaming ones (health Watch, reflection) are authenticated at the door
and read no principal.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc

from kanal.security.channel_security import PASSWORD_METADATA_KEY, USER_METADATA_KEY
from kanal.security.crl import load_crl
from kanal.security.listener_security import ListenerSecurity
from kanal.security.principal import ANONYMOUS, PRINCIPAL_TYPE_USER, Principal, bind_principal
from kanal.security.scram import ScramCredential, verify_password
from kanal.server.error_boundary import abort_with, abort_with_async
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

# user name -> mechanism -> credential, from the node's current metadata image.
ScramLookup = Callable[[str], Mapping[str, ScramCredential]]

CERT_CACHE_ENTRIES_MAX = 4096
PASSWORD_CACHE_ENTRIES_MAX = 4096
# How often the CRL file's modification time is looked at.
CRL_RECHECK_INTERVAL_S = 5.0
# gRPC health answers without credentials: probes and load balancers carry none.
_OPEN_METHOD_PREFIX = "/grpc.health.v1.Health/"


class Authenticator:
    """One listener's authentication; thread-safe (caches under a lock, lookups lock-free)."""

    def __init__(self, security: ListenerSecurity, scram_credentials: ScramLookup, *,
                 unready: Callable[[], KanalError | None] = lambda: None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """`unready()`: None once the node's image holds every credential, else the (retriable) error to
        answer a password that does not check out: a starting node that has not caught up with the
        metadata log yet must not tell a client its password is wrong."""
        if security.mapper is None:
            raise ValueError("ListenerSecurity without parsed mapping rules")
        self.security = security
        self._mapper = security.mapper
        self._scram = scram_credentials
        self._unready = unready
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._certs: dict[bytes, Principal | KanalError] = {}
        self._passwords: dict[bytes, ScramCredential] = {}
        self._key = os.urandom(32)
        self._revoked: frozenset[int] = frozenset()
        self._crl_mtime_ns: int | None = None
        self._crl_checked_s = float("-inf")
        if security.crl_file:
            self._reload_crl()

    def __repr__(self) -> str:
        return (f"<Authenticator {self.security.describe()} certs_cached={len(self._certs)} "
                f"passwords_cached={len(self._passwords)} revoked={len(self._revoked)}>")

    # -- the decision ------------------------------------------------------------------------------

    def authenticate(self, auth_context: Mapping[str, Iterable[bytes]],
                     metadata: Iterable[tuple[str, str | bytes]] | None) -> Principal:
        """The call's principal; KanalError(AUTHENTICATION_FAILED) to refuse it."""
        tls = list(auth_context.get("transport_security_type", ())) == [b"ssl"]
        user, password = _credentials(metadata)
        modes = self.security.authentication
        if user is not None or password is not None:
            if not tls:
                raise _refused("a password is never accepted over plaintext")
            if "password" not in modes:
                raise _refused("this listener does not take passwords (--authentication)")
            return self._password_principal(user or "", password or "")
        pem = next(iter(auth_context.get("x509_pem_cert", ())), None)
        if pem is not None and "mtls" in modes:
            return self._certificate_principal(pem)
        if not modes:
            return ANONYMOUS
        raise _refused(f"this listener requires authentication ({', '.join(sorted(modes))}); the call "
                       f"brought no {'client certificate or ' if 'mtls' in modes else ''}credentials")

    def scram_credentials(self, user: str) -> Mapping[str, ScramCredential]:
        """The user's SCRAM credentials by mechanism in the node's current metadata (empty when none): the
        Kafka listener's SASL/SCRAM exchange checks a client's proof against them."""
        return self._scram(user)

    def password_principal(self, user: str, password: str) -> Principal:
        """User:<user> when `password` is theirs (SASL/PLAIN on the Kafka listener, which checks TLS and the
        listener's modes itself); AUTHENTICATION_FAILED otherwise. May cost a PBKDF2: call off the loop."""
        return self._password_principal(user, password)

    def _password_principal(self, user: str, password: str) -> Principal:
        if not user:
            raise _refused("a password without a user name")
        credentials = self._scram(user)
        key = self._password_key(user, password)
        with self._lock:
            cached = self._passwords.get(key)
        if cached is not None and credentials.get(cached.mechanism) == cached:
            return Principal(PRINCIPAL_TYPE_USER, user)
        for credential in credentials.values():
            if verify_password(credential, password):
                with self._lock:
                    if len(self._passwords) >= PASSWORD_CACHE_ENTRIES_MAX:
                        self._passwords.clear()
                    self._passwords[key] = credential
                return Principal(PRINCIPAL_TYPE_USER, user)
        not_yet = self._unready()
        if not_yet is not None:
            raise not_yet
        raise _refused(f"wrong user name or password for {user!r}")

    def password_cached(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
        """Whether this call's password (if any) needs no PBKDF2: the aio server then decides on its event
        loop, and sends the others to a thread."""
        user, password = _credentials(metadata)
        if user is None or password is None:
            return True
        with self._lock:
            return self._password_key(user, password) in self._passwords

    def _password_key(self, user: str, password: str) -> bytes:
        return hmac.new(self._key, user.encode() + b"\0" + password.encode(), hashlib.sha256).digest()

    def _certificate_principal(self, pem: bytes) -> Principal:
        if self.security.crl_file:
            self._maybe_reload_crl()
        outcome = self._certs.get(pem)
        if outcome is None:
            outcome = self._map_certificate(pem)
            with self._lock:
                if len(self._certs) >= CERT_CACHE_ENTRIES_MAX:
                    self._certs.clear()
                self._certs[pem] = outcome
        if isinstance(outcome, KanalError):
            raise outcome
        return outcome

    def _map_certificate(self, pem: bytes) -> Principal | KanalError:
        from cryptography import x509

        try:
            cert = x509.load_pem_x509_certificate(pem)
        except ValueError as exc:
            return _refused(f"the client certificate cannot be read: {exc}")
        subject = cert.subject.rfc4514_string()
        if cert.serial_number in self._revoked:
            return _refused(f"the client certificate {subject} (serial {cert.serial_number:x}) is revoked")
        name = self._mapper.name_of(subject)
        if name is None:
            return _refused(
                f"no --principal-mapping-rules rule applies to the certificate subject {subject!r}"
            )
        return Principal(PRINCIPAL_TYPE_USER, name)

    # -- the CRL -----------------------------------------------------------------------------------

    def _maybe_reload_crl(self) -> None:
        now = self._monotonic()
        if now - self._crl_checked_s < CRL_RECHECK_INTERVAL_S:
            return
        self._crl_checked_s = now
        try:
            mtime = os.stat(self.security.crl_file or "").st_mtime_ns
        except OSError as exc:
            log.error("--tls-crl-file %s cannot be read (%s): keeping the %d revoked serials loaded before",
                      self.security.crl_file, exc.strerror, len(self._revoked))
            return
        if mtime != self._crl_mtime_ns:
            self._reload_crl()

    def _reload_crl(self) -> None:
        path = Path(self.security.crl_file or "")
        try:
            mtime = os.stat(path).st_mtime_ns
            revoked = load_crl(path, self.security.ca_pem)
        except (OSError, KanalError) as exc:
            if self._crl_mtime_ns is None:
                raise
            log.error("--tls-crl-file %s changed but cannot be used (%s): keeping the %d revoked serials "
                      "loaded before", path, exc, len(self._revoked))
            return
        with self._lock:
            self._revoked, self._crl_mtime_ns = revoked, mtime
            self._certs.clear()
        log.info("loaded --tls-crl-file %s: %d revoked serials", path, len(revoked))


def _credentials(metadata: Iterable[tuple[str, str | bytes]] | None) -> tuple[str | None, str | None]:
    """The call's user name and password (channel_security's metadata keys), None where absent."""
    user = password = None
    for key, value in metadata or ():
        if key == USER_METADATA_KEY:
            user = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        elif key == PASSWORD_METADATA_KEY:
            password = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return user, password


def _refused(message: str) -> KanalError:
    return KanalError(ErrorCode.AUTHENTICATION_FAILED, message)


# -- the interceptors: grpc.server (controllers) and grpc.aio (brokers) --------------------------------


class _GuardedHandlers:
    """Each method's handler wrapped by the door, made once per method (the server hands the interceptor the
    same handler object for every call of a method) rather than once per call."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._auth = authenticator
        self._by_method: dict[str, tuple[Any, Any]] = {}

    def guarded(self, method: str, handler):
        if handler is None or method.startswith(_OPEN_METHOD_PREFIX):
            return handler
        cached = self._by_method.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._by_method[method] = (handler, _guard(handler, self._auth))
        return cached[1]


def _guard(handler, auth: Authenticator):
    """`handler` run as the call's authenticated principal: a coroutine behaviour (the aio server's event
    loop) authenticates and binds on the loop, a sync one (grpc.server's threads, or the aio server's
    migration pool) in its own thread."""
    behavior = handler.unary_unary
    if behavior is None:
        return _guard_streaming(handler, auth)
    return grpc.unary_unary_rpc_method_handler(_bound_to_caller(behavior, auth), handler.request_deserializer,
                                               handler.response_serializer)


class _SyncInterceptor(grpc.ServerInterceptor):
    def __init__(self, authenticator: Authenticator) -> None:
        self._handlers = _GuardedHandlers(authenticator)

    def intercept_service(self, continuation, handler_call_details):
        return self._handlers.guarded(handler_call_details.method, continuation(handler_call_details))


def _authenticate_sync(auth: Authenticator, context) -> Principal:
    try:
        return auth.authenticate(context.auth_context(), context.invocation_metadata())
    except KanalError as exc:
        abort_with(context, exc.code, exc.message)
        raise  # abort raised already; this keeps the type checker honest


_STREAMING_KINDS = (("unary_stream", grpc.unary_stream_rpc_method_handler),
                   ("stream_unary", grpc.stream_unary_rpc_method_handler),
                   ("stream_stream", grpc.stream_stream_rpc_method_handler))


def _guard_streaming(handler, auth: Authenticator):
    """A streaming handler (health Watch, reflection, the followers' ReplicaFetch): authenticated at the
    door and served with its principal bound, as a unary call is. Sync, coroutine and async-generator
    behaviours each keep their kind."""
    kind, factory = next(
        ((k, f) for k, f in _STREAMING_KINDS if getattr(handler, k) is not None), (None, None)
    )
    if kind is None or factory is None:
        return handler
    return factory(_bound_to_caller(getattr(handler, kind), auth), handler.request_deserializer,
                   handler.response_serializer)


def _bound_to_caller(behavior: Callable[..., Any], auth: Authenticator) -> Callable[..., Any]:
    """`behavior` authenticated at the door and run with the caller's principal bound, of the same kind:
    an async generator, a coroutine (the aio server's loop) or a plain function (a thread)."""

    async def async_generator(argument, context):
        principal = await _authenticate_aio(auth, context)
        with bind_principal(principal):
            async for reply in behavior(argument, context):
                yield reply

    async def coroutine(argument, context):
        principal = await _authenticate_aio(auth, context)
        with bind_principal(principal):
            return await behavior(argument, context)

    def sync(argument, context):
        principal = _authenticate_sync(auth, context)
        with bind_principal(principal):
            return behavior(argument, context)

    if inspect.isasyncgenfunction(behavior):
        return async_generator
    return coroutine if inspect.iscoroutinefunction(behavior) else sync


def server_interceptor(authenticator: Authenticator) -> grpc.ServerInterceptor:
    return _SyncInterceptor(authenticator)


class _AioInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, authenticator: Authenticator) -> None:
        self._handlers = _GuardedHandlers(authenticator)

    async def intercept_service(self, continuation, handler_call_details):
        return self._handlers.guarded(handler_call_details.method, await continuation(handler_call_details))


async def _authenticate_aio(auth: Authenticator, context) -> Principal:
    metadata = context.invocation_metadata()
    try:
        if auth.password_cached(metadata):
            return auth.authenticate(context.auth_context(), metadata)
        # A PBKDF2 takes milliseconds: off the event loop, which serves every other call.
        auth_context = context.auth_context()
        return await asyncio.get_running_loop().run_in_executor(
            None, auth.authenticate, auth_context, metadata
        )
    except KanalError as exc:
        await abort_with_async(context, exc.code, exc.message)
        raise


def aio_server_interceptor(authenticator: Authenticator) -> grpc.aio.ServerInterceptor:
    return _AioInterceptor(authenticator)
