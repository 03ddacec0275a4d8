"""`kanal broker` flags reach BrokerConfig, and values out of bounds stop it with INVALID_CONFIG."""

from __future__ import annotations

import pytest

from kanal.broker.broker_main import parse_args
from kanal.broker.config import BrokerConfig
from kanal.v1.error import ErrorCode, KanalError


def base(tmp_path) -> list[str]:
    return [
        "--id",
        "0",
        "--listen",
        "127.0.0.1:1",
        "--controllers",
        "127.0.0.1:2",
        "--data-dir",
        str(tmp_path),
    ]


def test_producer_id_expiration_defaults_to_a_day_and_takes_the_flag(tmp_path):
    assert parse_args(base(tmp_path)).producer_id_expiration_ms == 86_400_000
    flag = ["--producer-id-expiration-ms", "5000"]
    assert parse_args(base(tmp_path) + flag).producer_id_expiration_ms == 5000


@pytest.mark.parametrize("value", ["999", "-1", str(11 * 365 * 24 * 3600 * 1000)])
def test_producer_id_expiration_out_of_bounds_is_invalid_config(tmp_path, value):
    with pytest.raises(KanalError) as err:
        parse_args(base(tmp_path) + ["--producer-id-expiration-ms", value])
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert "producer_id_expiration_ms" in err.value.message


@pytest.mark.parametrize(
    ("field", "value"),
    [("log_maintenance_interval_ms", -5), ("log_maintenance_interval_ms", 0), ("fetch_wait_ms_max", -1)],
)
def test_negative_intervals_and_waits_are_invalid_config(tmp_path, field, value):
    with pytest.raises(KanalError) as err:
        BrokerConfig(broker_id=0, listen="127.0.0.1:1", controllers=("127.0.0.1:2",), data_dir=tmp_path,
                     **{field: value})
    assert err.value.code == ErrorCode.INVALID_CONFIG and field in err.value.message


def test_heartbeat_interval_must_fit_four_times_in_the_controllers_session_timeout():
    from kanal.broker.config import check_heartbeat_fits_session

    check_heartbeat_fits_session(1000, 9000)  # the defaults
    check_heartbeat_fits_session(200, 2000)  # the cluster tests
    check_heartbeat_fits_session(500, 2000)  # exactly a quarter
    with pytest.raises(KanalError) as err:
        check_heartbeat_fits_session(501, 2000)
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert "at most 500" in err.value.message and "\n" not in err.value.message


def test_metadata_fetch_bytes_takes_the_flag_and_is_bounded(tmp_path):
    assert parse_args(base(tmp_path)).metadata_fetch_bytes_max == 8 << 20
    assert parse_args(base(tmp_path) + ["--metadata-fetch-bytes-max", "1"]).metadata_fetch_bytes_max == 1
    for value in ("0", "-1", str((64 << 20) + 1)):
        with pytest.raises(KanalError) as err:
            parse_args(base(tmp_path) + ["--metadata-fetch-bytes-max", value])
        assert err.value.code == ErrorCode.INVALID_CONFIG and "metadata_fetch_bytes_max" in err.value.message



def test_a_data_directory_of_another_node_stops_the_start_in_one_line(tmp_path):
    """`kanal broker --id 1` on broker 7's disk: a startup failure in one line, no traceback, and the
    directory's identity untouched. (Its own process: main() takes over the process's logging.)"""
    import subprocess
    import sys

    from kanal.broker.broker_main import EXIT_STARTUP_FAILED

    identity = "version=1\nnode.id=7\ndirectory.id=6f1c0d3e9a8b4c52a1e07d2b5f3c9e41\n"
    (tmp_path / "meta.properties").write_text(identity)
    argv = [
        "--id",
        "1",
        "--data-dir",
        str(tmp_path),
        "--listen",
        "127.0.0.1:1",
        "--controllers",
        "127.0.0.1:2",
    ]
    code = f"import sys; from kanal.broker.broker_main import main; sys.exit(main({argv!r}))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == EXIT_STARTUP_FAILED, result.stderr
    assert result.stderr.count("\n") == 1 and "another node's" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert (tmp_path / "meta.properties").read_text() == identity


def test_the_kafka_listener_flags_reach_the_config_from_flags_and_environment(tmp_path):
    config = parse_args(base(tmp_path) + ["--kafka-listen", "127.0.0.1:9094",
                                          "--kafka-requests-in-flight-max", "8"])
    assert (config.kafka_listen, config.kafka_advertised, config.kafka_requests_in_flight_max) == (
        "127.0.0.1:9094", "127.0.0.1:9094", 8)
    assert (config.kafka_request_bytes_max, config.kafka_batch_cache_bytes) == (100 << 20, 64 << 20)
    off = parse_args(base(tmp_path) + ["--kafka-listen", "127.0.0.1:9094", "--kafka-batch-cache-bytes", "0"])
    assert off.kafka_batch_cache_bytes == 0
    from_env = parse_args(base(tmp_path), {"KANAL_KAFKA_LISTEN": "0.0.0.0:9094",
                                           "KANAL_KAFKA_ADVERTISE": "localhost:9094"})
    assert (from_env.kafka_listen, from_env.kafka_advertised) == ("0.0.0.0:9094", "localhost:9094")
    assert parse_args(base(tmp_path)).kafka_listen == ""  # off unless asked for


@pytest.mark.parametrize(("flags", "says"), [
    (["--kafka-advertise", "127.0.0.1:9094"], "--kafka-advertise needs --kafka-listen"),
    (["--kafka-listen", "0.0.0.0:9094"], "wildcard"),
    (["--kafka-listen", "127.0.0.1:1"], "must differ from --listen"),
    (["--kafka-listen", "127.0.0.1:9094", "--kafka-request-bytes-max", "10"], "kafka_request_bytes_max"),
    (["--kafka-listen", "127.0.0.1:9094", "--kafka-requests-in-flight-max", "0"],
     "kafka_requests_in_flight_max"),
    (["--kafka-listen", "127.0.0.1:9094", "--kafka-batch-cache-bytes", "-1"], "kafka_batch_cache_bytes"),
])
def test_bad_kafka_listener_flags_are_invalid_config(tmp_path, flags, says):
    with pytest.raises(KanalError) as err:
        parse_args(base(tmp_path) + flags)
    assert err.value.code == ErrorCode.INVALID_CONFIG and says in err.value.message
