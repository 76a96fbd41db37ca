"""The dead-letter topic: where a malformed or refused report goes, with why.

A record the ingest plan rejects (:class:`~kvldp.aggregator.ingest.Rejected`) is written
with its original bytes and key to the collection's ``kvldp.<name>.dlq`` topic, its
reason, detail and source position in the headers. The consume loop of
:class:`~kvldp.aggregator.service.Aggregator` moves a partition past a rejected record
only once its dead letter is held by every in-sync replica.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer, TopicPartition

from kvldp.aggregator.ingest import Rejected
from kvldp.kafka.client_config import KafkaConfig


def dlq_producer(kafka: KafkaConfig) -> AIOKafkaProducer:
    """The dead-letter writer. A dead letter counts as written once every in-sync replica
    holds it (``acks=all``): only then does the partition move past the malformed message."""
    return AIOKafkaProducer(**kafka.client_options("kvldp-dlq"), acks="all", linger_ms=5)


async def dead_letter(
    dlq: AIOKafkaProducer, dlq_topic: str, tp: TopicPartition, rejected: list[Rejected]
) -> None:
    """Write rejected records to the DLQ and wait until every in-sync replica holds
    each of them (``acks=all``); only then is the plan applied."""
    futures = []
    for r in rejected:
        headers = [
            ("reason", r.reason.encode()),
            ("detail", r.detail.encode("utf-8", "replace")[:1024]),
            ("source_topic", tp.topic.encode()),
            ("source_partition", str(tp.partition).encode()),
            ("source_offset", str(r.offset).encode()),
        ]
        futures.append(await dlq.send(dlq_topic, value=r.value, key=r.key, headers=headers))
    await asyncio.gather(*futures)
