"""`kanal dev` survives its nodes: a killed broker is reported, the rest keep serving, and
`kanal dev restart` brings it back on its data (`kanal dev status` shows each step)."""

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


def _status(env) -> dict[str, dict]:
    result = _kanal(env, "dev", "status", "--output", "json")
    assert result.returncode in (0, 3), result.stderr
    return {n["name"]: n for n in json.loads(result.stdout)}


def test_a_killed_broker_is_reported_and_restarted_on_its_data(tmp_path):
    env = dict(os.environ, KANAL_HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("KANAL_BOOTSTRAP", None)
    out = tmp_path / "dev.out"
    with open(out, "w") as log:
        proc = subprocess.Popen([*KANAL, "dev", "--data-dir", str(tmp_path / "data"), "--controllers", "1",
                                 "--brokers", "2", "--racks", "a,b"], stdout=log, stderr=subprocess.STDOUT,
                                env=env)
    try:
        wait_until(
            lambda: "ready. bootstrap:" in out.read_text() or proc.poll() is not None, 120, "kanal dev ready"
        )
        assert proc.poll() is None, out.read_text()
        assert _kanal(env, "dev", "status").returncode == 0
        assert (
            _kanal(env, "topics", "create", "t", "--partitions", "2", "--replication-factor", "2").returncode
            == 0
        )
        first = "".join(f"a{i}\n" for i in range(20))
        assert _kanal(env, "produce", "t", "--acks", "all", stdin=first).returncode == 0

        victim = _status(env)["broker-1"]
        os.kill(victim["pid"], signal.SIGKILL)
        wait_until(
            lambda: _status(env)["broker-1"]["state"] == "exited", 30, "status to show broker-1 exited"
        )
        wait_until(lambda: "broker-1 exited" in out.read_text(), 30, "kanal dev to report the death")
        assert proc.poll() is None, "kanal dev stopped the cluster when one broker died"
        status = _status(env)
        assert all(status[n]["state"] == "serving" for n in ("controller-0", "broker-0")), status
        assert _kanal(env, "dev", "status").returncode == 3  # not every node serves

        # The rest keep serving: once the controller fences broker-1, broker-0 leads both partitions.
        second = "".join(f"b{i}\n" for i in range(20))
        produced = _kanal(env, "produce", "t", "--acks", "all", stdin=second)
        assert produced.returncode == 0, produced.stderr

        assert "no node" in _kanal(env, "dev", "restart", "broker-9").stderr
        restarted = _kanal(env, "dev", "restart", "broker-1")
        assert restarted.returncode == 0, restarted.stderr
        status = _status(env)
        assert status["broker-1"]["state"] == "serving" and status["broker-1"]["pid"] != victim["pid"]
        assert _kanal(env, "dev", "status").returncode == 0
        assert (status["broker-0"]["rack"], status["broker-1"]["rack"]) == ("a", "b")
        # A consumer in rack b (KANAL_CLIENT_RACK, as --client-rack) reads the same records, the leader
        # sending it to broker-1 once that is back in the ISR.
        consumed = _kanal(dict(env, KANAL_CLIENT_RACK="b"), "consume", "t", "--from-beginning",
                          "--max-messages", "40", "--output", "json")
        assert consumed.returncode == 0, consumed.stderr
        values = sorted(json.loads(line)["value"] for line in consumed.stdout.splitlines())
        assert values == sorted([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0
    assert not (tmp_path / "dev.json").exists()
