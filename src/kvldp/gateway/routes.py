"""The gateway's HTTP routes and the observer that counts and times every answer.

``POST /v1/collections/{name}/reports`` checks, in this order: the bearer token (401,
403 for another audience), the collection (404), the ``Kvldp-Device`` header against the
token's subject (403), the content type (415), the device's rate (429), the body's size
(413) and contents (400, 409; :mod:`kvldp.gateway.validation`); then produces the body
keyed by the device (503 when Kafka does not acknowledge in time) and answers 202. The
checks that cost least come first, so a flooding or unauthenticated client costs little.
``GET /healthz`` answers while the process runs, ``GET /readyz`` while Kafka answers,
``GET /metrics`` serves :mod:`kvldp.gateway.instruments`, on the public listener or on
a listener of its own.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from kvldp.gateway.answers import accepted, refusal, refused
from kvldp.gateway.forwarder import Forwarder, Unavailable
from kvldp.gateway.instruments import GatewayMetrics
from kvldp.gateway.rate_limit import RateLimiter, retry_after
from kvldp.gateway.tokens import TokenRefused, TokenVerifier
from kvldp.gateway.validation import BodyCheck, BodyRefused
from kvldp.web.routing import Handler
from kvldp.web.server import Observer

CONTENT_TYPE = "application/msgpack"
#: the header naming the device a client believes it is (must be the token's subject)
DEVICE_HEADER = "Kvldp-Device"
#: seconds a client waits before retrying when Kafka is unavailable
UNAVAILABLE_RETRY_S = 5
#: seconds ``/readyz`` waits for the cluster's metadata
READY_TIMEOUT_S = 2.0


#: the path of a collection's reports
REPORTS_PATH = "/v1/collections/{}/reports"
_REPORTS_PREFIX, _REPORTS_SUFFIX = REPORTS_PATH.split("{}")


@dataclass(frozen=True)
class Routes:
    """The handlers of one gateway, bound to its collections, keys, limiter and producer."""

    collections: Mapping[str, BodyCheck]
    verifier: TokenVerifier
    limiter: RateLimiter
    forwarder: Forwarder
    metrics: GatewayMetrics

    def table(self, with_metrics: bool = True) -> list[web.RouteDef]:
        """The public routes (a reports path per collection); ``/metrics`` among them
        unless it has a listener of its own (:meth:`metrics_table`)."""
        routes = [web.post(REPORTS_PATH.format(name), self._reports_of(name)) for name in self.collections]
        routes += [web.get("/healthz", self.healthz), web.get("/readyz", self.readyz)]
        return [*routes, *self.metrics_table()] if with_metrics else routes

    def metrics_table(self) -> list[web.RouteDef]:
        return [web.get("/metrics", self.serve_metrics)]

    def _reports_of(self, name: str) -> Handler:
        return functools.partial(self.post_reports, name=name)

    async def elsewhere(self, request: web.Request) -> web.StreamResponse:
        """A path no route serves: a reports path of a collection this gateway does not
        serve is 404 ``unknown_collection``, to a device with a valid token only."""
        path = request.path
        if not (path.startswith(_REPORTS_PREFIX) and path.endswith(_REPORTS_SUFFIX)):
            return refusal(404, "not_found", "Not Found")
        if request.method != "POST":
            response = refusal(405, "method_not_allowed", "Method Not Allowed")
            response.headers["Allow"] = "POST"
            return response
        try:
            await self.verifier.device(request.headers.get("Authorization"))
        except TokenRefused as exc:
            return refused(exc.status, exc.detail)
        return refused(404, "no such collection on this gateway")

    async def post_reports(self, request: web.Request, name: str) -> web.StreamResponse:
        """A device's report body for collection ``name``, checked and forwarded (see the
        module docstring)."""
        headers = request.headers
        try:
            device = await self.verifier.device(headers.get("Authorization"))
        except TokenRefused as exc:
            return refused(exc.status, exc.detail)
        check = self.collections[name]
        claimed = headers.get(DEVICE_HEADER)
        if claimed is not None and claimed != device:
            return refused(403, f"the {DEVICE_HEADER} header is not the token's subject")
        if headers.get("Content-Type") != CONTENT_TYPE and request.content_type != CONTENT_TYPE:
            return refused(415, f"send the report as Content-Type: {CONTENT_TYPE}")
        wait = self.limiter.take(device)
        if wait > 0:
            return refused(429, "this device sends too fast", retry_after(wait))
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _closing(refused(413, "request body too large"))
        except ConnectionError:  # the client left (or was cut off) before its body was complete
            return _closing(refusal(400, "incomplete", "the connection closed before the body was complete"))
        self.metrics.received(name, len(body))
        now_ms = int(time.time() * 1000)
        try:
            reports = check.reports(body, now_ms)
        except BodyRefused as exc:
            return refusal(exc.status, exc.code, exc.detail)
        try:
            await self.forwarder.send(check.collection.reports_topic, device.encode(), body, now_ms)
        except Unavailable as exc:
            self.metrics.unavailable(name)
            return refused(503, str(exc), str(UNAVAILABLE_RETRY_S))
        self.metrics.accepted(name, reports)
        return accepted(reports)

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.StreamResponse:
        if await self.forwarder.ready(READY_TIMEOUT_S):
            return web.json_response({"status": "ready"})
        return refused(503, "Kafka does not answer", str(UNAVAILABLE_RETRY_S))

    async def serve_metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=self.metrics.exposition(), headers={"Content-Type": self.metrics.content_type}
        )


def _closing(response: web.Response) -> web.Response:
    response.force_close()
    return response


def observer(metrics: GatewayMetrics, collections: Mapping[str, BodyCheck]) -> Observer:
    """Count every answer by collection and status, and time it (refusals of the server's
    own limits included)."""
    labels = {REPORTS_PATH.format(name): name for name in collections}

    def observe(request: web.BaseRequest, status: int, seconds: float) -> None:
        metrics.answered(labels.get(request.path, ""), status, seconds)

    return observe
