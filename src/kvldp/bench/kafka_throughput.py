"""``kvldp bench ingest`` and ``kvldp bench produce``: kvldp against bare aiokafka.

Both run on an embedded broker, or on the cluster ``--kafka-config`` /
``--bootstrap-servers`` name (then both sides use its TLS and SASL settings, under
topics of their own), and compare, in the same run, kvldp's work with the
least a Kafka client can do with the same records:

* ingest — a topic is filled once; then, alternately, a bare ``AIOKafkaConsumer``
  drains it with ``getmany`` and nothing else, and the kvldp aggregator folds it to
  completion. Both rates are measured from the first record in hand to the last one
  consumed (group join and start-up are excluded for both), so the ratio is the cost of
  decoding, validating, de-duplicating, budgeting and folding per message. ``kvldp bench
  ingest`` first freezes the process's start-up heap, as ``kvldp aggregate`` does
  (:mod:`kvldp.startup_heap`), so both sides run in a process set up like the service's.
* produce — simulated devices publish through :class:`~kvldp.producer.collector.Collector`
  (perturb, encode, send), against a bare ``AIOKafkaProducer`` sending the same bytes,
  encoded beforehand, with the same producer settings (``acks=all``, the SDK's default)
  and the same in-flight window.

Every figure is the median of ``repeats`` alternating runs; the ratio is of medians.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, TopicPartition

from kvldp.aggregator.consumer import FETCH_BYTES, FETCH_MAX_BYTES, MAX_RECORDS
from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.topics import ensure_topics
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.messages.wire import WireFormat
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.client_start import start_or_close
from kvldp.producer.collector import Collector
from kvldp.producer.gateway_client import REQUEST_TIMEOUT_S
from kvldp.producer.pairs import device_key
from kvldp.producer.publisher import MAX_IN_FLIGHT
from kvldp.producer.transport import kafka_producer
from kvldp.sim import simulate

#: the collection every Kafka benchmark uses (documented in docs/performance.md)
BENCH_MECHANISM = "kvue"
BENCH_KEYS = 20
#: how often the aggregator's progress is sampled (its resolution: 0.2% of a 1 s run)
POLL_S = 0.002
#: a benchmark that makes no progress for this long has failed
STALL_S = 120.0

#: kvldp's ingest performance targets
INGEST_RATIO_TARGET = 1.0
BATCHED_RATE_TARGET = 5_000_000
PRODUCE_RATIO_TARGET = 0.8


def bench_collection(tag: str, partitions: int = 4) -> Collection:
    """A fresh kvue collection over 20 keys (its own topics: nothing left from other runs)."""
    return parse_collection(
        {
            "name": f"bench-{tag}-{uuid.uuid4().hex[:8]}",
            "mechanism": BENCH_MECHANISM,
            "epsilon": 1.0,
            "key_count": BENCH_KEYS,
            "value_range": [0.0, 1.0],
            "aggregate": {"partitions": partitions, "windows": ["5m", "all"]},
        }
    )


@contextlib.contextmanager
def cluster(kafka: KafkaConfig | None) -> Iterator[KafkaConfig]:
    """The cluster given, or an embedded broker for the benchmark's lifetime."""
    if kafka is not None:
        yield kafka
        return
    with EmbeddedBroker(0) as broker:
        yield KafkaConfig.plaintext(broker.bootstrap_servers)


async def fill(collection: Collection, kafka: KafkaConfig, reports: int, per_message: int, seed: int) -> int:
    """Publish ``reports`` simulated reports, ``per_message`` per message; returns messages."""
    users = simulate.simulate(collection, "gaussian", reports, seed)
    async with Collector(collection, kafka_config=kafka, rng=np.random.default_rng(seed)) as sdk:
        await sdk.publish_users(users, simulate.device_ids(reports), batch_size=per_message)
        return sdk.sent_messages


class Clock:
    """Rate from the first observation of progress to the end: start-up is excluded."""

    def __init__(self) -> None:
        self.start = 0.0
        self.base = 0

    def see(self, done: int) -> None:
        if not self.start and done:
            self.start, self.base = time.perf_counter(), done

    def rate(self, done: int) -> float:
        if done == self.base:
            raise ValueError(
                f"all {done} arrived in the first fetch, so there is no rate to measure: use a larger topic"
            )
        return (done - self.base) / (time.perf_counter() - self.start)


async def drain_bare(collection: Collection, kafka: KafkaConfig, messages: int) -> float:
    """Messages per second of a consumer that only counts what ``getmany`` returns."""
    consumer = AIOKafkaConsumer(
        **kafka.client_options("kvldp-bench-bare"),
        enable_auto_commit=False,
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=FETCH_MAX_BYTES,
    )
    await start_or_close(consumer, kafka)
    try:
        tps = [TopicPartition(collection.reports_topic, p) for p in range(collection.aggregate.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        clock, seen, idle_since = Clock(), 0, time.monotonic()
        while seen < messages:
            fetched = await consumer.getmany(timeout_ms=200, max_records=MAX_RECORDS)
            got = sum(len(records) for records in fetched.values())
            if got:
                seen += got
                clock.see(seen)
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > STALL_S:
                raise TimeoutError(f"bare consumer stalled at {seen} of {messages} messages")
        return clock.rate(seen)
    finally:
        await consumer.stop()


async def fold_kvldp(collection: Collection, kafka: KafkaConfig, reports: int) -> float:
    """Reports per second of a kvldp aggregator folding the topic from its start."""
    aggregator = Aggregator(collection, kafka, metrics_port=0, log=lambda _: None)
    stop = asyncio.Event()
    task = asyncio.create_task(aggregator.run(stop))
    try:
        clock, idle_since, last = Clock(), time.monotonic(), 0
        while (done := aggregator.state.reports_total) < reports:
            if task.done():
                task.result()  # raises what stopped it
                raise RuntimeError("the aggregator stopped before folding every report")
            clock.see(done)
            if done != last:
                last, idle_since = done, time.monotonic()
            elif time.monotonic() - idle_since > STALL_S:
                raise TimeoutError(f"aggregator stalled at {done} of {reports} reports")
            await asyncio.sleep(POLL_S)
        return clock.rate(done)
    finally:
        stop.set()
        await task


async def _alternate(repeats: int, *jobs: Callable[[], Awaitable[float]]) -> list[list[float]]:
    """Run the jobs in turn, ``repeats`` times: drift of a shared machine hits all alike."""
    results: list[list[float]] = [[] for _ in jobs]
    for _ in range(repeats):
        for out, job in zip(results, jobs, strict=True):
            out.append(await job())
    return results


async def _ingest(
    kafka: KafkaConfig, messages: int, batched_reports: int, per_message: int, repeats: int, seed: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    single = bench_collection("ingest")
    await ensure_topics(kafka, single)
    await fill(single, kafka, messages, 1, seed)
    bare, kvldp = await _alternate(
        repeats,
        lambda: drain_bare(single, kafka, messages),
        lambda: fold_kvldp(single, kafka, messages),
    )
    ratio = statistics.median(kvldp) / statistics.median(bare)
    rows.append(
        {
            "case": "single-report messages",
            "messages": messages,
            "reports": messages,
            "bare_messages_per_s": statistics.median(bare),
            "kvldp_reports_per_s": statistics.median(kvldp),
            "ratio": ratio,
            "target": f"ratio >= {INGEST_RATIO_TARGET}",
            "met": ratio >= INGEST_RATIO_TARGET,
            "bare_runs": bare,
            "kvldp_runs": kvldp,
        }
    )
    batched = bench_collection("ingest-batched")
    await ensure_topics(kafka, batched)
    sent = await fill(batched, kafka, batched_reports, per_message, seed)
    bare, kvldp = await _alternate(
        repeats,
        lambda: drain_bare(batched, kafka, sent),
        lambda: fold_kvldp(batched, kafka, batched_reports),
    )
    rate = statistics.median(kvldp)
    rows.append(
        {
            "case": f"{per_message} reports per message",
            "messages": sent,
            "reports": batched_reports,
            "bare_messages_per_s": statistics.median(bare),
            "kvldp_reports_per_s": rate,
            "ratio": rate / per_message / statistics.median(bare),
            "target": f">= {BATCHED_RATE_TARGET:,} reports/s",
            "met": rate >= BATCHED_RATE_TARGET,
            "bare_runs": bare,
            "kvldp_runs": kvldp,
        }
    )
    return rows


def bench_ingest(
    messages: int = 500_000,
    batched_reports: int = 5_000_000,
    per_message: int = 1000,
    repeats: int = 3,
    seed: int = 0,
    kafka: KafkaConfig | None = None,
) -> list[dict[str, Any]]:
    """Rows for single-report and batched messages (see the module docstring)."""
    with cluster(kafka) as settings:
        return asyncio.run(_ingest(settings, messages, batched_reports, per_message, repeats, seed))


INGEST_COLUMNS = ["case", "messages", "bare_messages_per_s", "kvldp_reports_per_s", "ratio", "target", "met"]


async def publish_kvldp(
    collection: Collection, kafka: KafkaConfig, users: KVData, ids: list[str], seed: int
) -> float:
    """Messages per second of simulated devices: perturb, encode, send, acknowledged."""
    async with Collector(collection, kafka_config=kafka, rng=np.random.default_rng(seed)) as sdk:
        start = time.perf_counter()
        await sdk.publish_users(users, ids)
        await sdk.flush()
        return users.n_users / (time.perf_counter() - start)


async def publish_bare(
    collection: Collection, kafka: KafkaConfig, values: list[bytes], keys: list[bytes]
) -> float:
    """Messages per second of a bare producer sending pre-encoded bytes, same window."""
    # the producer of :class:`~kvldp.producer.collector.Collector`, with its default settings
    producer = kafka_producer(collection, kafka, "kvldp-bench-bare", "all", REQUEST_TIMEOUT_S)
    await start_or_close(producer, kafka)
    try:
        now = int(time.time() * 1000)
        start = time.perf_counter()
        pending: list[asyncio.Future[Any]] = []
        for value, key in zip(values, keys, strict=True):
            pending.append(
                await producer.send(collection.reports_topic, value=value, key=key, timestamp_ms=now)
            )
            if len(pending) >= MAX_IN_FLIGHT:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
        return len(values) / (time.perf_counter() - start)
    finally:
        await producer.stop()


async def _produce(kafka: KafkaConfig, messages: int, repeats: int, seed: int) -> list[dict[str, Any]]:
    collection = bench_collection("produce")
    await ensure_topics(kafka, collection)
    users = simulate.simulate(collection, "gaussian", messages, seed)
    ids = simulate.device_ids(messages)
    # the very reports the devices will send (same seed), encoded beforehand
    batch = collection.mechanism.perturb_many(users, np.random.default_rng(seed))
    rids = np.random.default_rng([seed, 1]).integers(1, 2**64, size=messages, dtype=np.uint64)
    values = WireFormat(collection).encode_many(batch, int(time.time() * 1000), rids)
    keys = [device_key(i) for i in ids]
    bare, kvldp = await _alternate(
        repeats,
        lambda: publish_bare(collection, kafka, values, keys),
        lambda: publish_kvldp(collection, kafka, users, ids, seed),
    )
    ratio = statistics.median(kvldp) / statistics.median(bare)
    return [
        {
            "case": "single-report messages",
            "messages": messages,
            "bare_messages_per_s": statistics.median(bare),
            "kvldp_messages_per_s": statistics.median(kvldp),
            "ratio": ratio,
            "target": f"ratio >= {PRODUCE_RATIO_TARGET}",
            "met": ratio >= PRODUCE_RATIO_TARGET,
            "bare_runs": bare,
            "kvldp_runs": kvldp,
        }
    ]


def bench_produce(
    messages: int = 200_000, repeats: int = 3, seed: int = 0, kafka: KafkaConfig | None = None
) -> list[dict[str, Any]]:
    """One row: simulated devices against a bare producer (see the module docstring)."""
    with cluster(kafka) as settings:
        return asyncio.run(_produce(settings, messages, repeats, seed))


PRODUCE_COLUMNS = [
    "case",
    "messages",
    "bare_messages_per_s",
    "kvldp_messages_per_s",
    "ratio",
    "target",
    "met",
]
