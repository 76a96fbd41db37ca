"""PrivKVM live against the embedded broker: rounds over the control topic, a simulated
fleet following it, the in-process reference, dead letters off the round, and a SIGKILL
of the aggregator between rounds."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.state import CheckpointStore
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.common.mechanisms.privkvm_rounds import means_digest
from kvldp.common.messages.control_record import Control, control_topic
from kvldp.common.messages.wire import WireFormat
from kvldp.producer.collector import Collector
from kvldp.producer.control_follower import ControlFollower
from kvldp.producer.device_state import DeviceState, ReportStatus
from kvldp.reliability.processes import AggregatorProcess, scrape
from kvldp.sim import simulate
from kvldp.sim.round_fleet import RoundFleet

from support import multi_key_population
from support.pipeline import (
    collection_toml,
    control_end,
    control_published,
    start,
    unique_collection,
    wait_for,
)

pytestmark = pytest.mark.asyncio


def rounds_collection(users: int, rounds: int = 3, d: int = 5, **params: Any) -> Collection:
    base = unique_collection("privkvm", d=d)
    return parse_collection(
        {
            "name": base.name,
            "mechanism": "privkvm",
            "epsilon": 4.0,
            "key_count": d,
            "value_range": [0.0, 10.0],
            "params": {"rounds": rounds, "round_period": "1s", "round_min_reports": users, **params},
            "aggregate": {
                "refit_interval_s": 0.5,
                "estimators": ["unbiased", "paper", "em"],
                "partitions": 2,
            },
        }
    )


async def test_three_streamed_rounds_equal_the_in_process_reference_and_cover_the_truth(
    broker: EmbeddedBroker,
) -> None:
    n, seed = 20_000, 11
    c = rounds_collection(n, d=12)
    users = multi_key_population(n, c.d, np.random.default_rng(7))
    ids = simulate.device_ids(n)
    aggregator = Aggregator(
        c, broker.bootstrap_servers, metrics_port=0, refit_interval=0.5, log=lambda _: None
    )
    stop, task = await start(aggregator)
    try:
        async with Collector(c, broker.bootstrap_servers, rng=np.random.default_rng(seed)) as sdk:
            reports = await asyncio.wait_for(RoundFleet(users, ids).run(sdk), 120)
            spent = [sdk.privacy_spent(device) for device in ids[:50]]
        assert [r.round for r in reports] == [0, 1, 2] and all(r.summary.sent == n for r in reports)
        rounds = aggregator.state.rounds
        assert rounds is not None
        await wait_for(lambda: rounds.complete, 30, "the last round to close")
        # the streamed rounds are the in-process rounds, report for report
        reference = c.mechanism.collect(users, np.random.default_rng(seed))
        assert aggregator.state.all_stats() == reference
        published = c.mechanism.published_means(reference.arrays["counts"].astype(np.float64))
        np.testing.assert_array_equal(np.array(rounds.published), published)
        # estimates after the last round, against the truth within 5 exported standard errors
        await aggregator.exporter.refresh(aggregator.state)
        snapshot = aggregator.exporter.snapshot
        assert snapshot is not None
        truth = simulate.truth(c, users)["mean"]
        for estimator in ("unbiased", "em"):
            e = snapshot.fits["all"].estimates[estimator]
            mean, se = c.raw_mean(e.mean), c.raw_scale(e.mean_stderr)
            for k, key in enumerate(c.keys):
                assert abs(mean[k] - truth[key]) < 5 * se[k], (estimator, key, mean[k], truth[key], se[k])
        # the final estimates are the in-process ones, intervals included, and their 95%
        # intervals hold the truth: of the d = 12 frequencies or means, more than 3 misses
        # has probability 0.0022 at 95% coverage (fixed seeds: the outcome is deterministic)
        expected_m = np.array([truth[key] for key in c.keys])
        true_f = users.truth()[0]
        for estimator in ("unbiased", "paper", "em"):
            e = snapshot.fits["all"].estimates[estimator]
            offline = c.mechanism.estimate(reference, estimator)
            np.testing.assert_allclose(e.mean_interval, offline.mean_interval, atol=1e-12)
            np.testing.assert_allclose(e.mean_stderr, offline.mean_stderr, atol=1e-12)
            lo, hi = (c.raw_mean(b) for b in e.mean_interval)
            assert np.all(np.isfinite(e.mean)) and np.all(e.mean_stderr > 0), estimator
            misses = int(np.sum((expected_m < lo) | (expected_m > hi)))
            assert misses <= 3, (estimator, lo, hi, expected_m)
            f_lo, f_hi = e.frequency_interval
            assert int(np.sum((true_f < f_lo) | (true_f > f_hi))) <= 3, (estimator, f_lo, f_hi, true_f)
        samples = await asyncio.to_thread(scrape, aggregator.bound_port or 0)
        name = ("collection", c.name)
        assert samples[("kvldp_round", (name,))] == 3 and samples[("kvldp_rounds_complete", (name,))] == 1
        for r in ("1", "2", "3"):
            assert samples[("kvldp_round_reports", (name, ("round", r)))] == n
        assert spent == pytest.approx([c.epsilon] * 50)
        assert (
            np.allclose(aggregator.state.device_spent(), c.epsilon)
            and aggregator.state.device_spent().size == n
        )
        assert samples[("kvldp_device_privacy_spent_epsilon_count", (name,))] == n
    finally:
        stop.set()
        await task


async def test_reports_off_the_open_round_go_to_the_dead_letter_topic_with_a_reason(
    broker: EmbeddedBroker,
) -> None:
    c = rounds_collection(1000)  # round 1 stays open
    wire = WireFormat(c)
    aggregator = Aggregator(
        c, broker.bootstrap_servers, metrics_port=0, refit_interval=0.5, log=lambda _: None
    )
    stop, task = await start(aggregator)
    md = means_digest(0, np.zeros(c.d))
    sends = [
        (b"a", {"r": 0, "md": md, "j": 1, "s": 2}),
        (b"a", {"r": 0, "md": md, "j": 2, "s": 0}),  # a's second report in round 1
        (b"b", {"r": 0, "md": md ^ 1, "j": 1, "s": 2}),  # built on other means
        (b"c", {"r": 1, "md": md, "j": 1, "s": 2}),  # round 2 is not open
    ]
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await producer.start()
    try:
        for key, report in sends:
            await producer.send_and_wait(
                c.reports_topic, wire.encode_report(report, ts_ms=None), key=key, partition=0
            )
        await wait_for(
            lambda: sum(aggregator.state.rejected_totals().values()) == 3, 30, "three dead letters"
        )
        assert aggregator.state.rejected_totals() == {
            "budget_exceeded": 1,
            "round_mismatch": 1,
            "stale_round": 1,
        }
        assert aggregator.state.rounds is not None and aggregator.state.rounds.open_reports == 1
        consumer = AIOKafkaConsumer(
            c.dlq_topic, bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            records = await consumer.getmany(timeout_ms=5000)
            letters = [r for batch in records.values() for r in batch]
        finally:
            await consumer.stop()
        assert sorted(dict(r.headers)["reason"] for r in letters) == [
            b"budget_exceeded",
            b"round_mismatch",
            b"stale_round",
        ]
    finally:
        await producer.stop()
        stop.set()
        await task


async def test_a_sigkill_between_rounds_neither_repeats_nor_skips_a_round(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    n, seed = 3000, 5
    c = rounds_collection(n)
    path = collection_toml(c, tmp_path / "c.toml")
    users = simulate.simulate(c, "gaussian", n, 8)
    ids = simulate.device_ids(n)
    state_dir = tmp_path / "state"
    process = AggregatorProcess(
        path, broker.bootstrap_servers, tmp_path, state_dir=state_dir, refit_interval=0.5
    )
    await process.start().ready()
    try:
        async with Collector(c, broker.bootstrap_servers, rng=np.random.default_rng(seed)) as sdk:
            assert sdk.control is not None
            first = await sdk.control.wait(lambda control: control.round == 0, timeout=30)
            await sdk.publish_round(users, ids, first)
            await sdk.flush()
            opened = await sdk.control.wait(lambda control: control.round == 1, timeout=30)
            process.kill()  # between round 1's close and any report of round 2
            # the control topic is compacted and keyed: round 1's record stays readable, so
            # only a record past the end offset of the killed aggregator's topic proves that
            # the restarted one announced its round again
            end = await control_end(broker.bootstrap_servers, c)
            await process.start().ready()
            again = await control_published(broker.bootstrap_servers, c, end, timeout=30)
            assert (again.round, again.means_digest, again.complete) == (1, opened.means_digest, False)
            reports = await asyncio.wait_for(RoundFleet(users, ids).run(sdk), 60)
            assert [r.round for r in reports] == [1, 2]
        saved = CheckpointStore(state_dir, c)
        await wait_for(
            lambda: (s := saved.load()) is not None and s.rounds is not None and s.rounds.complete,
            30,
            "the last round",
        )
        assert process.stop() == 0
        state = saved.load()
        assert state is not None and state.rounds is not None and state.rounds.closed == 3
        assert state.all_stats() == c.mechanism.collect(users, np.random.default_rng(seed))
        assert "round 1 closed" in process.log_tail(50)
    finally:
        if process.alive():
            process.kill()


async def test_devices_ignore_a_corrupt_control_record_and_wait_for_a_valid_one(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    c = rounds_collection(10)
    other = rounds_collection(10)
    topic = control_topic(c)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    follower = ControlFollower(c, broker.bootstrap_servers)
    await producer.start()
    try:
        valid = Control.build(c, 0, np.zeros(c.d), complete=False)
        for value in (
            b"\x93garbage",
            Control.build(other, 1, np.zeros(c.d), False).to_bytes(),
            valid.to_bytes(),
        ):
            await producer.send_and_wait(topic, value, key=c.name.encode(), partition=0)
        with caplog.at_level(logging.WARNING, logger="kvldp.producer"):
            await follower.start()
            seen = await follower.wait(timeout=30)
            assert seen.to_bytes() == valid.to_bytes()
            await producer.send_and_wait(topic, b"\x00", key=c.name.encode(), partition=0)
            newer = Control.build(c, 1, np.full(c.d, 0.5), complete=False)
            await producer.send_and_wait(topic, newer.to_bytes(), key=c.name.encode(), partition=0)
            assert (
                await follower.wait(lambda control: control.round == 1, timeout=30)
            ).to_bytes() == newer.to_bytes()
        ignored = [r.getMessage() for r in caplog.records if "ignoring record" in r.getMessage()]
        assert len(ignored) == 3 and "not msgpack" in ignored[0] and "of collection" in ignored[1]
    finally:
        await follower.stop()
        await producer.stop()


async def test_a_device_reports_once_per_round_through_the_sdk(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    c = rounds_collection(1000)  # round 1 stays open
    mechanism = c.mechanism
    assert isinstance(mechanism, PrivKVM)
    aggregator = Aggregator(
        c, broker.bootstrap_servers, metrics_port=0, refit_interval=0.5, log=lambda _: None
    )
    stop, task = await start(aggregator)
    try:
        async with Collector(c, broker.bootstrap_servers, state_path=tmp_path / "device") as sdk:
            assert await sdk.report({"k1": 5.0}) is ReportStatus.SENT
            assert await sdk.report({"k1": 6.0}) is ReportStatus.SKIPPED_ROUND
            assert sdk.privacy_spent() == pytest.approx(mechanism.round_epsilon(0))
        assert DeviceState.load(tmp_path / "device", c).rounds == [0]
        rounds = aggregator.state.rounds
        assert rounds is not None
        await wait_for(lambda: rounds.open_reports == 1, 30, "the report to be folded")
        assert sum(aggregator.state.rejected_totals().values()) == 0
    finally:
        stop.set()
        await task
