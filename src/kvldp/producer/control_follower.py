"""The device side of an interactive collection's control topic: follow the open round.

A PrivKVM device perturbs with the means the server published for the open round, so
before it reports it reads the latest control record (:mod:`kvldp.common.messages.control_record`).
:class:`ControlFollower` reads ``kvldp.<name>.control`` from its start (the topic is
compacted: the latest record of the collection survives) and keeps the newest *valid*
record. A record that is corrupt, of another collection or of another configuration is
ignored with one logged line (logger ``kvldp.producer``): devices go on with the last
valid record, or wait for one, and never perturb with means they could not check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.messages.control_record import Control, InvalidControl, control_topic, decode_control
from kvldp.kafka.client_config import KafkaConfig, as_kafka_config
from kvldp.kafka.client_start import start_reachable

logger = logging.getLogger("kvldp.producer")


class NoOpenRound(KvldpError):
    """No valid control record arrived in time (is the collection's aggregator running?)."""


class ControlFollower:
    """The newest valid control record of one interactive collection."""

    def __init__(self, collection: Collection, kafka: KafkaConfig | str) -> None:
        self.collection = collection
        self.topic = control_topic(collection)
        self.latest: Control | None = None
        self.kafka = as_kafka_config(kafka)
        self._consumer = AIOKafkaConsumer(
            **self.kafka.client_options("kvldp-control-follower"),
            enable_auto_commit=False,
            metadata_max_age_ms=2_000,
        )
        self._changed = asyncio.Condition()
        #: whether the follower has read up to the end of the topic once (the record it
        #: holds is then the newest, not an older one on the way there)
        self._caught_up = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await start_reachable(self._consumer, self.kafka)
        tp = TopicPartition(self.topic, 0)
        self._consumer.assign([tp])
        await self._consumer.seek_to_beginning(tp)
        self._task = asyncio.create_task(self._follow(tp), name="control")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    async def _follow(self, tp: TopicPartition) -> None:
        while True:
            try:
                batch = await self._consumer.getmany(tp, timeout_ms=500)
            except KafkaError as exc:  # the topic may not exist before the aggregator creates it
                logger.debug("control topic %s: %s", self.topic, exc)
                await asyncio.sleep(0.5)
                continue
            newest = None
            for record in batch.get(tp, []):
                try:
                    newest = decode_control(self.collection, record.value)
                except InvalidControl as exc:
                    logger.warning("ignoring record %d of %s: %s", record.offset, self.topic, exc)
            highwater = self._consumer.highwater(tp)
            caught_up = highwater is not None and await self._consumer.position(tp) >= highwater
            if newest is not None or caught_up != self._caught_up:
                async with self._changed:
                    self.latest = newest or self.latest
                    self._caught_up = self._caught_up or caught_up
                    self._changed.notify_all()

    async def wait(
        self, ready: Callable[[Control], bool] = lambda _: True, timeout: float | None = None
    ) -> Control:
        """The newest valid record once ``ready`` holds for it (raises :class:`NoOpenRound`
        after ``timeout`` seconds)."""

        def satisfied() -> bool:
            return self._caught_up and self.latest is not None and ready(self.latest)

        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(satisfied), timeout)
        except TimeoutError:
            raise NoOpenRound(
                f"no valid control record on {self.topic} within {timeout:g} s "
                f"(is the aggregator of collection {self.collection.name} running?)"
            ) from None
        assert self.latest is not None
        return self.latest
