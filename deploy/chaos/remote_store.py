"""The remote storage of a chaos run with the `remote` fault (`kanal chaos run --faults remote`): an S3 server
(moto, ../s3_server.py) on the host's loopback, reached by the brokers through a fault proxy
(fault_proxy.py) on the host's address in the chaos network. The nemesis fails the store at the proxy, so
moto keeps every object it was given (its objects live in its memory: stopping it would lose them):

| variant | what the brokers see |
|---|---|
| `down` | connections refused and open ones cut: the server stopped |
| `503` | every request answered `503 Service Unavailable`: a store shedding load |
| `kill-mid-upload` | the store stalls until a broker is caught in the middle of an upload, which is SIGKILLed there (restarted when the fault ends); then the store answers again |

While the store fails, uploads lag and local segments stay until they are uploaded; fetches of offsets held
only remotely fail with a retriable error; the run's checker finds any acknowledged record lost, and the
final read from offset 0 reads every remote segment the metadata records (one naming a missing object would
leave the read unfinished: `no_recovery`).
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import time
from pathlib import Path

from kanal.deploy.chaos.fault_proxy import TcpFaultProxy
from kanal.deploy.s3_server import MotoServer

_PROXY_MODES = {"down": "refuse", "503": "unavailable"}
# A topic the run tiers: small segments and a small local retention, so a minute's records make many
# segments, most of them read back from the store alone.
TIERED_TOPIC_CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "16384",
                        "local.retention.bytes": "32768"}
# How long `kill-mid-upload` waits for an upload to catch (the brokers upload a segment every second or so).
CATCH_UPLOAD_S = 5.0
_CATCH_POLL_S = 0.05
_RETRY_BACKOFF_MS_MAX = 500  # the brokers retry a failed upload soon after the store is back


class ChaosRemoteStore:
    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self.server: MotoServer | None = None
        self.proxy: TcpFaultProxy | None = None

    def start(self, listen_host: str) -> None:
        """Start the server and the proxy in front of it on `listen_host` (the host's chaos address)."""
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self.server = MotoServer.start(self._log_dir / "moto.log")
        self.proxy = TcpFaultProxy("127.0.0.1", self.server.port, listen_host=listen_host)

    def broker_flags(self, run_name: str) -> list[str]:
        server, proxy = self._started()
        return ["--remote-storage", f"s3://{server.bucket}/{run_name}", "--remote-storage-endpoint",
                proxy.endpoint, "--remote-storage-region", server.region, "--remote-storage-access-key-id",
                server.access_key_id, "--remote-storage-secret-access-key", server.secret_access_key,
                "--remote-retry-backoff-ms-max", str(_RETRY_BACKOFF_MS_MAX)]

    def fail(self, variant: str) -> None:
        """`down` or `503` (kill-mid-upload is `catch_upload`, then `heal`)."""
        self._started()[1].set_mode(_PROXY_MODES[variant])

    def catch_upload(self, deadline_s: float = CATCH_UPLOAD_S) -> set[str]:
        """Stall the store until some connection is held in the middle of an upload (or `deadline_s` passes);
        returns the client hosts caught, the store still stalled (`heal` lets it go)."""
        proxy = self._started()[1]
        proxy.set_mode("stall")
        deadline = time.monotonic() + deadline_s
        while not (caught := proxy.stalled_uploads()) and time.monotonic() < deadline:
            time.sleep(_CATCH_POLL_S)
        return caught

    def heal(self) -> None:
        if self.proxy is not None:
            self.proxy.set_mode("pass")

    def close(self) -> None:
        try:
            if self.proxy is not None:
                self.proxy.close()
        finally:
            if self.server is not None:
                self.server.stop()

    def _started(self) -> tuple[MotoServer, TcpFaultProxy]:
        if self.server is None or self.proxy is None:
            raise RuntimeError("the chaos remote store has not been started")
        return self.server, self.proxy
