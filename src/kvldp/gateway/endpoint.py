"""One gateway process: its collections, token verifier, rate limiter, Kafka producer and
HTTP server, from start to a clean stop.

:meth:`Gateway.run` connects the producer, starts serving, reports the bound port, and on
the stop event (SIGTERM or Ctrl-C from the command line) stops accepting connections,
lets requests in flight finish (up to the produce timeout and a second), delivers what the
producer still holds (for at most :data:`~kvldp.kafka.shutdown.STOP_GRACE_S`: a record
Kafka did not take by then was answered 503, and its device sends it again) and returns.
While it runs, :class:`~kvldp.kafka.reachability.Reachability` says in one line when
Kafka stops answering and when it answers again (``kvldp_kafka_reachable``). With :attr:`GatewaySettings.metrics_address`,
``/metrics`` has a listener of its own (a scraper's private address) and the devices'
listener answers 404 for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.gateway.answers import refusal
from kvldp.gateway.forwarder import Forwarder
from kvldp.gateway.instruments import GatewayMetrics
from kvldp.gateway.rate_limit import RateLimiter
from kvldp.gateway.routes import Routes, observer
from kvldp.gateway.tokens import TokenVerifier
from kvldp.gateway.validation import BodyCheck
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.reachability import Reachability
from kvldp.kafka.shutdown import STOP_GRACE_S, close_within
from kvldp.web.limits import Limits
from kvldp.web.security import HttpSecurity
from kvldp.web.server import WebServer

_LOGGER = logging.getLogger("kvldp.gateway")


@dataclass(frozen=True)
class GatewaySettings:
    """What an operator tunes: the per-device rate, connections and the produce timeout."""

    #: requests per second a device may make on average, and at once
    device_rate: float = 1.0
    device_burst: float = 10.0
    #: devices whose rate the table remembers (least recently seen evicted first)
    max_devices: int = 100_000
    #: seconds Kafka has to acknowledge a report before the answer is 503
    produce_timeout: float = 10.0
    max_connections: int = 10_000
    #: seconds a client has to send its request head, and its body once the head is in
    head_timeout: float = 10.0
    body_timeout: float = 20.0
    keepalive_timeout: float = 75.0
    #: where ``/metrics`` is served on its own (host, port; port 0: a free one), off the
    #: devices' listener; None serves it beside the reports
    metrics_address: tuple[str, int] | None = None


class Gateway:
    """Serves the reports of ``collections`` to Kafka for devices that ``verifier`` admits."""

    def __init__(
        self,
        collections: Sequence[Collection],
        kafka: KafkaConfig,
        verifier: TokenVerifier,
        host: str,
        port: int,
        settings: GatewaySettings | None = None,
        security: HttpSecurity | None = None,
        log: Callable[[str], None] = _LOGGER.warning,
    ) -> None:
        names = [c.name for c in collections]
        if not names:
            raise KvldpError("the gateway needs at least one --collection")
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise KvldpError(f"collection {duplicated[0]!r} is given twice")
        self.settings = settings or GatewaySettings()
        self.checks = {c.name: BodyCheck(c) for c in collections}
        self.host, self.port = host, port
        self.security = security or HttpSecurity()
        max_body = max(check.max_bytes for check in self.checks.values())
        self.metrics = GatewayMetrics(self.checks)
        self.forwarder = Forwarder(kafka, self.settings.produce_timeout, max_body)
        self.log = log
        self.reachability = Reachability(
            kafka, "gateway", "reports are answered 503 until it answers", log, self.metrics.registry
        )
        s = self.settings
        self.limiter = RateLimiter(s.device_rate, s.device_burst, s.max_devices)
        self.routes = Routes(self.checks, verifier, self.limiter, self.forwarder, self.metrics)
        self.limits = Limits(
            max_body=max_body,
            head_timeout=s.head_timeout,
            response_timeout=s.body_timeout + s.produce_timeout,
            keepalive_timeout=s.keepalive_timeout,
            max_connections=s.max_connections,
            shutdown_grace=s.produce_timeout + 1.0,
        )
        own_metrics = self.settings.metrics_address is not None
        self.server = WebServer(
            self.routes.table(with_metrics=not own_metrics),
            ("GET", "POST"),
            self.limits,
            self.security,
            refusal=refusal,
            fallback=self.routes.elsewhere,
            observe=observer(self.metrics, self.checks),
        )
        #: the listener of ``/metrics`` alone (plain HTTP, for a scraper on a private network)
        self.metrics_server = (
            WebServer(self.routes.metrics_table(), ("GET", "HEAD"), refusal=refusal) if own_metrics else None
        )
        self.bound_port: int | None = None
        self.metrics_port: int | None = None

    async def run(self, stop: asyncio.Event, ready: Callable[[Gateway], None] | None = None) -> None:
        """Serve until ``stop`` is set, then drain and close (see the module docstring)."""
        await self.forwarder.start()
        watch: asyncio.Task[None] | None = None
        try:
            await self.reachability.start()
            watch = asyncio.create_task(self.reachability.watch(), name="reachability")
            if self.metrics_server is not None and self.settings.metrics_address is not None:
                self.metrics_port = await self.metrics_server.start(*self.settings.metrics_address)
            self.bound_port = await self.server.start(self.host, self.port)
            try:
                if ready is not None:
                    ready(self)
                await stop.wait()
            finally:
                await self.server.close()
        finally:
            try:
                if self.metrics_server is not None:
                    await self.metrics_server.close()
            finally:
                if watch is not None:
                    watch.cancel()
                deadline = asyncio.get_running_loop().time() + STOP_GRACE_S
                unclean = await close_within([self.forwarder, self.reachability], deadline)
                if unclean:
                    self.log(
                        f"stopped without closing {', '.join(unclean)} cleanly (Kafka did not answer in time)"
                    )
