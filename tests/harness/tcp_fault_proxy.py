"""A TCP proxy that can fail on command: brokers reach an S3 server (moto) through it, and a test makes the
store unreachable or stalls it without touching the server (moto keeps its objects in memory, so stopping
it would lose them).

Modes:
- `pass`: bytes flow both ways, connection by connection;
- `refuse`: new connections are closed at once and open ones are cut (the server "stopped");
- `stall`: nothing is forwarded, on new connections or open ones (clients keep connections open), until
  the mode changes: then bytes flow again (`pass`) or connections are cut (`refuse`) — an upload caught
  in the middle.

Runs its own event loop on a thread; `close()` stops it and cuts every connection.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

MODES = ("pass", "refuse", "stall")
_CHUNK_BYTES = 1 << 16


class TcpFaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._mode = "pass"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-fault-proxy", daemon=True)
        self._thread.start()
        self._changed: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.stalled = 0  # connections held in `stall` mode right now
        started: Future[asyncio.Server] = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        self._server = started.result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        asyncio.run_coroutine_threadsafe(self._set_mode(mode), self._loop).result(timeout=10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> asyncio.Server:
        self._changed = asyncio.Event()
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _set_mode(self, mode: str) -> None:
        self._mode = mode
        if mode == "refuse":
            self._cut_all()
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    async def _close(self) -> None:
        self._server.close()
        self._cut_all()

    def _cut_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            await self._hold()
            if self._mode == "refuse":
                writer.transport.abort()
                return
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
            self._writers.add(up_writer)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _hold(self) -> None:
        """Wait while the mode is `stall`."""
        while self._mode == "stall":
            changed = self._changed
            assert changed is not None
            self.stalled += 1
            try:
                await changed.wait()
            finally:
                self.stalled -= 1

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(_CHUNK_BYTES):
                await self._hold()  # a connection kept open across a change stalls too (clients pool them)
                if self._mode == "refuse":
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
