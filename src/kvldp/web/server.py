"""One HTTP(S) endpoint of kvldp: aiohttp's server behind kvldp's limits and security.

:class:`WebServer` takes an endpoint's routes, the methods it serves, its
:class:`~kvldp.web.limits.Limits` and its :class:`~kvldp.web.security.HttpSecurity`.
aiohttp parses the requests (with the limits' line, field and header-count bounds), routes
them and writes the responses; :class:`~kvldp.web.listener.Listener` accepts the
connections within the connection bound and puts each behind its deadlines; the
middlewares of :mod:`kvldp.web.middleware` refuse methods, bodies and missing credentials
(in the endpoint's :data:`~kvldp.web.middleware.Refusal` format). An endpoint's own
middlewares run inside :func:`~kvldp.web.middleware.phases` and around those refusals, so
they see every answer (the gateway counts them).
Closing stops accepting, gives answers in flight ``shutdown_grace`` seconds, and then
cuts whatever is still open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware

from kvldp.web.limits import Limits
from kvldp.web.listener import Listener
from kvldp.web.middleware import Refusal, phases, refusals, text_refusal
from kvldp.web.security import HttpSecurity


class WebServer:
    """Serves ``routes`` for ``methods`` on one host and port until :meth:`close`."""

    def __init__(
        self,
        routes: Iterable[web.AbstractRouteDef],
        methods: Iterable[str],
        limits: Limits | None = None,
        security: HttpSecurity | None = None,
        *,
        refusal: Refusal = text_refusal,
        middlewares: Iterable[Middleware] = (),
    ) -> None:
        self.routes = list(routes)
        self.refusal = refusal
        self.middlewares = list(middlewares)
        self.methods = frozenset(methods)
        self.limits = limits or Limits()
        self.security = security or HttpSecurity()
        self._runner: web.AppRunner | None = None
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
        app = web.Application(
            middlewares=[
                phases(listener),
                *self.middlewares,
                refusals(self.methods, limits.max_body, self.security, self.refusal),
            ],
            client_max_size=max(limits.max_body, 1),  # 0 would mean unbounded
        )
        app.add_routes(self.routes)
        runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=limits.shutdown_grace,
            keepalive_timeout=limits.keepalive_timeout,
            max_line_size=limits.max_line_size,
            max_field_size=limits.max_field_size,
            max_headers=limits.max_headers,
            lingering_time=0,  # an unread body is not drained: the connection closes
        )
        await runner.setup()
        assert runner.server is not None
        self._runner = runner
        try:
            return await listener.start(host, port, runner.server)
        except BaseException:
            await self.close()
            raise

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
