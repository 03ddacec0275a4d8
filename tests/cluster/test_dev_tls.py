"""`kanal dev --tls`: a secured dev cluster whose client config the other commands pick up, `kanal users`, and
the CLI's security flags and --command-config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from .conftest import wait_until

pytestmark = pytest.mark.cluster
KANAL = [sys.executable, "-m", "kanal.deploy.cli"]


def _kanal(env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*KANAL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=180,
                          check=False)


def test_dev_tls_secures_the_cluster_and_the_other_commands_follow(tmp_path):
    env = dict(os.environ, KANAL_HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("KANAL_BOOTSTRAP", None)
    env.pop("KANAL_CLIENT_CONFIG", None)
    out = tmp_path / "dev.out"
    with open(out, "w") as log:
        proc = subprocess.Popen(
            [
                *KANAL,
                "dev",
                "--tls",
                "--data-dir",
                str(tmp_path / "data"),
                "--controllers",
                "1",
                "--brokers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        wait_until(
            lambda: "ready. bootstrap:" in out.read_text() or proc.poll() is not None, 120, "kanal dev ready"
        )
        assert proc.poll() is None, out.read_text()
        assert "secured: TLS" in out.read_text() and "INSECURE" not in out.read_text()
        client_config = tmp_path / "client.toml"
        state = json.loads((tmp_path / "dev.json").read_text())
        assert state["client_config"] == str(client_config) and client_config.exists()
        assert _kanal(env, "dev", "status").returncode == 0  # health over TLS
        shell = _kanal(env, "metadata", "ls", "/brokers")  # kanal metadata dials the controller over TLS too
        assert shell.returncode == 0 and shell.stdout.split() == ["0/"], shell.stderr

        # The dev client certificate (User:admin) is picked up without a flag.
        created = _kanal(env, "users", "create", "alice", "--user-password-stdin", stdin="wonderland\n")
        assert created.returncode == 0, created.stderr
        listed = _kanal(env, "users", "list", "--output", "json")
        assert json.loads(listed.stdout) == {"alice": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096},
                                                      {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}
        # A password on top of the certificate names the principal; a wrong one is refused at the door.
        ok = _kanal(env, "topics", "create", "t", "--user", "alice", "--password", "wonderland")
        assert ok.returncode == 0, ok.stderr
        wrong = _kanal(env, "topics", "list", "--user", "alice", "--password", "nope")
        assert wrong.returncode == 1 and "AUTHENTICATION_FAILED" in wrong.stderr
        # With --bootstrap the dev config is not assumed: plaintext to a TLS listener gets nowhere, and
        # --command-config with the same file gets in.
        bootstrap = state["bootstrap"]
        plain = _kanal(env, "topics", "list", "--bootstrap", bootstrap)
        assert plain.returncode == 1 and "BROKER_NOT_AVAILABLE" in plain.stderr
        listed = _kanal(
            env, "topics", "list", "--bootstrap", bootstrap, "--command-config", str(client_config)
        )
        assert listed.returncode == 0 and "t" in listed.stdout.split()
        deleted = _kanal(env, "users", "delete", "alice")
        assert deleted.returncode == 0 and "SCRAM-SHA-256" in deleted.stdout
        assert json.loads(_kanal(env, "users", "list", "--output", "json").stdout) == {}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0
    assert not (tmp_path / "dev.json").exists() and not (tmp_path / "client.toml").exists()
