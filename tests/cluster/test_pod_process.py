"""The server commands as a pod runs them: bad configuration is one line and a non-zero exit before
anything starts; JSON logs on stdout; a liveness service; listen vs advertise; SIGTERM of a leader broker
moves its leaderships away before it exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.deploy.local_cluster import LocalCluster
from kanal.server.flags import LIVENESS_SERVICE

from .conftest import create_topic

pytestmark = pytest.mark.cluster
KANAL = [sys.executable, "-m", "kanal.deploy.cli"]
PEERS = "0=127.0.0.1:9701=127.0.0.1:9601,1=127.0.0.1:9702=127.0.0.1:9602"


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*KANAL, *args], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize(
    ("kind", "args", "env", "message"),
    [
        ("broker", ["--config", "{dir}/b.toml"], {}, "unknown key 'listn'"),
        (
            "broker",
            [
                "--id",
                "1",
                "--listen",
                "127.0.0.1:9",
                "--controllers",
                "127.0.0.1:9601",
                "--data-dir",
                "{dir}/d",
            ],
            {"KANAL_HEARTBEAT_INTERVAL_MS": "fast"},
            "KANAL_HEARTBEAT_INTERVAL_MS: expected an integer",
        ),
        (
            "broker",
            [
                "--id",
                "1",
                "--listen",
                "127.0.0.1:9",
                "--advertise",
                "kanal-broker-1.nowhere.invalid:9092",
                "--controllers",
                "127.0.0.1:9601",
                "--data-dir",
                "{dir}/d",
                "--resolve-wait-ms-max",
                "0",
            ],
            {},
            "does not resolve",
        ),
        (
            "controller",
            ["--id-from-hostname", "--listen", "127.0.0.1:9", "--peers", PEERS, "--data-dir", "{dir}/d"],
            {"HOSTNAME": "kanal-controller-2"},
            "does not list this controller (--id 2)",
        ),
        (
            "controller",
            ["--listen", "127.0.0.1:9", "--data-dir", "{dir}/d", "--peers", PEERS],
            {"KANAL_ID": "0", "KANAL_SESSION_TIMEOUT_MS": "9s"},
            "KANAL_SESSION_TIMEOUT_MS: expected an integer",
        ),
    ],
)
def test_bad_configuration_is_one_line_and_nothing_starts(tmp_path, kind, args, env, message):
    (tmp_path / "b.toml").write_text('listn = "0.0.0.0:9092"\n')
    result = _run([kind, *(a.replace("{dir}", str(tmp_path)) for a in args)], env)
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "d").exists(), "a half-started node left data behind"


def test_json_logs_liveness_advertise_and_sigterm_moves_leadership(tmp_path):
    # A long session timeout: only a controlled shutdown can move leadership before the broker's session
    # would expire, so a leader found elsewhere right after the exit shows the shutdown moved it.
    cluster = LocalCluster(tmp_path, controllers=1, brokers=2,
                           controller_flags=["--session-timeout-ms", "60000", "--log-format", "json"],
                           broker_flags=["--log-format", "json"])
    for node in cluster.brokers:  # bind 127.0.0.1, advertise the name `localhost`
        port = node.endpoint.rsplit(":", 1)[1]
        node.args += ["--advertise", f"localhost:{port}"]
    cluster.start(timeout_s=90)
    try:
        for node in cluster.nodes:
            with grpc.insecure_channel(node.endpoint) as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=LIVENESS_SERVICE), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
        create_topic(cluster, "pods", partitions=2, replication_factor=2)
        md = ClusterMetadata(cluster.bootstrap)
        try:
            view = md.refresh(["pods"])
            assert sorted(view.brokers.values()) == sorted(f"localhost:{n.endpoint.rsplit(':', 1)[1]}"
                                                           for n in cluster.brokers)
            leader = view.topics["pods"][0].leader
            node = next(n for n in cluster.brokers if n.node_id == leader)
            node.process.terminate()
            assert node.process.wait(30) == 0
            after = md.refresh(["pods"]).topics["pods"]
            assert all(p.leader not in (leader, -1) for p in after), after
        finally:
            md.close()
        for node in cluster.nodes:
            lines = node.log_path.read_text().splitlines()
            objects = [json.loads(line) for line in lines if line.startswith("{")]
            assert len(objects) >= 3 and all(o["node"] == node.name for o in objects)
            assert not any(f" {node.name} " in line for line in lines), "a text log line"
    finally:
        cluster.stop()
