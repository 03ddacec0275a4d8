"""The `mirror` fault of a chaos run (`kanal chaos run --faults mirror`, dev target only): the run's cluster A
is the source of a `kanal mirror` flow into a second cluster, B (one controller, one broker, on the host's
address in the chaos network), and the mirror runs in a network namespace of its own, so the nemesis can cut
it off:

| variant | what happens |
|---|---|
| `link` | the mirror's namespace is cut from every other (the link between the clusters is down); healed at the fault's end |
| `kill` | the mirror process SIGKILLed; started again at the fault's end (it resumes from its committed positions) |

After the faults, the run waits for the mirror's committed positions to reach A's log ends, then reads B's
copy of the run's topic (`A.chaos`, read_committed) as `final` events; the history's `mirror` event names
the source topic and its copy, and the checker compares them partition by partition: the copy must hold
the source's final log, each record once, in the same order (`mirror_lost`, `mirror_duplicate`,
`mirror_extra`, `mirror_reorder`).
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kanal.clients.admin import Admin
from kanal.deploy.chaos.netns import ChaosNetwork
from kanal.deploy.local_cluster import LocalCluster, Node

MIRROR_NODE = "mirror"  # its namespace's member name in the chaos network
SOURCE_ALIAS, TARGET_ALIAS = "A", "B"
# The mirror's own timing: topics found within a second, transactions of at most 50 ms.
MIRROR_FLAGS = ["--refresh-interval-ms", "1000", "--commit-interval-ms", "50"]
_POLL_S = 0.2


class ChaosMirror:
    def __init__(self, data_dir: Path, network: ChaosNetwork, topic: str,
                 controller_flags: list[str], broker_flags: list[str]) -> None:
        self._data_dir, self._network, self.topic = data_dir, network, topic
        self._flags = (controller_flags, broker_flags)
        self.cluster: LocalCluster | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._source = ""

    @property
    def remote_topic(self) -> str:
        return f"{SOURCE_ALIAS}.{self.topic}"

    @property
    def positions_group(self) -> str:
        return f"kanal-mirror-{SOURCE_ALIAS}-to-{TARGET_ALIAS}.positions"

    def start(self, source_bootstrap: str) -> None:
        """B, then the mirror process in its namespace (it creates the copy of the topic itself)."""
        host = self._network.host_address
        self.cluster = LocalCluster(self._data_dir, controllers=1, brokers=1, controller_flags=self._flags[0],
                                    broker_flags=self._flags[1],
                                    hosts={"controller-0": host, "broker-0": host})
        self.cluster.start(timeout_s=90)
        self._source = source_bootstrap
        self.start_process()

    def start_process(self) -> None:
        assert self.cluster is not None
        log = open(self._data_dir / "mirror.log", "a")  # noqa: SIM115 - the child holds it; closed below
        try:
            self.process = subprocess.Popen(
                [*self._network.launcher(MIRROR_NODE), sys.executable, "-m", "kanal.deploy.cli", "mirror",
                 "run", "--source", f"{SOURCE_ALIAS}={self._source}", "--target",
                 f"{TARGET_ALIAS}={self.cluster.bootstrap}", "--topics", self.topic, *MIRROR_FLAGS],
                stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        finally:
            log.close()

    def kill(self) -> None:
        """SIGKILL, by PID (`ip netns exec` replaced itself with the mirror)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def caught_up(self, source_ends: dict[int, int], timeout_s: float) -> None:
        """Wait until the mirror's committed positions reach `source_ends` (partition -> A's log end);
        TimeoutError naming where they stand."""
        assert self.cluster is not None
        deadline = time.monotonic() + timeout_s
        positions: dict[tuple[str, int], int] = {}
        with Admin(self.cluster.bootstrap, request_timeout_ms=5_000) as admin:
            while True:
                positions = admin.group_offsets(self.positions_group)
                if all(positions.get((self.remote_topic, p), -1) >= end for p, end in source_ends.items()):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the mirror's positions {positions} short of the source's ends "
                                       f"{source_ends} after {timeout_s}s")
                if self.process is not None and self.process.poll() is not None:
                    raise TimeoutError(f"the mirror exited with {self.process.returncode}")
                time.sleep(_POLL_S)  # polling the positions until the deadline

    @property
    def bootstrap(self) -> str:
        assert self.cluster is not None
        return self.cluster.bootstrap

    def close(self) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                self.process.terminate()  # each flow commits what it copied, then the process exits
                Node.wait_stopped(self.process, time.monotonic() + 30)
        finally:
            if self.cluster is not None:
                self.cluster.stop()
