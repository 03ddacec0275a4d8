"""Server flags from the command line, KANAL_* variables and a TOML file (kanal.server.flags), as the
two server commands parse them: precedence, unknown keys, wrong types, ids from a StatefulSet ordinal."""

from __future__ import annotations

import json
import logging

import pytest

from kanal.broker.broker_main import parse_command
from kanal.raft.controller_config import ControllerConfigError, parse_controller_args
from kanal.server.flags import ServerFlagError, ordinal_of
from kanal.server.logs import JsonFormatter

PEERS = "0=127.0.0.1:9701=127.0.0.1:9601,1=127.0.0.1:9702=127.0.0.1:9602,2=127.0.0.1:9703=127.0.0.1:9603"


def broker(argv, env=None, hostname="host"):
    return parse_command(argv, env or {}, hostname)[0]


def base_broker(tmp_path) -> list[str]:
    return ["--listen", "127.0.0.1:9092", "--controllers", "127.0.0.1:9601", "--data-dir", str(tmp_path)]


def test_flag_beats_environment_beats_file_beats_default(tmp_path):
    conf = tmp_path / "b.toml"
    conf.write_text('heartbeat-interval-ms = 300\nreplica-lag-ms-max = 4000\nrack = "file-rack"\nid = 7\n')
    env = {"KANAL_REPLICA_LAG_MS_MAX": "5000", "KANAL_RACK": "env-rack"}
    config = broker([*base_broker(tmp_path), "--config", str(conf), "--rack", "flag-rack"], env)
    assert config.rack == "flag-rack"                     # flag over env and file
    assert config.replica_lag_ms_max == 5000              # env over file
    assert config.heartbeat_interval_ms == 300            # file over default
    assert config.broker_id == 7 and config.produce_timeout_ms_default == 30_000  # file; default


def test_everything_from_the_environment_and_a_file_alone(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text(f'listen = "127.0.0.1:9601"\npeers = "{PEERS}"\ndata-dir = "{tmp_path}"\n'
                    'id-from-hostname = true\nsession-timeout-ms = 6000\n')
    config = parse_controller_args([], {"KANAL_CONFIG": str(conf), "KANAL_LOG_FORMAT": "json",
                                        "KANAL_RAFT_LISTEN": "0.0.0.0:9701"}, "kanal-controller-1")
    assert config.controller_id == 1 and config.session_timeout_ms == 6000 and config.log_format == "json"
    assert str(config.raft) == "127.0.0.1:9702"           # this id's entry in --peers
    assert str(config.raft_bind) == "0.0.0.0:9701"


@pytest.mark.parametrize(("content", "message"), [
    ("heartbeat-intervall-ms = 300\n", "unknown key 'heartbeat-intervall-ms'"),
    ('heartbeat-interval-ms = "soon"\n', "heartbeat-interval-ms: expected an integer, got 'soon'"),
    ("listen = 9092\n", "listen: expected a string, got 9092"),
    ('id-from-hostname = "maybe"\n', "id-from-hostname: expected true or false"),
    ("listen = \n", "not TOML"),
    ('log-format = "xml"\n', "log-format: expected one of text, json"),
])
def test_a_bad_file_is_one_line_naming_file_and_key(tmp_path, content, message):
    conf = tmp_path / "bad.toml"
    conf.write_text(content)
    with pytest.raises(ServerFlagError) as info:
        broker([*base_broker(tmp_path), "--id", "1", "--config", str(conf)])
    assert message in str(info.value) and str(conf) in str(info.value) and "\n" not in str(info.value)


def test_a_bad_environment_value_names_the_variable(tmp_path):
    with pytest.raises(ServerFlagError, match="KANAL_HEARTBEAT_INTERVAL_MS: expected an integer, got 'x'"):
        broker([*base_broker(tmp_path), "--id", "1"], {"KANAL_HEARTBEAT_INTERVAL_MS": "x"})
    with pytest.raises(ControllerConfigError, match="KANAL_ELECTION_TIMEOUT_MS: expected an integer"):
        parse_controller_args(["--id", "0", "--listen", "127.0.0.1:9601", "--peers", PEERS, "--data-dir",
                               str(tmp_path)], {"KANAL_ELECTION_TIMEOUT_MS": "1e3"}, "h")


def test_a_value_from_the_file_is_still_checked_by_the_typed_config(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text("election-timeout-ms = 5\n")
    with pytest.raises(ControllerConfigError, match="--election-timeout-ms must be in"):
        parse_controller_args(["--id", "0", "--listen", "127.0.0.1:9601", "--peers", PEERS, "--data-dir",
                               str(tmp_path), "--config", str(conf)], {}, "h")


def test_ids_from_the_hostname_ordinal(tmp_path):
    assert ordinal_of("kanal-broker-12") == 12 and ordinal_of("kanal-controller-0.kanal-controller.ns") == 0
    with pytest.raises(ServerFlagError, match="does not end in -ORDINAL"):
        ordinal_of("laptop")
    assert broker([*base_broker(tmp_path), "--id-from-hostname"], hostname="kanal-broker-2").broker_id == 2
    assert broker([*base_broker(tmp_path)], {"KANAL_ID_FROM_HOSTNAME": "true"}, "b-4").broker_id == 4
    with pytest.raises(ServerFlagError, match="not both"):
        broker([*base_broker(tmp_path), "--id", "1", "--id-from-hostname"], hostname="kanal-broker-2")
    with pytest.raises(ServerFlagError, match="one of --id or --id-from-hostname is required"):
        broker(base_broker(tmp_path))
    with pytest.raises(ControllerConfigError, match=r"does not list this controller \(--id 3\)"):
        parse_controller_args(["--id-from-hostname", "--listen", "127.0.0.1:9601", "--peers", PEERS,
                               "--data-dir", str(tmp_path)], {}, "kanal-controller-3")


def test_advertised_addresses_must_resolve_and_not_be_wildcards(tmp_path):
    with pytest.raises(ServerFlagError, match="--advertise: 'no-such-host.invalid' does not resolve"):
        broker([*base_broker(tmp_path), "--id", "1", "--advertise", "no-such-host.invalid:9092",
                "--resolve-wait-ms-max", "0"])
    from kanal.v1.error import KanalError
    with pytest.raises(KanalError, match="wildcard"):
        broker(["--listen", "0.0.0.0:9092", "--controllers", "127.0.0.1:9601", "--data-dir", str(tmp_path),
                "--id", "1"])
    config = broker(["--listen", "0.0.0.0:9092", "--advertise", "localhost:9092", "--controllers",
                     "127.0.0.1:9601", "--data-dir", str(tmp_path), "--id", "1"])
    assert config.advertised == "localhost:9092" and config.listen == "0.0.0.0:9092"
    peers = PEERS.replace("0=127.0.0.1:9701", "0=no-such-host.invalid:9701")
    with pytest.raises(
        ControllerConfigError, match="--peers raft address of controller 0: 'no-such-host.invalid'"
    ):
        parse_controller_args(["--id", "0", "--listen", "0.0.0.0:9601", "--peers", peers, "--data-dir",
                               str(tmp_path), "--resolve-wait-ms-max", "0"], {}, "h")


def test_json_log_lines_are_one_object_each():
    record = logging.LogRecord(
        "kanal.broker.x", logging.WARNING, __file__, 1, "moved %d\nleaders", (3,), None
    )
    line = JsonFormatter("broker-1").format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert list(parsed) == ["ts", "level", "node", "logger", "thread", "message"]
    assert (
        parsed["message"] == "moved 3\nleaders"
        and parsed["node"] == "broker-1"
        and parsed["ts"].endswith("Z")
    )
