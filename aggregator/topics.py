"""Create a collection's topics when they are missing (the aggregator owns them)."""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from common.collection import Collection
from common.control import control_topic, is_interactive

#: Kafka's "topic already exists" error code (a concurrent creator won the race)
TOPIC_ALREADY_EXISTS = 36
#: the state topic keeps the latest snapshot per partition; snapshots of wide statistics are large
STATE_TOPIC_CONFIG = {"cleanup.policy": "compact", "max.message.bytes": str(64 << 20)}
#: the control topic keeps the latest record per collection
CONTROL_TOPIC_CONFIG = {"cleanup.policy": "compact"}


async def ensure_topics(
    bootstrap_servers: str, collection: Collection, replication_factor: int = 1, state: bool = False
) -> list[str]:
    """Create ``kvldp.<name>.reports`` (``aggregate.partitions`` partitions),
    ``kvldp.<name>.dlq``, for scale-out the compacted ``kvldp.<name>.state`` and for an
    interactive collection the compacted ``kvldp.<name>.control``, if absent; returns the
    names created."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="kvldp-admin")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(collection.reports_topic, collection.aggregate.partitions, replication_factor),
            NewTopic(collection.dlq_topic, 1, replication_factor),
        ]
        if state:
            wanted.append(
                NewTopic(collection.state_topic, 1, replication_factor, topic_configs=STATE_TOPIC_CONFIG)
            )
        if is_interactive(collection):
            wanted.append(
                NewTopic(control_topic(collection), 1, replication_factor, topic_configs=CONTROL_TOPIC_CONFIG)
            )
        missing = [t for t in wanted if t.name not in existing]
        if not missing:
            return []
        response = await admin.create_topics(missing)
        for topic, code, message in response.topic_errors:
            if code not in (0, TOPIC_ALREADY_EXISTS):
                raise RuntimeError(f"cannot create topic {topic}: error {code} {message or ''}".strip())
        return [t.name for t in missing]
    finally:
        await admin.close()
