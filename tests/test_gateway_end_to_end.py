"""Nothing lost, nothing doubled: thousands of devices report through ``kvldp gateway``
into the aggregator while Kafka stalls and the gateway is killed.

The parts are the real ones: an Apache Kafka node of the test's own (it is paused), ``kvldp
gateway`` and ``kvldp aggregate`` as child processes, and one SDK ``Collector`` per
device with ``endpoint=`` and the device's own token (keys from ``kvldp devices keygen``,
tokens signed by the code of ``kvldp devices token``). Every device reports a few times,
each report followed by ``flush()``. Meanwhile:

1. once a fifth of the reports are in, the broker is paused (SIGSTOP) until the gateway
   has answered 503 to many requests (each waited out the produce timeout), then resumed
   (SIGCONT);
2. once three fifths are in, the gateway is SIGKILLed with requests in flight and started
   again on the same port.

The devices retry on 503 and on broken connections, sending the same bytes. Afterwards
every device's ``flush()`` has returned, the reports topic holds under every device's
key as many distinct report ids as the reports the device believes it sent (some stored
more than once), and the aggregator folded exactly their number, counting every extra
copy as a duplicate.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.common.config.collection import Collection
from kvldp.common.messages.wire import WireFormat
from kvldp.gateway.signing import load_private_key, sign_token
from kvldp.producer.collector import Collector
from kvldp.producer.gateway_client import GatewayTransport
from kvldp.producer.retry_policy import RetryPolicy
from kvldp.reliability.processes import AggregatorProcess, scrape, total

from support import run_kvldp
from support.gateway_process import GatewayProcess
from support.pipeline import collection_toml, eventually, unique_collection, wait_for

AUDIENCE = "kvldp-e2e"
#: reports each device sends, one after the other
REPORTS_PER_DEVICE = 3
#: seconds Kafka has to acknowledge before the gateway answers 503
PRODUCE_TIMEOUT_S = 1.0
#: 503 answers the gateway must have given before the broker is resumed
UNAVAILABLE_ANSWERS = 200
#: de-duplication by report id (docs/reliability.md), set here rather than left to the
#: default. With 0 (off) this test fails: in a run of 2,000 devices (6,000 reports) the
#: aggregator folded 6,696, the 696 copies of resent reports counted as fresh ones.
DEDUP_HORIZON = 100_000
#: the SDK's backoff, shortened (its defaults are 0.5 s doubling to 30 s)
RETRY = RetryPolicy(initial_backoff=0.2, max_backoff=2.0, deadline=120.0)


@dataclass
class Progress:
    """What the devices have done so far, counted as they do it."""

    acknowledged: int = 0  # reports whose flush() returned
    sending: int = 0  # devices between a report() and the end of its flush()


@pytest.fixture
def own_kafka() -> Iterator[ApacheKafka]:
    """An Apache Kafka node of this test's own: pausing it must stall nothing else."""
    with ApacheKafka(1) as running:
        yield running


def allow_open_files(count: int) -> None:
    """Raise this process's open-file limit to ``count`` (one connection per device)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < count:
        if hard != resource.RLIM_INFINITY and hard < count:
            pytest.fail(f"the test needs {count} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))


async def device(
    collection: Collection, url: str, name: str, token: str, index: int, progress: Progress
) -> tuple[int, int]:
    """One device: ``REPORTS_PER_DEVICE`` reports, each flushed. Returns the number of
    reports it believes it sent (what its collector counted once flush() returned) and
    how many times its transport sent a message again."""
    collector = Collector(
        collection, endpoint=url, token=token, device_id=name, retry=RETRY, max_connections=1
    )
    async with collector:
        for r in range(REPORTS_PER_DEVICE):
            progress.sending += 1
            try:
                key = collection.keys[(index + r) % collection.d]
                await collector.report({key: float((index * 7 + r) % 11)})
                await collector.flush()
            finally:
                progress.sending -= 1
            progress.acknowledged += 1
    assert isinstance(collector.transport, GatewayTransport)
    return collector.sent_reports, collector.transport.retries


async def read_topic(bootstrap: str, topic: str, count: int, wire: WireFormat) -> dict[str, list[int]]:
    """Every record of ``topic`` (``count`` partitions), from the beginning to its end now:
    the report ids under each record key, one per record (a report stored twice is there
    twice)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    rids: dict[str, list[int]] = defaultdict(list)
    try:
        partitions = [TopicPartition(topic, p) for p in range(count)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        deadline = time.monotonic() + 60
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, "the reports topic could not be read to its end"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                decoded = wire.decode([r.value for r in records], [r.timestamp for r in records])
                assert not decoded.rejected and decoded.message.tolist() == list(range(len(records)))
                for record, rid in zip(records, decoded.rids.tolist(), strict=True):
                    assert record.key is not None
                    rids[record.key.decode()].append(int(rid))
    finally:
        await consumer.stop()
    return dict(rids)


async def gateway_unavailable_answers(gateway: GatewayProcess, collection: Collection) -> float:
    """The gateway's count of bodies Kafka did not acknowledge (exported from its start, 0
    until the first)."""
    samples = await asyncio.to_thread(scrape, gateway.port)
    return samples[("kvldp_gateway_produce_errors_total", (("collection", collection.name),))]


async def nothing_lost_nothing_doubled(kafka: ApacheKafka, workdir: Path, devices: int) -> dict[str, float]:
    started = time.monotonic()
    allow_open_files(devices + 1024)
    collection = unique_collection("kvue", d=6, dedup_horizon=DEDUP_HORIZON)
    toml = collection_toml(collection, workdir / "collection.toml")
    keygen = run_kvldp("devices", "keygen", "--out", str(workdir / "keys"))
    assert keygen.returncode == 0, keygen.stderr
    key, kid = load_private_key(workdir / "keys" / "private.pem")
    names = [f"phone-{i:05d}" for i in range(devices)]
    tokens = {name: sign_token(key, kid, name, AUDIENCE, 3600) for name in names}
    broker_pid = kafka.pids[1]
    bootstrap = kafka.bootstrap_servers

    aggregator = AggregatorProcess(toml, bootstrap, workdir).start()
    gateway = GatewayProcess(
        [toml],
        workdir / "keys" / "jwks.json",
        AUDIENCE,
        bootstrap,
        workdir,
        ["--produce-timeout", str(PRODUCE_TIMEOUT_S)],
    )
    figures: dict[str, float] = {"devices": devices}
    tasks: list[asyncio.Task[tuple[int, int]]] = []
    try:
        await aggregator.ready()  # it creates the collection's topics
        url = await gateway.start()
        progress = Progress()
        expected = devices * REPORTS_PER_DEVICE
        tasks = [
            asyncio.create_task(device(collection, url, name, tokens[name], i, progress))
            for i, name in enumerate(names)
        ]
        # 1. Kafka stalls: every request waits out the produce timeout and is answered 503
        await wait_for(lambda: progress.acknowledged >= expected // 5, 60, "a fifth of the reports")
        before = await gateway_unavailable_answers(gateway, collection)
        os.kill(broker_pid, signal.SIGSTOP)
        try:
            paused = time.monotonic()

            async def refused_enough() -> bool:
                answers = await gateway_unavailable_answers(gateway, collection)
                return answers - before >= UNAVAILABLE_ANSWERS

            await eventually(refused_enough, 60, f"{UNAVAILABLE_ANSWERS} answers 503 while Kafka is paused")
            # and it stays paused past the produce timeout of any request those answers
            # raced with: /readyz, asked now, gives Kafka 2 s at most (and fails with the
            # producer's request, after the produce timeout)
            async with aiohttp.ClientSession() as session, session.get(f"{url}/readyz") as response:
                assert response.status == 503
        finally:
            os.kill(broker_pid, signal.SIGCONT)
        figures["unavailable_before_pause"] = before
        figures["broker_paused_s"] = round(time.monotonic() - paused, 2)
        # 2. the gateway dies with requests in flight and comes back on the same port
        await wait_for(lambda: progress.acknowledged >= 3 * expected // 5, 60, "three fifths of the reports")
        figures["unavailable_answers"] = await gateway_unavailable_answers(gateway, collection)
        figures["devices_in_flight_at_kill"] = progress.sending
        assert progress.sending > 0
        gateway.kill()
        assert await gateway.start() == url
        # 3. every device's flush() returns; none is refused
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        assert not failures, (len(failures), failures[0])
        results = [o for o in outcomes if not isinstance(o, BaseException)]
        believed = {name: sent for name, (sent, _) in zip(names, results, strict=True)}
        assert set(believed.values()) == {REPORTS_PER_DEVICE}
        figures["messages_sent_again"] = sum(again for _, again in results)
        # 4. the topic holds every device's reports, some more than once
        stored = await read_topic(
            bootstrap,
            collection.reports_topic,
            collection.aggregate.partitions,
            WireFormat(collection),
        )
        assert sorted(stored) == names
        distinct = {name: len(set(rids)) for name, rids in stored.items()}
        assert distinct == believed, [n for n in names if distinct[n] != believed[n]][:10]
        records = sum(len(rids) for rids in stored.values())
        figures["records"] = records
        figures["duplicates_stored"] = records - expected
        # without copies, de-duplication would go untested
        assert records > expected, "no report reached Kafka twice: the scenario tested no resend"
        # 5. the aggregator folds each report once and drops every copy
        names_counted = ("kvldp_reports_total", "kvldp_duplicates_total", "kvldp_reports_rejected_total")

        async def all_read() -> bool:
            samples = await asyncio.to_thread(aggregator.samples)
            return sum(total(samples, n) for n in names_counted) >= records

        await eventually(all_read, 60, f"the aggregator to read {records} records")
        samples = await asyncio.to_thread(aggregator.samples)
        assert total(samples, "kvldp_reports_total") == expected
        assert total(samples, "kvldp_duplicates_total") == records - expected
        assert total(samples, "kvldp_reports_rejected_total") == 0
        assert gateway.stop() == 0
        assert aggregator.stop() == 0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        gateway.kill()
        aggregator.kill()
    figures["wall_s"] = round(time.monotonic() - started, 1)
    print(figures)  # the figures, with -s
    return figures


@pytest.mark.asyncio
async def test_nothing_lost_nothing_doubled(own_kafka: ApacheKafka, tmp_path: Path) -> None:
    await nothing_lost_nothing_doubled(own_kafka, tmp_path, devices=2_000)


@pytest.mark.full
@pytest.mark.asyncio
async def test_nothing_lost_nothing_doubled_full_size(own_kafka: ApacheKafka, tmp_path: Path) -> None:
    await nothing_lost_nothing_doubled(own_kafka, tmp_path, devices=5_000)
