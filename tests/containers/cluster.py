"""ContainerCluster: kanal's image run as the production overlay's StatefulSets would run it, one container
per pod, for chaos tests.

Each container gets the rendered manifests' args and environment for its pod (manifests.py) with the
documented differences below, held by tests/deploy/test_manifests.py:
- LOCALIZED: every address (`HOST:PORT` in the listen, advertise, peers, controllers and metrics settings)
  is moved onto 127.0.0.1 and a free port. The containers run with host networking, so all traffic stays
  on loopback here, and the test process dials the brokers by the addresses they advertise.
- TEST_SPEED: shorter session, election, heartbeat and replica-lag timeouts, so a failure is noticed in
  about a second rather than Kafka's production 9-30 s (the same figures the process cluster tests use).
- RACK: the brokers' init container (`kanal node-zone`, which asks the Kubernetes API server for the node's
  zone) does not run: there is no API server here (tests/deploy/test_node_zone.py tests it against one). The
  fixture writes what it would write, `zone-<ordinal>`, to the file KANAL_RACK_FILE names, on a directory
  mounted where the pod mounts the emptyDir.
- PLAINTEXT (unless `tls=True`): the production overlay's TLS settings (TLS_KEYS, with the brokers'
  listener for other nodes, which needs TLS) are left out, so most container tests talk plaintext.
  With `tls=True` they stay, and the fixture lays certificates out as the
  Secrets kanal-controller-tls / kanal-broker-tls mount them (tls.crt, tls.key, ca.crt on TLS_MOUNT, owned
  by the pod's uid, 0440) and client.toml as ConfigMap kanal-client-config mounts it (CLIENT_CONFIG); the
  certificates name localhost and 127.0.0.1, the addresses the nodes dial here.
The Raft secret is a file mounted where the Secret is mounted in a pod; the data directory is a Docker
named volume on /var/lib/kanal, the PVC's mount point, that survives kill, stop and restart.

Every container and volume carries the label `kanal.test=containers`, `kanal.test.checkout=<this checkout's
path>` and `kanal.test.run=<run id>`; the session fixture removes whatever a previous, interrupted run of
this checkout left (by label: runs from other checkouts sharing the engine are left alone) and what this
run made.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import docker
from testcontainers.core.container import DockerContainer

from kanal.deploy.certificates import make_ca
from kanal.deploy.local_cluster import free_ports, serving
from kanal.security.channel_security import ClientSecurity

from .manifests import REPO, PodProcess, client_config, pod_process, render

IMAGE = "kanal:dev"
LABEL = "kanal.test"
LABEL_VALUE = "containers"
RUN_LABEL = "kanal.test.run"
CHECKOUT_LABEL = "kanal.test.checkout"
OVERLAY = "production"
CONTROLLERS = "kanal-controller"
BROKERS = "kanal-broker"
# Keys whose values hold addresses, per StatefulSet: the only rendered values the fixture changes.
LOCALIZED = {
    CONTROLLERS: {"KANAL_LISTEN", "KANAL_RAFT_LISTEN", "KANAL_PEERS", "KANAL_METRICS"},
    BROKERS: {"KANAL_LISTEN", "KANAL_ADVERTISE", "KANAL_CONTROLLERS", "KANAL_METRICS",
              "KANAL_INTER_NODE_LISTEN", "KANAL_INTER_NODE_ADVERTISE", "KANAL_KAFKA_LISTEN",
              "KANAL_KAFKA_ADVERTISE"},
}
# Added for speed; each is a flag of the command, so the rendered manifests could carry it too.
TEST_SPEED = {
    CONTROLLERS: {"KANAL_SESSION_TIMEOUT_MS": "2000", "KANAL_ELECTION_TIMEOUT_MS": "300"},
    BROKERS: {"KANAL_HEARTBEAT_INTERVAL_MS": "200", "KANAL_REPLICA_LAG_MS_MAX": "1500",
              "KANAL_REPLICA_FETCH_WAIT_MS_MAX": "200", "KANAL_OFFSETS_TOPIC_PARTITIONS": "10",
              "KANAL_GROUP_SESSION_TIMEOUT_MS_MIN": "200", "KANAL_GROUP_INITIAL_REBALANCE_DELAY_MS": "100"},
}
SECRET_MOUNT = "/etc/kanal/secret"
TLS_MOUNT = "/etc/kanal/tls"
CLIENT_CONFIG = "/etc/kanal/client/client.toml"
_TLS_COMMON = {"KANAL_TLS_CERT_FILE", "KANAL_TLS_KEY_FILE", "KANAL_TLS_CA_FILE", "KANAL_TLS_CLIENT_AUTH",
               "KANAL_AUTHENTICATION"}
# The brokers' listener for other nodes needs TLS (it demands certificates): plaintext brokers have one.
TLS_KEYS = {CONTROLLERS: _TLS_COMMON,
            BROKERS: _TLS_COMMON | {"KANAL_INTER_NODE_LISTEN", "KANAL_INTER_NODE_ADVERTISE"}}
POD_UID = 10001  # the StatefulSets' runAsUser / fsGroup
DATA_MOUNT = "/var/lib/kanal"
_ADDRESS = re.compile(r"[A-Za-z0-9.-]+:\d+")


@dataclass
class ContainerNode:
    pod: PodProcess
    kind: str  # "controller" or "broker"
    node_id: int
    endpoint: str  # 127.0.0.1:port of its gRPC server
    env: dict[str, str]
    volume: str
    metrics: str  # 127.0.0.1:port of its Prometheus endpoint
    rack: str = ""  # what its rack file says (brokers)
    node_endpoint: str = ""  # 127.0.0.1:port of a broker's listener for other nodes (with TLS)
    container: DockerContainer | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.pod.name

    @property
    def _docker(self):
        if self.container is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.container.get_wrapped_container()

    @property
    def running(self) -> bool:
        c = self._docker
        c.reload()
        return c.status == "running"

    @property
    def exit_code(self) -> int | None:
        c = self._docker
        c.reload()
        return None if c.status in ("running", "paused") else c.attrs["State"]["ExitCode"]

    def kill(self) -> None:
        """SIGKILL of the container's main process: a crash."""
        self._docker.kill()
        self._docker.wait(timeout=30)

    def pause(self) -> None:
        self._docker.pause()

    def unpause(self) -> None:
        self._docker.unpause()

    def stop(self, timeout_s: int = 30) -> int:
        """`docker stop`: SIGTERM, SIGKILL after `timeout_s`; the exit status."""
        self._docker.stop(timeout=timeout_s)
        return int(self._docker.wait(timeout=timeout_s + 30)["StatusCode"])

    def start_again(self) -> None:
        """Start the same container (same volume, same settings) after a kill or stop."""
        self._docker.start()

    def logs(self) -> str:
        return self._docker.logs().decode(errors="replace")


class ContainerCluster:
    def __init__(self, run_id: str, work_dir: Path, *, image: str = IMAGE, controllers: int = 3,
                 brokers: int = 3, tls: bool = False) -> None:
        docs = render(OVERLAY)
        self.run_id = run_id
        self.image = image
        self.tls = tls
        self.security: ClientSecurity | None = None  # how the test process dials the nodes (tls=True)
        self._tls_dirs: dict[str, Path] = {}
        if tls:
            self._make_tls(work_dir, docs)
        secret_dir = work_dir / "secret"
        secret_dir.mkdir(parents=True, exist_ok=True)
        (secret_dir / "cluster-secret").write_text(secrets.token_hex(16) + "\n")
        (secret_dir / "cluster-secret").chmod(0o644)
        secret_dir.chmod(0o755)
        self._secret_dir = secret_dir
        pods = [(CONTROLLERS, i, pod_process(docs, CONTROLLERS, i)) for i in range(controllers)]
        pods += [(BROKERS, i, pod_process(docs, BROKERS, i)) for i in range(brokers)]
        ports = iter(free_ports(5 * len(pods)))
        local: dict[str, str] = {}          # rendered HOST:PORT -> 127.0.0.1:port, cluster-wide names
        wildcard: dict[str, dict[str, str]] = {}  # per pod: 0.0.0.0:PORT -> 127.0.0.1:port
        grpc_endpoint: dict[str, str] = {}
        node_endpoint: dict[str, str] = {}
        metrics_endpoint: dict[str, str] = {}
        for sts, i, pod in pods:
            first, second, metrics = (f"127.0.0.1:{next(ports)}" for _ in range(3))
            nodes_port = f"127.0.0.1:{next(ports)}"
            kafka_port = f"127.0.0.1:{next(ports)}"
            if sts == CONTROLLERS:
                name = f"{pod.name}.{CONTROLLERS}"
                local[f"{name}:9091"], local[f"{name}:9093"] = first, second
                wildcard[pod.name] = {"0.0.0.0:9091": first, "0.0.0.0:9093": second, "0.0.0.0:9404": metrics}
            else:
                local[pod.env["KANAL_ADVERTISE"]] = first
                wildcard[pod.name] = {"0.0.0.0:9092": first, "0.0.0.0:9404": metrics,
                                      "0.0.0.0:9094": kafka_port}
                local[pod.env["KANAL_KAFKA_ADVERTISE"]] = kafka_port
                if tls and "KANAL_INTER_NODE_ADVERTISE" in pod.env:
                    local[pod.env["KANAL_INTER_NODE_ADVERTISE"]] = nodes_port
                    wildcard[pod.name]["0.0.0.0:9093"] = nodes_port
                    node_endpoint[pod.name] = nodes_port
            grpc_endpoint[pod.name] = first
            metrics_endpoint[pod.name] = metrics
        self._rack_dirs: dict[str, Path] = {}
        self.controllers: list[ContainerNode] = []
        self.brokers: list[ContainerNode] = []
        for sts, i, pod in pods:
            table = {**local, **wildcard[pod.name]}
            env = {k: localize(v, table) for k, v in pod.env.items() if tls or k not in TLS_KEYS[sts]}
            env.update(TEST_SPEED[sts])
            kind = "controller" if sts == CONTROLLERS else "broker"
            node = ContainerNode(
                pod,
                kind,
                i,
                grpc_endpoint[pod.name],
                env,
                f"kanal-test-{run_id}-{pod.name}",
                metrics_endpoint[pod.name],
                node_endpoint=node_endpoint.get(pod.name, ""),
            )
            if "KANAL_RACK_FILE" in env:
                node.rack = f"zone-{i}"
                rack_file = Path(env["KANAL_RACK_FILE"])
                rack_dir = work_dir / f"rack-{pod.name}"
                rack_dir.mkdir(parents=True, exist_ok=True)
                rack_dir.chmod(0o755)
                (rack_dir / rack_file.name).write_text(node.rack + "\n")
                (rack_dir / rack_file.name).chmod(0o644)
                self._rack_dirs[pod.name] = rack_dir
                self._rack_mount = str(rack_file.parent)
            (self.controllers if kind == "controller" else self.brokers).append(node)

    def _make_tls(self, work_dir: Path, docs: list[dict]) -> None:
        """A CA; per StatefulSet a Secret's files (tls.crt, tls.key, ca.crt); client.toml; and the test
        process's own client certificate."""
        ca = make_ca(work_dir / "ca")
        for sts in (CONTROLLERS, BROKERS):
            issued = ca.issue(work_dir / "issued", sts, sts)
            secret = work_dir / f"secret-{sts}-tls"
            secret.mkdir(parents=True, exist_ok=True)
            for name, source in (("tls.crt", issued.cert), ("tls.key", issued.key), ("ca.crt", ca.cert)):
                (secret / name).write_bytes(source.read_bytes())
                os.chown(secret / name, POD_UID, POD_UID)
                (secret / name).chmod(0o440)  # the Secret volume's defaultMode, readable by the pod's group
            secret.chmod(0o755)
            self._tls_dirs[sts] = secret
        client_dir = work_dir / "client-config"
        client_dir.mkdir(parents=True, exist_ok=True)
        (client_dir / "client.toml").write_text(client_config(docs))
        (client_dir / "client.toml").chmod(0o644)
        client_dir.chmod(0o755)
        self._client_dir = client_dir
        me = ca.issue(work_dir / "issued", "test-client", "test-client")
        self.ca = ca
        self.security = ClientSecurity(ca_file=str(ca.cert), cert_file=str(me.cert), key_file=str(me.key))

    @property
    def nodes(self) -> list[ContainerNode]:
        return [*self.controllers, *self.brokers]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.endpoint for n in self.brokers)

    @property
    def admin_bootstrap(self) -> str:
        """Where certificate clients dial: the brokers' listeners for other nodes, when they have them."""
        return ",".join(n.node_endpoint or n.endpoint for n in self.brokers)

    def labels(self) -> dict[str, str]:
        return {**checkout_labels(), RUN_LABEL: self.run_id}

    def start(self, timeout_s: float = 120, nodes: list[ContainerNode] | None = None) -> None:
        """Create and start `nodes` (default: all) on new volumes and wait until they are Ready; a node left
        out is a pod the StatefulSet has not made yet (scaled up later with another start)."""
        nodes = self.nodes if nodes is None else nodes
        client = docker.from_env()
        try:
            for node in nodes:
                self._create(client, node)
        finally:
            client.close()
        self.wait_ready(nodes, timeout_s)

    def _create(self, client, node: ContainerNode) -> None:
        """A new volume and a new container for `node`, started (its pod's first start)."""
        client.volumes.create(node.volume, labels=self.labels())
        container = DockerContainer(self.image, command=list(node.pod.args), env=node.env,
                                    network_mode="host", labels=self.labels(),
                                    name=f"kanal-test-{self.run_id}-{node.name}")
        container.with_volume_mapping(node.volume, DATA_MOUNT, "rw")
        container.with_volume_mapping(str(self._secret_dir), SECRET_MOUNT, "ro")
        if node.name in self._rack_dirs:
            container.with_volume_mapping(str(self._rack_dirs[node.name]), self._rack_mount, "ro")
        if self.tls:
            sts = CONTROLLERS if node.kind == "controller" else BROKERS
            container.with_volume_mapping(str(self._tls_dirs[sts]), TLS_MOUNT, "ro")
            container.with_volume_mapping(str(self._client_dir), str(Path(CLIENT_CONFIG).parent), "ro")
        node.container = container.start()

    def replace_volume(self, node: ContainerNode) -> None:
        """The pod's volume is lost: its container and volume are removed (by their ids) and the pod starts
        again on a new, empty volume of the same name (a StatefulSet re-creating the claim)."""
        client = docker.from_env()
        try:
            old = node._docker
            old.remove(force=True)
            client.volumes.get(node.volume).remove(force=True)
            self._create(client, node)
        finally:
            client.close()

    def remove_volume(self, node: ContainerNode) -> None:
        """A scaled-down pod's claim deleted: its (stopped) container and its volume removed by their ids."""
        client = docker.from_env()
        try:
            node._docker.remove(force=True)
            client.volumes.get(node.volume).remove(force=True)
        finally:
            client.close()

    def files(self, node: ContainerNode, path: str) -> list[str]:
        """The names under `path` in a (stopped or running) node's container, read from its filesystem."""
        import io
        import tarfile

        stream, _ = node._docker.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return sorted(m.name for m in tar.getmembers())

    def wait_ready(self, nodes: Iterable[ContainerNode], timeout_s: float = 120) -> None:
        """Wait until each node's gRPC health says SERVING (what the readiness probe asks)."""
        deadline = time.monotonic() + timeout_s
        for node in nodes:
            while not serving(node.endpoint, timeout_s=0.5, security=self.security):
                if node.exit_code is not None:
                    raise RuntimeError(f"{node.name} exited with {node.exit_code}:\n{node.logs()[-3000:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{node.name} not SERVING after {timeout_s}s:\n{node.logs()[-3000:]}")
                time.sleep(0.05)

    def restart(self, node: ContainerNode, timeout_s: float = 120) -> None:
        if node.running:
            node.stop()
        node.start_again()
        self.wait_ready([node], timeout_s)

    def remove(self) -> None:
        remove_labelled({RUN_LABEL: self.run_id})


def checkout_labels() -> dict[str, str]:
    """The labels of every container and volume this checkout's tests make."""
    return {LABEL: LABEL_VALUE, CHECKOUT_LABEL: str(REPO)}


def localize(value: str, table: dict[str, str]) -> str:
    """Every HOST:PORT in `value` replaced by its 127.0.0.1 address; KeyError for one the table lacks."""
    def swap(match: re.Match) -> str:
        if match.group(0) not in table:
            raise KeyError(f"the container fixture has no local address for {match.group(0)!r}")
        return table[match.group(0)]

    return _ADDRESS.sub(swap, value)


def remove_labelled(labels: dict[str, str]) -> None:
    """Remove the containers, then the volumes, carrying all of `labels` (by label, never by name)."""
    client = docker.from_env()
    try:
        selector = [f"{k}={v}" for k, v in labels.items()]
        for container in client.containers.list(all=True, filters={"label": selector}):
            container.remove(force=True, v=True)
        for volume in client.volumes.list(filters={"label": selector}):
            volume.remove(force=True)
    finally:
        client.close()
