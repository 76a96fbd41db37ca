"""The partitions of a topic, asked of the cluster by a consumer that subscribed to nothing.

Such a consumer knows the topics of its first metadata answer only, and what that holds
depends on the broker: Tansu lists every topic, Apache Kafka none. ``topics()`` does not
help: aiokafka fetches the cluster's metadata for it but keeps only the names, so
``partitions_for_topic`` still knows nothing of a topic the consumer never subscribed to.
:func:`topic_partitions` reads the partitions from a fresh metadata answer instead.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer

__all__ = ["topic_partitions"]


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    """The partitions of ``topic`` (none when it does not exist) for a started consumer."""
    known = consumer.partitions_for_topic(topic)
    if known:
        return set(known)
    # aiokafka has no public call returning a topic's partitions to a consumer that is
    # not subscribed to it; its client's full metadata fetch returns them
    cluster = await consumer._client.fetch_all_metadata()
    return set(cluster.partitions_for_topic(topic) or ())
