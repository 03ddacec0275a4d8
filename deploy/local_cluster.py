"""LocalCluster: a kanal cluster of real processes on 127.0.0.1 — controllers and brokers — for `kanal dev`,
tests and benchmarks.

Every node is a `python -m kanal.deploy.cli controller|broker ...` child process on free loopback ports
chosen at start, with its data under `<data_dir>/<node>/` and its output in `<data_dir>/logs/<node>.log`.
Nodes can be killed (SIGKILL), paused (SIGSTOP), resumed (SIGCONT), stopped (SIGTERM, then SIGKILL after
a deadline) and restarted with the same ports and data. Everything started is stopped by PID in `stop()`
(and on context exit: every broker at once, then every controller at once); nothing else is ever signalled.

Readiness is the gRPC health service of each node reporting SERVING, waited for with a deadline.

Secured (`tls=make_dev_tls(...)`, deploy/certificates.py): every node serves TLS with its own certificate
(CN=broker-<id> / CN=controller-<id>), requires client certificates signed by the CA and authenticates
calls by certificate (mapped to User:broker-<id>, ...) or password (`security_flags` replaces these
listener flags, e.g. to add --tls-crl-file). `client_security` is what clients use: TLS with the dev
client certificate.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kanal.deploy.certificates import NODE_MAPPING_RULES, DevTls
from kanal.security.channel_security import ClientSecurity, open_channel

# Ports are chosen below the kernel's ephemeral range: a port the kernel hands out for bind(0) is also one it
# may give, a moment later, to any process's outgoing connection as its local port, and then the node that
# was to listen there cannot (a broker exited with "Address already in use" for its metrics port once, with
# two test suites running). Below the range only another listener can take a port between choice and use.
_LISTEN_PORTS_LOW = 10_000
_CHOICE_TRIES_MAX = 1_000


def _ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on 127.0.0.1 for listeners to come, chosen at random below the ephemeral
    range (held open together while choosing, so they differ); from the ephemeral range (bind to 0) when
    there is no room below it."""
    low, high = _LISTEN_PORTS_LOW, _ephemeral_low() - 1
    sockets: list[socket.socket] = []
    try:
        for _ in range(_CHOICE_TRIES_MAX):
            if len(sockets) == count:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", random.randint(low, high) if high - low > 1_000 else 0))
            except OSError:  # taken: choose again
                s.close()
                continue
            sockets.append(s)
        if len(sockets) < count:
            raise OSError(f"no {count} free ports found on 127.0.0.1")
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Node:
    """One process of the cluster."""

    kind: str  # "controller" or "broker"
    node_id: int
    endpoint: str  # gRPC host:port
    args: list[str]
    log_path: Path
    process: subprocess.Popen | None = None
    extra: dict = field(default_factory=dict)
    # The argv before `<kind> <args>`: this interpreter running the `kanal` command, unless a launcher
    # (kanal chaos: `ip netns exec NS ...`) says otherwise.
    launcher: list[str] = field(default_factory=lambda: [sys.executable, "-m", "kanal.deploy.cli"])

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        pid = self.process.pid if self.process else None
        return f"<{self.kind} {self.node_id} {self.endpoint} pid={pid} {state}>"

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.node_id}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self._live() is not None

    def _live(self) -> subprocess.Popen | None:
        """The process while it runs; None before the first start and after it exited."""
        process = self.process
        return process if process is not None and process.poll() is None else None

    def start(self, env: dict[str, str]) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                [*self.launcher, self.kind, *self.args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            )

    def signal(self, sig: int) -> None:
        if (process := self._live()) is not None:
            os.kill(process.pid, sig)

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown work."""
        if (process := self._live()) is not None:
            process.kill()
            process.wait(10)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL if it has not exited by the deadline."""
        if (process := self.terminate()) is not None:
            self.wait_stopped(process, time.monotonic() + timeout_s)

    def terminate(self) -> subprocess.Popen | None:
        """SIGTERM without waiting (a paused process is resumed first: it cannot handle SIGTERM while
        stopped); the process signalled, None when none ran."""
        if (process := self._live()) is None:
            return None
        self.resume()
        process.terminate()
        return process

    @staticmethod
    def wait_stopped(process: subprocess.Popen, deadline: float) -> None:
        """Wait for a process sent SIGTERM until `deadline` (time.monotonic()), then SIGKILL it."""
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


class LocalCluster:
    def __init__(self, data_dir: Path | None = None, *, controllers: int = 3, brokers: int = 3,
                 controller_flags: list[str] | None = None, broker_flags: list[str] | None = None,
                 cluster_secret: str = "kanal-local", tls: DevTls | None = None,
                 security_flags: list[str] | None = None, hosts: dict[str, str] | None = None,
                 node_listeners: bool = False, kafka_listeners: bool = False,
                 schema_registry_listeners: bool = False, racks: tuple[str, ...] = ()) -> None:
        """`hosts`: the address each node (by name, `controller-0`, `broker-1`) binds and advertises,
        127.0.0.1 when left out (kanal chaos gives each node its own network namespace and address).
        `node_listeners` (with `tls`): every broker also serves a listener for the other nodes
        (--inter-node-listen, certificates required), and its client listener takes password clients
        without a certificate; certificate holders (the dev admin) use `admin_bootstrap`.
        `kafka_listeners`: every broker also serves the Kafka wire protocol (--kafka-listen), for Kafka
        clients at `kafka_bootstrap`. `schema_registry_listeners`: every broker also serves the schema
        registry's REST API (--schema-registry-listen), at `schema_registry_urls`. `racks`: broker b runs
        with `--rack racks[b % len(racks)]`."""
        if not 1 <= controllers <= 7:
            raise ValueError("controllers must be in [1, 7]")
        if not 0 <= brokers <= 64:
            raise ValueError("brokers must be in [0, 64]")
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="kanal-cluster-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tls = tls
        self.client_security: ClientSecurity | None = None
        if tls is not None:
            self.client_security = ClientSecurity(ca_file=str(tls.ca.cert), cert_file=str(tls.client.cert),
                                                  key_file=str(tls.client.key))
        # Per controller: gRPC, Raft, metrics; per broker: gRPC, metrics. Every node gets its own metrics port
        # (the default one is fixed, so nodes sharing an address would collide).
        if node_listeners and tls is None:
            raise ValueError("node_listeners needs tls")
        self.node_listeners = node_listeners
        registry_ports = brokers if schema_registry_listeners else 0
        ports = free_ports(3 * controllers + 2 * brokers + (brokers if node_listeners else 0)
                           + (brokers if kafka_listeners else 0) + registry_ports)
        registry_base = len(ports) - registry_ports
        kafka_base = registry_base - (brokers if kafka_listeners else 0)
        self.controllers: list[Node] = []
        hosts = hosts or {}
        c_hosts = [hosts.get(f"controller-{i}", "127.0.0.1") for i in range(controllers)]
        peers = ",".join(
            f"{i}={c_hosts[i]}:{ports[3 * i + 1]}={c_hosts[i]}:{ports[3 * i]}" for i in range(controllers)
        )
        for i in range(controllers):
            grpc_port, raft_port, metrics_port = ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]
            args = [
                "--id",
                str(i),
                "--listen",
                f"{c_hosts[i]}:{grpc_port}",
                "--raft",
                f"{c_hosts[i]}:{raft_port}",
                "--peers",
                peers,
                "--data-dir",
                str(self.data_dir / f"controller-{i}"),
                "--metrics",
                f"{c_hosts[i]}:{metrics_port}",
                "--cluster-secret",
                cluster_secret,
                *self._tls_flags(f"controller-{i}", security_flags),
                *(controller_flags or []),
            ]
            node = Node("controller", i, f"{c_hosts[i]}:{grpc_port}", args,
                        self.data_dir / "logs" / f"controller-{i}.log")
            node.extra["metrics"] = f"{c_hosts[i]}:{metrics_port}"
            self.controllers.append(node)
        self._peers, self._cluster_secret = peers, cluster_secret
        self._controller_flags = list(controller_flags or [])
        controller_endpoints = ",".join(n.endpoint for n in self.controllers)
        self.brokers: list[Node] = []
        # Replication factor of __consumer_offsets and __transaction_state: the broker count, at most 3.
        self.internal_topics_rf = max(1, min(3, brokers))
        base = 3 * controllers
        for b in range(brokers):
            grpc_port, metrics_port = ports[base + 2 * b], ports[base + 2 * b + 1]
            host = hosts.get(f"broker-{b}", "127.0.0.1")
            args = ["--id", str(b), "--listen", f"{host}:{grpc_port}", "--controllers", controller_endpoints,
                    "--data-dir", str(self.data_dir / f"broker-{b}"), "--metrics", f"{host}:{metrics_port}",
                    # A cluster of fewer than 3 brokers can never host the internal topics at Kafka's
                    # default RF 3 (brokers refuse to create them smaller): use what this cluster has.
                    "--offsets-topic-replication-factor", str(self.internal_topics_rf),
                    "--transaction-state-replication-factor", str(self.internal_topics_rf),
                    *self._tls_flags(f"broker-{b}", security_flags), *(broker_flags or [])]
            if racks:
                args += ["--rack", racks[b % len(racks)]]
            node_endpoint = ""
            if node_listeners:
                node_endpoint = f"{host}:{ports[base + 2 * brokers + b]}"
                args += ["--inter-node-listen", node_endpoint, "--tls-client-auth", "none"]
            if kafka_listeners:
                node_kafka = f"{host}:{ports[kafka_base + b]}"
                args += ["--kafka-listen", node_kafka]
            if schema_registry_listeners:
                node_registry = f"{host}:{ports[registry_base + b]}"
                args += ["--schema-registry-listen", node_registry]
            node = Node("broker", b, f"{host}:{grpc_port}", args, self.data_dir / "logs" / f"broker-{b}.log")
            node.extra["metrics"] = f"{host}:{metrics_port}"
            if racks:
                node.extra["rack"] = racks[b % len(racks)]
            if kafka_listeners:
                node.extra["kafka"] = node_kafka
            if schema_registry_listeners:
                node.extra["schema_registry"] = node_registry
            if node_endpoint:
                node.extra["inter_node"] = node_endpoint
            self.brokers.append(node)
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault(
            "PYTHONFAULTHANDLER", "1"
        )  # a crash in native code leaves its Python stack in the node's log
        self._env = env

    def new_controller(self) -> Node:
        """A controller to add to the quorum (`kanal quorum add`), not started: the next id, ports of its own,
        and --peers naming the controllers this cluster started with plus itself, as a controller joining
        a running quorum must (it learns later changes from the log). On 127.0.0.1, without TLS."""
        if self.tls is not None:
            raise ValueError("new_controller does not issue certificates: a cluster without TLS only")
        i = max(n.node_id for n in self.controllers) + 1
        grpc_port, raft_port, metrics_port = free_ports(3)
        host = "127.0.0.1"
        peers = f"{self._peers},{i}={host}:{raft_port}={host}:{grpc_port}"
        args = ["--id", str(i), "--listen", f"{host}:{grpc_port}", "--raft", f"{host}:{raft_port}",
                "--peers", peers, "--data-dir", str(self.data_dir / f"controller-{i}"),
                "--metrics", f"{host}:{metrics_port}", "--cluster-secret", self._cluster_secret,
                *self._controller_flags]
        node = Node(
            "controller", i, f"{host}:{grpc_port}", args, self.data_dir / "logs" / f"controller-{i}.log"
        )
        node.extra["metrics"] = f"{host}:{metrics_port}"
        node.extra["raft"] = f"{host}:{raft_port}"
        self.controllers.append(node)
        return node

    def _tls_flags(self, node: str, security_flags: list[str] | None) -> list[str]:
        if self.tls is None:
            return []
        issued = self.tls.nodes[node]
        flags = ["--tls-cert-file", str(issued.cert), "--tls-key-file", str(issued.key),
                 "--tls-ca-file", str(self.tls.ca.cert)]
        if security_flags is not None:
            return flags + security_flags
        return flags + ["--tls-client-auth", "required", "--authentication", "mtls,password",
                        "--principal-mapping-rules", NODE_MAPPING_RULES]

    def __repr__(self) -> str:
        return (f"<LocalCluster {len(self.controllers)} controllers, {len(self.brokers)} brokers "
                f"in {self.data_dir}>")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def nodes(self) -> list[Node]:
        return [*self.controllers, *self.brokers]

    @property
    def bootstrap(self) -> str:
        """Comma-separated broker endpoints, for clients."""
        return ",".join(n.endpoint for n in self.brokers)

    @property
    def kafka_bootstrap(self) -> str:
        """Comma-separated Kafka listener endpoints ("" when the brokers have none), for Kafka clients."""
        return ",".join(n.extra["kafka"] for n in self.brokers if "kafka" in n.extra)

    @property
    def schema_registry_urls(self) -> str:
        """Comma-separated URLs of the brokers' schema registry listeners ("" when they have none): what
        a Confluent registry client takes (`url`), https when the cluster has TLS."""
        scheme = "https" if self.tls is not None else "http"
        return ",".join(f"{scheme}://{n.extra['schema_registry']}" for n in self.brokers
                        if "schema_registry" in n.extra)

    @property
    def admin_bootstrap(self) -> str:
        """Comma-separated endpoints for clients that authenticate by certificate (the dev admin): the
        brokers' listeners for other nodes when they have them, else `bootstrap`."""
        return ",".join(n.extra.get("inter_node", n.endpoint) for n in self.brokers)

    @property
    def controller_endpoints(self) -> str:
        return ",".join(n.endpoint for n in self.controllers)

    def start(self, timeout_s: float = 60.0) -> None:
        """Start every node and wait until each reports SERVING."""
        try:
            for node in self.nodes:
                node.start(self._env)
            self.wait_ready(self.nodes, timeout_s)
        except BaseException:
            self.stop()
            raise

    def start_node(self, node: Node, timeout_s: float = 60.0, wait: bool = True) -> None:
        node.start(self._env)
        if wait:
            self.wait_ready([node], timeout_s)

    def restart(self, node: Node, timeout_s: float = 60.0) -> None:
        node.stop()
        self.start_node(node, timeout_s)

    def wait_ready(self, nodes: list[Node], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for node in nodes:
            while not serving(node.endpoint, timeout_s=0.5, security=self.client_security):
                if not node.running:
                    code = node.process.returncode if node.process is not None else None
                    raise RuntimeError(f"{node.name} exited with {code}; "
                                       f"last output:\n{self.tail(node)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{node.name} not SERVING after {timeout_s}s; last output:\n{self.tail(node)}"
                    )
                time.sleep(0.05)

    def tail(self, node: Node, lines: int = 30) -> str:
        try:
            return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no output)"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop every node this cluster started, by PID: SIGTERM to every broker at once (each a controlled
        shutdown while the controllers still run), then to every controller at once; a node still running
        `timeout_s` after its SIGTERM is killed. One group at a time, not one node: a clean stop takes
        seconds (gRPC's grace, the controlled shutdown), and six in a row would add them up."""
        for group in (self.brokers, self.controllers):
            deadline = time.monotonic() + timeout_s
            signalled = []
            for node in reversed(group):
                try:
                    if (process := node.terminate()) is not None:
                        signalled.append((node, process))
                except OSError:  # keep stopping the others
                    node.kill()
            for node, process in signalled:
                try:
                    node.wait_stopped(process, deadline)
                except (OSError, subprocess.SubprocessError):
                    node.kill()

    def remove_data(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def serving(endpoint: str, timeout_s: float = 1.0, security: ClientSecurity | None = None) -> bool:
    """Whether the gRPC health service at `endpoint` says SERVING."""
    with open_channel(endpoint, (), security) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING
