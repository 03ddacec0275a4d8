"""Targets a chaos run can hit:

- `DevTarget`: a `kanal dev`-style cluster (3 controllers, 3 brokers by default; deploy/local_cluster.py)
  started by the run, each node in its own network namespace (netns.py), so every fault is possible;
  with the `disk` fault each broker's data directory is a tmpfs of its own (256 MiB) that the fault fills.
  Needs root. Started and stopped by the run, also when it is interrupted (mounts unmounted by path).
- `BootstrapTarget`: a running cluster the user names by its bootstrap address. kanal cannot reach its
  processes or network, so it takes no faults: the workloads and the checker run against it as it is
  (useful while the user injects faults their own way).

A target gives the workloads a bootstrap, the monitor the nodes' endpoints, and the nemesis its handles
(`kill`, `restart`, `pause`, `resume`, the network).
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

from kanal.deploy.chaos.mutation import Mutant
from kanal.deploy.chaos.netns import ChaosNetwork
from kanal.deploy.local_cluster import LocalCluster, Node

log = logging.getLogger("kanal.chaos.target")

BALLAST = ".kanal-chaos-ballast"  # the file the disk fault fills a broker's filesystem with
BROKER_DISK_BYTES = 256 * 1024 * 1024

# Short timeouts so a failover fits in a short run (the cluster tests' spirit, a little slower for a
# loaded machine). The session timeout must exceed 6 election timeouts and 4 broker heartbeat intervals.
CONTROLLER_FLAGS = ["--session-timeout-ms", "3000", "--election-timeout-ms", "400"]
BROKER_FLAGS = ["--heartbeat-interval-ms", "300", "--replica-lag-ms-max", "2000", "--replica-fetch-wait-ms-max",
                "200", "--group-session-timeout-ms-min", "200", "--group-initial-rebalance-delay-ms", "100",
                "--offsets-topic-partitions", "5"]


class DevTarget:
    name = "dev"
    takes_faults = True

    def __init__(self, data_dir: Path, *, controllers: int = 3, brokers: int = 3, mutant: Mutant | None = None,
                 broker_disk_bytes: int | None = None) -> None:
        """`broker_disk_bytes`: give each broker's data directory a tmpfs of this size (the `disk` fault
        fills it); None keeps them on the data directory's filesystem."""
        self.data_dir = Path(data_dir)
        self._disk_bytes = broker_disk_bytes
        self._mounts: list[Path] = []
        self.node_names = [f"controller-{i}" for i in range(controllers)] + [f"broker-{i}" for i in range(brokers)]
        self.network = ChaosNetwork(self.node_names)
        self.cluster: LocalCluster | None = None
        self._counts = (controllers, brokers)
        self._mutant = mutant

    def __repr__(self) -> str:
        return f"<DevTarget {self.cluster!r} {self.network!r}>"

    def start(self) -> None:
        self.network.open()
        try:
            if self._disk_bytes is not None:
                for name in self.node_names:
                    if name.startswith("broker-"):
                        self._mount_disk(self.data_dir / name)
            hosts = {name: m.address for name, m in self.network.members.items()}
            self.cluster = LocalCluster(self.data_dir, controllers=self._counts[0], brokers=self._counts[1],
                                        controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS, hosts=hosts)
            for node in self.cluster.nodes:
                python = [sys.executable, "-m", "kanal.deploy.cli"]
                if self._mutant is not None and node.kind == "broker":
                    python = self._mutant.launcher()
                node.launcher = [*self.network.launcher(node.name), *python]
            self.cluster.start(timeout_s=90)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            if self.cluster is not None:
                self.cluster.stop()
        finally:
            try:
                self.network.close()
            finally:
                for mount in reversed(self._mounts):
                    result = subprocess.run(["umount", str(mount)], capture_output=True, text=True, check=False)
                    if result.returncode != 0:
                        log.warning("could not unmount %s: %s", mount, result.stderr.strip())
                self._mounts.clear()

    # ---- disks ----

    def _mount_disk(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self._disk_bytes}", f"kanal-chaos-{os.getpid()}",
                        str(path)], check=True, capture_output=True)
        self._mounts.append(path)

    def _ballast(self, name: str) -> Path:
        if self.data_dir / name not in self._mounts:
            raise RuntimeError(f"{name} has no disk of its own to fill (the disk fault needs broker_disk_bytes)")
        return self.data_dir / name / BALLAST

    def fill_disk(self, name: str) -> None:
        """Fill the broker's data filesystem to the last byte with one file (which the broker ignores:
        it is not a partition directory)."""
        path = self._ballast(name)
        with open(path, "ab") as f:
            # Whole free space first, then ever smaller pieces: the filesystem's own bookkeeping makes
            # the exact free byte count unreliable, so fill until it says no at 4 KiB.
            chunk = os.statvfs(path.parent).f_bavail * os.statvfs(path.parent).f_frsize
            while chunk >= 4096:
                try:
                    os.posix_fallocate(f.fileno(), os.fstat(f.fileno()).st_size, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    chunk //= 2

    def empty_disk(self, name: str) -> None:
        self._ballast(name).unlink(missing_ok=True)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def node(self, name: str) -> Node:
        for node in self.cluster.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    @property
    def brokers(self) -> dict[int, str]:
        return {n.node_id: n.endpoint for n in self.cluster.brokers}

    @property
    def controllers(self) -> dict[int, str]:
        return {n.node_id: n.endpoint for n in self.cluster.controllers}

    def exited_nodes(self) -> list[Node]:
        """Nodes started and since exited (not those never started)."""
        return [n for n in self.cluster.nodes if n.process is not None and not n.running]

    def kill(self, name: str) -> None:
        self.node(name).kill()

    def restart(self, name: str) -> None:
        node = self.node(name)
        if not node.running:
            self.cluster.start_node(node, wait=False)

    def pause(self, name: str) -> None:
        self.node(name).pause()

    def resume(self, name: str) -> None:
        self.node(name).resume()

    def wait_all_serving(self, timeout_s: float) -> None:
        for node in self.cluster.nodes:
            if not node.running:
                self.cluster.start_node(node, wait=False)
        self.cluster.wait_ready(self.cluster.nodes, timeout_s)


class BootstrapTarget:
    name = "bootstrap"
    takes_faults = False

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    @property
    def brokers(self) -> dict[int, str]:
        from kanal.clients.cluster_metadata import ClusterMetadata

        md = ClusterMetadata(self.bootstrap)
        try:
            return dict(md.refresh([]).brokers)
        finally:
            md.close()

    @property
    def controllers(self) -> dict[int, str]:
        return {}

    def wait_all_serving(self, timeout_s: float) -> None:
        pass

    def exited_nodes(self) -> list:
        return []
