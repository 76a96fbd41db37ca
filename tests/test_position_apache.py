"""Retention past the checkpoint on a real Apache Kafka broker (the ``apache_kafka``
fixture): the aggregator stops, records are deleted past its position (delete-records,
which moves the log start at once where retention would take its time), and the
restarted aggregator folds every remaining record once and counts the deleted offsets
it had not read in ``kvldp_offsets_lost_to_retention_total`` and one log line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from kvldp.aggregator.service import Aggregator
from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.common.config.collection import Collection
from kvldp.producer.collector import Collector

from support.pipeline import scrape, start, unique_collection, wait_for

pytestmark = pytest.mark.asyncio


async def send(collection: Collection, bootstrap: str, reports: int, first_device: int) -> None:
    """``reports`` reports, one per message (so one per offset), from distinct devices."""
    devices = [f"device-{first_device + i}" for i in range(reports)]
    async with Collector(collection, bootstrap) as sdk:
        await sdk.report_many([{"k0": 1.0}] * reports, devices)


async def delete_before(bootstrap: str, tp: TopicPartition, offset: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        low = await admin.delete_records({tp: RecordsToDelete(before_offset=offset)}, timeout_ms=10_000)
        assert low[tp] == offset
    finally:
        await admin.close()


async def test_a_restart_after_records_were_deleted_past_its_position(
    apache_kafka: ApacheKafka, tmp_path: Path
) -> None:
    bootstrap = apache_kafka.bootstrap_servers
    collection = unique_collection("kvue", 3, partitions=1)
    tp = TopicPartition(collection.reports_topic, 0)
    lines: list[str] = []

    def aggregator() -> Aggregator:
        return Aggregator(
            collection, bootstrap, metrics_port=0, state_dir=tmp_path, log=lines.append, refit_interval=0.5
        )

    first = aggregator()
    stop, task = await start(first)
    try:
        await send(collection, bootstrap, 100, 0)
        await wait_for(lambda: first.state.reports_total == 100, 60, "the first 100 reports")
    finally:
        stop.set()
        await task
    assert first.state.partition(0).next_offset == 100
    await send(collection, bootstrap, 100, 100)  # offsets 100..199, read by nobody yet
    await delete_before(bootstrap, tp, 140)
    second = aggregator()
    stop, task = await start(second)
    try:
        await wait_for(lambda: second.state.reports_total == 160, 60, "the 60 reports left in the log")
        samples = await asyncio.to_thread(scrape, second.bound_port)
        await send(collection, bootstrap, 5, 200)
        await wait_for(lambda: second.state.reports_total == 165, 60, "5 more")
    finally:
        stop.set()
        await task
    state = second.state.partition(0)
    assert (second.state.reports_total, state.lost, state.next_offset, state.resets) == (165, 40, 205, 0)
    key = ("kvldp_offsets_lost_to_retention_total", (("collection", collection.name), ("partition", "0")))
    assert samples[key] == 40
    lost_lines = [line for line in lines if "deleted by retention" in line]
    assert len(lost_lines) == 1 and "40 offsets (100 to 139)" in lost_lines[0], lines
