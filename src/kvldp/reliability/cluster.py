"""What the cluster scenarios ask of a real Apache Kafka cluster
(:class:`~kvldp.broker.apache_kafka.ApacheKafka`) while they take its nodes down.

A scenario that kills brokers has to know which node leads which partition, when a
partition has a leader again, when every replica is back in sync (killing the next
node before that could leave a partition below ``min.insync.replicas`` and stall every
``acks=all`` write), what configuration a topic really has, and how far a partition's
log reaches and how many records it still holds (compaction leaves gaps in the
offsets). Each question is asked afresh of the nodes that run at that moment.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, UnknownTopicOrPartitionError

from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.kafka.topic_partitions import topic_partitions

#: how long one admin request may take (a request to a node just killed must not hang)
REQUEST_TIMEOUT_MS = 5_000
#: the server properties of the scenarios' cluster: the log cleaner looks for logs to
#: compact every 0.2 s (Kafka's default is 15 s), so that a compaction the state topic's
#: own settings allow happens within a fast test. It is a broker setting (the cleaner
#: thread's idle sleep); no topic configuration can shorten it.
CLUSTER_PROPERTIES = {"log.cleaner.backoff.ms": "200"}


def three_nodes() -> ApacheKafka:
    """The cluster the scenarios run on (not yet started): three nodes, so every topic
    has 3 replicas and needs 2 in sync (:class:`ApacheKafka`'s replication defaults)."""
    return ApacheKafka(3, extra_properties=CLUSTER_PROPERTIES)


def live_bootstrap(cluster: ApacheKafka) -> str:
    """The client addresses of the nodes that run now."""
    return ",".join(cluster.nodes[node_id].address for node_id in sorted(cluster.pids))


@asynccontextmanager
async def admin(cluster: ApacheKafka) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(
        bootstrap_servers=live_bootstrap(cluster),
        client_id="kvldp-reliability",
        request_timeout_ms=REQUEST_TIMEOUT_MS,
    )
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def partitions(cluster: ApacheKafka, topics: list[str] | None = None) -> list[dict[str, Any]]:
    """Each partition of ``topics`` (None: every topic, Kafka's internal ones included) as
    the cluster's metadata has it: ``topic``, ``partition``, ``leader`` (-1: none),
    ``replicas`` and ``isr``."""
    async with admin(cluster) as client:
        described = await client.describe_topics(topics)
    return [{"topic": t["topic"], **p} for t in described for p in t["partitions"]]


async def leaders(cluster: ApacheKafka, topic: str) -> dict[int, int]:
    """The leader of each partition of ``topic`` (-1: none)."""
    return {p["partition"]: p["leader"] for p in await partitions(cluster, [topic])}


async def led_elsewhere(cluster: ApacheKafka, topic: str, node_id: int) -> bool:
    """Every partition of ``topic`` has a leader, and it is not ``node_id``."""
    try:
        led = await leaders(cluster, topic)
    except (KafkaError, OSError):
        return False
    return bool(led) and all(leader not in (-1, node_id) for leader in led.values())


async def fully_replicated(cluster: ApacheKafka) -> bool:
    """Every partition of every topic has a leader and every replica in sync."""
    try:
        described = await partitions(cluster)
    except (KafkaError, OSError):
        return False
    return bool(described) and all(
        p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in described
    )


async def topic_config(cluster: ApacheKafka, topic: str, timeout: float = 30.0) -> dict[str, str]:
    """Every configuration entry of ``topic`` as the cluster applies it (its own and the
    broker defaults).

    A topic just created is known to the controller before every node has its metadata:
    a node asked in that moment answers UNKNOWN_TOPIC_OR_PARTITION, so that answer is
    asked again until ``timeout``; any other error is raised at once."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        async with admin(cluster) as client:
            (response,) = await client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        (resource,) = response.resources
        error_code, error_message, _, _, entries = resource[:5]
        if not error_code:
            return {entry[0]: entry[1] for entry in entries}
        if error_code != UnknownTopicOrPartitionError.errno or asyncio.get_running_loop().time() > deadline:
            raise KafkaError(f"describing the configuration of {topic}: error {error_code} {error_message}")
        await asyncio.sleep(0.1)


async def log_bounds(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """The log start and end offsets of each partition of ``topic``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = await _partitions_of(bootstrap, topic)
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {tp.partition: (starts[tp], ends[tp]) for tp in tps}


async def count_records(bootstrap: str, topic: str, timeout: float = 60.0) -> dict[int, int]:
    """How many records each partition of ``topic`` holds now: read from the log start to
    the end offset taken first (compaction leaves gaps in the offsets, so this is below
    ``end - start`` once it has removed records)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=64 << 20,
        fetch_max_bytes=64 << 20,
    )
    await consumer.start()
    try:
        tps = await _partitions_of(bootstrap, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        counts = dict.fromkeys(tps, 0)
        deadline = asyncio.get_running_loop().time() + timeout
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{topic} was not read to its end offsets {ends} in {timeout:.0f} s")
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                counts[tp] += sum(1 for r in records if r.offset < ends[tp])
    finally:
        await consumer.stop()
    return {tp.partition: n for tp, n in counts.items()}


async def _partitions_of(bootstrap: str, topic: str) -> list[TopicPartition]:
    found = await topic_partitions(bootstrap, topic)
    if not found:
        raise KafkaError(f"topic {topic} does not exist")
    return [TopicPartition(topic, p) for p in sorted(found)]
