"""`kanal controller` flags: a typed, validated ControllerConfig, or one line on stderr and exit 2."""

from __future__ import annotations

import pytest

from kanal.raft.controller_config import ControllerConfigError, parse_controller_args
from kanal.raft.controller_main import main

PEERS = "1=127.0.0.1:7001=127.0.0.1:6001,2=127.0.0.1:7002=127.0.0.1:6002,3=127.0.0.1:7003=127.0.0.1:6003"


def _args(**overrides: str) -> list[str]:
    flags = {
        "--id": "2",
        "--listen": "127.0.0.1:6002",
        "--raft": "127.0.0.1:7002",
        "--peers": PEERS,
        "--data-dir": "/tmp/kanal-test-unused",
    }
    flags.update(overrides)
    out: list[str] = []
    for k, v in flags.items():
        if v is not None:
            out += [k, v]
    return out


def test_valid_flags_and_defaults():
    config = parse_controller_args(_args())
    assert config.controller_id == 2
    assert str(config.listen) == "127.0.0.1:6002"
    assert [v.controller_id for v in config.voters] == [1, 2, 3]
    assert [v.controller_id for v in config.others] == [1, 3]
    assert config.voter_by_raft("127.0.0.1:7003").controller_id == 3
    assert config.cluster_secret is None
    assert config.session_timeout_ms == 9_000
    assert config.election_timeout_ms_max == 2 * config.election_timeout_ms
    # leaderFallbackTimeout is a few election timeouts, far below pysyncobj's 30 s.
    assert config.leader_fallback_timeout_ms == 2 * config.election_timeout_ms_max < 30_000
    with_secret = parse_controller_args(_args(**{"--cluster-secret": "abcdefgh-secret"}))
    assert with_secret.cluster_secret == "abcdefgh-secret"
    assert "abcdefgh-secret" not in repr(with_secret)


def test_secret_is_never_in_repr(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text("a-very-secret-value\n")
    config = parse_controller_args(_args(**{"--cluster-secret-file": str(secret_file)}))
    assert config.cluster_secret == "a-very-secret-value"
    assert "a-very-secret-value" not in repr(config)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"--id": "x"}, "--id"),
        ({"--id": "9"}, "does not list this controller"),
        ({"--raft": "127.0.0.1:7009"}, "differs from --peers"),
        ({"--listen": "nowhere"}, "HOST:PORT"),
        ({"--listen": "127.0.0.1:70000"}, "outside 1..65535"),
        ({"--peers": "1=127.0.0.1:7001"}, "ID=RAFTHOST"),
        ({"--peers": PEERS + ",2=127.0.0.1:7004=127.0.0.1:6004"}, "distinct"),
        ({"--peers": "2=127.0.0.1:7002=127.0.0.1:6002,3=127.0.0.1:7002=127.0.0.1:6003"}, "distinct"),
        ({"--session-timeout-ms": "50"}, "--session-timeout-ms"),
        (
            {"--session-timeout-ms": "1000", "--session-check-interval-ms": "1000"},
            "below --session-timeout-ms",
        ),
        ({"--election-timeout-ms": "100", "--raft-heartbeat-interval-ms": "50"}, "election-timeout-ms / 3"),
        ({"--inflight-proposals-max": "0"}, "--inflight-proposals-max"),
        ({"--metadata-batch-bytes-max": str(64 << 20)}, "--metadata-batch-bytes-max"),
        ({"--cluster-secret": "short"}, "--cluster-secret"),
        ({"--cluster-id": "bad id!"}, "--cluster-id"),
        ({"--log-level": "LOUD"}, "--log-level"),
        ({"--peers": None}, "--peers"),
    ],
)
def test_bad_flags_are_rejected_with_one_line(overrides, message):
    with pytest.raises(ControllerConfigError) as info:
        parse_controller_args(_args(**overrides))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_main_exits_2_with_one_line_on_stderr(capsys):
    assert main(_args(**{"--session-timeout-ms": "-5"})) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kanal controller: error: --session-timeout-ms")
    assert main([*_args(), "--no-such-flag", "1"]) == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_a_secret_without_the_cryptography_package_is_a_usage_error(monkeypatch, capsys):
    import pysyncobj

    monkeypatch.setattr(pysyncobj, "HAS_CRYPTO", False)
    assert main([*_args(), "--cluster-secret", "long-enough-secret"]) == 2
    assert "needs the 'cryptography' package" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("session_ms", "election_ms", "ok"),
    [
        ("9000", "500", True),  # the defaults: 2,000 + 1,000 < 9,000
        ("2000", "300", True),  # the cluster tests: 1,200 + 600 < 2,000
        ("2000", "333", True),  # 1,332 + 666 = 1,998 < 2,000
        ("2000", "334", False),  # 1,336 + 668 = 2,004
        ("3000", "500", False),  # 2,000 + 1,000 = 3,000: not below
    ],
)
def test_session_timeout_must_exceed_leader_fallback_plus_an_election(session_ms, election_ms, ok):
    """A controller cut off from the quorum answers heartbeats until pysyncobj's leaderFallbackTimeout
    makes it step down; brokers need the rest of the session to reach the new active controller."""
    flags = _args(**{"--session-timeout-ms": session_ms, "--election-timeout-ms": election_ms,
                     "--raft-heartbeat-interval-ms": "50"})
    if ok:
        config = parse_controller_args(flags)
        assert config.leader_fallback_timeout_ms + config.election_timeout_ms_max < config.session_timeout_ms
        return
    with pytest.raises(ControllerConfigError) as info:
        parse_controller_args(flags)
    message = str(info.value)
    assert message.startswith(f"--session-timeout-ms ({session_ms}) must exceed the leader fallback timeout")
    # It names the way out: the largest session timeout that is not enough, the election timeout to stay
    # below.
    assert "raise --session-timeout-ms above" in message and "lower --election-timeout-ms below" in message
    assert "\n" not in message
