"""One config error type: a bad flag of either server, a bad listener or metrics setting, malformed
HOST:PORT text and a bad client config all raise kanal.v1.error.ConfigError, which callers catch as a
KanalError with INVALID_CONFIG (or as the ValueError the per-module errors were) and print as one line."""

from __future__ import annotations

import pytest

from kanal.broker.broker_main import parse_command
from kanal.clients.producer_config import ProducerConfig
from kanal.net.host_port import parse_host_port
from kanal.raft.controller_config import parse_controller_args
from kanal.server.metrics_endpoint import metrics_listen
from kanal.v1.error import ConfigError, ErrorCode, KanalError

BROKER_ARGS = [
    "--id",
    "0",
    "--listen",
    "127.0.0.1:9092",
    "--controllers",
    "127.0.0.1:9093",
    "--data-dir",
    "/tmp/x",
]
CONTROLLER_ARGS = ["--id", "0", "--listen", "127.0.0.1:1", "--peers", "0=127.0.0.1:2=127.0.0.1:1",
                   "--data-dir", "/tmp/x"]

# where -> (the call, a word its message must hold: the setting it names)
BAD_CONFIGS = {
    "broker flag": (lambda: parse_command([*BROKER_ARGS, "--log-level", "bogus"]), "log-level"),
    "controller flag": (
        lambda: parse_controller_args([*CONTROLLER_ARGS, "--no-such-flag"]),
        "--no-such-flag",
    ),
    "host:port": (lambda: parse_host_port("no-port"), "HOST:PORT"),
    "client config": (lambda: ProducerConfig(bootstrap="127.0.0.1:9092", acks=7), "acks"),
}


@pytest.mark.parametrize("where", sorted(BAD_CONFIGS))
def test_every_bad_config_is_one_config_error(where):
    call, named = BAD_CONFIGS[where]
    with pytest.raises(ConfigError, match=named) as info:
        call()
    err = info.value
    assert isinstance(err, KanalError) and isinstance(err, ValueError)
    assert err.code == ErrorCode.INVALID_CONFIG
    assert str(err) == err.message and err.message and "\n" not in err.message


def test_a_metrics_flag_that_is_not_host_port_is_a_config_error():
    with pytest.raises(ConfigError, match="--metrics"):
        metrics_listen("nonsense", "127.0.0.1:9092", 9404)
