"""ProducerConfig and ConsumerConfig refuse bad values at construction, naming the setting."""

from __future__ import annotations

import pytest

from kanal.clients.consumer import ConsumerConfig
from kanal.clients.producer_config import ProducerConfig
from kanal.v1.error import ErrorCode, KanalError

BOOTSTRAP = "127.0.0.1:9092"


@pytest.mark.parametrize("config, settings, named", [
    (ProducerConfig, {"bootstrap": 5}, "bootstrap"),
    (ProducerConfig, {"bootstrap": ""}, "bootstrap"),
    (ProducerConfig, {"bootstrap": "no-port"}, "bootstrap"),
    (ProducerConfig, {"enable_idempotence": "no"}, "enable_idempotence"),  # a truthy str would turn it on
    (ProducerConfig, {"client_id": 5}, "client_id"),
    # The client id travels as gRPC metadata (kanal-client-id): printable ASCII, at most 255 characters.
    (ProducerConfig, {"client_id": "caf\u00e9"}, "client id"),
    (ProducerConfig, {"client_id": "x" * 256}, "client id"),
    (ConsumerConfig, {"client_id": "tab\there"}, "client id"),
    (ProducerConfig, {"batch_size_bytes": True}, "batch_size_bytes"),
    (ProducerConfig, {"linger_ms": 1.5}, "linger_ms"),
    (ProducerConfig, {"acks": 2}, "acks"),
    (ProducerConfig, {"use_native_path": 0}, "use_native_path"),
    (ConsumerConfig, {"bootstrap": None}, "bootstrap"),
    (ConsumerConfig, {"enable_auto_commit": "no"}, "enable_auto_commit"),
    (ConsumerConfig, {"group_id": 5}, "group_id"),
    (ConsumerConfig, {"group_instance_id": b"x", "group_id": "g"}, "group_instance_id"),
    (ConsumerConfig, {"max_poll_records": False}, "max_poll_records"),
    (ConsumerConfig, {"fetch_max_wait_ms": -1}, "fetch_max_wait_ms"),
    (ConsumerConfig, {"auto_offset_reset": "smallest"}, "auto_offset_reset"),
])
def test_bad_settings_are_invalid_config_naming_the_setting(config, settings, named):
    with pytest.raises(KanalError) as err:
        config(**{"bootstrap": BOOTSTRAP, **settings})
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert named in str(err.value)


def test_defaults_and_ordinary_values_are_accepted():
    assert ProducerConfig(bootstrap=f"{BOOTSTRAP}, 127.0.0.2:9092").acks_value == -1
    assert ProducerConfig(bootstrap=BOOTSTRAP, acks=1, enable_idempotence=False).acks_value == 1
    assert ConsumerConfig(bootstrap=BOOTSTRAP, group_id="g", enable_auto_commit=False).group_id == "g"
    with pytest.raises(TypeError):  # an unknown setting is a typo, not something to ignore
        ConsumerConfig(bootstrap=BOOTSTRAP, bogus=1)
