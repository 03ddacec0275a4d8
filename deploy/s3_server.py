"""A real S3 API server on this machine: moto's server (`python -m moto.server`, from `pip install
'moto[server]'`, which the `test` extra brings) in a subprocess on 127.0.0.1, on a port the kernel picks.
Tests, benchmarks and `kanal chaos --faults remote` (whose nemesis needs a store it can make unreachable)
start one; production points brokers at a real S3-compatible store instead.

    server = MotoServer.start(log_path)       # returns once it answers HTTP; bucket BUCKET exists
    open_remote_storage(f"s3://{server.bucket}/some/prefix", endpoint=server.endpoint, region=...,
                        access_key_id=..., secret_access_key=...)
    server.stop()                             # SIGTERM to its PID (SIGKILL after a grace period)

moto keeps every object in its process's memory: a stopped server's objects are gone, so it is never
restarted while it is needed (an unreachable store is made by a proxy in front of it: chaos/fault_proxy.py).
moto accepts any credentials; the `testing` pair is the conventional one. Its request log (one line per
request, werkzeug's format) is in `log_path`; `requests()` reads it.
"""

from __future__ import annotations

import http.client
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

BUCKET = "kanal-test"
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"
REGION = "us-east-1"
START_TIMEOUT_S = 60  # importing moto takes a few seconds on a loaded 2-core machine
STOP_TIMEOUT_S = 10
_LISTENING = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_POLL_S = 0.05
T = TypeVar("T")


class MotoUnavailable(RuntimeError):
    """moto is not installed, or its server did not start."""


@dataclass
class MotoServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    bucket: str = BUCKET
    access_key_id: str = ACCESS_KEY_ID
    secret_access_key: str = SECRET_ACCESS_KEY
    region: str = REGION

    @classmethod
    def start(cls, log_path: Path, bucket: str = BUCKET) -> MotoServer:
        """Start a server (port 0: the kernel picks a free one, moto prints it) and create `bucket`."""
        try:
            import moto.server  # noqa: F401 - only whether it is there: the server runs in its own process
        except ImportError as exc:
            raise MotoUnavailable("an S3 server here needs moto: pip install 'moto[server]'") from exc
        with open(log_path, "wb") as log:  # the child keeps its own descriptor
            process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            def listening() -> int:  # 0 until it prints its port
                if process.poll() is not None:
                    raise MotoUnavailable(f"moto server exited with {process.returncode}: "
                                         f"{log_path.read_text(errors='replace')[-2000:]}")
                match = _LISTENING.search(log_path.read_text(errors="replace"))
                return int(match.group(1)) if match else 0

            port = _poll(listening, "moto server to listen")
            server = cls(process, port, log_path)
            _poll(lambda: server._request("GET", "/")[0] == 200, "moto server to answer", tolerate=(OSError,))
            server.create_bucket(bucket)
            server.bucket = bucket
            return server
        except BaseException:
            _stop(process)
            raise

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def create_bucket(self, bucket: str) -> None:
        """`PUT /bucket`, the whole of S3's CreateBucket in us-east-1 (no SDK needed)."""
        status, body = self._request("PUT", f"/{bucket}")
        if status != 200:
            raise MotoUnavailable(f"creating bucket {bucket!r}: HTTP {status}: {body[:500]!r}")

    def requests(self) -> list[str]:
        """The request lines moto logged so far (`PUT /bucket/key?partNumber=1&... HTTP/1.1 200`)."""
        return request_lines(self.log_path.read_text(errors="replace"))

    def stop(self) -> None:
        _stop(self.process)

    def _request(self, method: str, path: str) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request(method, path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def request_lines(log_text: str) -> list[str]:
    """The requests of a moto server's log, each `METHOD /path HTTP/1.1 STATUS` (werkzeug colours some
    lines with ANSI escapes, which are dropped)."""
    plain = _ANSI_ESCAPE.sub("", log_text)
    return [f"{line} {status}" for line, status in re.findall(r'"([A-Z]+ /[^"]*)" (\d{3})', plain)]


def _poll(condition: Callable[[], T], what: str, tolerate: tuple[type[BaseException], ...] = ()) -> T:
    """`condition()` until it is truthy (returned), for START_TIMEOUT_S; an exception of `tolerate` is "not
    yet"."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            if value := condition():
                return value
        except tolerate:
            pass
        if time.monotonic() > deadline:
            raise MotoUnavailable(f"timed out after {START_TIMEOUT_S}s waiting for {what}")
        time.sleep(_POLL_S)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server by its PID, SIGKILL it if it is still there after STOP_TIMEOUT_S; reaped."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)
