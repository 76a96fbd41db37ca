"""Create a collection's topics when they are missing (the aggregator owns them).

Topics are created with the collection's ``aggregate.replication_factor`` copies and
``min.insync.replicas = aggregate.min_insync_replicas``: with ``acks=all`` (the DLQ, state
and control producers, and the device SDK by default) a write is acknowledged only once
that many replicas hold it, so losing a broker loses nothing acknowledged as long as
fewer than ``min_insync_replicas`` copies are lost at once. The defaults (1 and 1) suit a
single development broker; a production cluster uses 3 and 2. Topics that already exist
are left as they are, but one with fewer replicas than configured is reported once at
start (an operator, or a broker's auto-creation, made it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.messages.control_record import control_topic, is_interactive
from kvldp.kafka.client_config import KafkaConfig, as_kafka_config
from kvldp.kafka.client_start import start_or_close

#: Kafka's "topic already exists" error code (a concurrent creator won the race)
TOPIC_ALREADY_EXISTS = 36
#: Kafka's "replication factor larger than the number of brokers" error code
INVALID_REPLICATION_FACTOR = 38
#: the state topic keeps the latest snapshot per partition; snapshots of wide statistics are large
STATE_TOPIC_CONFIG = {"cleanup.policy": "compact", "max.message.bytes": str(64 << 20)}
#: the control topic keeps the latest record per collection
CONTROL_TOPIC_CONFIG = {"cleanup.policy": "compact"}


def wanted_topics(collection: Collection, state: bool) -> list[NewTopic]:
    """The topics of ``collection`` with their partitions, replication and configs."""
    replicas = collection.aggregate.replication_factor
    durable = {"min.insync.replicas": str(collection.aggregate.min_insync_replicas)}

    def topic(name: str, partitions: int, configs: Mapping[str, str] | None = None) -> NewTopic:
        return NewTopic(name, partitions, replicas, topic_configs={**durable, **(configs or {})})

    topics = [
        topic(collection.reports_topic, collection.aggregate.partitions),
        topic(collection.dlq_topic, 1),
    ]
    if state:
        topics.append(topic(collection.state_topic, 1, STATE_TOPIC_CONFIG))
    if is_interactive(collection):
        topics.append(topic(control_topic(collection), 1, CONTROL_TOPIC_CONFIG))
    return topics


async def ensure_topics(
    kafka: KafkaConfig | str,
    collection: Collection,
    state: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[str]:
    """Create ``kvldp.<name>.reports`` (``aggregate.partitions`` partitions),
    ``kvldp.<name>.dlq``, for scale-out the compacted ``kvldp.<name>.state`` and for an
    interactive collection the compacted ``kvldp.<name>.control``, if absent; returns the
    names created. With ``log``, says which existing topics have fewer replicas than
    ``aggregate.replication_factor``."""
    settings = as_kafka_config(kafka)
    admin = AIOKafkaAdminClient(**settings.client_options("kvldp-admin"))
    await start_or_close(admin, settings)
    try:
        wanted = wanted_topics(collection, state)
        existing = {t["topic"]: t for t in await admin.describe_topics()}
        if log is not None:
            for line in under_replicated(
                collection, [existing[t.name] for t in wanted if t.name in existing]
            ):
                log(line)
        missing = [t for t in wanted if t.name not in existing]
        if not missing:
            return []
        response = await admin.create_topics(missing)
        for topic, code, message in response.topic_errors:
            if code == INVALID_REPLICATION_FACTOR:
                raise KvldpError(
                    f"cannot create topic {topic} with aggregate.replication_factor="
                    f"{collection.aggregate.replication_factor}: {message or 'the cluster has fewer brokers'}"
                )
            if code not in (0, TOPIC_ALREADY_EXISTS):
                raise RuntimeError(f"cannot create topic {topic}: error {code} {message or ''}".strip())
        return [t.name for t in missing]
    finally:
        await admin.close()


def under_replicated(collection: Collection, described: list[dict[str, Any]]) -> list[str]:
    """A line per described topic (metadata as aiokafka's ``describe_topics`` gives it)
    whose partitions have fewer replicas than ``aggregate.replication_factor``."""
    wanted = collection.aggregate.replication_factor
    lines = []
    for topic in described:
        copies = [len(p.get("replicas") or ()) for p in topic.get("partitions") or ()]
        if copies and min(copies) < wanted:
            lines.append(
                f"warning: topic {topic['topic']} has {min(copies)} replica(s) per partition, fewer than "
                f"aggregate.replication_factor={wanted}: a broker failure can lose what it holds "
                "(raise it with kafka-reassign-partitions)"
            )
    return lines
