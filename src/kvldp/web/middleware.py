"""The rules every request of a kvldp endpoint passes, as aiohttp middlewares.

In the order :class:`~kvldp.web.server.WebServer` stacks them, outermost first:

* :func:`phases` marks the connection's phases for its deadlines
  (:mod:`kvldp.web.deadlines`): the head is complete when the request gets here, and the
  response is sent once this middleware has written it to the socket itself — so a
  reader that does not read counts against ``response_timeout``. It answers aiohttp's
  routing errors (404, 405) as plain responses and a handler's exception as a 500, logged
  on ``kvldp.web``;
* :func:`refusals`, one middleware for the server's own refusals: 405 to any method the
  endpoint does not serve; 413 to a request declaring a body above ``max_body`` bytes
  (any body when it is 0), closing the connection without reading the body; 401 with
  ``WWW-Authenticate`` unless the request carries the configured credentials.

An endpoint whose clients read answers in another format than plain text (the gateway's
JSON) hands the server a :data:`Refusal`, which writes the 405 and 413 answers;
:func:`text_refusal` is the default.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from kvldp.web.listener import Listener
from kvldp.web.security import HttpSecurity

logger = logging.getLogger("kvldp.web")

#: writes a refusal: (status, stable error code, one-line detail) -> the response
Refusal = Callable[[int, str, str], web.Response]


def text_refusal(status: int, code: str, detail: str) -> web.Response:
    """A refusal as one line of plain text (the detail)."""
    return web.Response(status=status, text=f"{detail}\n")


def phases(listener: Listener) -> Middleware:
    """Tell the request's connection when its head is complete and its response sent."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = listener.connection(request.protocol)
        if connection is not None:
            connection.head_complete()
        try:
            response = await _answer(request, handler)
            # a client that left or was cut off: aiohttp finds the connection closed as well
            with contextlib.suppress(ConnectionError):
                await response.prepare(request)
                await response.write_eof()
            return response
        finally:
            if connection is not None:
                connection.response_sent()

    return middleware


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:  # aiohttp's routing errors
        return web.Response(status=exc.status, reason=exc.reason, text=exc.text, headers=exc.headers)
    except Exception:
        logger.exception("%s %s failed", request.method, request.path)
        return web.Response(status=500, text="internal error\n")


def refusals(
    methods: Iterable[str], max_body: int, security: HttpSecurity, refuse: Refusal = text_refusal
) -> Middleware:
    """The server's own refusals, in this order (one middleware, so one frame per request):

    * 405 to every method but ``methods``;
    * 413 (and a closed connection) to a body above ``max_body`` bytes; 0 refuses any
      body. A chunked body of unknown length is refused at 0 and otherwise bounded as it
      is read (aiohttp's ``client_max_size``);
    * 401 with a basic-auth challenge unless the request carries ``security``'s
      credentials."""
    allowed = frozenset(methods)
    allow = ", ".join(sorted(allowed))

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method not in allowed:
            response = refuse(405, "method_not_allowed", f"only {allow}")
            response.headers["Allow"] = allow
            return response
        length = request.content_length
        if request.body_exists and (max_body == 0 or (length is not None and length > max_body)):
            text = "no request body accepted" if max_body == 0 else f"request body above {max_body} bytes"
            response = refuse(413, "too_large", text)
            response.force_close()
            return response
        if not security.authorised(request.headers.get("Authorization")):
            return web.Response(
                status=401,
                text="authentication required\n",
                headers={"WWW-Authenticate": 'Basic realm="kvldp"'},
            )
        return await handler(request)

    return middleware
