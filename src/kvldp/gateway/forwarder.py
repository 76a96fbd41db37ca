"""The gateway's one Kafka producer: a body is forwarded once, or refused as unavailable.

Records go out with ``acks=all`` (a report counts as accepted once every in-sync replica
holds it) and without producer idempotence, as the SDK sends them: the aggregator drops
a re-sent report by its report id. :meth:`Forwarder.send` waits at most ``timeout``
seconds for the acknowledgement and raises :class:`Unavailable` otherwise; it never sends
the same body again itself (a record still queued when the wait ends may reach Kafka
later: a client that retries sends the same report id, which the aggregator counts
once). :meth:`Forwarder.ready` fetches the cluster's metadata within a timeout
(``/readyz``).
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.client_start import start_or_close


class Unavailable(Exception):
    """Kafka did not acknowledge a record in time, or refused it."""


class Forwarder:
    """Produces report bodies to their collection's reports topic."""

    def __init__(self, kafka: KafkaConfig, timeout: float, max_message_bytes: int) -> None:
        self.kafka = kafka
        self.timeout = timeout
        self.max_request_size = max(max_message_bytes * 2, 1 << 20)
        self._producer: AIOKafkaProducer | None = None

    @property
    def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("the forwarder is not started")
        return self._producer

    async def start(self) -> None:
        """Connect (one line naming the setting when that fails)."""
        self._producer = AIOKafkaProducer(
            **self.kafka.client_options("kvldp-gateway"),
            acks="all",
            enable_idempotence=False,
            linger_ms=0,
            max_request_size=self.max_request_size,
            # the producer gives up on a request after the produce timeout as well, so that a
            # stop does not wait on an unreachable cluster for aiokafka's default 40 s
            request_timeout_ms=int(self.timeout * 1000),
        )
        await start_or_close(self._producer, self.kafka)

    async def stop(self) -> None:
        """Deliver what is queued and close."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def send(self, topic: str, key: bytes, value: bytes, timestamp_ms: int) -> None:
        """Produce one record and wait for every in-sync replica (:class:`Unavailable`
        after ``timeout`` seconds or on a Kafka error)."""
        try:
            async with asyncio.timeout(self.timeout):
                delivery = await self.producer.send(topic, value=value, key=key, timestamp_ms=timestamp_ms)
                # not shielded: the timeout cancels only this record's own future, which
                # aiokafka then leaves alone (it settles a record's future only if it is not
                # done), while the record stays in its batch
                await delivery
        except TimeoutError:
            raise Unavailable(f"Kafka did not acknowledge within {self.timeout:g} s") from None
        except KafkaError as exc:
            raise Unavailable(f"Kafka refused the record ({type(exc).__name__})") from None

    async def ready(self, timeout: float) -> bool:
        """Whether the cluster answers a metadata request within ``timeout`` seconds."""
        try:
            async with asyncio.timeout(timeout):
                await self.producer.client.fetch_all_metadata()
        except (TimeoutError, KafkaError, OSError):
            return False
        return True
