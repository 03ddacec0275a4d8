"""A TCP proxy that can fail on command: brokers reach an S3 server (moto, ../s3_server.py) through it, and
the chaos nemesis (`--faults remote`) or a test makes the store unreachable, failing or stalled without
touching the server (moto keeps its objects in memory, so stopping it would lose them).

Modes:
- `pass`: bytes flow both ways, connection by connection;
- `refuse`: new connections are closed at once and open ones are cut (the server "stopped");
- `unavailable`: every request, on a new connection or an open one, is answered `503 Service Unavailable`
  (S3's answer when it sheds load) and its connection closed; nothing reaches the server;
- `stall`: nothing is forwarded, on new connections or open ones (clients keep connections open), until
  the mode changes: then bytes flow again (`pass`) or connections are cut (`refuse`) — an upload caught
  in the middle. `stalled_uploads()` names the client addresses held in the middle of a PUT or POST (an
  upload or a multipart step), so a broker can be killed while its upload hangs.

Runs its own event loop on a thread; `close()` stops it and cuts every connection.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

MODES = ("pass", "refuse", "unavailable", "stall")
_CHUNK_BYTES = 1 << 16
_UPLOAD_METHODS = (b"PUT ", b"POST ")
_DRAIN_AFTER_REPLY_S = 5.0
# What S3 answers when it sheds load (its SlowDown / ServiceUnavailable), enough for any HTTP client.
_UNAVAILABLE_BODY = b"<Error><Code>ServiceUnavailable</Code><Message>made unavailable</Message></Error>"
_UNAVAILABLE_REPLY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                      % (len(_UNAVAILABLE_BODY), _UNAVAILABLE_BODY))


class TcpFaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, listen_host: str = "127.0.0.1") -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listen_host = listen_host
        self._mode = "pass"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-fault-proxy", daemon=True)
        self._thread.start()
        self._changed: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.stalled = 0  # connections held in `stall` mode right now
        self._uploading: dict[asyncio.StreamWriter, str] = {}  # a client's connection mid-upload: its host
        self._held: set[asyncio.StreamWriter] = set()  # client connections held by `stall` right now
        started: Future[asyncio.Server] = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        self._server = started.result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def endpoint(self) -> str:
        return f"http://{self._listen_host}:{self.port}"

    def stalled_uploads(self) -> set[str]:
        """The client hosts with an upload (a PUT or POST) held by `stall` in the middle right now."""
        return asyncio.run_coroutine_threadsafe(self._stalled_uploads(), self._loop).result(timeout=10)

    async def _stalled_uploads(self) -> set[str]:
        return {host for writer, host in self._uploading.items() if writer in self._held}

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
        return await asyncio.start_server(self._serve, self._listen_host, 0)

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
            # No hold here in `stall`: the connection is made and its first bytes read, so the pipe knows
            # whether the request it holds is an upload.
            if self._mode == "refuse":
                writer.transport.abort()
                return
            if self._mode == "unavailable":
                await self._answer_unavailable(reader, writer)
                return
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
            self._writers.add(up_writer)
            await asyncio.gather(self._pipe(reader, up_writer, client=writer), self._pipe(up_reader, writer))
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            self._uploading.pop(writer, None)
            writer.transport.abort()

    async def _answer_unavailable(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer 503 once the client has sent something, and close the connection."""
        await reader.read(_CHUNK_BYTES)
        await _reply_unavailable(reader, writer)

    async def _hold(self, client: asyncio.StreamWriter) -> None:
        """Wait while the mode is `stall`."""
        while self._mode == "stall":
            changed = self._changed
            assert changed is not None
            self.stalled += 1
            self._held.add(client)
            try:
                await changed.wait()
            finally:
                self.stalled -= 1
                self._held.discard(client)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    client: asyncio.StreamWriter | None = None) -> None:
        """Bytes from `reader` to `writer`; `client` is set on the client-to-server direction, whose request
        lines say whether the connection is in the middle of an upload."""
        try:
            while data := await reader.read(_CHUNK_BYTES):
                if client is not None:
                    self._note_request(client, data)
                # A connection kept open across a change stalls too (clients pool them).
                await self._hold(client if client is not None else writer)
                if self._mode == "refuse":
                    return
                if self._mode == "unavailable" and client is not None:
                    await _reply_unavailable(reader, client)
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    def _note_request(self, client: asyncio.StreamWriter, data: bytes) -> None:
        """A chunk that starts a request names its method: an upload's connection is marked until the next
        request on it. (A body chunk that happens to start with "PUT " would mark it too: harmless, the mark
        only picks which broker a `kill-mid-upload` fault kills.)"""
        method = data[:8]
        if method.startswith(_UPLOAD_METHODS):
            self._uploading[client] = client.get_extra_info("peername")[0]
        elif method[:4] in (b"GET ", b"HEAD", b"DELE"):
            self._uploading.pop(client, None)


async def _reply_unavailable(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Send the 503 and end our side, then read and drop the rest of the request (for a bounded time): a
    socket closed with unread bytes resets the connection, and the client would see a reset, not the 503."""
    writer.write(_UNAVAILABLE_REPLY)
    await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
    try:
        async with asyncio.timeout(_DRAIN_AFTER_REPLY_S):
            while await reader.read(_CHUNK_BYTES):
                pass
    except TimeoutError:
        pass
