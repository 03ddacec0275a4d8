"""A Spark standalone cluster (one master, one worker) on 127.0.0.1, for the tests that run kanal's jobs on a
cluster rather than in local mode.

pyspark's wheel has no `sbin/start-master.sh`, but it has `bin/spark-class`, which starts the master and the
worker as the scripts would. Each runs in its own process group (stopped by PGID, so the worker's executors go
with it); logs and the worker's scratch space stay under the test's directory. The master's REST submission
server is off (it would bind a fixed port, 6066), its web UI gives the JSON the start waits on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Self

import pyspark

from kanal.deploy.local_cluster import free_ports

START_TIMEOUT_S = 180.0  # two JVMs on a loaded 2-core machine
STOP_TIMEOUT_S = 30.0


class SparkStandalone:
    """`with SparkStandalone(dir) as spark_cluster:` — `spark_cluster.master_url` is `spark://127.0.0.1:PORT`."""

    def __init__(self, directory: Path, worker_cores: int = 2, worker_memory: str = "2g") -> None:
        self.directory = directory
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.master_port, self.master_ui_port, self.worker_ui_port = free_ports(3)
        self.master_url = f"spark://127.0.0.1:{self.master_port}"
        self.processes: list[subprocess.Popen] = []

    def env(self) -> dict[str, str]:
        """The environment for the daemons and for a driver that should reach them on loopback."""
        home = os.path.dirname(pyspark.__file__)
        return {
            **os.environ,
            "SPARK_HOME": home,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.directory / "logs"),
            "SPARK_WORKER_DIR": str(self.directory / "work"),
        }

    def __enter__(self) -> Self:
        self.launch()
        try:
            self._wait_for_worker()
        except BaseException:
            self.stop()
            raise
        return self

    def launch(self) -> None:
        """Start the master and the worker without waiting for them (their JVMs take 10-20 s to come up, time
        a caller may spend on other work); `with` waits until the worker has registered. Once only."""
        if self.processes:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        properties = self.directory / "spark-defaults.conf"
        properties.write_text("spark.master.rest.enabled false\n")
        spark_class = str(Path(self.env()["SPARK_HOME"]) / "bin" / "spark-class")
        try:
            self._start(
                "master",
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.master_port),
                    "--webui-port",
                    str(self.master_ui_port),
                    "--properties-file",
                    str(properties),
                ],
            )
            self._start(
                "worker",
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    str(self.worker_ui_port),
                    "--cores",
                    str(self.worker_cores),
                    "--memory",
                    self.worker_memory,
                    "--work-dir",
                    str(self.directory / "work"),
                    "--properties-file",
                    str(properties),
                ],
            )
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.directory / f"{name}.out", "wb")  # noqa: SIM115 - the child holds it; closed with us
        with log:
            self.processes.append(subprocess.Popen(argv, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL, start_new_session=True))

    def status(self) -> dict:
        """The master's own view (its web UI's JSON), or {} while it is not answering yet."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=5) as reply:
                return json.load(reply)
        except OSError:
            return {}

    def _wait_for_worker(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.status().get("aliveworkers", 0) < 1:
            for p in self.processes:
                if p.poll() is not None:
                    raise AssertionError(f"a Spark daemon exited with {p.returncode}: {self.logs()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no Spark worker registered within {START_TIMEOUT_S:.0f} s: {self.logs()}"
                )
            time.sleep(0.5)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.directory.glob("*.out")))

    def stop(self) -> None:
        """SIGTERM each daemon's process group (the worker's executors included), SIGKILL what outlives it."""
        for p in reversed(self.processes):
            _signal_group(p, signal.SIGTERM)
        for p in reversed(self.processes):
            try:
                p.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait(STOP_TIMEOUT_S)
        self.processes.clear()


def _signal_group(p: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass
