"""A scripted stand-in for ``kvldp gateway``: the HTTP peer of the SDK's transport tests.

It speaks the gateway's contract on the wire — ``POST /v1/collections/{name}/reports``,
the JSON answers ``{"accepted": n}`` and ``{"error": ..., "detail": ...}``,
``Retry-After`` on 429 and 503, ``WWW-Authenticate`` on 401 — but decides its answers
from a script instead of validating reports and producing them to Kafka: each request
takes the next scripted :class:`Answer`, and 202 once the script is used up. With
``tokens`` it answers 401 to any other bearer token first. It records every request
(path, headers, body, arrival time) so a test can compare the bytes of retries. The
real gateway is tested end to end elsewhere (with the embedded broker and the
aggregator); this double only lets the SDK's retry, refusal and token rules be tried
one status at a time.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import msgpack
from aiohttp import web


@dataclass(frozen=True)
class Answer:
    """One scripted answer: ``status`` with the contract's JSON body (``error`` and
    ``detail``), or ``raw`` as a text body instead (what a proxy in front might send)."""

    status: int
    error: str = ""
    detail: str = ""
    retry_after: str | None = None
    raw: str | None = None


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


def reports_in(body: bytes) -> int:
    """Reports in a message of the wire format: a batch's ``n``, else one."""
    try:
        obj = msgpack.unpackb(body, raw=False)
    except Exception:
        return 0
    return int(obj.get("n", 1)) if isinstance(obj, dict) else 0


class GatewayDouble:
    """An aiohttp server on 127.0.0.1 answering as scripted (see the module)."""

    def __init__(self, answers: Iterable[Answer] = (), tokens: Iterable[str] | None = None) -> None:
        self.script: deque[Answer] = deque(answers)
        self.tokens = None if tokens is None else set(tokens)
        self.received: list[Received] = []
        self._runner: web.AppRunner | None = None
        app = web.Application()
        app.router.add_post("/{prefix:.*}v1/collections/{name}/reports", self._reports)
        self._app = app

    async def start(
        self, sock: socket.socket | None = None, ssl_context: ssl.SSLContext | None = None
    ) -> str:
        """Serve on ``sock`` (a bound socket), else on a free port; returns the base URL."""
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        if sock is None:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
        site = web.SockSite(self._runner, sock, ssl_context=ssl_context)
        await site.start()
        port = sock.getsockname()[1]
        return f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def bodies(self) -> list[bytes]:
        return [r.body for r in self.received]

    async def _reports(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.received.append(Received(request.path, dict(request.headers), body, time.monotonic()))
        auth = request.headers.get("Authorization", "")
        if self.tokens is not None and auth.removeprefix("Bearer ") not in self.tokens:
            return web.json_response(
                {"error": "unauthorized", "detail": "token refused"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        if not self.script:
            return web.json_response({"accepted": reports_in(body)}, status=202)
        answer = self.script.popleft()
        headers = {} if answer.retry_after is None else {"Retry-After": answer.retry_after}
        if answer.raw is not None:
            return web.Response(status=answer.status, text=answer.raw, headers=headers)
        if answer.status < 300:
            return web.json_response({"accepted": reports_in(body)}, status=answer.status)
        payload = json.dumps({"error": answer.error, "detail": answer.detail})
        return web.Response(
            status=answer.status, text=payload, content_type="application/json", headers=headers
        )
