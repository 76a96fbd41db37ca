"""The gateway's answers: JSON bodies with a stable error code, and the headers that go
with some of them.

A 202 is ``{"accepted": <reports>}``; every refusal is ``{"error": "<code>", "detail":
"<one line>"}``. A 401 carries ``WWW-Authenticate: Bearer error="invalid_token"`` and a
429 or 503 carries ``Retry-After`` (whole seconds).
"""

from __future__ import annotations

from aiohttp import web

#: the error code of each status whose code is the status' own (a 400's or 409's is the
#: decoder's reason, a routing error's is set where aiohttp raises it)
CODES = {
    401: "unauthorized",
    403: "forbidden",
    404: "unknown_collection",
    413: "too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    503: "unavailable",
}
CHALLENGE = 'Bearer error="invalid_token"'


def refusal(status: int, code: str, detail: str) -> web.Response:
    """A refusal as JSON (also the :data:`kvldp.web.refusals.Refusal` of the server's
    own 405 and 413 answers)."""
    response = web.json_response({"error": code, "detail": detail}, status=status)
    if status == 401:
        response.headers["WWW-Authenticate"] = CHALLENGE
    return response


def refused(status: int, detail: str, retry_after: str | None = None) -> web.Response:
    """A refusal with the status' own code (:data:`CODES`)."""
    response = refusal(status, CODES[status], detail)
    if retry_after is not None:
        response.headers["Retry-After"] = retry_after
    return response


def accepted(reports: int) -> web.Response:
    """``{"accepted": <reports>}`` (written without the JSON encoder: it is one integer)."""
    return web.Response(text=f'{{"accepted": {reports:d}}}', status=202, content_type="application/json")
