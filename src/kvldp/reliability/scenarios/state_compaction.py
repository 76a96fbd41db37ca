"""The ``state_compaction`` scenario: on a real Apache Kafka cluster, the log cleaner
compacts the state topic while workers come and go, and a worker that joins afterwards
takes every partition over from the compacted topic alone.

Kafka compacts only closed segments, once the share of records not yet cleaned reaches
``min.cleanable.dirty.ratio`` (50% by default), and its cleaner wakes every
``log.cleaner.backoff.ms`` (15 s): left at that, a test would see no compaction at all.
The state topic is therefore created (as an operator may create it, before the
aggregator, which leaves an existing topic as it is) with kvldp's own settings plus
:data:`FAST_COMPACTION` — topic configurations, so only this topic is cleaned that
eagerly — and the cluster's cleaner wakes every 0.2 s
(:data:`~kvldp.reliability.cluster.CLUSTER_PROPERTIES`, a broker setting with no topic
form).

Compaction is proven, not assumed: reading the state topic from its start gives fewer
records than its end offset says were written (a compacted log keeps its offsets, with
gaps where older snapshots of a partition were). Then every worker is SIGKILLed and the
reports topic's records below each partition's snapshot are deleted (delete-records), so
the state folded so far exists only in the compacted state topic. A new worker joins,
takes every partition, and folds the second half of the canaries (one report per
statistics cell): every cell must hold exactly 1, and nothing may count as lost.
"""

from __future__ import annotations

import asyncio
import random
import time
from functools import partial
from pathlib import Path

import numpy as np
from aiokafka import TopicPartition
from aiokafka.admin import NewTopic, RecordsToDelete

from kvldp.aggregator.topics import wanted_topics
from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.common.config.collection import Collection
from kvldp.common.messages.wire import WireFormat
from kvldp.reliability.cluster import admin, count_records, log_bounds, topic_config
from kvldp.reliability.processes import AggregatorProcess
from kvldp.reliability.scenarios.checks import check_canaries, fold_parts
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.waits import folded, has_folded, joined, sent, until
from kvldp.reliability.scenarios.workers import ACTIONS, WorkerPool, merged_snapshots
from kvldp.reliability.traffic import Message, canaries, publish

#: the state topic's settings beside kvldp's own: a new segment once the active one holds
#: records 0.1 s older than the newest (Kafka cleans closed segments only), and a clean as
#: soon as 1% of the log is dirty
FAST_COMPACTION = {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}
#: seconds over which the first half of the canaries is published, per worker action
SECONDS_PER_ACTION = 3.0
#: seconds any one wait may take
WAIT_S = 120.0


async def state_compaction(
    cluster: ApacheKafka, workdir: Path, slots: int = 6_000, cycles: int = 4, batch: int = 10, seed: int = 9
) -> Outcome:
    """Three workers and an exporter; ``cycles`` worker actions (add, SIGTERM, SIGKILL)
    while half the canaries stream in and the state topic is compacted; then a worker
    that joins after compaction, alone, folds the other half."""
    out = Outcome("state_compaction")
    bootstrap = cluster.bootstrap_servers
    collection, path = make_collection(
        workdir, "compaction", "grr", slots, partitions=6, replication_factor=3, min_insync_replicas=2
    )
    state_topic = collection.state_topic
    await _create_topics(cluster, collection)
    applied = await topic_config(cluster, state_topic)
    out.check(
        all(applied.get(k) == v for k, v in {**FAST_COMPACTION, "cleanup.policy": "compact"}.items()),
        f"{state_topic} configured for compaction: {[(k, applied.get(k)) for k in FAST_COMPACTION]}",
    )
    messages = canaries(collection, batch, seed)
    cells = WireFormat(collection).fields[0].high
    half = len(messages) // 2
    first_half = sum(m.reports for m in messages[:half])
    rng = random.Random(seed)
    started = time.monotonic()
    exporter = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-exporter", role="exporter")
    await exporter.start().ready()
    pool = WorkerPool(path, bootstrap, workdir, collection.name, rng)
    for _ in range(3):
        await pool.add()
    # 1. workers come and go while the first half streams in
    actions, during = await _churn(out, pool, collection, messages[:half], cycles)
    out.check(
        await until(partial(has_folded, exporter, first_half), WAIT_S),
        f"the exporter merged the first {first_half} canaries",
    )
    # 2. the state topic as the next worker will read it: compacted
    written, left = await _compacted(out, bootstrap, state_topic)
    # 3. the state so far lives only in the compacted topic
    offsets = await _only_in_state_topic(out, cluster, collection, pool, first_half)
    # 4. a worker that joins now restores every partition from the compacted topic
    late = await pool.add()
    out.check(
        await until(partial(joined, late, collection.aggregate.partitions), WAIT_S),
        f"{late.name} took all {collection.aggregate.partitions} partitions",
    )
    await publish(bootstrap, collection.reports_topic, messages[half:])
    out.check(await until(partial(has_folded, exporter, cells), WAIT_S), f"the exporter merged all {cells}")
    exported = await folded(exporter)
    out.figures["seconds"] = round(time.monotonic() - started, 1)
    pool.stop(out)
    out.check(exporter.stop() == 0, "exporter stopped cleanly")
    await _check_merged(out, collection, bootstrap, cells, exported)
    out.figures.update(
        canaries=cells,
        actions=actions,
        workers_started=len(pool.workers),
        state_records_written_and_left_during_the_churn=during,
        state_records_written=written,
        state_records_left=left,
        reports_deleted_below=offsets,
    )
    return out


async def _churn(
    out: Outcome, pool: WorkerPool, collection: Collection, messages: list[Message], cycles: int
) -> tuple[list[str], list[tuple[int, int]]]:
    """Publish ``messages`` over ``cycles`` worker actions, each once another share of them
    has been sent, the last once the cleaner has compacted the state topic. Returns the
    actions and the state topic's (records written, records left) read between them."""
    bootstrap, state_topic = pool.bootstrap, collection.state_topic
    progress = [0]
    sending = asyncio.create_task(
        publish(
            bootstrap,
            collection.reports_topic,
            messages,
            rate=len(messages) / (cycles * SECONDS_PER_ACTION),
            progress=progress,
        )
    )
    actions = []
    during: list[tuple[int, int]] = []

    async def cleaned() -> bool:  # the cleaner has removed superseded snapshots
        during.append(await _written_and_left(bootstrap, state_topic))
        return during[-1][1] < during[-1][0]

    for step in range(cycles):
        share = len(messages) * (step + 1) // (cycles + 1)
        out.check(await until(partial(sent, progress, share), WAIT_S, poll=0.05), f"{share} canaries sent")
        if step == cycles - 1:  # the last action comes once the cleaner has compacted: between actions
            out.check(
                await until(cleaned, WAIT_S, poll=0.5),
                f"{state_topic} compacted while the workers came and went: (written, left) {during[-3:]}",
            )
        else:
            during.append(await _written_and_left(bootstrap, state_topic))
        actions.append(await pool.step(out, ACTIONS[step % len(ACTIONS)]))
    await sending
    return actions, during


async def _compacted(out: Outcome, bootstrap: str, state_topic: str) -> tuple[int, int]:
    """Wait until the state topic holds fewer records than were written to it; returns
    (records written, records left)."""
    last: list[tuple[int, int]] = []

    async def compacted() -> bool:
        last[:] = [await _written_and_left(bootstrap, state_topic)]
        return last[0][1] < last[0][0]

    out.check(await until(compacted, WAIT_S, poll=0.5), f"{state_topic} compacted: (written, left) {last}")
    return last[0]


async def _only_in_state_topic(
    out: Outcome, cluster: ApacheKafka, collection: Collection, pool: WorkerPool, folded_so_far: int
) -> dict[int, int]:
    """SIGKILL every worker and delete the reports below each partition's snapshot, so the
    state folded so far lives only in the state topic. Returns the snapshots' offsets."""
    bootstrap = cluster.bootstrap_servers
    for worker in pool.alive():
        worker.kill()
    snapshots = await merged_snapshots(collection, bootstrap)
    offsets = {p: s.next_offset for p, s in snapshots.partitions.items()}
    out.check(
        snapshots.reports_total == folded_so_far,
        f"snapshots hold {snapshots.reports_total} = {folded_so_far}",
    )
    await _delete_before(cluster, collection, offsets)
    starts = {p: start for p, (start, _) in (await log_bounds(bootstrap, collection.reports_topic)).items()}
    out.check(
        all(starts[p] == o for p, o in offsets.items()),
        f"the reports below the snapshots deleted: log starts {starts}, snapshots at {offsets}",
    )
    return offsets


async def _check_merged(
    out: Outcome, collection: Collection, bootstrap: str, cells: int, exported: float
) -> None:
    """The state topic's snapshots, merged, hold every canary once (as the exporter
    counted, ``exported``), count no offset as lost and read every partition to its end."""
    merged = await merged_snapshots(collection, bootstrap)
    check_canaries(out, merged, cells)
    out.check(exported == cells, f"exported kvldp_reports_total {exported} = {cells}")
    out.check(
        merged.all_stats() == fold_parts(collection, [{"y": np.arange(cells)}]),
        "statistics equal the independent fold of the canaries",
    )
    lost = {p: s.lost for p, s in merged.partitions.items() if s.lost}
    out.check(not lost, f"no offset counted as lost to retention: {lost}")
    ends = {p: end for p, (_, end) in (await log_bounds(bootstrap, collection.reports_topic)).items()}
    got = {p: s.next_offset for p, s in merged.partitions.items()}
    out.check(got == ends, f"every partition read to its end: {got} = {ends}")


async def _written_and_left(bootstrap: str, topic: str) -> tuple[int, int]:
    """The records ever written to ``topic`` (its offsets) and those it still holds."""
    written = sum(end - start for start, end in (await log_bounds(bootstrap, topic)).values())
    return written, sum((await count_records(bootstrap, topic)).values())


async def _create_topics(cluster: ApacheKafka, collection: Collection) -> None:
    """The collection's topics as the aggregator would create them, the state topic with
    :data:`FAST_COMPACTION` too."""
    topics = [
        NewTopic(
            t.name,
            t.num_partitions,
            t.replication_factor,
            topic_configs={**t.topic_configs, **FAST_COMPACTION},
        )
        if t.name == collection.state_topic
        else t
        for t in wanted_topics(collection, state=True)
    ]
    async with admin(cluster) as client:
        response = await client.create_topics(topics)
    errors = [(name, code, message) for name, code, message in response.topic_errors if code]
    if errors:
        raise RuntimeError(f"creating the topics failed: {errors}")


async def _delete_before(cluster: ApacheKafka, collection: Collection, offsets: dict[int, int]) -> None:
    """Delete every record of the reports topic below ``offsets`` (per partition)."""
    wanted = {
        TopicPartition(collection.reports_topic, p): RecordsToDelete(before_offset=o)
        for p, o in offsets.items()
        if o > 0
    }
    async with admin(cluster) as client:
        await client.delete_records(wanted, timeout_ms=10_000)
