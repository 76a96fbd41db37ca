"""The gateway's one Kafka producer: a body is forwarded once, or refused as unavailable.

Records go out with ``acks=all`` (a report counts as accepted once every in-sync replica
holds it) and without producer idempotence, as the SDK sends them: the aggregator drops
a re-sent report by its report id. :meth:`Forwarder.send` waits at most ``timeout``
seconds for the acknowledgement and raises :class:`Unavailable` otherwise; it never sends
the same body again itself (a record still queued when the wait ends may reach Kafka
later: a client that retries sends the same report id, which the aggregator counts
once). Handing the record to the producer takes no time unless the producer's buffer is
full, and then aiokafka bounds that wait by the same timeout. The waits for
acknowledgements share one timer (:class:`Deadlines`): a timer per request cost a
request more than all of the gateway's checks of its token and rate together. :meth:`Forwarder.ready` fetches the cluster's metadata within a timeout
(``/readyz``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError

from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.client_start import start_or_close
from kvldp.kafka.partitioner import partition_of


class Unavailable(Exception):
    """Kafka did not acknowledge a record in time, or refused it."""


class Deadlines:
    """Fails each future still pending ``timeout`` seconds after it was added, with
    :class:`Unavailable`, using one timer for all of them.

    Futures are added in the order of their deadlines (every one gets the same timeout),
    so the timer is set for the oldest; futures already settled are dropped from the front
    as new ones come, which keeps the queue about as long as the futures in flight."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._pending: deque[tuple[float, asyncio.Future[Any]]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, future: asyncio.Future[Any]) -> None:
        pending = self._pending
        while pending and pending[0][1].done():
            pending.popleft()
        loop = asyncio.get_running_loop()
        pending.append((loop.time() + self.timeout, future))
        if self._timer is None:
            self._timer = loop.call_at(pending[0][0], self._expire)

    def _expire(self) -> None:
        self._timer = None
        pending = self._pending
        loop = asyncio.get_running_loop()
        now = loop.time()
        while pending and (pending[0][0] <= now or pending[0][1].done()):
            _, future = pending.popleft()
            if not future.done():
                future.set_exception(Unavailable(f"Kafka did not acknowledge within {self.timeout:g} s"))
        if pending:
            self._timer = loop.call_at(pending[0][0], self._expire)

    def cancel(self) -> None:
        """Stop the timer (the futures are left as they are)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending.clear()


class Forwarder:
    """Produces report bodies to their collection's reports topic."""

    def __init__(self, kafka: KafkaConfig, timeout: float, max_message_bytes: int) -> None:
        self.kafka = kafka
        self.timeout = timeout
        self.max_request_size = max(max_message_bytes * 2, 1 << 20)
        self._producer: AIOKafkaProducer | None = None
        self._deadlines = Deadlines(timeout)

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
            partitioner=partition_of,
        )
        await start_or_close(self._producer, self.kafka)

    async def stop(self) -> None:
        """Deliver what is queued and close."""
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await producer.stop()
            finally:
                self._deadlines.cancel()

    async def send(self, topic: str, key: bytes, value: bytes, timestamp_ms: int) -> None:
        """Produce one record and wait for every in-sync replica (:class:`Unavailable`
        after ``timeout`` seconds or on a Kafka error)."""
        try:
            delivery = await self.producer.send(topic, value=value, key=key, timestamp_ms=timestamp_ms)
            # the deadline fails this record's own future, which aiokafka then leaves alone
            # (it settles a record's future only if it is not done); the record stays in its
            # batch
            self._deadlines.add(delivery)
            await delivery
        except KafkaTimeoutError:  # no room in the producer's buffer within the timeout
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
