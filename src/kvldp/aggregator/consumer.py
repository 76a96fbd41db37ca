"""The aggregator's Kafka consumer of a reports topic, and how much one fetch takes.

Every role of :class:`~kvldp.aggregator.service.Aggregator` joins the collection's
consumer group with these settings: offsets are committed by the aggregator itself (only
after a checkpoint), the consumer never moves a partition by itself (an out-of-range
offset is the aggregator's to judge: a reset, or records lost to retention), a crashed member leaves the group within seconds, and a vanished or
recreated topic is noticed within seconds. The fetch sizes are shared with the bare
consumer of ``kvldp bench ingest``, so that the benchmark compares like with like.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer

from kvldp.common.config.collection import Collection
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.lean_records import install as install_lean_records
from kvldp.kafka.lean_records import lean

#: items per ``getmany``: records, or whole record batches for the reports consumer;
#: amortises the per-fetch overhead (the consume loop lets the other tasks run between
#: partitions, each about FETCH_BYTES of a fetch at most)
MAX_RECORDS = 20_000
#: a member that sends no heartbeat for this long is expelled from the group (aiokafka sends
#: none while a rebalance listener runs, so a worker's listener only pauses the partitions
#: it is given: their snapshots are waited for and loaded after it returns)
SESSION_TIMEOUT_MS = 6_000
#: the longest a worker waits for the snapshots of newly assigned partitions (all together)
#: before reading on from older ones (exact too, only more to re-read): the previous owner
#: publishes before it gives them up, so they come at once unless it died
SNAPSHOT_WAIT_S = SESSION_TIMEOUT_MS / 2000
#: bytes per partition per fetch (aiokafka's default): bounds the transient memory of a
#: fetch; 4 MiB is no faster (``kvldp bench ingest``) and keeps 4x more bytes in flight
FETCH_BYTES = 1 << 20
#: bytes per fetch over all partitions (aiokafka's default is 50 MiB): the reports
#: consumer hands out a fetch's records in whole batches, about 3x these bytes as Python
#: objects, so this bounds what one ``getmany`` holds whatever the partition count
FETCH_MAX_BYTES = 4 * FETCH_BYTES


def reports_consumer(kafka: KafkaConfig, collection: Collection, role: str) -> AIOKafkaConsumer:
    """A consumer in ``collection``'s group for an aggregator of ``role`` (not yet started
    or subscribed), fetching record batches of :class:`~kvldp.kafka.lean_records.LeanRecord`."""
    install_lean_records()
    return AIOKafkaConsumer(
        **kafka.client_options(f"kvldp-{role}"),
        key_deserializer=lean,
        group_id=collection.consumer_group,
        enable_auto_commit=False,
        # "none": an out-of-range fetch raises instead of jumping to the log start, which
        # the aggregator would undo forever (it never skips past its next offset)
        auto_offset_reset="none",
        heartbeat_interval_ms=500,  # a crashed member leaves the group within one session timeout
        session_timeout_ms=SESSION_TIMEOUT_MS,
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=FETCH_MAX_BYTES,
        metadata_max_age_ms=5_000,  # notice a vanished or recreated topic within seconds
    )
