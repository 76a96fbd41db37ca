"""Forged unary reports through the broker and the aggregator: refused as
``implausible_report`` to the dead-letter topic, their devices counted in
``kvldp_implausible_devices``, the estimates built on the genuine reports alone."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from kvldp.aggregator.service import Aggregator
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.messages.wire import WireFormat
from kvldp.producer.collector import Collector
from kvldp.sim import simulate

from support.pipeline import scrape, start, unique_collection, wait_for

pytestmark = pytest.mark.asyncio


async def test_forged_pckv_ue_reports_are_refused_counted_and_ignored(broker: EmbeddedBroker) -> None:
    collection = unique_collection("pckv_ue", 20)
    mech = collection.mechanism
    rule = mech.plausibility_rule()
    assert rule is not None and rule.active
    n, forgers, each = 2000, 4, 3
    users = simulate.simulate(collection, "gaussian", n, seed=5)
    agg = Aggregator(
        collection, broker.bootstrap_servers, metrics_port=0, refit_interval=0.5, log=lambda _: None
    )
    stop, task = await start(agg)
    wire = WireFormat(collection)
    every_key = bytes([0xFF, 0xFF, 0x0F])  # the pos bit of all 20 keys (M2GA on every key)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await producer.start()
    try:
        async with Collector(collection, broker.bootstrap_servers, rng=np.random.default_rng(5)) as sdk:
            await sdk.publish_users(users, simulate.device_ids(n), batch_size=1)
        for f in range(forgers):
            for _ in range(each):
                value = wire.encode_report({"pos": every_key, "neg": bytes(3)}, ts_ms=None)
                await producer.send_and_wait(collection.reports_topic, value, key=f"forger-{f}".encode())
        await wait_for(lambda: agg.state.reports_total == n, 60, "every genuine report folded")
        await wait_for(
            lambda: agg.state.rejected_totals()["implausible_report"] == forgers * each,
            60,
            "the forged refused",
        )
        assert agg.state.rejected_totals() == {"implausible_report": forgers * each}
        assert agg.state.all_stats().n_reports == n
        assert agg.state.implausible_devices == forgers
        assert agg.bound_port is not None
        samples = await asyncio.to_thread(scrape, agg.bound_port)
        labels = (("collection", collection.name),)
        assert samples[("kvldp_implausible_devices", labels)] == forgers
        assert samples[("kvldp_reports_total", labels)] == n
        rejected = (("collection", collection.name), ("reason", "implausible_report"))
        assert samples[("kvldp_reports_rejected_total", rejected)] == forgers * each
        consumer = AIOKafkaConsumer(
            collection.dlq_topic, bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            letters = []
            for _ in range(20):
                records = await consumer.getmany(timeout_ms=1000)
                letters += [r for batch in records.values() for r in batch]
                if len(letters) >= forgers * each:
                    break
        finally:
            await consumer.stop()
        assert len(letters) == forgers * each
        for letter in letters:
            headers = dict(letter.headers)
            assert headers["reason"] == b"implausible_report"
            assert b"20 of 20 keys non-zero" in headers["detail"]
        assert sorted({letter.key for letter in letters}) == [f"forger-{f}".encode() for f in range(forgers)]
    finally:
        await producer.stop()
        stop.set()
        await task
