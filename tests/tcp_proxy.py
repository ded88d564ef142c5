"""A TCP proxy on 127.0.0.1, run by the test's own loop, that delays, drops and refuses connections to a server.

``async with TcpProxy(target_port) as proxy:`` listens on ``proxy.port`` (a free port) until the block exits
and forwards each connection to 127.0.0.1:target_port. ``proxy.latency`` (seconds) delays every chunk in each
direction: a chunk is written no sooner than ``latency`` (as it was when the chunk was read) after it was
read, and in the order read. The delay is measured by ``time.monotonic()``, not the loop's clock: uvloop's
counts whole milliseconds and would let a chunk out up to a millisecond early. ``proxy.drop_connections()``
closes every open connection, both sides, at once; while ``proxy.refuse`` is true, new connections are
accepted and closed at once. A connection also ends as a whole when either side closes it."""

from __future__ import annotations

import asyncio
import time

CHUNK = 65536
QUEUED_CHUNKS = 64  # per direction: a reader waits once this many chunks wait for their time


class _Link:
    """One client's connection and its connection to the server, with the tasks that forward between them."""

    def __init__(self, client: asyncio.StreamWriter, server: asyncio.StreamWriter) -> None:
        self.writers = (client, server)
        self.tasks: list[asyncio.Task[None]] = []

    def close(self) -> None:
        """Closes both connections at once, dropping what was not written yet, and stops forwarding."""
        for writer in self.writers:
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class TcpProxy:
    """Forwards 127.0.0.1:port to 127.0.0.1:target_port; see the module's docstring."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.latency = 0.0
        self.refuse = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()  # one per accepted connection, until it ends

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            self.drop_connections()
            # not cancelled: Python 3.11's streams report a cancelled connection handler as a loop error
            await asyncio.gather(*self._handlers)
            await server.wait_closed()

    def drop_connections(self) -> None:
        """Closes every open connection, on the client's side and on the server's."""
        for link in list(self._links):
            link.close()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            if self.refuse:
                client_writer.transport.abort()
                return
            try:
                server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                client_writer.transport.abort()
                return
            link = _Link(client_writer, server_writer)
            if self._server is None:  # the proxy closed while this connection was being made
                link.close()
                return
            self._links.add(link)
            try:
                for reader, writer in ((client_reader, server_writer), (server_reader, client_writer)):
                    chunks: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(QUEUED_CHUNKS)
                    link.tasks.append(asyncio.create_task(self._receive(reader, chunks)))
                    link.tasks.append(asyncio.create_task(self._send(chunks, writer, link)))
                await asyncio.gather(*link.tasks, return_exceptions=True)
            finally:
                self._links.discard(link)
                link.close()
        finally:
            self._handlers.discard(handler)

    async def _receive(self, reader: asyncio.StreamReader, chunks: asyncio.Queue[tuple[float, bytes] | None]) -> None:
        """Queues each chunk read with the time it is due, then None at the end of the stream."""
        try:
            while chunk := await reader.read(CHUNK):
                await chunks.put((time.monotonic() + self.latency, chunk))
        except OSError:
            pass
        await chunks.put(None)

    async def _send(self, chunks: asyncio.Queue[tuple[float, bytes] | None], writer: asyncio.StreamWriter,
                    link: _Link) -> None:
        """Writes each queued chunk once it is due; closes the link at the end of the stream or on an error."""
        try:
            while (item := await chunks.get()) is not None:
                due, chunk = item
                while (delay := due - time.monotonic()) > 0:
                    await asyncio.sleep(delay)
                writer.write(chunk)
                await writer.drain()
        except (OSError, RuntimeError):  # the connection was lost (uvloop raises RuntimeError on a closed one)
            pass
        finally:
            link.close()
