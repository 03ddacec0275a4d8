"""SASL on the Kafka listener (kanal.broker.kafka.sasl): the server side of SCRAM (RFC 5802, RFC 7677)
against RFC 7677's example exchange and a client written here, and PLAIN's message (RFC 4616).

A Kafka client authenticates with SCRAM-SHA-256 or -512 against the credentials kanal stores
(kanal.security.scram); any failure is SaslFailed, which the listener answers SASL_AUTHENTICATION_FAILED
before it closes the connection (a UnicodeDecodeError, for bytes that are not UTF-8, too)."""

from __future__ import annotations

import base64
import hmac

import pytest

from kanal.broker.kafka.sasl import SCRAM_MECHANISMS, SaslFailed, ScramExchange, parse_plain
from kanal.security import scram

# RFC 7677, section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

SHA512 = "SCRAM-SHA-512"
SALT = bytes(range(32))
ITERATIONS = 4096
PASSWORD = "correct horse ✓"
CLIENT_NONCE = "fyko+d2lbbFgONRv9qkxdawL"
SERVER_NONCE = "3rfcNHYJY1ZVvWVs7j"


def test_both_scram_mechanisms_are_offered():
    assert set(SCRAM_MECHANISMS) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}


def test_rfc_7677_exchange_gives_the_rfcs_server_messages():
    credential = scram.derive("SCRAM-SHA-256", "pencil", RFC_SALT, 4096)
    asked = []

    def credentials_of(user: str) -> dict:
        asked.append(user)
        return {"SCRAM-SHA-256": credential}

    exchange = ScramExchange("SCRAM-SHA-256", RFC_SERVER_NONCE)
    assert exchange.first(RFC_CLIENT_FIRST, credentials_of) == RFC_SERVER_FIRST
    assert asked == ["user"] and exchange.user == "user"
    assert exchange.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL


class Client:
    """The client side of SCRAM, from RFC 5802 section 3 and kanal.security.scram's derivations."""

    def __init__(self, mechanism: str, user: str, password: str, gs2_header: str = "n,,") -> None:
        self.hash_name = scram.MECHANISMS[mechanism]
        self.password = password
        self.gs2_header = gs2_header
        self.first_bare = f"n={user},r={CLIENT_NONCE}"
        self.server_first = ""
        self.auth_message = b""
        self.salted = b""

    def first(self) -> bytes:
        return (self.gs2_header + self.first_bare).encode()

    def final(self, server_first: bytes, *, nonce: str | None = None, binding: str | None = None) -> bytes:
        self.server_first = server_first.decode()
        attributes = dict(part.split("=", 1) for part in self.server_first.split(","))
        assert attributes["r"].startswith(CLIENT_NONCE) and len(attributes["r"]) > len(CLIENT_NONCE)
        self.salted = scram.salted_password(self.hash_name, self.password, base64.b64decode(attributes["s"]),
                                            int(attributes["i"]))
        if binding is None:
            binding = base64.b64encode(self.gs2_header.encode()).decode()
        without_proof = f"c={binding},r={attributes['r'] if nonce is None else nonce}"
        self.auth_message = f"{self.first_bare},{self.server_first},{without_proof}".encode()
        proof = scram.client_proof(self.hash_name, self.salted, self.auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def expected_server_final(self) -> bytes:
        server_key = hmac.new(self.salted, b"Server Key", self.hash_name).digest()
        return b"v=" + base64.b64encode(scram.server_signature(self.hash_name, server_key, self.auth_message))


def credentials(user: str, mechanism: str = SHA512, password: str = PASSWORD):
    credential = scram.derive(mechanism, password, SALT, ITERATIONS)
    return lambda name: {mechanism: credential} if name == user else {}


def test_a_scram_sha_512_exchange_succeeds_and_the_server_proves_itself():
    client = Client(SHA512, "alice", PASSWORD)
    exchange = ScramExchange(SHA512, SERVER_NONCE)
    server_first = exchange.first(client.first(), credentials("alice"))
    assert server_first == (f"r={CLIENT_NONCE}{SERVER_NONCE},s={base64.b64encode(SALT).decode()},"
                            f"i={ITERATIONS}").encode()
    server_final = exchange.final(client.final(server_first))
    assert server_final == client.expected_server_final()
    assert exchange.user == "alice"


def test_a_client_that_says_it_could_bind_channels_still_authenticates():
    """gs2 flag "y": the client supports channel binding but thinks the server does not (RFC 5802 6)."""
    client = Client(SHA512, "alice", PASSWORD, gs2_header="y,,")
    exchange = ScramExchange(SHA512, SERVER_NONCE)
    final = client.final(exchange.first(client.first(), credentials("alice")))
    assert final.startswith(b"c=eSws,")  # base64 of "y,,"
    assert exchange.final(final) == client.expected_server_final()


def failed_final(client: Client, credentials_of, **tamper) -> None:
    exchange = ScramExchange(SHA512, SERVER_NONCE)
    final = client.final(exchange.first(client.first(), credentials_of), **tamper)
    with pytest.raises(SaslFailed):
        exchange.final(final)


def test_a_wrong_password_fails():
    failed_final(Client(SHA512, "alice", "wrong password"), credentials("alice"))


def test_a_credential_of_the_other_mechanism_does_not_serve():
    failed_final(Client(SHA512, "alice", PASSWORD), credentials("alice", mechanism="SCRAM-SHA-256"))


@pytest.mark.parametrize("nonce", [CLIENT_NONCE, CLIENT_NONCE + SERVER_NONCE + "x",
                                   CLIENT_NONCE + SERVER_NONCE[:-1], "other" + SERVER_NONCE])
def test_a_tampered_nonce_fails(nonce):
    failed_final(Client(SHA512, "alice", PASSWORD), credentials("alice"), nonce=nonce)


@pytest.mark.parametrize("binding", ["", "biws=", "eSws", "cCx0bHMtdW5pcXVlLA==", "bixhPWFsaWNlLA=="],
                         ids=["empty", "padded", "y-flag", "p-flag", "authzid"])
def test_a_channel_binding_other_than_the_client_first_header_fails(binding):
    failed_final(Client(SHA512, "alice", PASSWORD), credentials("alice"), binding=binding)


def test_an_unknown_user_fails_at_the_proof_and_looks_like_a_known_one():
    client = Client(SHA512, "mallory", PASSWORD)
    first = ScramExchange(SHA512, SERVER_NONCE).first(client.first(), lambda name: {})
    again = ScramExchange(SHA512, SERVER_NONCE).first(client.first(), lambda name: {})
    assert first == again  # a stable salt: a second try does not tell the name is unknown
    salt = base64.b64decode(dict(p.split("=", 1) for p in first.decode().split(","))["s"])
    assert len(salt) >= scram.SALT_BYTES_MIN and first.endswith(b",i=4096")
    failed_final(client, lambda name: {})


@pytest.mark.parametrize("proof", ["!!!!", "abc", "dGVzdA", "dGVz dA==", ""])
def test_a_proof_that_is_not_base64_or_not_a_proof_fails(proof):
    client = Client(SHA512, "alice", PASSWORD)
    exchange = ScramExchange(SHA512, SERVER_NONCE)
    final = client.final(exchange.first(client.first(), credentials("alice")))
    without_proof = final.rsplit(b",p=", 1)[0]
    with pytest.raises(SaslFailed):
        exchange.final(without_proof + b",p=" + proof.encode())


def test_a_final_message_without_a_proof_fails():
    client = Client(SHA512, "alice", PASSWORD)
    exchange = ScramExchange(SHA512, SERVER_NONCE)
    final = client.final(exchange.first(client.first(), credentials("alice")))
    with pytest.raises(SaslFailed):
        exchange.final(final.rsplit(b",p=", 1)[0])


@pytest.mark.parametrize(("sent", "user"), [("a=2Cb", "a,b"), ("x=3Dy", "x=y"), ("=2C=3D=3D=2C", ",==,"),
                                            ("dörte", "dörte")])
def test_escaped_user_names_decode(sent, user):
    client = Client(SHA512, sent, PASSWORD)
    exchange = ScramExchange(SHA512, SERVER_NONCE)
    asked = []

    def credentials_of(name: str) -> dict:
        asked.append(name)
        return credentials(user)(name)

    final = client.final(exchange.first(client.first(), credentials_of))
    assert asked == [user] and exchange.user == user
    exchange.final(final)  # and the exchange completes for that user


@pytest.mark.parametrize("message", [
    b"",
    b"n,,",
    b"n,n=user,r=abc",  # two parts only
    b"p=tls-server-end-point,,n=user,r=abc",  # channel binding asked for
    b"x,,n=user,r=abc",
    b"n,b=user,n=user,r=abc",  # not an authzid
    b"n,,n=user",  # no nonce
    b"n,,r=abc",  # no user
    b"n,,n=us=er,r=abc",  # '=' not escaped
    b"n,,n=a=2Xb,r=abc",
    b"n,,n=user,r=abc,junk",  # attribute without '='
    b"n,,nn=user,r=abc",
])
def test_a_malformed_client_first_message_fails(message):
    with pytest.raises(SaslFailed):
        ScramExchange(SHA512, SERVER_NONCE).first(message, credentials("user"))


def test_a_client_first_message_that_is_not_utf8_is_refused():
    with pytest.raises((SaslFailed, UnicodeDecodeError)):
        ScramExchange(SHA512, SERVER_NONCE).first(b"n,,n=\xff\xfe,r=abc", credentials("user"))


def test_the_server_first_message_carries_the_stored_salt_and_iterations():
    credential = scram.derive(SHA512, PASSWORD, b"s" * 20, 8192)
    message = ScramExchange(SHA512, "N").first(b"n,,n=bob,r=C", lambda name: {SHA512: credential})
    assert message == b"r=CN,s=" + base64.b64encode(b"s" * 20) + b",i=8192"


# ---- PLAIN ----

@pytest.mark.parametrize(("token", "expected"), [
    (b"\0user\0pw", ("user", "pw")),
    (b"user\0user\0pw", ("user", "pw")),
    (b"\0us\xc3\xa9r\0p\xc3\xa4ss word", ("usér", "päss word")),
    (b"\0user\0", ("user", "")),
])
def test_plain_messages_parse(token, expected):
    assert parse_plain(token) == expected


@pytest.mark.parametrize("token", [
    b"admin\0user\0pw",  # acting as another user
    b"user\0pw",
    b"userpw",
    b"",
    b"\0user\0pw\0",
    b"\0\0user\0pw",
])
def test_plain_messages_that_do_not_follow_rfc_4616_are_refused(token):
    with pytest.raises(SaslFailed):
        parse_plain(token)


@pytest.mark.parametrize("token", [b"\0us\xffer\0pw", b"\0user\0p\xc3", b"\xfe\0user\0pw"])
def test_plain_messages_that_are_not_utf8_are_refused(token):
    with pytest.raises((SaslFailed, UnicodeDecodeError)):
        parse_plain(token)
