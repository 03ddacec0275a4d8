"""`kanal broker` flags reach BrokerConfig, and values out of bounds stop it with INVALID_CONFIG."""

from __future__ import annotations

import pytest

from kanal.broker.broker_main import parse_args
from kanal.broker.config import BrokerConfig
from kanal.v1.error import ErrorCode, KanalError


def base(tmp_path) -> list[str]:
    return ["--id", "0", "--listen", "127.0.0.1:1", "--controllers", "127.0.0.1:2", "--data-dir", str(tmp_path)]


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


@pytest.mark.parametrize(("field", "value"), [("log_maintenance_interval_ms", -5), ("log_maintenance_interval_ms", 0),
                                              ("fetch_wait_ms_max", -1)])
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
