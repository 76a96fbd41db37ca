"""Deadlines for every phase of one HTTP connection, around aiohttp's protocol.

aiohttp bounds the size of a request but not the time a client takes to send it, nor the
time it takes to read the answer. A :class:`GuardedConnection` sits between the event
loop's transport and aiohttp's protocol, forwards every event to it, and keeps one timer.
A connection is always in one of three phases, each with its bound from
:class:`~kvldp.web.limits.Limits`:

* ``head`` — from the accept (a TLS handshake included), or from the first byte of a
  later request on a kept-alive connection, until aiohttp has parsed a complete request
  head: ``head_timeout``. Bytes arriving one by one do not extend it;
* ``response`` — from a complete head until the response is handed to the socket
  (reading a body, answering, writing to a reader that reads slowly):
  ``response_timeout``;
* ``idle`` — between requests: aiohttp closes a kept-alive connection after
  ``keepalive_timeout``; one whose close still waits for its reader to take the last
  response is cut ``response_timeout`` later.

When the deadline of the current phase passes, the transport is aborted (a TCP reset,
unsent data dropped), whatever the client sends or fails to read. The timer is moved
only when a phase's deadline comes before it; a later deadline is recorded, and a timer
that fires before it is set again for it. A request thus costs one timer instead of one
per phase. The request side marks
the phases (:meth:`GuardedConnection.head_complete`,
:meth:`GuardedConnection.response_sent`; see :meth:`kvldp.web.server.WebServer.handle`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Literal, cast

from kvldp.web.limits import Limits

Phase = Literal["head", "response", "idle"]


class GuardedConnection(asyncio.Protocol):
    """One client connection: aiohttp's protocol ``inner`` behind a deadline per phase.

    Created when the socket is accepted (the head deadline counts from then);
    ``on_lost`` is called once the connection is gone."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        limits: Limits,
        on_lost: Callable[[GuardedConnection], None],
        sock: socket.socket,
    ) -> None:
        self.inner = inner
        self.limits = limits
        self.on_lost = on_lost
        #: the accepted socket until the event loop takes it over (for the TLS handshake)
        self.pending_socket: socket.socket | None = sock
        self.phase: Phase = "head"
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + limits.head_timeout
        self._timer: asyncio.TimerHandle | None = None
        #: when the timer fires (no later than ``_deadline``)
        self._timer_at = 0.0

    @property
    def made(self) -> bool:
        """Whether the connection reached aiohttp (after the TLS handshake, if any)."""
        return self.transport is not None

    # ------------------------------------------------------------ the transport's events
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.phase == "idle":
            self._enter("head", self.limits.head_timeout)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._cancel()
        try:
            self.inner.connection_lost(exc)
        finally:
            self.on_lost(self)

    # ------------------------------------------------------------ the request's phases
    def head_complete(self) -> None:
        """aiohttp parsed a request head: its response is due within ``response_timeout``."""
        self._enter("response", self.limits.response_timeout)

    def response_sent(self) -> None:
        """The response is with the socket: the connection is idle."""
        self._enter("idle", self.limits.keepalive_timeout + self.limits.response_timeout)

    def abort(self) -> None:
        """Cut the connection at once (a reset; unsent data is dropped)."""
        if self.transport is not None and not self.lost:
            self.transport.abort()

    def _enter(self, phase: Phase, seconds: float) -> None:
        self.phase = phase
        self._deadline = self._loop.time() + seconds
        if self._timer is None or self._deadline < self._timer_at:
            self._arm()

    def _arm(self) -> None:
        self._cancel()
        if not self.lost:
            self._timer_at = self._deadline
            self._timer = self._loop.call_at(self._deadline, self._expire)

    def _expire(self) -> None:
        """The timer fired: cut the connection if its deadline has passed, else wait for it."""
        self._timer = None
        if self._loop.time() >= self._deadline:
            self.abort()
        else:
            self._arm()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
