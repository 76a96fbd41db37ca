"""One HTTP(S) endpoint of kvldp: aiohttp's low-level server behind kvldp's limits and
security.

:class:`WebServer` takes an endpoint's routes, the methods it serves, its
:class:`~kvldp.web.limits.Limits` and its :class:`~kvldp.web.security.HttpSecurity`.
aiohttp parses the requests (with the limits' line, field and header-count bounds) and
writes the responses; :class:`~kvldp.web.listener.Listener` accepts the connections
within the connection bound and puts each behind its deadlines. Every request then goes
through one handler, :meth:`WebServer.handle`:

* it marks the connection's phases for its deadlines (:mod:`kvldp.web.deadlines`): the
  head is complete when the request gets there, and the response is sent once the
  handler has written it to the socket itself, so a reader that does not read counts
  against ``response_timeout``;
* it makes the server's own refusals (:class:`~kvldp.web.refusals.ServerRules`: method,
  body size, basic auth), routes the rest (:class:`~kvldp.web.routing.PathTable`) and
  answers a handler's exception with a 500, logged on ``kvldp.web``;
* it hands every answer, refusals included, to the endpoint's ``observe`` (the gateway
  counts and times them).

aiohttp's low-level server is used rather than an ``Application``: kvldp's endpoints
route a handful of exact paths, and an application's router, middleware chain and
per-request handler wrapping cost a request more than all of kvldp's own rules (see
docs/performance.md, the gateway). Closing stops accepting, gives answers in flight
``shutdown_grace`` seconds, and then cuts whatever is still open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import cast

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from kvldp.web.limits import Limits
from kvldp.web.listener import Listener
from kvldp.web.refusals import Refusal, ServerRules, text_refusal
from kvldp.web.routing import Handler, PathTable
from kvldp.web.security import HttpSecurity

logger = logging.getLogger("kvldp.web")

#: told of every answer: (request, status, seconds from a complete head to the answer)
Observer = Callable[[web.BaseRequest, int, float], None]


class WebServer:
    """Serves ``routes`` for ``methods`` on one host and port until :meth:`close`."""

    def __init__(
        self,
        routes: Iterable[web.RouteDef],
        methods: Iterable[str],
        limits: Limits | None = None,
        security: HttpSecurity | None = None,
        *,
        refusal: Refusal = text_refusal,
        fallback: Handler | None = None,
        observe: Observer | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.security = security or HttpSecurity()
        self.rules = ServerRules(frozenset(methods), self.limits.max_body, self.security, refusal)
        self.table = PathTable(routes, refusal, fallback)
        self.observe = observe
        self._runner: web.ServerRunner | None = None
        self._listener: Listener | None = None

    @property
    def open_connections(self) -> int:
        """Connections accepted and not yet closed."""
        return self._listener.open_connections if self._listener is not None else 0

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host``:``port``; returns the bound port (``port`` 0: a free one)."""
        limits = self.limits
        ssl_context = self.security.ssl_context()
        self._listener = listener = Listener(limits, ssl_context)
        client_max_size = max(limits.max_body, 1)  # 0 would mean unbounded
        loop = asyncio.get_running_loop()

        def request_factory(
            message: RawRequestMessage,
            payload: StreamReader,
            protocol: RequestHandler,
            writer: AbstractStreamWriter,
            task: asyncio.Task[None],
        ) -> web.Request:
            return web.Request(
                message, payload, protocol, writer, task, loop, client_max_size=client_max_size
            )

        server = web.Server(
            self.handle,
            request_factory=request_factory,
            access_log=None,
            keepalive_timeout=limits.keepalive_timeout,
            max_line_size=limits.max_line_size,
            max_field_size=limits.max_field_size,
            max_headers=limits.max_headers,
            lingering_time=0,  # an unread body is not drained: the connection closes
        )
        runner = web.ServerRunner(server, shutdown_timeout=limits.shutdown_grace)
        await runner.setup()
        self._runner = runner
        try:
            return await listener.start(host, port, server)
        except BaseException:
            await self.close()
            raise

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Answer one request and write the answer (see the module docstring)."""
        request = cast(web.Request, request)  # made by the request factory of :meth:`start`
        listener = self._listener
        connection = listener.connection(request.protocol) if listener is not None else None
        if connection is not None:
            connection.head_complete()
        started = time.perf_counter()
        try:
            response: web.StreamResponse | None = self.rules.refusal(request)
            if response is None:
                try:
                    response = await self.table.handler(request)(request)
                except web.HTTPException as exc:  # aiohttp's own, e.g. from reading a body
                    response = self.rules.refuse(exc.status, "bad_request", exc.reason)
                except Exception:
                    logger.exception("%s %s failed", request.method, request.path)
                    response = web.Response(status=500, text="internal error\n")
            if self.observe is not None:
                self.observe(request, response.status, time.perf_counter() - started)
            try:  # a client that left or was cut off: aiohttp finds the connection closed as well
                await response.prepare(request)
                await response.write_eof()
            except ConnectionError:
                pass
            return response
        finally:
            if connection is not None:
                connection.response_sent()

    async def close(self) -> None:
        """Stop accepting, let answers in flight finish (``shutdown_grace``), cut the rest."""
        listener = self._listener
        if listener is not None:
            await listener.stop_accepting()
        if self._runner is not None:
            # aiohttp gives a handler the grace to finish, then cancels it and waits up to the
            # grace again (a handler writing to a client that does not read ends only when its
            # connection does): the connections still open when the grace is over are cut then
            cut = None
            if listener is not None:
                cut = asyncio.get_running_loop().call_later(self.limits.shutdown_grace, listener.abort_open)
            try:
                await self._runner.cleanup()
            finally:
                if cut is not None:
                    cut.cancel()
            self._runner = None
        if self._listener is not None:
            await self._listener.abort_all(self.limits.shutdown_grace)
            self._listener = None
