"""`kanal dev --tls`: a secured dev cluster whose client config the other commands pick up, `kanal users`, and
the CLI's security flags and --command-config."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import kanal_dev, wait_until

pytestmark = pytest.mark.cluster
KANAL = [sys.executable, "-m", "kanal.deploy.cli"]
# A handshake the listener refuses is retried (UNAVAILABLE) until the request timeout, 30 s by default, and
# only then is BROKER_NOT_AVAILABLE. The refusal comes in milliseconds on loopback: 3 s is ample to see it.
REFUSED_WAIT = ("--request-timeout-ms", "3000")


def _kanal(env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*KANAL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=180,
                          check=False)


def test_dev_tls_secures_the_cluster_and_the_other_commands_follow(tmp_path):
    """Issue 42, item 2: `kanal dev --tls --authorizer` enforces ACLs, and a password user gets in over TLS
    without a client certificate, while the nodes and the dev admin authenticate by certificate on the
    brokers' listeners of their own."""
    env = dict(os.environ, KANAL_HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("KANAL_BOOTSTRAP", None)
    env.pop("KANAL_CLIENT_CONFIG", None)
    out = tmp_path / "dev.out"
    with open(out, "w") as log:
        proc = subprocess.Popen(
            [*KANAL, "dev", "--tls", "--authorizer", "--data-dir", str(tmp_path / "data"),
             "--controllers", "1", "--brokers", "1"],
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
        assert "ACLs enforced" in out.read_text()
        client_config = tmp_path / "client.toml"
        password_config = tmp_path / "password-client.toml"
        state = json.loads((tmp_path / "dev.json").read_text())
        assert state["client_config"] == str(client_config) and client_config.exists()
        assert password_config.exists() and "tls-cert-file" not in password_config.read_text()
        assert state["bootstrap"] != state["admin_bootstrap"]
        assert _kanal(env, "dev", "status").returncode == 0  # health over TLS
        shell = _kanal(env, "metadata", "ls", "/brokers")  # kanal metadata dials the controller over TLS too
        assert shell.returncode == 0 and shell.stdout.split() == ["0/"], shell.stderr

        # The dev client certificate (User:admin, a super user) is picked up without a flag.
        created = _kanal(env, "users", "create", "alice", "--user-password-stdin", stdin="wonderland\n")
        assert created.returncode == 0, created.stderr
        listed = _kanal(env, "users", "list", "--output", "json")
        assert json.loads(listed.stdout) == {"alice": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096},
                                                      {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}
        for topic in ("t", "u"):
            made = _kanal(env, "topics", "create", topic)
            assert made.returncode == 0, made.stderr
        alice = ["--command-config", str(password_config), "--user", "alice", "--password", "wonderland"]
        # Alice: a password, no certificate. Without an ACL she may not even see the topics.
        seen = _kanal(env, "topics", "list", *alice)
        assert seen.returncode == 0 and "t" not in seen.stdout.split(), seen.stderr
        denied = _kanal(env, "produce", "t", *alice, stdin="before\n")
        # (an idempotent producer first needs a producer id: IDEMPOTENT_WRITE, or WRITE on some topic)
        assert denied.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr, denied.stderr
        granted = _kanal(env, "acls", "add", "--allow-principal", "User:alice", "--operation", "All",
                         "--topic", "t")
        assert granted.returncode == 0, granted.stderr
        produced = _kanal(env, "produce", "t", *alice, stdin="hello\n")
        assert produced.returncode == 0, produced.stderr
        read = _kanal(env, "consume", "t", *alice, "--from-beginning", "--max-messages", "1")
        assert read.returncode == 0 and read.stdout.split() == ["hello"], read.stderr
        other = _kanal(env, "produce", "u", *alice, stdin="no\n")
        assert other.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in other.stderr
        wrong = _kanal(env, "topics", "list", "--command-config", str(password_config), "--user", "alice",
                       "--password", "nope")
        assert wrong.returncode == 1 and "AUTHENTICATION_FAILED" in wrong.stderr
        # The password listener asks for no certificate: the admin's alone does not get in there ...
        cert_only = _kanal(env, "topics", "list", "--bootstrap", state["bootstrap"], "--command-config",
                           str(client_config))
        assert cert_only.returncode == 1 and "AUTHENTICATION_FAILED" in cert_only.stderr
        # ... and the certificate listener lets no one in without one.
        ca = str(tmp_path / "data" / "tls" / "ca.pem")
        no_cert = _kanal(env, "topics", "list", "--bootstrap", state["admin_bootstrap"], "--tls-ca-file", ca,
                         "--user", "alice", "--password", "wonderland", *REFUSED_WAIT)
        assert no_cert.returncode == 1 and "BROKER_NOT_AVAILABLE" in no_cert.stderr
        # With --bootstrap the dev config is not assumed: plaintext to a TLS listener gets nowhere, and
        # --command-config with the same file gets in.
        plain = _kanal(env, "topics", "list", "--bootstrap", state["admin_bootstrap"], *REFUSED_WAIT)
        assert plain.returncode == 1 and "BROKER_NOT_AVAILABLE" in plain.stderr
        listed = _kanal(env, "topics", "list", "--bootstrap", state["admin_bootstrap"], "--command-config",
                        str(client_config))
        assert listed.returncode == 0 and {"t", "u"} <= set(listed.stdout.split())
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
    for left in ("dev.json", "client.toml", "password-client.toml"):
        assert not (tmp_path / left).exists()


README = Path(__file__).resolve().parents[2] / "README.md"
BIN = str(Path(sys.executable).parent)  # where pip put the `kanal` script of this interpreter


def readme_tls_block() -> list[str]:
    """The indented command block after the README's "**Try it:** `kanal dev --tls`" paragraph."""
    text = README.read_text()
    start = text.index("**Try it:** `kanal dev --tls`")
    block = re.search(r"\n\n((?:    .*\n)+)", text[start:])
    assert block is not None
    return [line[4:] for line in block.group(1).splitlines()]


def test_the_readme_tls_commands_work_as_printed(tmp_path):
    """Issue 42: the README's `kanal dev --tls --authorizer` lines, a password user among them, run
    verbatim under a fresh HOME (so ~/.kanal is this cluster's)."""
    lines = readme_tls_block()
    assert lines[0] == "kanal dev --tls --authorizer &"
    env = dict(os.environ, HOME=str(tmp_path), PYTHONUNBUFFERED="1",
               PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    for name in ("KANAL_HOME", "KANAL_BOOTSTRAP", "KANAL_CLIENT_CONFIG", "KANAL_PASSWORD"):
        env.pop(name, None)
    with kanal_dev(env, tmp_path / "dev.out", *lines[0].split()[2:-1]):
        outputs = []
        for line in lines[1:]:
            done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, timeout=180,
                                  check=False)
            assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
            outputs.append(done.stdout)
    consume = next(i for i, line in enumerate(lines[1:]) if line.startswith("kanal consume"))
    assert outputs[consume].split() == ["hello"]
