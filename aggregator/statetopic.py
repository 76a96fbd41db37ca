"""The compacted state topic ``kvldp.<name>.state``: per-partition snapshots for scale-out.

A worker publishes, for every input partition it owns, the snapshot
``{next_offset, statistics, filters}`` keyed by the partition number (on a timer and
before giving a partition up in a rebalance, waiting for the broker's acknowledgement).
The next owner loads the latest snapshot of the partition and seeks to its offset, so
state moves between workers with Kafka alone. An exporter reads the latest snapshot of
every partition without joining the consumer group, merges and refits.

Snapshots use the checkpoint format of :mod:`aggregator.state` with one partition, so a
snapshot can never be loaded into a differently configured collection. The topic is
created with ``cleanup.policy=compact``; readers keep the last value per key, so they are
correct on brokers that do not compact (Tansu).
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from aggregator.state import AggregatorState, PartitionState
from common.collection import Collection

#: snapshots of wide statistics (IOH at d = 10: 0.5 MB per bucket) must fit one message
MAX_SNAPSHOT_BYTES = 64 << 20


def encode(collection: Collection, partition: int, state: PartitionState) -> bytes:
    single = AggregatorState(collection)
    single.partitions[partition] = state
    return single.to_bytes()


def decode(collection: Collection, data: bytes) -> dict[int, PartitionState]:
    return AggregatorState.from_bytes(collection, data).partitions


class StateTopic:
    """Publishes and reads partition snapshots of one collection."""

    def __init__(self, collection: Collection, bootstrap_servers: str) -> None:
        self.collection = collection
        self.topic = collection.state_topic
        self.bootstrap_servers = bootstrap_servers
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            client_id="kvldp-state",
            max_request_size=MAX_SNAPSHOT_BYTES,
            linger_ms=0,
        )

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, snapshots: dict[int, PartitionState]) -> None:
        """Send every snapshot and wait until the broker acknowledged all of them."""
        futures = [
            await self._producer.send(self.topic, key=str(p).encode(), value=encode(self.collection, p, s))
            for p, s in snapshots.items()
        ]
        for future in futures:
            await future

    async def latest(self) -> dict[int, bytes]:
        """The newest snapshot bytes of every input partition, read from the beginning."""
        consumer = reader(self.bootstrap_servers)
        await consumer.start()
        try:
            return await read_to_end(consumer, self.topic, {})
        finally:
            await consumer.stop()


def reader(bootstrap_servers: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        client_id="kvldp-state-reader",
        fetch_max_bytes=MAX_SNAPSHOT_BYTES,
        max_partition_fetch_bytes=MAX_SNAPSHOT_BYTES,
    )


async def read_to_end(consumer: AIOKafkaConsumer, topic: str, latest: dict[int, bytes]) -> dict[int, bytes]:
    """Assign every partition of ``topic`` from the beginning and read until each one's
    position reaches its high watermark (fetch-based: never trusts ListOffsets)."""
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        await consumer.topics()
        partitions = consumer.partitions_for_topic(topic) or set()
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    if not tps:
        return latest
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    done: set[TopicPartition] = set()
    idle = 0
    while len(done) < len(tps) and idle < 10:
        fetched = await consumer.getmany(timeout_ms=200, max_records=1000)
        idle = 0 if fetched else idle + 1
        for records in fetched.values():
            for r in records:
                if r.key is not None and r.value is not None:
                    latest[int(r.key)] = r.value
        for tp in tps:
            highwater = consumer.highwater(tp)
            if highwater is not None and await consumer.position(tp) >= highwater:
                done.add(tp)
    return latest
