"""The refusals every kvldp endpoint makes before a request reaches its handler.

:func:`server_refusal` answers, in this order: 405 to a method the endpoint does not
serve; 413 (closing the connection without reading the body) to a request declaring a
body above ``max_body`` bytes, or any body when it is 0 (a chunked body of unknown length
is bounded as it is read, by the request's ``client_max_size``); 401 with a basic-auth
challenge unless the request carries the configured credentials.

An endpoint whose clients read answers in another format than plain text (the gateway's
JSON) hands the server a :data:`Refusal`, which writes the 405, 413, 404 and routing
answers; :func:`text_refusal` is the default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from kvldp.web.security import HttpSecurity

#: writes a refusal: (status, stable error code, one-line detail) -> the response
Refusal = Callable[[int, str, str], web.Response]


def text_refusal(status: int, code: str, detail: str) -> web.Response:
    """A refusal as one line of plain text (the detail)."""
    return web.Response(status=status, text=f"{detail}\n")


@dataclass(frozen=True)
class ServerRules:
    """What an endpoint serves at all: its methods, its largest body, its credentials."""

    methods: frozenset[str]
    max_body: int
    security: HttpSecurity
    refuse: Refusal = text_refusal

    def refusal(self, request: web.BaseRequest) -> web.Response | None:
        """The answer refusing ``request``, or None when it may reach its handler."""
        if request.method not in self.methods:
            allow = ", ".join(sorted(self.methods))
            response = self.refuse(405, "method_not_allowed", f"only {allow}")
            response.headers["Allow"] = allow
            return response
        if request.body_exists:
            max_body, length = self.max_body, request.content_length
            if max_body == 0 or (length is not None and length > max_body):
                text = "no request body accepted" if max_body == 0 else f"request body above {max_body} bytes"
                response = self.refuse(413, "too_large", text)
                response.force_close()
                return response
        security = self.security
        if security.username is not None and not security.authorised(request.headers.get("Authorization")):
            return web.Response(
                status=401,
                text="authentication required\n",
                headers={"WWW-Authenticate": 'Basic realm="kvldp"'},
            )
        return None
