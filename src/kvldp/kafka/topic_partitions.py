"""The partitions of a topic, asked of the cluster.

A consumer that assigns partitions itself (``kvldp record``, the reliability scenarios'
readers) must first learn how many a topic has. What an aiokafka consumer knows after
``start()`` depends on the broker: its metadata request names no topic, which Tansu
answers with every topic and Apache Kafka 4 with none; and the consumer's ``topics()``
fetches every topic into a copy of the metadata that the consumer does not keep, so
``partitions_for_topic`` stays empty after it. An admin client's description of every
topic says it, and never creates the topic (a request naming a missing topic may, where
the broker auto-creates topics).
"""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient

from kvldp.kafka.client_config import KafkaConfig, as_kafka_config
from kvldp.kafka.client_start import start_or_close


async def topic_partitions(kafka: KafkaConfig | str, topic: str) -> set[int]:
    """The partition numbers of ``topic`` (empty when it does not exist)."""
    settings = as_kafka_config(kafka)
    admin = AIOKafkaAdminClient(**settings.client_options("kvldp-admin"))
    await start_or_close(admin, settings)
    try:
        described = await admin.describe_topics()
    finally:
        await admin.close()
    return {p["partition"] for t in described if t["topic"] == topic for p in t["partitions"]}
