"""kanal's schema registry client (clients/schema_registry_client.py) against a stand-in registry over real
HTTP: requests and replies, Confluent's error codes as kanal's, the cache of schemas by id and its bound,
going on to the next URL, and TLS with basic credentials."""

from __future__ import annotations

import base64
import ssl

import pytest

from kanal.clients.schema_registry_client import (
    CONFLUENT_CODES,
    RegistryError,
    Schema,
    SchemaRegistryClient,
    registry_error,
)
from kanal.deploy.certificates import make_ca
from kanal.deploy.local_cluster import free_ports
from kanal.schemas.schema_types import Reference
from kanal.security.channel_security import ClientSecurity
from kanal.v1.error import ErrorCode, KanalError

from .fake_registry import FakeRegistry

AVRO = '{"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}'


@pytest.fixture
def registry():
    fake = FakeRegistry()
    yield fake
    fake.stop()


def test_register_read_back_and_cache_schemas_by_id(registry):
    client = SchemaRegistryClient(registry.url, schemas_cached_max=2)
    first = client.register("orders-value", Schema(AVRO))
    assert client.register("orders-value", Schema(AVRO)) == first  # the same schema: the same id
    assert client.schema(first) == Schema(AVRO) == client.schema(first)
    assert registry.count("GET", f"/schemas/ids/{first}") == 1  # the second came from the cache
    proto = Schema('syntax = "proto3"; message P { int32 x = 1; }', "PROTOBUF",
                   (Reference("other.proto", "other-value", 1),))
    second = client.register("points-value", proto)
    assert client.schema(second) == proto
    assert registry.requests[-2][2]["Content-Type"] == "application/vnd.schemaregistry.v1+json"
    third = client.register("t-value", Schema('"string"'))
    client.schema(third)  # the cache holds two: the least recently used (the first) goes
    client.schema(first)
    assert registry.count("GET", f"/schemas/ids/{first}") == 2
    assert client.subjects() == ["orders-value", "points-value", "t-value"]
    assert client.versions("orders-value") == [1]
    latest = client.version("orders-value")
    assert (latest.subject, latest.version, latest.schema_id, latest.schema.text) == (
        "orders-value", 1, first, AVRO)
    assert client.lookup("points-value", proto).schema_id == second
    assert client.schema_versions(first) == [("orders-value", 1)]
    assert client.delete_subject("t-value") == [1]


def test_subjects_are_percent_encoded_whole(registry):
    client = SchemaRegistryClient(registry.url)
    client.register("a/b%c value", Schema(AVRO))
    assert registry.requests[-1][1] == "/subjects/a%2Fb%25c%20value/versions"
    assert client.subjects() == ["a/b%c value"]


@pytest.mark.parametrize("status,error_code,code", [
    (409, 409, ErrorCode.INCOMPATIBLE_SCHEMA),
    (422, 42201, ErrorCode.INVALID_SCHEMA),
    (404, 40401, ErrorCode.SUBJECT_NOT_FOUND),
    (404, 40402, ErrorCode.SCHEMA_VERSION_NOT_FOUND),
    (404, 40403, ErrorCode.SCHEMA_NOT_FOUND),
    (404, 40405, ErrorCode.NOT_SOFT_DELETED),
    (422, 42205, ErrorCode.REGISTRY_MODE_FORBIDS),
    (422, 42206, ErrorCode.SCHEMA_REFERENCED),
    (401, 40101, ErrorCode.AUTHENTICATION_FAILED),
    (403, 40301, ErrorCode.AUTHORIZATION_FAILED),
    (404, None, ErrorCode.INVALID_REQUEST),
    (502, None, ErrorCode.UNKNOWN_SERVER_ERROR),
])
def test_refusals_are_kanal_errors_with_confluents_codes_kept(registry, status, error_code, code):
    client = SchemaRegistryClient(registry.url)
    registry.refuse_next(status, error_code, "the registry says no")
    with pytest.raises(RegistryError) as err:
        client.register("orders-value", Schema(AVRO))
    assert err.value.code == code and err.value.http_status == status
    assert err.value.error_code == (error_code or status)
    assert "register under orders-value" in err.value.message and "the registry says no" in err.value.message
    assert registry.count("POST", "/subjects/orders-value/versions") == 1  # not retriable: asked once


def test_every_code_of_the_table_maps_to_a_registry_or_request_error():
    for confluent, code in CONFLUENT_CODES.items():
        error = registry_error(500 if confluent >= 50000 else 400, b'{"error_code": %d}' % confluent, "x")
        assert error.code == code and error.error_code == confluent


def test_a_url_that_cannot_be_reached_or_a_controller_moving_goes_to_the_next(registry):
    nowhere = f"http://127.0.0.1:{free_ports(1)[0]}"
    client = SchemaRegistryClient(f"{nowhere},{registry.url}", retry_backoff_ms=0)
    schema_id = client.register("orders-value", Schema(AVRO))
    assert client.urls == [nowhere, registry.url]
    registry.refuse_next(500, 50003, "no controller")
    assert client.schema(schema_id) == Schema(AVRO)  # retried (on the same, only, live URL's turn)
    assert registry.count("GET", f"/schemas/ids/{schema_id}") == 2


def test_a_registry_that_never_answers_is_broker_not_available_after_the_timeout():
    client = SchemaRegistryClient(f"http://127.0.0.1:{free_ports(1)[0]}", request_timeout_ms=300,
                                  retry_backoff_ms=10)
    with pytest.raises(KanalError) as err:
        client.subjects()
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and "did not answer" in err.value.message


@pytest.mark.parametrize("url", ["", "ftp://h:1", "http://", "127.0.0.1:8081"])
def test_bad_urls_are_invalid_config(url):
    with pytest.raises(KanalError) as err:
        SchemaRegistryClient(url)
    assert err.value.code == ErrorCode.INVALID_CONFIG


def test_tls_with_basic_credentials_and_a_password_never_in_plaintext(tmp_path):
    ca = make_ca(tmp_path)
    issued = ca.issue(tmp_path, "registry", "registry")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(issued.cert, issued.key)
    fake = FakeRegistry(tls=context)
    try:
        security = ClientSecurity(ca_file=str(ca.cert), user="alice", password="s3cret")
        client = SchemaRegistryClient(fake.url, security=security)
        client.register("orders-value", Schema(AVRO))
        expected = "Basic " + base64.b64encode(b"alice:s3cret").decode()
        assert fake.requests[-1][2]["Authorization"] == expected
        # A name the certificate does not carry fails the handshake, as an unreachable registry.
        wrong = ClientSecurity(ca_file=str(ca.cert), server_name="elsewhere")
        with pytest.raises(KanalError) as err:
            SchemaRegistryClient(fake.url, security=wrong, request_timeout_ms=200).subjects()
        assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and "TLS" in err.value.message
        with pytest.raises(KanalError) as err:
            SchemaRegistryClient(fake.url.replace("https", "http"), security=security)
        assert err.value.code == ErrorCode.INVALID_CONFIG and "only ever sent over TLS" in err.value.message
    finally:
        fake.stop()
