"""The Kafka watch of a running service and its bounded stop, without a cluster: the
outage is said once, after :data:`DOWN_AFTER_S` of silence and not before, and once more
when the cluster answers; transient failures are said once per outage; the gauge and
counter follow. Closing clients keeps one deadline, takes aiokafka's leaked cancellation
for a stop, and names what could not close."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, TopicAuthorizationFailedError
from prometheus_client import CollectorRegistry

from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.reachability import DOWN_AFTER_S, Reachability, transient
from kvldp.kafka.shutdown import LAST_CHANCE_S, close_within


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watch() -> tuple[Reachability, list[str], Clock, CollectorRegistry]:
    lines: list[str] = []
    clock = Clock()
    registry = CollectorRegistry()
    kafka = KafkaConfig.plaintext("127.0.0.1:9")
    return Reachability(kafka, "worker", "waiting", lines.append, registry, clock), lines, clock, registry


def value(registry: CollectorRegistry, name: str) -> float:
    got = registry.get_sample_value(name)
    assert got is not None, name
    return got


def test_an_outage_is_said_once_after_the_silence_and_its_end_once() -> None:
    reach, lines, clock, registry = watch()
    for _ in range(int(DOWN_AFTER_S)):  # failures for less than DOWN_AFTER_S: nothing said
        clock.now += 0.99
        reach.observe("connection refused")
    assert reach.up and lines == [] and value(registry, "kvldp_kafka_reachable") == 1
    clock.now += 0.5
    for _ in range(5):
        reach.observe("connection refused")
        clock.now += 1
    assert not reach.up and len(lines) == 1
    assert (
        lines[0]
        == "worker: Kafka at 127.0.0.1:9 (PLAINTEXT) unreachable for 3 s (connection refused); waiting"
    )
    assert value(registry, "kvldp_kafka_reachable") == 0
    assert value(registry, "kvldp_kafka_outages_total") == 1
    reach.observe(None)
    reach.observe(None)
    assert reach.up and len(lines) == 2 and "answers again" in lines[1]
    assert value(registry, "kvldp_kafka_reachable") == 1
    clock.now += DOWN_AFTER_S
    reach.observe("connection refused")
    assert len(lines) == 3 and value(registry, "kvldp_kafka_outages_total") == 2


def test_a_failure_is_said_once_per_outage() -> None:
    reach, lines, clock, _ = watch()
    for _ in range(3):
        reach.failed("publishing snapshots", NodeNotReadyError("node 1 not ready"))
    assert lines == [
        "worker: publishing snapshots failed (NodeNotReadyError: node 1 not ready); trying again"
    ]
    clock.now += DOWN_AFTER_S
    reach.observe("refused")
    reach.observe(None)  # the outage ended: the next failure is news again
    reach.failed("publishing snapshots", NodeNotReadyError("node 1 not ready"))
    assert len(lines) == 4


def test_transient_errors_are_told_from_refusals() -> None:
    assert transient(KafkaConnectionError("lost")) and transient(TimeoutError())
    assert not transient(TopicAuthorizationFailedError("kvldp.x.reports"))
    assert not transient(ValueError("bad"))


class Hangs:
    async def stop(self) -> None:
        await asyncio.Event().wait()


class LeaksCancellation:
    """As aiokafka's consumer does: stop() re-raises the cancellation of its own task."""

    async def stop(self) -> None:
        inner = asyncio.create_task(asyncio.sleep(10))
        await asyncio.sleep(0)
        inner.cancel()
        await inner


class Closes:
    closed = False

    async def close(self) -> None:
        self.closed = True


@pytest.mark.asyncio
async def test_clients_close_in_order_within_one_deadline() -> None:
    """The leaked cancellation is a stop; the first hanging client is cut at the deadline,
    the second after its last chance; a client with nothing to wait for still closes."""
    loop = asyncio.get_running_loop()
    last = Closes()
    started = loop.time()
    unclean = await close_within([LeaksCancellation(), None, Hangs(), Hangs(), last], started + 0.3)
    assert unclean == ["Hangs", "Hangs"]
    assert last.closed
    assert loop.time() - started >= 0.3 + LAST_CHANCE_S


@pytest.mark.asyncio
async def test_a_cancelled_stop_is_not_swallowed() -> None:
    task = asyncio.create_task(close_within([Hangs()], asyncio.get_running_loop().time() + 60))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
