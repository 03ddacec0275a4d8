"""Targets a chaos run can hit:

- `DevTarget`: a `kanal dev`-style cluster (3 controllers, 3 brokers by default; deploy/local_cluster.py)
  started by the run, each node a process in its own network namespace (netns.py). Needs root.
- `ContainersTarget`: the same cluster as containers of kanal's image (deploy/image), one per node. Each
  node's container shares the network namespace of a small sandbox container of its own (started with
  `--network none`, as a pod's pause container holds a pod's network), which the chaos network wires to
  its bridge; so a container can be killed (`docker kill`, then `docker start`) or paused (`docker pause`)
  and keeps its address and its cuts. Data in a host directory bind-mounted at the same path. Needs root
  and a Docker engine; every container carries the label `kanal.chaos.run=<run name>` and is removed by it.
- `BootstrapTarget`: a running cluster the user names by its bootstrap address. kanal cannot reach its
  processes or network, so it takes no faults: the workloads and the checker run against it as it is
  (useful while the user injects faults their own way).

With the `disk` fault each broker's data directory is a tmpfs of its own, which the fault fills with one
ballast file; with the `power` fault each node's data directory is a power-loss filesystem (storage.py).
With the `clock` fault each broker runs under `kanal.deploy.chaos.skewed_clock`, which gives it a wall clock
of its own that the nemesis steps through a file `<data_dir>/.clock/<node>` (the host's clock is never
touched). With the `remote` fault (`DevTarget` only) the brokers tier the run's topic to an S3 server the
target starts, behind a proxy the nemesis fails (remote_store.py). Everything a target starts is stopped by
`close()`, also after a failure (mounts unmounted by
path, containers removed by name).

A target gives the workloads a bootstrap, the monitor the nodes' endpoints, and the nemesis its handles
(`kill`, `restart`, `pause`, `resume`, `fill_disk`, `empty_disk`, `cut_power`, `step_clock`,
`exited_nodes`, the network, `remote_store` and `catch_upload`).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from kanal.deploy.chaos.mirror_link import MIRROR_NODE, ChaosMirror
from kanal.deploy.chaos.mutation import Mutant
from kanal.deploy.chaos.netns import ChaosNetwork
from kanal.deploy.chaos.remote_store import ChaosRemoteStore
from kanal.deploy.chaos.skewed_clock import write_offset
from kanal.deploy.chaos.storage import BrokerDisks, PowerDisks, storage_root
from kanal.deploy.local_cluster import LocalCluster, Node, serving
from kanal.security.channel_security import ClientSecurity

log = logging.getLogger("kanal.chaos.target")

CLOCKS = ".clock"  # under the data directory: each skewed node's clock offset file (skewed_clock.py)
IMAGE_UID = 10001  # the image runs as this user (deploy/image/README.md): it must own the data directories
RUN_LABEL = "kanal.chaos.run"

# Short timeouts so a failover fits in a short run (the cluster tests' spirit, a little slower for a
# loaded machine). The session timeout must exceed 6 election timeouts and 4 broker heartbeat intervals.
CONTROLLER_FLAGS = ["--session-timeout-ms", "3000", "--election-timeout-ms", "400"]
BROKER_FLAGS = [
    "--heartbeat-interval-ms",
    "300",
    "--replica-lag-ms-max",
    "2000",
    "--replica-fetch-wait-ms-max",
    "200",
    "--group-session-timeout-ms-min",
    "200",
    "--group-initial-rebalance-delay-ms",
    "100",
    "--offsets-topic-partitions",
    "5",
]


def node_names(controllers: int, brokers: int) -> list[str]:
    return [f"controller-{i}" for i in range(controllers)] + [f"broker-{i}" for i in range(brokers)]


def _started(cluster: LocalCluster | None) -> LocalCluster:
    """The target's cluster, which exists from start() on."""
    if cluster is None:
        raise RuntimeError("the chaos target has not been started")
    return cluster


class DevTarget:
    name = "dev"
    takes_faults = True

    def __init__(
        self,
        data_dir: Path,
        *,
        controllers: int = 3,
        brokers: int = 3,
        mutant: Mutant | None = None,
        broker_disk_bytes: int | None = None,
        power: bool = False,
        clock: bool = False,
        remote: bool = False,
        mirror_topic: str | None = None,
    ) -> None:
        """`broker_disk_bytes`: give each broker's data directory a tmpfs of this size (the `disk` fault
        fills it); None keeps them on the data directory's filesystem. `power`: every data directory on a
        power-loss filesystem (the `power` fault). `clock`: brokers on a wall clock of their own (the
        `clock` fault). `remote`: brokers with remote storage the nemesis can fail (the `remote` fault).
        `mirror_topic`: a second cluster and a `kanal mirror` flow of this topic into it, in a namespace of
        its own (the `mirror` fault, mirror_link.py)."""
        self.data_dir = Path(data_dir)
        self.disks = BrokerDisks(storage_root(self.data_dir, power), broker_disk_bytes)
        self.power = PowerDisks(self.data_dir, power)
        self.clock = clock
        self.node_names = node_names(controllers, brokers)
        self.network = ChaosNetwork(self.node_names + ([MIRROR_NODE] if mirror_topic else []))
        self.cluster: LocalCluster | None = None
        self._counts = (controllers, brokers)
        self._mutant = mutant
        self.remote_store = ChaosRemoteStore(self.data_dir / "logs" / "remote-store") if remote else None
        self.mirror = ChaosMirror(self.data_dir / "mirror-target", self.network, mirror_topic,
                                  CONTROLLER_FLAGS, BROKER_FLAGS) if mirror_topic else None

    def __repr__(self) -> str:
        return f"<DevTarget {self.cluster!r} {self.network!r}>"

    def start(self) -> None:
        try:
            self.network.open()
            self.disks.mount(self.node_names)
            self.power.mount(self.node_names)
            hosts = {name: m.address for name, m in self.network.members.items()}
            broker_flags = list(BROKER_FLAGS)
            if self.remote_store is not None:
                self.remote_store.start(self.network.host_address)
                broker_flags += self.remote_store.broker_flags(self.data_dir.name)
            self.cluster = LocalCluster(
                self.data_dir,
                controllers=self._counts[0],
                brokers=self._counts[1],
                controller_flags=CONTROLLER_FLAGS,
                broker_flags=broker_flags,
                hosts=hosts,
            )
            for node in self.cluster.nodes:
                python = [sys.executable, "-m", "kanal.deploy.cli"]
                if self._mutant is not None:  # every node: a mutation may edit the controller
                    python = self._mutant.launcher()
                if self.clock and node.kind == "broker":
                    python = [python[0], *clock_launcher(self.data_dir, node.name), *python[2:]]
                node.launcher = [*self.network.launcher(node.name), *python]
            self.cluster.start(timeout_s=90)
            if self.mirror is not None:
                self.mirror.start(self.cluster.bootstrap)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            if self.mirror is not None:
                self.mirror.close()
            if self.cluster is not None:
                # SIGKILL: the history is written; a controlled shutdown of six nodes would only add time.
                for node in self.cluster.nodes:
                    node.kill()
                self.cluster.stop()
        finally:
            try:
                self.network.close()
            finally:
                try:
                    self.power.close()
                finally:
                    try:
                        self.disks.unmount()
                    finally:
                        if self.remote_store is not None:
                            self.remote_store.close()

    @property
    def bootstrap(self) -> str:
        return _started(self.cluster).bootstrap

    def catch_upload(self) -> str | None:
        """Stall the remote store until a broker is caught in the middle of an upload: its name (the store
        left stalled: `remote_store.heal()` lets it go), or None if none was caught in time."""
        if self.remote_store is None:
            raise RuntimeError("this target was started without remote storage")
        hosts = self.remote_store.catch_upload()
        names = sorted(name for name, m in self.network.members.items() if m.address in hosts)
        return names[0] if names else None

    def node(self, name: str) -> Node:
        for node in _started(self.cluster).nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    @property
    def brokers(self) -> dict[int, str]:
        return {n.node_id: n.endpoint for n in _started(self.cluster).brokers}

    @property
    def controllers(self) -> dict[int, str]:
        return {n.node_id: n.endpoint for n in _started(self.cluster).controllers}

    def exited_nodes(self) -> list[tuple[str, int]]:
        """Nodes started and since exited (not those never started), with their exit status."""
        return [(n.name, n.process.returncode) for n in _started(self.cluster).nodes
                if n.process is not None and not n.running]

    def kill(self, name: str) -> None:
        self.node(name).kill()

    def restart(self, name: str) -> None:
        node = self.node(name)
        if not node.running:
            _started(self.cluster).start_node(node, wait=False)

    def pause(self, name: str) -> None:
        self.node(name).pause()

    def resume(self, name: str) -> None:
        self.node(name).resume()

    def fill_disk(self, name: str) -> None:
        self.disks.fill(name)

    def empty_disk(self, name: str) -> None:
        self.disks.empty(name)

    def cut_power(self, name: str) -> dict:
        return self.power.cut(name)

    def step_clock(self, name: str, offset_s: float) -> None:
        step_clock(self.data_dir, name, offset_s, self.clock)

    def wait_all_serving(self, timeout_s: float) -> None:
        for node in _started(self.cluster).nodes:
            if not node.running:
                _started(self.cluster).start_node(node, wait=False)
        _started(self.cluster).wait_ready(_started(self.cluster).nodes, timeout_s)


def clock_launcher(data_dir: Path, name: str) -> list[str]:
    """The argv that puts a node on a wall clock of its own, between the interpreter and `-m MODULE ...`."""
    return ["-m", "kanal.deploy.chaos.skewed_clock", str(data_dir / CLOCKS / name)]


def step_clock(data_dir: Path, name: str, offset_s: float, enabled: bool) -> None:
    if not enabled:
        raise RuntimeError(f"{name} does not run on a clock of its own (the clock fault needs clock=True)")
    (data_dir / CLOCKS).mkdir(exist_ok=True)
    write_offset(data_dir / CLOCKS / name, offset_s)


def _docker(*args: str, check: bool = True) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(
            f"docker {' '.join(args[:3])} ...: exit {result.returncode}: {result.stderr.strip()}"
        )
    return result.stdout.strip()


class ContainersTarget:
    name = "containers"
    takes_faults = True

    def __init__(self, data_dir: Path, *, image: str = "kanal:dev", controllers: int = 3, brokers: int = 3,
                 broker_disk_bytes: int | None = None, power: bool = False, clock: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.image = image
        self.run = f"kanal-chaos-{os.getpid()}"
        self.node_names = node_names(controllers, brokers)
        self.disks = BrokerDisks(storage_root(self.data_dir, power), broker_disk_bytes)
        # The image's user (not the mounting root) reads and writes through the mounts: allow_other.
        self.power = PowerDisks(self.data_dir, power, allow_other=True)
        self.clock = clock
        self.network: ChaosNetwork | None = None
        self.cluster: LocalCluster | None = None  # the nodes' arguments and endpoints only; never started
        self._counts = (controllers, brokers)

    def __repr__(self) -> str:
        return f"<ContainersTarget {self.run} image={self.image} {self.network!r}>"

    def container(self, name: str) -> str:
        return f"{self.run}-{name}"

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
            raise RuntimeError(
                "--target containers needs a Docker engine (bash deploy/image/ensure-docker.sh)"
            )
        if subprocess.run(
            ["docker", "image", "inspect", self.image], capture_output=True, check=False
        ).returncode:
            raise RuntimeError(
                f"no image {self.image}: build it with bash deploy/image/build.sh --tag {self.image}"
            )
        self.disks.mount(self.node_names)
        pids = {}
        for name in self.node_names:
            # The sandbox holds the node's network namespace across kills and restarts of the node.
            _docker(
                "run",
                "-d",
                "--name",
                f"{self.container(name)}-net",
                "--label",
                f"{RUN_LABEL}={self.run}",
                "--network",
                "none",
                "--entrypoint",
                "python3",
                self.image,
                "-c",
                "import signal; signal.pause()",
            )
            pids[name] = int(_docker("inspect", "-f", "{{.State.Pid}}", f"{self.container(name)}-net"))
        self.network = ChaosNetwork(self.node_names, attach=pids)
        self.network.open()
        hosts = {name: m.address for name, m in self.network.members.items()}
        self.cluster = LocalCluster(self.data_dir, controllers=self._counts[0], brokers=self._counts[1],
                                    controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS, hosts=hosts)
        for node in self.cluster.nodes:
            (self.data_dir / node.name).mkdir(parents=True, exist_ok=True)
        (self.data_dir / CLOCKS).mkdir(exist_ok=True)
        subprocess.run(["chown", "-R", f"{IMAGE_UID}:{IMAGE_UID}", str(self.data_dir)], check=True)
        # After the chown: the mounts' daemon does every operation as root, whoever asks.
        self.power.mount(self.node_names)
        for node in self.cluster.nodes:
            command = [self.image, node.kind, *node.args]
            if self.clock and node.kind == "broker":
                command = ["--entrypoint", "python3", self.image, *clock_launcher(self.data_dir, node.name),
                           "kanal.deploy.cli", node.kind, *node.args]
            # The data directory bind-mounted recursively, with the mounts under it (tmpfs, power-loss) as
            # they are when the container starts: a power cut remounts while the node is down.
            _docker("run", "-d", "--name", self.container(node.name), "--label", f"{RUN_LABEL}={self.run}",
                    "--network", f"container:{self.container(node.name)}-net",
                    "-v", f"{self.data_dir}:{self.data_dir}", *command)
        self.wait_all_serving(90)

    def close(self) -> None:
        try:
            if self.cluster is not None:
                logs = self.data_dir / "logs"
                logs.mkdir(parents=True, exist_ok=True)
                for name in self.node_names:  # the runner keeps them beside the history
                    out = subprocess.run(["docker", "logs", self.container(name)], capture_output=True,
                                         check=False)
                    (logs / f"{name}.log").write_bytes(out.stdout + out.stderr)
            names = _docker("ps", "-aq", "--filter", f"label={RUN_LABEL}={self.run}", check=False).split()
            if names:
                _docker("rm", "-f", *names, check=False)
        finally:
            try:
                if self.network is not None:
                    self.network.close()
            finally:
                try:
                    self.power.close()
                finally:
                    self.disks.unmount()

    @property
    def bootstrap(self) -> str:
        return _started(self.cluster).bootstrap

    @property
    def brokers(self) -> dict[int, str]:
        return {n.node_id: n.endpoint for n in _started(self.cluster).brokers}

    @property
    def controllers(self) -> dict[int, str]:
        return {n.node_id: n.endpoint for n in _started(self.cluster).controllers}

    def _state(self, name: str) -> dict:
        return json.loads(_docker("inspect", "-f", "{{json .State}}", self.container(name)))

    def exited_nodes(self) -> list[tuple[str, int]]:
        out = []
        for name in self.node_names:
            state = self._state(name)
            if state["Status"] == "exited":
                out.append((name, int(state["ExitCode"])))
        return out

    def kill(self, name: str) -> None:
        _docker("kill", self.container(name))

    def restart(self, name: str) -> None:
        if self._state(name)["Status"] == "exited":
            _docker("start", self.container(name))

    def pause(self, name: str) -> None:
        _docker("pause", self.container(name))

    def resume(self, name: str) -> None:
        if self._state(name)["Status"] == "paused":
            _docker("unpause", self.container(name))

    def fill_disk(self, name: str) -> None:
        self.disks.fill(name)

    def empty_disk(self, name: str) -> None:
        self.disks.empty(name)

    def cut_power(self, name: str) -> dict:
        return self.power.cut(name)

    def step_clock(self, name: str, offset_s: float) -> None:
        step_clock(self.data_dir, name, offset_s, self.clock)

    def wait_all_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for name, _ in self.exited_nodes():
            self.restart(name)
        for node in _started(self.cluster).nodes:
            while not serving(node.endpoint, timeout_s=0.5):
                if self._state(node.name)["Status"] == "exited":
                    tail = _docker("logs", "--tail", "30", self.container(node.name), check=False)
                    raise RuntimeError(f"{node.name} exited; last output:\n{tail}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{node.name} not SERVING after {timeout_s}s")
                time.sleep(0.1)


class BootstrapTarget:
    name = "bootstrap"
    takes_faults = False

    def __init__(self, bootstrap: str, security: ClientSecurity | None = None) -> None:
        self.bootstrap = bootstrap
        self.security = security  # TLS and credentials, for a secured cluster

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    @property
    def brokers(self) -> dict[int, str]:
        from kanal.clients.cluster_metadata import ClusterMetadata

        md = ClusterMetadata(self.bootstrap, security=self.security)
        try:
            return dict(md.refresh([]).brokers)
        finally:
            md.close()

    @property
    def controllers(self) -> dict[int, str]:
        return {}

    def wait_all_serving(self, timeout_s: float) -> None:
        pass

    def exited_nodes(self) -> list[tuple[str, int]]:
        return []
