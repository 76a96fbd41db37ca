"""What a worker never publishes, and how checkpoints never overlap: a partition given up
(or still being taken over) has no state on this worker, and an empty snapshot of it
would let compaction drop the real one; a cancelled checkpoint finishes its file writes
before the next one starts; a partition whose snapshot is late is waited for, not
started afresh. Driven without Kafka: stand-ins for the state topic and its follower."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError

from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.state import CheckpointStore
from kvldp.aggregator.statetopic import Entry
from kvldp.common.config.collection import Collection

from support.pipeline import unique_collection


class StateTopicStandIn:
    """Records what would be published; fails while ``down``."""

    def __init__(self) -> None:
        self.published: list[list[int]] = []
        self.down = False

    async def publish(self, state: Any, partitions: set[int], held: Any = None) -> None:
        if self.down:
            raise KafkaConnectionError("the cluster is away")
        self.published.append(sorted(partitions))


def worker(collection: Collection, lines: list[str]) -> tuple[Aggregator, StateTopicStandIn]:
    agg = Aggregator(collection, "127.0.0.1:1", metrics_port=0, role="worker", log=lines.append)
    topic = StateTopicStandIn()
    agg.snapshots = topic  # type: ignore[assignment]
    return agg, topic


@pytest.mark.asyncio
async def test_a_partition_given_up_or_loading_is_never_published() -> None:
    collection = unique_collection("kvue", 3, partitions=3)
    agg, topic = worker(collection, [])
    topic_name = collection.reports_topic
    for p in (0, 1):
        agg.state.partition(p).next_offset = 10
    agg._dirty = {0, 1}
    topic.down = True  # the snapshot published on revocation does not get through
    await agg.revoked([TopicPartition(topic_name, 0)])
    assert 0 not in agg.state.partitions
    topic.down = False
    agg._loading = {2}  # being taken over: something asked for its state meanwhile
    agg.state.partition(2)
    agg._dirty |= {2}
    await agg.checkpoint()
    assert topic.published == [[1]]  # neither 0 (given up) nor 2 (loading)


@pytest.mark.asyncio
async def test_a_cancelled_checkpoint_finishes_writing_before_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    collection = unique_collection("kvue", 3, partitions=1, max_reports_per_device=5)
    lines: list[str] = []
    agg = Aggregator(collection, "127.0.0.1:1", metrics_port=0, state_dir=tmp_path, log=lines.append)
    assert agg.store is not None
    store, real = agg.store, CheckpointStore.save
    writing, overlaps = threading.Lock(), []

    def slow_save(self: CheckpointStore, checkpoint: Any) -> None:
        if not writing.acquire(blocking=False):
            overlaps.append(time.monotonic())
            writing.acquire()
        try:
            time.sleep(0.2)
            real(self, checkpoint)
        finally:
            writing.release()

    monkeypatch.setattr(CheckpointStore, "save", slow_save)
    part = agg.state.partition(0)
    for k in range(2):
        part.devices.add(np.arange(1000 * k, 1000 * (k + 1), dtype=np.uint64))
        part.chain.touch(np.arange(1000 * k, 1000 * (k + 1), dtype=np.int64))
        part.next_offset = 100 * (k + 1)
        agg._dirty = {0}
        first = asyncio.create_task(agg.checkpoint())
        await asyncio.sleep(0.05)  # the first is writing
        first.cancel()
        part.chain.lost()  # the next one is a new base: it removes the files of the chain
        part.next_offset += 1
        agg._dirty = {0}
        await agg.checkpoint()
        assert first.cancelled()
    assert not overlaps
    loaded = store.load()
    assert (
        loaded is not None
        and loaded.partition(0).next_offset == 201
        and len(loaded.partition(0).devices) == 2000
    )


class FollowerStandIn:
    """A state-topic follower whose reads end after ``rounds`` calls of :meth:`caught_up`,
    having found ``entry`` (or nothing) on the way."""

    def __init__(self, rounds: int, entry: Entry | None) -> None:
        self.snapshots: dict[int, Entry] = {}
        self.rounds, self.entry = rounds, entry

    async def caught_up(self, timeout: float) -> bool:
        self.rounds -= 1
        if self.rounds <= 0:
            if self.entry is not None:
                self.snapshots[0] = self.entry
            return True
        return False


@pytest.mark.asyncio
async def test_a_late_snapshot_is_waited_for_and_a_missing_one_said() -> None:
    collection = unique_collection("kvue", 3, partitions=2)
    lines: list[str] = []
    agg, _ = worker(collection, lines)
    tp, other = (TopicPartition(collection.reports_topic, p) for p in (0, 1))
    entry = Entry((0, 50), b"snapshot", 0)
    late = FollowerStandIn(3, entry)
    assert await agg._no_snapshots(late, {tp: 50}) == {tp: entry}  # type: ignore[arg-type]
    assert late.rounds == 0  # it waited until the state topic was read to its end
    assert (
        lines[-1]
        == f"partitions 0 (offset 50 committed): waiting for their snapshots in {collection.state_topic}"
    )
    # two partitions, neither on the topic: one wait, one line for both
    none = FollowerStandIn(2, None)
    assert await agg._no_snapshots(none, {tp: 50, other: 7}) == {tp: None, other: None}  # type: ignore[arg-type]
    assert none.rounds == 0
    assert lines[-2:] == [
        f"partitions 0 (offset 50 committed), 1 (offset 7 committed): waiting for their snapshots in "
        f"{collection.state_topic}",
        f"partitions 0, 1: {collection.state_topic} holds no snapshot of them; folding them afresh from "
        "their first offsets",
    ]
