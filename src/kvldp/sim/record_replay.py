"""``kvldp record`` and ``kvldp replay``: raw report messages to a file and back.

Recording reads the reports topic without joining the aggregator's consumer group (it
assigns the partitions itself), so it never disturbs a running aggregator. Replay
re-publishes every message with its original key and timestamp, optionally paced by
the recorded timestamps (``speed`` = 2 is twice as fast as recorded; 0 = flat out).

Both check their file before connecting (a recording that is not one, an output
directory that does not exist), and replay counts a message as sent when every in-sync
replica holds it (``acks=all``): an analyst's replayed stream is not thinned by a
leader failover.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.messages.recording import RecordedMessage, read_recording, write_header, write_record
from kvldp.kafka.client_config import KafkaConfig, as_kafka_config
from kvldp.kafka.client_start import start_or_close
from kvldp.kafka.topic_partitions import topic_partitions


async def record(
    collection: Collection, kafka: KafkaConfig | str, out: Path, from_beginning: bool, idle_timeout: float
) -> int:
    """Write the topic's messages to ``out`` until nothing arrives for ``idle_timeout`` seconds:
    all of them with ``from_beginning``, else those past each partition's end when the
    recording starts.

    A partition's end is the high watermark of the broker's first fetch answer, not its
    answer to a ListOffsets request for the latest offset: the embedded broker answers
    that with the base offset of the partition's last record batch, so a seek to it
    would re-read that batch. What the first fetches bring is older than the end, and
    dropped."""
    if out.is_dir():
        raise KvldpError(f"output {str(out)!r} is a directory; give a file name")
    if not out.parent.is_dir():
        raise KvldpError(f"output directory {str(out.parent)!r} does not exist")
    settings = as_kafka_config(kafka)
    consumer = AIOKafkaConsumer(**settings.client_options("kvldp-record"), enable_auto_commit=False)
    await start_or_close(consumer, settings)
    count = 0
    try:
        partitions = consumer.partitions_for_topic(collection.reports_topic)
        if not partitions:  # what the consumer was told at start (Tansu), or else ask
            partitions = await topic_partitions(settings, collection.reports_topic)
        if not partitions:
            raise FileNotFoundError(f"topic {collection.reports_topic} does not exist")
        tps = [TopicPartition(collection.reports_topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        #: per partition, the first offset recorded (unknown until a fetch answer gives it)
        start: dict[TopicPartition, int] = {}
        if from_beginning:
            await consumer.seek_to_beginning(*tps)
            start = dict.fromkeys(tps, 0)
        else:
            await consumer.seek_to_end(*tps)
        with out.open("wb") as stream:
            write_header(stream, collection)
            last = time.monotonic()
            while time.monotonic() - last < idle_timeout:
                fetched = await consumer.getmany(timeout_ms=200, max_records=10_000)
                for tp in tps:
                    if tp not in start and (end := consumer.highwater(tp)) is not None:
                        start[tp] = end
                for tp, records in fetched.items():
                    first = start.get(tp)
                    new = [r for r in records if first is not None and r.offset >= first]
                    for r in new:
                        write_record(
                            stream, RecordedMessage(tp.partition, r.offset, r.timestamp, r.key, r.value)
                        )
                    count += len(new)
                    if new:
                        last = time.monotonic()
    finally:
        await consumer.stop()
    return count


async def replay(path: Path, kafka: KafkaConfig | str, speed: float = 0.0, topic: str | None = None) -> int:
    """Publish a recording's messages (same keys, values and timestamps) to its topic."""
    settings = as_kafka_config(kafka)
    with path.open("rb") as stream:
        header, records = read_recording(stream)  # a file that is not a recording fails here, unconnected
        target = topic or header.topic
        producer = AIOKafkaProducer(**settings.client_options("kvldp-replay"), acks="all", linger_ms=5)
        await start_or_close(producer, settings)
        try:
            count = await _publish(producer, records, target, speed)
        finally:
            await producer.stop()
    return count


async def _publish(
    producer: AIOKafkaProducer, records: Iterator[RecordedMessage], target: str, speed: float
) -> int:
    """Send every record, paced by ``speed``; returns once all are acknowledged."""
    count = 0
    started = time.monotonic()
    first_ts: int | None = None
    pending = []
    for r in records:
        if speed > 0:
            first_ts = r.timestamp if first_ts is None else first_ts
            wait = (r.timestamp - first_ts) / 1000.0 / speed - (time.monotonic() - started)
            if wait > 0:
                await asyncio.sleep(wait)
        pending.append(await producer.send(target, value=r.value, key=r.key, timestamp_ms=r.timestamp))
        count += 1
        if len(pending) >= 2000:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    return count
