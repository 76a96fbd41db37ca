"""Listening sockets, the accept loop, and the bound on open connections.

The server accepts connections itself instead of through ``loop.create_server``, so that a
connection counts from the moment it is accepted. With TLS, the event loop's own server
hands a connection to its protocol only once the handshake is done, and never tells it
about a handshake that fails: connections stuck in a handshake would go uncounted.

Each accepted socket is admitted while fewer than ``max_connections`` are open; at the
bound, an idle kept-alive connection is cut to make room, and if there is none the new
socket is closed at once (the client reads end of file or a reset). An admitted socket
gets its TLS handshake, within ``head_timeout``, and a
:class:`~kvldp.web.deadlines.GuardedConnection` around the protocol of ``protocol_factory``
(aiohttp's). Running out of file descriptors pauses accepting for a second, as the event
loop's own server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from kvldp.common.errors import KvldpError
from kvldp.web.deadlines import GuardedConnection
from kvldp.web.limits import Limits

logger = logging.getLogger("kvldp.web")
#: seconds to wait before accepting again when the process is out of descriptors or memory
ACCEPT_RETRY_S = 1.0
#: connections the kernel queues until the accept loop takes them (it takes them at once)
BACKLOG = 128


class Listener:
    """Accepts connections on every address of a host, within :class:`Limits`."""

    def __init__(self, limits: Limits, ssl_context: ssl.SSLContext | None = None) -> None:
        self.protocol_factory: Callable[[], asyncio.Protocol] | None = None
        self.limits = limits
        self.ssl_context = ssl_context
        self._sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: the open connections, by aiohttp's protocol of each, in the order they were accepted
        self._open: dict[asyncio.BaseProtocol, GuardedConnection] = {}
        self._drained = asyncio.Event()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def connection(self, protocol: asyncio.BaseProtocol) -> GuardedConnection | None:
        """The open connection whose aiohttp protocol is ``protocol``."""
        return self._open.get(protocol)

    async def start(self, host: str, port: int, protocol_factory: Callable[[], asyncio.Protocol]) -> int:
        """Listen on every address of ``host`` and serve each connection with a protocol of
        ``protocol_factory``; returns the port of the first address (``port`` 0: a free one)."""
        self.protocol_factory = protocol_factory
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(  # host "": every interface
                host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            for family, address in dict.fromkeys((info[0], info[4]) for info in infos):
                sock = socket.create_server(address, family=family, backlog=BACKLOG)
                self._sockets.append(sock)
                sock.setblocking(False)
        except OSError as exc:
            self._close_sockets()
            raise KvldpError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        for sock in self._sockets:
            self._spawn(self._accept(sock))
        return int(self._sockets[0].getsockname()[1])

    async def stop_accepting(self) -> None:
        """Close the listening sockets; drop the connections still in their TLS handshake."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._close_sockets()
        for connection in list(self._open.values()):
            if connection.pending_socket is not None:  # its handshake never started
                connection.pending_socket.close()
                self._release(connection)

    def abort_open(self) -> None:
        """Cut every connection still open (their ends are awaited by :meth:`abort_all`)."""
        for connection in list(self._open.values()):
            connection.abort()

    async def abort_all(self, timeout: float) -> None:
        """Cut every connection still open and wait (at most ``timeout``) until they are gone."""
        self.abort_open()
        if self._open:
            self._drained.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), timeout)

    # ------------------------------------------------------------ accepting
    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listening)
            except ConnectionAbortedError:  # the client gave up before it was accepted
                continue
            except OSError as exc:  # out of descriptors, buffers or memory
                logger.warning("cannot accept a connection (trying again in %g s): %s", ACCEPT_RETRY_S, exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            if not self._admit():
                sock.close()
                continue
            assert self.protocol_factory is not None
            connection = GuardedConnection(self.protocol_factory(), self.limits, self._release, sock)
            self._open[connection.inner] = connection
            self._spawn(self._connect(connection))

    def _admit(self) -> bool:
        """Whether a new connection fits, cutting the oldest idle one if that makes room."""
        if len(self._open) < self.limits.max_connections:
            return True
        idle = next((c for c in self._open.values() if c.phase == "idle"), None)
        if idle is None:
            return False
        self._release(idle)
        idle.abort()
        return True

    async def _connect(self, connection: GuardedConnection) -> None:
        sock, connection.pending_socket = connection.pending_socket, None
        assert sock is not None
        tls = self.ssl_context
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: connection,
                sock,
                ssl=tls,
                ssl_handshake_timeout=self.limits.head_timeout if tls is not None else None,
            )
        except OSError:
            pass  # a TLS handshake that failed or timed out: the event loop closed the socket
        finally:
            if not connection.made:
                self._release(connection)

    # ------------------------------------------------------------ bookkeeping
    def _release(self, connection: GuardedConnection) -> None:
        self._open.pop(connection.inner, None)
        if not self._open:
            self._drained.set()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []
