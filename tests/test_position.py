"""Resets decided on the broker's evidence, and retention past the aggregator's position,
through a stand-in consumer (tests/support/stand_in.py): a high watermark that lags for
one fetch re-reads nothing, a recreated topic is still a reset, and offsets deleted
before they were read are counted once, in one log line and the metric, while folding
goes on from the log start."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from kvldp.aggregator.exporter import SnapshotCollector
from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.state import AggregatorState

from support.pipeline import unique_collection
from support.stand_in import Reports, StandInConsumer, aggregator, no_topic_admin

pytestmark = pytest.mark.asyncio

#: fetches that are plenty to read everything the tests put in a log (no livelock)
FETCH_BOUND = 60


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kvldp.aggregator.service.ensure_topics", no_topic_admin)


async def drain(agg: Aggregator, consumer: StandInConsumer) -> None:
    """Fetch until the aggregator has read the log to its end, within :data:`FETCH_BOUND` fetches."""
    for _ in range(FETCH_BOUND):
        await agg.consume_once()
        if consumer.position == consumer.end and agg.state.partition(0).next_offset == consumer.end:
            return
    raise AssertionError(f"not at the log end ({consumer.end}) after {FETCH_BOUND} fetches")


def setup(records: int, seed: int = 7) -> tuple[Aggregator, StandInConsumer, Reports, list[str]]:
    collection = unique_collection("kvue", 3, partitions=1)
    consumer = StandInConsumer(TopicPartition(collection.reports_topic, 0))
    reports = Reports(collection, seed)
    consumer.append(reports.make(records))
    lines: list[str] = []
    return aggregator(collection, consumer, lines), consumer, reports, lines


def lost_metric(agg: Aggregator) -> dict[str, float]:
    """``kvldp_offsets_lost_to_retention_total`` per partition, as the exporter collects it."""
    for family in SnapshotCollector(agg.collection, lambda: agg.state).collect():
        if family.name == "kvldp_offsets_lost_to_retention":
            return {s.labels["partition"]: s.value for s in family.samples if s.name.endswith("_total")}
    raise AssertionError("kvldp_offsets_lost_to_retention_total is not exported")


async def restart(agg: Aggregator, consumer: StandInConsumer, lines: list[str], saved: bytes) -> Aggregator:
    """A new aggregator on ``consumer`` from the checkpoint ``saved`` of ``agg``, assigned
    its partition and drained."""
    restarted = aggregator(agg.collection, consumer, lines)
    restarted.state = AggregatorState.from_bytes(agg.collection, saved)
    await restarted.assigned([consumer.tp])
    await drain(restarted, consumer)
    return restarted


async def test_a_high_watermark_that_lags_for_one_fetch_re_reads_nothing() -> None:
    agg, consumer, reports, lines = setup(1000)
    await agg.assigned([consumer.tp])
    await drain(agg, consumer)
    assert agg.state.reports_total == 1000
    consumer.dip(10)  # a new leader whose high watermark is still catching up
    await agg.consume_once()
    assert consumer.highwater(consumer.tp) == 10
    await agg.check_resets()
    consumer.append(reports.make(5))
    await drain(agg, consumer)
    state = agg.state.partition(0)
    assert (agg.state.reports_total, state.resets, state.next_offset) == (1005, 0, 1005)
    assert not any("reset" in line for line in lines), lines


async def test_a_recreated_topic_is_still_a_reset() -> None:
    agg, consumer, reports, lines = setup(50)
    await agg.assigned([consumer.tp])
    await drain(agg, consumer)
    consumer.recreate()
    consumer.append(reports.make(5))  # ends at 5, below the next offset 50
    await drain(agg, consumer)
    state = agg.state.partition(0)
    assert (agg.state.reports_total, state.resets, state.next_offset) == (55, 1, 5)
    assert sum("was reset" in line for line in lines) == 1, lines


async def test_a_recreated_topic_that_grew_past_the_checkpoint_is_a_reset_by_its_digest() -> None:
    agg, consumer, reports, lines = setup(50)
    await agg.assigned([consumer.tp])
    await drain(agg, consumer)
    saved = agg.state.to_bytes()
    consumer.recreate()
    consumer.append(reports.make(60))
    restarted = await restart(agg, consumer, lines, saved)
    state = restarted.state.partition(0)
    assert (restarted.state.reports_total, state.resets, state.next_offset) == (110, 1, 60)


async def test_offsets_deleted_before_they_were_read_are_counted_once_and_reading_goes_on() -> None:
    agg, consumer, reports, lines = setup(100)
    await agg.assigned([consumer.tp])
    await drain(agg, consumer)
    consumer.append(reports.make(200))
    consumer.delete_before(250)  # retention passed the next offset, 100
    seeks = consumer.seeks
    await drain(agg, consumer)
    state = agg.state.partition(0)
    assert (agg.state.reports_total, state.lost, state.next_offset, state.resets) == (150, 150, 300, 0)
    lost_lines = [line for line in lines if "deleted by retention" in line]
    assert len(lost_lines) == 1 and "150 offsets (100 to 249)" in lost_lines[0], lines
    assert consumer.seeks - seeks == 1
    assert lost_metric(agg) == {"0": 150.0}
    consumer.append(reports.make(3))
    await drain(agg, consumer)
    assert (agg.state.reports_total, agg.state.partition(0).lost) == (153, 150)


async def test_a_restart_after_retention_passed_the_checkpoint_counts_the_rest_once() -> None:
    agg, consumer, reports, lines = setup(100)
    await agg.assigned([consumer.tp])
    await drain(agg, consumer)
    saved = agg.state.to_bytes()
    consumer.append(reports.make(100))
    await drain(agg, consumer)  # folded up to 200, then crashed: the checkpoint says 100
    consumer.delete_before(130)
    restarted = await restart(agg, consumer, lines, saved)
    state = restarted.state.partition(0)
    assert (restarted.state.reports_total, state.lost, state.next_offset) == (170, 30, 200)
    assert lost_metric(restarted) == {"0": 30.0}
    assert AggregatorState.from_bytes(agg.collection, restarted.state.to_bytes()).partition(0).lost == 30
