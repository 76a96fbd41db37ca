"""Helpers of the streaming tests: collections, waiting, and reading an interactive
collection's control topic by offset (metrics parsing and the replay oracle come from
:mod:`kvldp.reliability`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import collection_toml as to_toml
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.messages.control_record import Control, InvalidControl, control_topic, decode_control
from kvldp.kafka.topic_partitions import topic_partitions
from kvldp.reliability.oracle import replay_oracle as oracle
from kvldp.reliability.processes import scrape

__all__ = [
    "collection_toml",
    "control_end",
    "control_published",
    "eventually",
    "oracle",
    "records_in",
    "scrape",
    "start",
    "topic_size",
    "unique_collection",
    "wait_for",
]

_counter = 0


def unique_collection(
    mechanism: str = "kvue",
    d: int = 6,
    privacy: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
    **aggregate: Any,
) -> Collection:
    """A collection with a name no other test uses (topics and consumer groups are per name),
    with an optional ``[privacy]`` table and mechanism ``params``."""
    global _counter
    _counter += 1
    table: dict[str, Any] = {
        "name": f"t{_counter}-{mechanism}-{int(time.time() * 1000) % 100000}",
        "mechanism": mechanism,
        "epsilon": 2.0,
        "key_count": d,
        "value_range": [0.0, 10.0],
        "aggregate": {
            "refit_interval_s": 0.5,
            "estimators": ["unbiased", "em"],
            "windows": ["5m", "all"],
            **aggregate,
        },
        **({"privacy": privacy} if privacy else {}),
        **({"params": params} if params else {}),
    }
    return parse_collection(table)


def collection_toml(collection: Collection, path: Path) -> Path:
    """Write a collection as TOML (for the CLI subprocess tests)."""
    path.write_text(to_toml(collection))
    return path


async def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)


class Runnable(Protocol):
    """An aggregator or an exporter: runs until its stop event, binds a metrics port."""

    bound_port: int | None

    async def run(self, stop: asyncio.Event) -> None: ...


async def start(runner: Runnable) -> tuple[asyncio.Event, asyncio.Task[None]]:
    """Start an in-process aggregator or exporter; return its stop event and task."""
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    await wait_for(lambda: runner.bound_port is not None or task.done(), 30, "the aggregator to start")
    if task.done():
        await task
    return stop, task


async def eventually(fetch: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await fetch():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.2)


async def control_end(bootstrap: str, collection: Collection) -> int:
    """The end offset of ``collection``'s control topic: the offset its next record gets."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(control_topic(collection), 0)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        return int(await consumer.position(tp))
    finally:
        await consumer.stop()


async def control_published(bootstrap: str, collection: Collection, start: int, timeout: float) -> Control:
    """The first valid control record of ``collection`` at offset ``start`` or later: one
    published after ``start`` was taken as :func:`control_end`, never an older one that the
    compacted topic still holds."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(control_topic(collection), 0)
    deadline = time.monotonic() + timeout
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        while time.monotonic() < deadline:
            for record in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                try:
                    return decode_control(collection, record.value)
                except InvalidControl:
                    continue
    finally:
        await consumer.stop()
    raise AssertionError(f"no control record at offset {start} or later of {tp.topic} within {timeout}s")


async def topic_size(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds, as its partitions' end offsets say (0 before it
    exists). The embedded broker's end offsets can lag behind what it stores: enough to
    see that records arrived, not to count them (:func:`records_in`)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic) or await topic_partitions(bootstrap, topic)
        if not partitions:
            return 0
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return int(sum(ends.values()))
    finally:
        await consumer.stop()


async def records_in(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds, counted exactly: an empty marker record appended to
    each partition gets the offset of its partition's end. Adds those markers, so call it
    once, when nothing else writes to the topic any more."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        partitions = await producer.partitions_for(topic)
        marks = [await producer.send_and_wait(topic, b"", partition=p) for p in sorted(partitions)]
        return sum(mark.offset for mark in marks)
    finally:
        await producer.stop()
