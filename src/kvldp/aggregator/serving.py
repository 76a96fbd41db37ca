"""What the two processes that serve a collection's estimates share.

The aggregator (:class:`kvldp.aggregator.service.Aggregator`, roles ``all`` and
``worker``) and the merged exporter (:class:`kvldp.aggregator.merged.MergedExporter`,
role ``exporter``) take the same settings — the collection, the Kafka connection, the
metrics endpoint, the refit interval, the log, the clock — refuse an interactive collection
outside role ``all`` in the same words, and run their timers and tasks the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable

from kvldp.aggregator.state import AggregatorState
from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.messages.control_record import is_interactive
from kvldp.kafka.client_config import KafkaConfig, as_kafka_config
from kvldp.web.security import HttpSecurity


class ServingRole:
    """One collection's settings and state in a process that serves its estimates (the
    defaults of the settings are the subclasses' constructors')."""

    def __init__(
        self,
        collection: Collection,
        kafka: KafkaConfig | str,
        role: str,
        metrics_host: str,
        metrics_port: int,
        refit_interval: float | None,
        log: Callable[[str], None],
        security: HttpSecurity | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if role != "all" and is_interactive(collection):
            raise KvldpError(
                f"collection {collection.name} is interactive ({collection.mechanism_name}): one aggregator "
                "decides its rounds, so it runs with --role all"
            )
        self.collection = collection
        #: where and how to connect; every client of this process uses these settings
        self.kafka = as_kafka_config(kafka)
        self.role = role
        self.metrics_host = metrics_host
        self.metrics_port = metrics_port
        self.refit_interval = refit_interval or collection.aggregate.refit_interval_s
        self.log = log
        self.security = security
        #: wall-clock seconds: windows, compaction and the skew bound read it (tests inject one)
        self.clock = clock
        self.state = AggregatorState(collection)
        #: the port /metrics listens on, once it does
        self.bound_port: int | None = None

    def now_ms(self) -> int:
        """The clock in milliseconds since the epoch."""
        return int(self.clock() * 1000)


async def every(seconds: float, job: Callable[[], Awaitable[None]]) -> None:
    """Run ``job`` every ``seconds``, each run after the previous one ended, until cancelled."""
    while True:
        await asyncio.sleep(seconds)
        await job()


async def cancel(tasks: Iterable[asyncio.Task[object]]) -> None:
    """Cancel ``tasks`` and wait until each has finished; a task that had failed raises its
    exception here."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
