"""An endpoint's routes: handlers by exact path and method.

kvldp's endpoints serve a handful of fixed paths, so a request is routed by one dictionary
lookup on its path and one on its method. A path no route serves gets 404 (or what the
endpoint's ``fallback`` answers: the gateway's per-collection paths are routes of their
own, and its fallback names an unknown collection); a served path asked with a method it
does not take gets 405 with ``Allow``. Both answers are written by the endpoint's
:data:`~kvldp.web.refusals.Refusal`, so they are in its format.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from kvldp.web.refusals import Refusal

#: what answers a request
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class PathTable:
    """Routes requests to the handlers of ``routes`` (aiohttp route definitions of exact
    paths)."""

    def __init__(
        self, routes: Iterable[web.RouteDef], refuse: Refusal, fallback: Handler | None = None
    ) -> None:
        self.refuse = refuse
        self.fallback = fallback
        #: path -> method -> handler
        self.paths: dict[str, dict[str, Handler]] = {}
        for route in routes:
            if "{" in route.path:
                raise ValueError(f"route {route.path!r}: kvldp routes are exact paths")
            methods = self.paths.setdefault(route.path, {})
            methods[route.method] = route.handler
            if route.method == "GET":  # as aiohttp does: a GET route answers HEAD too
                methods.setdefault("HEAD", route.handler)

    def handler(self, request: web.BaseRequest) -> Handler:
        """The handler of ``request``: its route's, the fallback, or one answering 404 or
        405 (a plain function, so that a request goes through no coroutine of the table's
        own)."""
        methods = self.paths.get(request.path)
        if methods is None:
            return self.fallback if self.fallback is not None else self._not_found
        handler = methods.get(request.method)
        if handler is None:
            return functools.partial(self._not_allowed, ", ".join(sorted(methods)))
        return handler

    async def _not_found(self, request: web.Request) -> web.StreamResponse:
        return self.refuse(404, "not_found", "Not Found")

    async def _not_allowed(self, allow: str, request: web.Request) -> web.StreamResponse:
        response = self.refuse(405, "method_not_allowed", "Method Not Allowed")
        response.headers["Allow"] = allow
        return response
