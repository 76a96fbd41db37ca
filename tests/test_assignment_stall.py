"""A worker takes over partitions that have no snapshot yet without stalling the group.

While ``on_partitions_assigned`` runs, aiokafka sends no heartbeats: a worker that waited
for each missing snapshot in turn (10 s each) was expelled from the group after the
6 s session timeout and the group rebalanced again. Here one worker joins a collection
of 12 partitions with an empty state topic, on Apache Kafka: it must own them all within
the session timeout, in one assignment, and stay in the same generation.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kvldp.aggregator.service import Aggregator
from kvldp.broker.apache_kafka import ApacheKafka

from support.pipeline import start, unique_collection, wait_for

#: the aggregator's consumer session timeout (kvldp.aggregator.consumer)
SESSION_TIMEOUT_S = 6.0


@pytest.mark.asyncio
async def test_twelve_partitions_without_snapshots_are_taken_in_one_generation(
    apache_kafka: ApacheKafka,
) -> None:
    collection = unique_collection("kvue", 5, partitions=12, windows=["all"])
    worker = Aggregator(
        collection,
        apache_kafka.bootstrap_servers,
        metrics_port=0,
        role="worker",
        checkpoint_interval=0.3,
        log=lambda _: None,
    )
    calls: list[tuple[float, float, int]] = []  # (start, end, partitions) of each assignment
    assigned = worker.assigned

    async def counted(partitions: list[Any]) -> None:
        began = time.monotonic()
        await assigned(partitions)
        calls.append((began, time.monotonic(), len(partitions)))

    worker.assigned = counted  # type: ignore[method-assign]
    stop, task = await start(worker)
    try:
        await wait_for(lambda: len(calls) > 0, 60, "the first assignment")
        began, ended, partitions = calls[0]
        assert partitions == 12
        assert ended - began < SESSION_TIMEOUT_S / 2, f"assignment took {ended - began:.1f} s"
        consumer = worker._consumer
        assert consumer is not None
        generation = consumer._coordinator.generation
        # two session timeouts later (a generation only grows): still the same member,
        # generation and assignment, and no other assignment
        deadline = time.monotonic() + 2 * SESSION_TIMEOUT_S
        await wait_for(lambda: task.done() or time.monotonic() > deadline, 3 * SESSION_TIMEOUT_S, "a while")
        assert not task.done()
        assert consumer._coordinator.generation == generation and len(calls) == 1
        assert len(consumer.assignment()) == 12
    finally:
        stop.set()
        await task
