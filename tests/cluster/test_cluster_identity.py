"""Issue 40's data loss, reproduced with `kanal dev`: brokers started against a controller quorum made afresh
(its volumes deleted) used to delete every partition directory within a second ("its topic was deleted
while this broker was away"). Now every data directory records the cluster id the metadata log names,
and a broker whose disk names another cluster refuses to start, naming both ids, and deletes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import stop_dev, wait_until

pytestmark = pytest.mark.cluster
KANAL = [sys.executable, "-m", "kanal.deploy.cli"]


def _kanal(env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*KANAL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=180,
                          check=False)


def _meta(directory: Path) -> dict[str, str]:
    lines = (directory / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def _partition_files(data: Path) -> dict[str, list[str]]:
    """Every replica directory of topic t under every broker, with its files."""
    return {f"{d.parent.name}/{d.name}": sorted(f.name for f in d.iterdir())
            for d in sorted(data.glob("broker-*/t-*")) if d.is_dir()}


def _dev(env, data: Path, out: Path) -> subprocess.Popen:
    with open(out, "w") as log:
        return subprocess.Popen([*KANAL, "dev", "--data-dir", str(data), "--controllers", "1",
                                 "--brokers", "2"], stdout=log, stderr=subprocess.STDOUT, env=env)


def test_brokers_refuse_a_fresh_quorum_and_keep_every_partition(tmp_path):
    env = dict(os.environ, KANAL_HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("KANAL_BOOTSTRAP", None)
    data = tmp_path / "data"
    first = _dev(env, data, tmp_path / "first.out")
    try:
        first_out = tmp_path / "first.out"
        wait_until(lambda: "ready. bootstrap:" in first_out.read_text() or first.poll() is not None,
                   120, "kanal dev ready")
        assert first.poll() is None, (tmp_path / "first.out").read_text()
        created = _kanal(env, "topics", "create", "t", "--partitions", "4", "--replication-factor", "2")
        assert created.returncode == 0, created.stderr
        produced = _kanal(env, "produce", "t", "--acks", "all", stdin="".join(f"v{i}\n" for i in range(40)))
        assert produced.returncode == 0, produced.stderr
    finally:
        stop_dev(first)
    assert first.returncode == 0
    cluster_id = _meta(data / "controller-0")["cluster.id"]
    assert len(cluster_id) == 32
    # Every data directory, brokers' and controllers', records the one cluster id.
    nodes = [d for d in data.iterdir() if (d / "meta.properties").exists()]
    assert len(nodes) == 3 and {_meta(d).get("cluster.id") for d in nodes} == {cluster_id}
    before = _partition_files(data)
    assert len(before) == 8, before
    assert all(any(f.endswith(".log") for f in files) for files in before.values()), before

    for controller_dir in data.glob("controller-*"):  # the operator error: a fresh controller quorum
        shutil.rmtree(controller_dir)
    out = tmp_path / "second.out"
    second = _dev(env, data, out)
    try:
        wait_until(lambda: second.poll() is not None or "ready. bootstrap:" in out.read_text(), 120,
                   "the second kanal dev to give up")
        text = out.read_text()
        assert second.poll() is not None and second.returncode != 0, text
    finally:
        stop_dev(second)
    new_id = _meta(data / "controller-0")["cluster.id"]
    assert new_id != cluster_id
    # The broker's one-line refusal names both clusters ...
    broker_logs = "".join(p.read_text(errors="replace") for p in (data / "logs").glob("broker-*.log")) + text
    refusals = [line for line in broker_logs.splitlines() if "INCONSISTENT_CLUSTER_ID" in line
                or f"belongs to cluster {cluster_id}" in line]
    assert any(cluster_id in line and new_id in line for line in refusals), broker_logs[-3000:]
    assert "its topic was deleted while this broker was away" not in broker_logs
    # ... and every partition directory survives, file for file; the disks still name the old cluster.
    assert _partition_files(data) == before
    assert {_meta(d)["cluster.id"] for d in data.glob("broker-*") if d.is_dir()} == {cluster_id}
