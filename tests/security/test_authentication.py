"""The door (kanal.security.authentication): the Authenticator's decisions as a pure function of the
connection
and the metadata, and its interceptors on real TLS servers in this process — grpc.server (controllers) and
grpc.aio (brokers: coroutine handlers on the loop, sync handlers on the migration pool) — checking that the
principal a handler reads with call_principal() is the authenticated one."""

from __future__ import annotations

import asyncio
import threading
from concurrent import futures

import grpc
import pytest

from kanal.deploy.certificates import NODE_MAPPING_RULES, make_ca
from kanal.security.authentication import Authenticator, aio_server_interceptor, server_interceptor
from kanal.security.channel_security import (
    PASSWORD_METADATA_KEY,
    USER_METADATA_KEY,
    ClientSecurity,
    open_channel,
)
from kanal.security.listener_security import ListenerSecurity, ListenerSecurityError
from kanal.security.principal import ANONYMOUS, call_principal
from kanal.security.scram import derive
from kanal.v1.error import ErrorCode, KanalError

USERS = {"alice": {"SCRAM-SHA-256": derive("SCRAM-SHA-256", "wonderland", b"s" * 16, 4096)}}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d)
    return {
        "dir": d,
        "ca": ca,
        "server": ca.issue(d, "server", "broker-1"),
        "alice": ca.issue(d, "alice", "alice"),
        "bob": ca.issue(d, "bob", "bob"),
    }


def listener(pki, authentication=frozenset({"mtls", "password"}), client_auth="required", crl=None):
    return ListenerSecurity(
        cert_file=str(pki["server"].cert),
        key_file=str(pki["server"].key),
        ca_file=str(pki["ca"].cert),
        client_auth=client_auth,
        authentication=authentication,
        principal_mapping_rules=NODE_MAPPING_RULES,
        crl_file=crl,
    )


def tls_context(pem: bytes | None = None):
    context = {"transport_security_type": [b"ssl"]}
    if pem is not None:
        context["x509_pem_cert"] = [pem]
    return context


def refused(fn) -> str:
    with pytest.raises(KanalError) as err:
        fn()
    assert err.value.code == ErrorCode.AUTHENTICATION_FAILED
    return err.value.message


def password(user, secret):
    return ((USER_METADATA_KEY, user.encode()), (PASSWORD_METADATA_KEY, secret.encode()))


# -- the decision -------------------------------------------------------------------------------------


def test_certificates_map_to_principals_and_passwords_win(pki):
    auth = Authenticator(listener(pki), lambda user: USERS.get(user, {}))
    alice_pem = pki["alice"].cert.read_bytes()
    assert str(auth.authenticate(tls_context(alice_pem), ())) == "User:alice"
    assert str(auth.authenticate(tls_context(alice_pem), password("alice", "wonderland"))) == "User:alice"
    bob_pem = pki["bob"].cert.read_bytes()
    assert str(auth.authenticate(tls_context(bob_pem), password("alice", "wonderland"))) == "User:alice"


def test_wrong_unknown_and_missing_credentials_are_refused_alike(pki):
    auth = Authenticator(listener(pki, authentication=frozenset({"password"}), client_auth="none"),
                         lambda user: USERS.get(user, {}))
    wrong = refused(lambda: auth.authenticate(tls_context(), password("alice", "looking-glass")))
    unknown = refused(lambda: auth.authenticate(tls_context(), password("mallory", "x")))
    assert wrong.replace("alice", "?") == unknown.replace("mallory", "?")  # no hint which names exist
    assert "requires authentication" in refused(lambda: auth.authenticate(tls_context(), ()))
    assert str(auth.authenticate(tls_context(), password("alice", "wonderland"))) == "User:alice"


def test_a_node_still_catching_up_answers_retriably_instead_of_refusing(pki):
    starting = [KanalError(ErrorCode.BROKER_NOT_AVAILABLE, "catching up")]
    auth = Authenticator(listener(pki), lambda user: USERS.get(user, {}),
                         unready=lambda: starting[0] if starting else None)
    with pytest.raises(KanalError) as err:
        auth.authenticate(tls_context(), password("carol", "not-yet-known"))
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE
    assert str(auth.authenticate(tls_context(), password("alice", "wonderland"))) == "User:alice"
    starting.clear()  # caught up: now a password that does not check out is refused
    refused(lambda: auth.authenticate(tls_context(), password("carol", "not-yet-known")))


def test_passwords_are_never_taken_over_plaintext_nor_where_the_listener_takes_none(pki):
    auth = Authenticator(listener(pki), lambda user: USERS.get(user, {}))
    assert "plaintext" in refused(lambda: auth.authenticate({}, password("alice", "wonderland")))
    mtls_only = Authenticator(
        listener(pki, authentication=frozenset({"mtls"})), lambda user: USERS.get(user, {})
    )
    assert "does not take passwords" in refused(
        lambda: mtls_only.authenticate(
            tls_context(pki["alice"].cert.read_bytes()), password("alice", "wonderland")
        )
    )


def test_a_listener_without_authentication_serves_everyone_as_anonymous():
    auth = Authenticator(ListenerSecurity(), lambda user: {})
    assert auth.authenticate({}, ()) is ANONYMOUS


def test_verified_passwords_are_cached_until_the_credential_changes(pki):
    users = dict(USERS)
    auth = Authenticator(listener(pki), lambda user: users.get(user, {}))
    meta = password("alice", "wonderland")
    assert not auth.password_cached(meta)
    auth.authenticate(tls_context(), meta)
    assert auth.password_cached(meta)
    # A new password for alice: the cached outcome no longer holds, the old password is refused at once.
    users["alice"] = {"SCRAM-SHA-256": derive("SCRAM-SHA-256", "new", b"t" * 16, 4096)}
    refused(lambda: auth.authenticate(tls_context(), meta))
    users["alice"] = {}
    refused(lambda: auth.authenticate(tls_context(), password("alice", "new")))


def test_revoked_certificates_are_refused_and_the_crl_is_reread(pki, tmp_path):
    crl = pki["ca"].crl(tmp_path / "crl.pem", [pki["bob"].serial])
    clock = [0.0]
    auth = Authenticator(listener(pki, crl=str(crl)), lambda user: {}, monotonic=lambda: clock[0])
    assert "revoked" in refused(lambda: auth.authenticate(tls_context(pki["bob"].cert.read_bytes()), ()))
    alice_pem = pki["alice"].cert.read_bytes()
    assert str(auth.authenticate(tls_context(alice_pem), ())) == "User:alice"
    pki["ca"].crl(crl, [pki["bob"].serial, pki["alice"].serial])
    import os
    os.utime(crl, ns=(os.stat(crl).st_mtime_ns + 10**9,) * 2)
    clock[0] += 10
    assert "revoked" in refused(lambda: auth.authenticate(tls_context(alice_pem), ()))


def test_security_settings_are_checked_at_start(pki, tmp_path):
    with pytest.raises(ListenerSecurityError, match="cannot read"):
        ListenerSecurity(cert_file=str(tmp_path / "missing.pem"), key_file=str(pki["server"].key),
                         ca_file=str(pki["ca"].cert))
    with pytest.raises(ListenerSecurityError, match="needs TLS"):
        ListenerSecurity(authentication=frozenset({"password"}))
    with pytest.raises(ListenerSecurityError, match="tls-client-auth required"):
        listener(pki, authentication=frozenset({"mtls"}), client_auth="none")
    other = make_ca(tmp_path / "other", common_name="other CA")
    crl = other.crl(tmp_path / "other-crl.pem", [])
    with pytest.raises(ListenerSecurityError, match="not signed by a CA"):
        listener(pki, crl=str(crl))


# -- the interceptors, on real TLS servers -------------------------------------------------------------


def _who(request, context):
    return str(call_principal()).encode()


async def _who_async(request, context):
    await asyncio.sleep(0)
    return str(call_principal()).encode()


def _handlers(*pairs):
    return grpc.method_handlers_generic_handler("t.T", {
        name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in pairs})


@pytest.fixture(scope="module")
def servers(pki):
    """A grpc.server and a grpc.aio server, both TLS with mTLS and password authentication."""
    security = listener(pki)
    sync_server = grpc.server(
        futures.ThreadPoolExecutor(4),
        interceptors=[server_interceptor(Authenticator(security, lambda u: USERS.get(u, {})))],
    )
    sync_server.add_generic_rpc_handlers((_handlers(("Who", _who)),))
    sync_port = sync_server.add_secure_port("127.0.0.1:0", security.server_credentials())
    sync_server.start()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    pool = futures.ThreadPoolExecutor(4)

    async def start_aio():
        server = grpc.aio.server(migration_thread_pool=pool, interceptors=[
            aio_server_interceptor(Authenticator(security, lambda u: USERS.get(u, {})))])
        server.add_generic_rpc_handlers((_handlers(("Who", _who), ("WhoAsync", _who_async)),))
        port = server.add_secure_port("127.0.0.1:0", security.server_credentials())
        await server.start()
        return server, port

    aio_server, aio_port = asyncio.run_coroutine_threadsafe(start_aio(), loop).result(10)
    yield {"sync": f"127.0.0.1:{sync_port}", "aio": f"127.0.0.1:{aio_port}"}
    asyncio.run_coroutine_threadsafe(aio_server.stop(0), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    sync_server.stop(0)
    pool.shutdown()


def call(endpoint, method, security):
    with open_channel(endpoint, (), security) as channel:
        return channel.unary_unary(f"/t.T/{method}")(b"", timeout=10).decode()


@pytest.mark.parametrize(("server", "method"), [("sync", "Who"), ("aio", "Who"), ("aio", "WhoAsync")])
def test_handlers_run_as_the_authenticated_principal(pki, servers, server, method):
    ca = str(pki["ca"].cert)
    as_alice = ClientSecurity(ca_file=ca, cert_file=str(pki["alice"].cert), key_file=str(pki["alice"].key))
    assert call(servers[server], method, as_alice) == "User:alice"
    bob_with_password = ClientSecurity(
        ca_file=ca,
        cert_file=str(pki["bob"].cert),
        key_file=str(pki["bob"].key),
        user="alice",
        password="wonderland",
    )
    assert call(servers[server], method, bob_with_password) == "User:alice"
    wrong = ClientSecurity(ca_file=ca, cert_file=str(pki["bob"].cert), key_file=str(pki["bob"].key),
                           user="alice", password="nope")
    with pytest.raises(grpc.RpcError) as err:
        call(servers[server], method, wrong)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert dict(err.value.trailing_metadata())["kanal-error-code"] == str(
        int(ErrorCode.AUTHENTICATION_FAILED)
    )
    # Nothing leaks from one call's binding into the next on the same server.
    assert call(servers[server], method, as_alice) == "User:alice"


def test_clients_refuse_to_send_a_password_without_tls():
    with pytest.raises(KanalError) as err:
        ClientSecurity(user="alice", password="wonderland")
    assert err.value.code == ErrorCode.INVALID_CONFIG
