"""Targets a chaos run can hit:

- `DevTarget`: a `kanal dev`-style cluster (3 controllers, 3 brokers by default; deploy/local_cluster.py)
  started by the run, each node in its own network namespace (netns.py), so every fault is possible.
  Needs root. Started and stopped by the run, also when it is interrupted.
- `BootstrapTarget`: a running cluster the user names by its bootstrap address. kanal cannot reach its
  processes or network, so it takes no faults: the workloads and the checker run against it as it is
  (useful while the user injects faults their own way).

A target gives the workloads a bootstrap, the monitor the nodes' endpoints, and the nemesis its handles
(`kill`, `restart`, `pause`, `resume`, the network).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from kanal.deploy.chaos.mutation import Mutant
from kanal.deploy.chaos.netns import ChaosNetwork
from kanal.deploy.local_cluster import LocalCluster, Node

log = logging.getLogger("kanal.chaos.target")

# Short timeouts so a failover fits in a short run (the cluster tests' spirit, a little slower for a
# loaded machine). The session timeout must exceed 6 election timeouts and 4 broker heartbeat intervals.
CONTROLLER_FLAGS = ["--session-timeout-ms", "3000", "--election-timeout-ms", "400"]
BROKER_FLAGS = ["--heartbeat-interval-ms", "300", "--replica-lag-ms-max", "2000", "--replica-fetch-wait-ms-max",
                "200", "--group-session-timeout-ms-min", "200", "--group-initial-rebalance-delay-ms", "100",
                "--offsets-topic-partitions", "5"]


class DevTarget:
    name = "dev"
    takes_faults = True

    def __init__(self, data_dir: Path, *, controllers: int = 3, brokers: int = 3, mutant: Mutant | None = None) -> None:
        self.data_dir = Path(data_dir)
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
            self.network.close()

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
