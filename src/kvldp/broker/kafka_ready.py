"""When a Kafka cluster kvldp started accepts writes: every node registered as a broker and
a record produced with ``acks=all`` acknowledged.

Listening ports say little about a KRaft cluster: a node listens before its controller
quorum has a leader and before it is registered and unfenced as a broker, and a topic
with 3 replicas cannot be created before 3 brokers are. So the cluster counts as ready
once its metadata lists every broker and a write to :data:`PROBE_TOPIC` (created first,
with as many replicas as the cluster's topics have) is acknowledged by all in-sync
replicas.
Each try is bounded, and tries repeat until the deadline; a node that died ends the wait
at once, with what it said.

The wait is synchronous (it runs its own event loop in a thread of its own, so that it
works from any caller, an event loop's included).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from kvldp.broker.child_process import BrokerError

#: the topic the readiness write goes to (it stays in the cluster, one record per start)
PROBE_TOPIC = "kvldp.ready"
#: how long one try may take
TRY_TIMEOUT_S = 10.0
#: the pause between tries
RETRY_S = 0.25


class NotReady(Exception):
    """One readiness try found the cluster not ready yet (the message says how)."""


def wait_accepts_writes(
    bootstrap: str, brokers: int, deadline: float, dead: Callable[[], str | None]
) -> None:
    """Wait until the cluster at ``bootstrap`` lists ``brokers`` brokers and acknowledges a
    write with ``acks=all``; :class:`BrokerError` at ``deadline`` (a ``time.monotonic()``
    value) or as soon as ``dead()`` tells of a node that died."""
    with ThreadPoolExecutor(1, thread_name_prefix="kafka-ready") as pool:
        pool.submit(asyncio.run, _wait(bootstrap, brokers, deadline, dead)).result()


async def _wait(bootstrap: str, brokers: int, deadline: float, dead: Callable[[], str | None]) -> None:
    while True:
        if (died := dead()) is not None:
            raise BrokerError(died)
        left = deadline - time.monotonic()
        try:
            await asyncio.wait_for(_try(bootstrap, brokers), timeout=max(0.1, min(TRY_TIMEOUT_S, left)))
            return
        except (KafkaError, OSError, NotReady, TimeoutError) as exc:
            if time.monotonic() >= deadline:
                why = str(exc) or type(exc).__name__
                raise BrokerError(
                    f"Apache Kafka at {bootstrap} did not accept writes in time: {why}"
                ) from None
        await asyncio.sleep(RETRY_S)


async def _try(bootstrap: str, brokers: int) -> None:
    timeout_ms = int(TRY_TIMEOUT_S * 1000)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms)
    try:
        await admin.start()
        registered = len((await admin.describe_cluster())["brokers"])
        if registered < brokers:
            raise NotReady(f"{registered} of {brokers} brokers registered")
        with contextlib.suppress(TopicAlreadyExistsError):  # an earlier try's
            await admin.create_topics([NewTopic(PROBE_TOPIC, 1, min(brokers, 3))])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=timeout_ms)
    try:
        await producer.start()
        await producer.send_and_wait(PROBE_TOPIC, b"ready")
    finally:
        await producer.stop()
