"""A real S3 API server for tests: moto's server (`python -m moto.server`, the `moto[server]` test extra) in
a subprocess on 127.0.0.1, on a port the kernel picks.

    server = MotoServer.start(log_path)       # returns once it answers HTTP; bucket BUCKET exists
    open_remote_storage(f"s3://{server.bucket}/some/prefix", endpoint=server.endpoint, region=...,
                        access_key_id=..., secret_access_key=...)
    server.stop()                             # SIGTERM to its PID (SIGKILL after a grace period)

moto keeps every object in its process's memory: a stopped server's objects are gone, so a test never
restarts one it still needs (a test of an unreachable store starts a server of its own and stops it).
moto accepts any credentials; the `testing` pair is the conventional one. Its request log (one line per
request, werkzeug's format) is in `log_path`; `requests()` reads it.
"""

from __future__ import annotations

import http.client
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.harness.waiting import wait_until

BUCKET = "kanal-test"
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"
REGION = "us-east-1"
START_TIMEOUT_S = 60  # importing moto takes a few seconds on a loaded 2-core machine
STOP_TIMEOUT_S = 10
_LISTENING = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")


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
        with open(log_path, "wb") as log:  # the child keeps its own descriptor
            process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            def listening() -> int | None:
                if process.poll() is not None:
                    raise AssertionError(f"moto server exited with {process.returncode}: "
                                         f"{log_path.read_text(errors='replace')[-2000:]}")
                match = _LISTENING.search(log_path.read_text(errors="replace"))
                return int(match.group(1)) if match else None

            port = wait_until(listening, START_TIMEOUT_S, "moto server to listen")
            server = cls(process, port, log_path)
            wait_until(lambda: server._request("GET", "/")[0] == 200, START_TIMEOUT_S,
                       "moto server to answer", tolerate=(OSError,))
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
            raise AssertionError(f"creating bucket {bucket!r}: HTTP {status}: {body[:500]!r}")

    def requests(self) -> list[str]:
        """The request lines moto logged so far (`PUT /bucket/key?partNumber=1&... HTTP/1.1`)."""
        return re.findall(r'"([A-Z]+ /[^"]*)"', self.log_path.read_text(errors="replace"))

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


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server by its PID, SIGKILL it if it is still there after STOP_TIMEOUT_S; reaped."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)
