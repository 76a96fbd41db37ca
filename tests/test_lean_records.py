"""The reports consumer fetches lean records (the batch reader's, with offset, timestamp,
key and value) with the values aiokafka's own records carry, while every other consumer of
the process still gets aiokafka's records, headers and all. If an aiokafka release renames the constructor
kvldp wraps, this fails (the aggregator still works, on aiokafka's records)."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from kvldp.aggregator.consumer import reports_consumer
from kvldp.aggregator.topics import ensure_topics
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.lean_records import LeanRecord, install

from support.pipeline import unique_collection


async def fetch_all(consumer: AIOKafkaConsumer, tp: TopicPartition, count: int) -> list[object]:
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[object] = []
        while len(got) < count:
            got += (await consumer.getmany(tp, timeout_ms=1000)).get(tp, [])
        return got
    finally:
        await consumer.stop()


@pytest.mark.asyncio
async def test_the_reports_consumer_gets_lean_records_and_other_consumers_aiokafkas(
    broker: EmbeddedBroker,
) -> None:
    assert install()  # aiokafka's record constructor was found and wrapped
    kafka = KafkaConfig.plaintext(broker.bootstrap_servers)
    collection = unique_collection("kvue", 3, partitions=1)
    await ensure_topics(kafka, collection)
    tp = TopicPartition(collection.reports_topic, 0)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(
                tp.topic,
                value=b"report-%d" % i,
                key=b"device-%d" % i,
                headers=[("h", b"%d" % i)],
                partition=0,
            )
    finally:
        await producer.stop()
    lean: list[LeanRecord] = await fetch_all(reports_consumer(kafka, collection, "all"), tp, 3)  # type: ignore[assignment]
    full = await fetch_all(AIOKafkaConsumer(bootstrap_servers=broker.bootstrap_servers), tp, 3)
    assert not any(isinstance(r, ConsumerRecord) for r in lean)
    assert all(isinstance(r, ConsumerRecord) for r in full)
    fields = [(r.offset, r.timestamp, r.key, r.value) for r in full]  # type: ignore[attr-defined]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in lean] == fields
    assert [r.offset for r in lean] == [0, 1, 2]
    assert [r.headers for r in full] == [(("h", b"%d" % i),) for i in range(3)]  # type: ignore[attr-defined]
