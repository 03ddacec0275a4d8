"""One host:port parser serves every config: the same text is accepted or refused alike by a client's
bootstrap, a broker's listener and a controller's peers."""

from __future__ import annotations

import pytest

from kanal.broker.config import parse_endpoint
from kanal.clients.config_checks import parse_bootstrap
from kanal.net.host_port import parse_host_port
from kanal.raft.controller_config import Address, ControllerConfigError
from kanal.v1.error import ErrorCode, KanalError

GOOD = [("127.0.0.1:9092", "127.0.0.1", 9092), ("broker-0.kanal.svc:1", "broker-0.kanal.svc", 1),
        ("[::1]:65535", "[::1]", 65535), ("localhost:19092", "localhost", 19092)]
BAD = ["127.0.0.1", ":9092", "host:", "host:port", "host:0", "host:65536", "ho st:1", "host:-1", "a_b:1",
       "[::1:1]x:2", ""]


@pytest.mark.parametrize(("text", "host", "port"), GOOD)
def test_good_endpoints_parse_the_same_everywhere(text, host, port):
    assert parse_host_port(text) == (host, port)
    assert parse_endpoint(text) == (host, port)
    assert parse_bootstrap(text) == [text]
    address = Address.parse(text, "--listen")
    assert (address.host, address.port) == (host, port)


@pytest.mark.parametrize("text", BAD)
def test_bad_endpoints_are_refused_everywhere_with_one_line(text):
    with pytest.raises(ValueError) as plain:
        parse_host_port(text)
    assert "\n" not in str(plain.value)
    with pytest.raises(KanalError) as broker:
        parse_endpoint(text)
    assert broker.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(ControllerConfigError, match="^--listen: "):
        Address.parse(text, "--listen")
    if text:  # an empty bootstrap is refused for being empty, before any endpoint is parsed
        with pytest.raises(KanalError, match="bootstrap endpoint") as client:
            parse_bootstrap(text)
        assert client.value.code == ErrorCode.INVALID_CONFIG
