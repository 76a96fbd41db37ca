"""The aggregator's writer of an interactive collection's control topic.

The aggregator (role ``all``) owns ``kvldp.<name>.control``: a compacted topic of one
partition whose records are keyed by the collection name, so the latest one is the
protocol's state (:mod:`kvldp.common.messages.control_record`). Every publication waits for ``acks=all``
before the aggregator moves on: a round counts as announced only once the record is on
every in-sync replica.

At start the aggregator reads the latest record back. If it is this collection's and
further along than the aggregator's own state (the state was lost: no ``--state-dir``,
or another directory), running on would open an old round again, which devices that
already reported in it could never join; the aggregator refuses to start instead.
"""

from __future__ import annotations

import contextlib

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from kvldp.aggregator.round_state import RoundState
from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.messages.control_record import Control, InvalidControl, control_topic, decode_control
from kvldp.kafka.client_config import KafkaConfig, as_kafka_config
from kvldp.kafka.client_start import start_or_close

#: seconds to wait for the control topic's last record at start
READ_TIMEOUT_S = 10.0


class ControlAhead(KvldpError):
    """The control topic is further along than the aggregator's state."""


class ControlPublisher:
    """Publishes the control record of one interactive collection."""

    def __init__(self, collection: Collection, kafka: KafkaConfig | str) -> None:
        self.collection = collection
        self.kafka = as_kafka_config(kafka)
        self.topic = control_topic(collection)
        self._producer = AIOKafkaProducer(**self.kafka.client_options("kvldp-control"), acks="all")

    async def start(self) -> None:
        await start_or_close(self._producer, self.kafka)

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, control: Control) -> None:
        """Write the record and wait until every in-sync replica has it."""
        await self._producer.send_and_wait(
            self.topic, value=control.to_bytes(), key=self.collection.name.encode(), partition=0
        )

    async def latest(self) -> Control | None:
        """The newest valid record of this collection on the topic, if any."""
        consumer = AIOKafkaConsumer(
            **self.kafka.client_options("kvldp-control-reader"), enable_auto_commit=False
        )
        tp = TopicPartition(self.topic, 0)
        await start_or_close(consumer, self.kafka)
        try:
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            end = await consumer.position(tp)
            if end == 0:
                return None
            consumer.seek(tp, 0)
            newest: Control | None = None
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=int(READ_TIMEOUT_S * 1000))
                if not batch:
                    break
                for record in batch.get(tp, []):
                    with contextlib.suppress(InvalidControl):
                        newest = decode_control(self.collection, record.value)
            return newest
        except KafkaError:
            return None
        finally:
            await consumer.stop()

    async def announce(self, rounds: RoundState) -> None:
        """Check the topic is not ahead of ``rounds``, then publish ``rounds``' record."""
        mine = rounds.control()
        seen = await self.latest()
        if seen is not None and (seen.round, seen.complete) > (mine.round, mine.complete):
            raise ControlAhead(
                f"{self.topic} says {seen.describe()}, but this aggregator's state is at "
                f"{mine.describe()}: its state of the earlier rounds is lost (run it with the "
                "--state-dir it used before, or start a new collection)"
            )
        await self.publish(mine)
