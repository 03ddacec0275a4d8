"""The security flags of `kanal broker` and `kanal controller`: from the command line, the environment or a
config file, into a checked ListenerSecurity; a missing or unreadable file stops the start with one line."""

from __future__ import annotations

import pytest

from kanal.broker.broker_main import parse_args as parse_broker_args
from kanal.deploy.certificates import make_ca
from kanal.raft.controller_config import ControllerConfigError, parse_controller_args
from kanal.server.flags import ServerFlagError
from kanal.v1.error import KanalError

BROKER = [
    "--id",
    "1",
    "--listen",
    "127.0.0.1:9092",
    "--controllers",
    "127.0.0.1:9091",
    "--data-dir",
    "/tmp/kanal-x",
]
CONTROLLER = ["--id", "0", "--listen", "127.0.0.1:9091", "--peers", "0=127.0.0.1:9093=127.0.0.1:9091",
              "--data-dir", "/tmp/kanal-y"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d)
    node = ca.issue(d, "node", "broker-1")
    return {"cert": str(node.cert), "key": str(node.key), "ca": str(ca.cert), "dir": d}


def tls_flags(files, **extra):
    flags = ["--tls-cert-file", files["cert"], "--tls-key-file", files["key"], "--tls-ca-file", files["ca"]]
    for key, value in extra.items():
        flags += [f"--{key.replace('_', '-')}", value]
    return flags


def test_flags_environment_and_config_file_build_the_listener_security(files, tmp_path):
    config = parse_broker_args(
        [*BROKER, *tls_flags(files, tls_client_auth="required", authentication="mtls,password")], environ={}
    )
    assert config.security.tls and config.security.client_auth == "required"
    assert config.security.authentication == {"mtls", "password"}
    assert config.security.outbound().cert_file == files["cert"]
    environ = {"KANAL_TLS_CERT_FILE": files["cert"], "KANAL_TLS_KEY_FILE": files["key"],
               "KANAL_TLS_CA_FILE": files["ca"], "KANAL_AUTHENTICATION": "password"}
    assert parse_broker_args(BROKER, environ=environ).security.authentication == {"password"}
    toml = tmp_path / "controller.toml"
    toml.write_text(f'tls-cert-file = "{files["cert"]}"\ntls-key-file = "{files["key"]}"\n'
                    f'tls-ca-file = "{files["ca"]}"\ntls-client-auth = "required"\nauthentication = "mtls"\n'
                    f'principal-mapping-rules = "RULE:^CN=(.*)$/$1/"\n')
    security = parse_controller_args([*CONTROLLER, "--config", str(toml)], environ={}).security
    assert security.mapper.name_of("CN=broker-1") == "broker-1"
    assert parse_broker_args(BROKER, environ={}).security.outbound() is None  # plaintext by default


@pytest.mark.parametrize(("extra", "message"), [
    ({"tls_cert_file": "/nonexistent/cert.pem"}, "cannot read"),
    ({"tls_key_file": "CA"}, "not an unencrypted PEM private key"),
    ({"tls_client_auth": "requested"}, "requested"),
    ({"authentication": "mtls"}, "needs --tls-client-auth required"),
    ({"authentication": "none,password"}, "none cannot be combined"),
    ({"principal_mapping_rules": "RULE:oops"}, "mapping"),
    ({"tls_crl_file": "/nonexistent/crl.pem"}, "cannot read"),
])
def test_bad_settings_stop_the_start_with_one_line(files, extra, message):
    extra = {k: files["ca"] if v == "CA" else v for k, v in extra.items()}
    with pytest.raises(ServerFlagError) as err:
        parse_broker_args([*BROKER, *tls_flags(files, **extra)], environ={})
    assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ControllerConfigError) as err:
        parse_controller_args([*CONTROLLER, *tls_flags(files, **extra)], environ={})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_plaintext_listener_others_can_reach_is_warned_about(caplog):
    import logging

    from kanal.security.listener_security import ListenerSecurity, is_loopback_bind, warn_if_exposed

    assert is_loopback_bind("127.0.0.1") and is_loopback_bind("localhost") and is_loopback_bind("[::1]")
    assert not is_loopback_bind("0.0.0.0") and not is_loopback_bind("kanal-broker-0.kanal-broker")
    log = logging.getLogger("test-exposed")
    with caplog.at_level(logging.WARNING, logger="test-exposed"):
        warn_if_exposed("127.0.0.1", ListenerSecurity(), log, "broker 1")
        assert not caplog.records
        warn_if_exposed("0.0.0.0", ListenerSecurity(), log, "broker 1")
    assert "without TLS" in caplog.records[0].getMessage()


def test_an_inter_node_listener_requires_certificates_and_frees_the_client_listener(files):
    """Issue 42, item 2: with --inter-node-listen, mtls authenticates the nodes there, so the client
    listener may ask for no certificate (password clients)."""
    flags = [*BROKER, *tls_flags(files, tls_client_auth="none", authentication="mtls,password"),
             "--inter-node-listen", "127.0.0.1:9095"]
    config = parse_broker_args(flags, environ={})
    assert config.inter_node_advertised == "127.0.0.1:9095" and config.security.node_listener
    assert config.security.client_auth == "none"
    advertised = parse_broker_args([*flags, "--inter-node-advertise", "localhost:19095"], environ={})
    assert advertised.inter_node_advertised == "localhost:19095"


@pytest.mark.parametrize(("flags", "message"), [
    (["--inter-node-listen", "127.0.0.1:9095"], "needs TLS"),
    (["--inter-node-advertise", "127.0.0.1:9095"], "needs --inter-node-listen"),
    (["--inter-node-listen", "127.0.0.1:9092", "--tls-cert-file", "CERT", "--tls-key-file", "KEY",
      "--tls-ca-file", "CA"], "must differ from --listen"),
    (["--inter-node-listen", "0.0.0.0:9095", "--tls-cert-file", "CERT", "--tls-key-file", "KEY",
      "--tls-ca-file", "CA"], "wildcard"),
])
def test_bad_inter_node_listeners_stop_the_start_with_one_line(files, flags, message):
    names = {"CERT": files["cert"], "KEY": files["key"], "CA": files["ca"]}
    with pytest.raises((ServerFlagError, KanalError)) as err:
        parse_broker_args([*BROKER, *[names.get(f, f) for f in flags]], environ={})
    assert message in str(err.value) and "\n" not in str(err.value)
