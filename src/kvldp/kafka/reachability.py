"""Whether a running service's Kafka cluster answers, said once per outage and exported.

Once a service runs, aiokafka hides an unreachable cluster: fetches come back empty,
heartbeats and commits retry, and its own logs are silenced (see
:func:`kvldp.cli.configure_logging`). :class:`Reachability` asks the cluster, every
:data:`PROBE_INTERVAL_S`, for its broker list (a metadata request naming no topic, cheap
on a cluster of any size) on a connection of its own; one node answering within
:data:`PROBE_TIMEOUT_S` is enough. When no node has answered for :data:`DOWN_AFTER_S` (a
leader failover that takes one node away never trips it), the service says so in one line
and the gauge ``kvldp_kafka_reachable`` drops to 0; when a node answers again, one more
line, and the gauge is 1. ``kvldp_kafka_outages_total`` counts the outages and
``kvldp_kafka_last_contact_timestamp_seconds`` is the time of the latest answer.

The services read :attr:`Reachability.up` to skip what cannot succeed while the cluster is
away (an informational offset commit, a snapshot that cannot be acknowledged), and
:meth:`Reachability.failed` to say once per outage that some Kafka work failed and will be
tried again, instead of failing the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, KafkaTimeoutError
from aiokafka.protocol.metadata import MetadataRequest
from prometheus_client import CollectorRegistry, Counter, Gauge

from kvldp.kafka.client_config import KafkaConfig

#: seconds between two probes of the cluster
PROBE_INTERVAL_S = 1.0
#: seconds one probe may take before it counts as unanswered
PROBE_TIMEOUT_S = 2.0
#: seconds without an answer from any node before the cluster is said to be unreachable
DOWN_AFTER_S = 3.0


def transient(exc: BaseException) -> bool:
    """Whether a Kafka failure may pass by itself (a lost connection, a timeout, a leader
    moving), as opposed to a refusal a user must fix (an ACL, a bad setting)."""
    if isinstance(exc, TimeoutError | KafkaTimeoutError):
        return True
    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


class Reachability:
    """Watches one cluster for one service: ``service`` names it in the log lines, and
    ``meanwhile`` says what it does while the cluster is away."""

    def __init__(
        self,
        kafka: KafkaConfig,
        service: str,
        meanwhile: str,
        log: Callable[[str], None],
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kafka = kafka
        self.service = service
        self.meanwhile = meanwhile
        self.log = log
        self.clock = clock
        #: False from :data:`DOWN_AFTER_S` without an answer until the next answer
        self.up = True
        self._last_answer = clock()
        self._down_since_wall = 0.0
        self._said: set[str] = set()
        self._client: AIOKafkaClient | None = None
        self._reachable = Gauge(
            "kvldp_kafka_reachable",
            "1 while a node of the Kafka cluster answers within the probe timeout, 0 while none does",
            registry=registry,
        )
        self._outages = Counter(
            "kvldp_kafka_outages", "times the Kafka cluster stopped answering", registry=registry
        )
        self._last_contact = Gauge(
            "kvldp_kafka_last_contact_timestamp_seconds",
            "when a node of the Kafka cluster last answered (Unix time)",
            registry=registry,
        )
        self._reachable.set(1)
        self._last_contact.set(time.time())

    async def start(self) -> None:
        """Connect the probe's client (the cluster answered the service's own start)."""
        self._client = AIOKafkaClient(
            **self.kafka.client_options(f"kvldp-{self.service}-probe"),
            request_timeout_ms=int(PROBE_TIMEOUT_S * 1000),
        )
        await self._client.bootstrap()

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    async def watch(self) -> None:
        """Probe forever (run as a task)."""
        while True:
            self.observe(await self.probe())
            await asyncio.sleep(PROBE_INTERVAL_S)

    async def probe(self) -> str | None:
        """Ask the known nodes, in random order, for the broker list until one answers;
        None when one did, else why none did."""
        client = self._client
        if client is None:
            return "the probe is not started"
        nodes = [broker.nodeId for broker in client.cluster.brokers()]
        random.shuffle(nodes)
        why = "no broker is known"
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                for node in nodes:
                    try:
                        await client.send(node, MetadataRequest([]))
                        return None
                    except (KafkaError, OSError) as exc:
                        why = _reason(exc)
        except TimeoutError:
            why = f"no answer within {PROBE_TIMEOUT_S:g} s"
        return why

    def observe(self, failure: str | None) -> None:
        """Take one probe's outcome: None (a node answered) or why none did."""
        now = self.clock()
        if failure is None:
            self._last_answer = now
            self._last_contact.set(time.time())
            if not self.up:
                self.up = True
                self._said.clear()
                self._reachable.set(1)
                self.log(
                    f"{self.service}: Kafka at {self.kafka.describe()} answers again after "
                    f"{time.time() - self._down_since_wall:.0f} s"
                )
            return
        if self.up and now - self._last_answer >= DOWN_AFTER_S:
            self.up = False
            self._down_since_wall = time.time() - (now - self._last_answer)
            self._reachable.set(0)
            self._outages.inc()
            self.log(
                f"{self.service}: Kafka at {self.kafka.describe()} unreachable for "
                f"{now - self._last_answer:.0f} s ({failure}); {self.meanwhile}"
            )

    def failed(self, what: str, exc: BaseException) -> None:
        """Say once per outage (or once while the cluster answers) that ``what`` failed for
        a transient reason and will be tried again."""
        if what in self._said:
            return
        self._said.add(what)
        self.log(f"{self.service}: {what} failed ({_reason(exc)}); trying again")


def _reason(exc: BaseException) -> str:
    """The error's class and text, the class named once (aiokafka's texts often start with it)."""
    name, text = type(exc).__name__, str(exc)
    if not text or text == name:
        return name
    return text if text.startswith(name) else f"{name}: {text}"
