"""The streaming pipeline on a real Kafka-protocol broker (Tansu, and for the main
end-to-end test Apache Kafka too): devices -> Kafka -> aggregator -> Prometheus,
exactly-once state across SIGKILLs, the dead-letter topic, record and replay."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer

from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.state import CheckpointStore
from kvldp.aggregator.topics import ensure_topics
from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import load_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms.padding import slot_weights
from kvldp.common.messages.recording import read_recording
from kvldp.producer.collector import Collector
from kvldp.reliability.processes import Samples
from kvldp.sim import simulate
from kvldp.sim.record_replay import record, replay

from support import record_and_fold, run_kvldp
from support.pipeline import (
    collection_toml,
    scrape,
    start,
    unique_collection,
    wait_for,
)

pytestmark = pytest.mark.asyncio


async def publish_and_scrape(
    bootstrap: str, collection: Collection, users: KVData, seed: int, batch_size: int
) -> Samples:
    """Publish ``users`` through the SDK to a fresh aggregator, wait until a refit covers
    every report, and return one scrape of its metrics."""
    n = users.n_users
    agg = Aggregator(collection, bootstrap, metrics_port=0, refit_interval=0.5, log=lambda _: None)
    stop, task = await start(agg)
    try:
        async with Collector(collection, bootstrap, rng=np.random.default_rng(seed)) as sdk:
            await sdk.publish_users(users, simulate.device_ids(n), batch_size=batch_size)
        await wait_for(lambda: agg.state.reports_total == n, 60, "all reports folded")
        await wait_for(
            lambda: agg.exporter.snapshot is not None and agg.exporter.snapshot.fits["all"].n_reports == n,
            60,
            "a refit of every report",
        )
        assert agg.bound_port is not None
        return await asyncio.to_thread(scrape, agg.bound_port)
    finally:
        stop.set()
        await task


@pytest.mark.parametrize("batch_size", [1, 100])
@pytest.mark.parametrize("bootstrap", ["broker", "apache_kafka"], indirect=True)
async def test_end_to_end_estimates_within_five_standard_errors(bootstrap: str, batch_size: int) -> None:
    """50,000 simulated devices, on Tansu and on Apache Kafka; every key's exported
    frequency and mean within 5 standard errors of the truth file, inside their exported
    95% interval; every key without a mean counted as not estimable, and at least one
    mean checked per estimator; kvldp_reports_total exact."""
    collection = unique_collection("kvue", 6)
    users = simulate.simulate(collection, "gaussian", 50_000, seed=11)
    truth = simulate.truth(collection, users)
    assert all(truth["mean"][key] is not None for key in collection.keys)  # every key is held
    samples = await publish_and_scrape(bootstrap, collection, users, seed=11, batch_size=batch_size)
    labels = lambda **kw: tuple(sorted({"collection": collection.name, **kw}.items()))  # noqa: E731
    assert samples[("kvldp_reports_total", labels())] == 50_000
    for estimator in ("unbiased", "em"):
        checked, without_mean = [], []
        for key in collection.keys:
            lab = labels(key=key, estimator=estimator, window="all")
            f, fs = samples[("kvldp_frequency", lab)], samples[("kvldp_frequency_stderr", lab)]
            assert abs(f - truth["frequency"][key]) < 5 * fs, (key, estimator, f, truth["frequency"][key], fs)
            f_lo, f_hi = samples[("kvldp_frequency_low", lab)], samples[("kvldp_frequency_high", lab)]
            assert 0.0 <= f_lo <= f_hi <= 1.0
            if ("kvldp_mean", lab) not in samples:
                without_mean.append(key)
                continue
            m, ms = samples[("kvldp_mean", lab)], samples[("kvldp_mean_stderr", lab)]
            assert abs(m - truth["mean"][key]) < 5 * ms, (key, estimator, m, truth["mean"][key], ms)
            lo, hi = samples[("kvldp_mean_low", lab)], samples[("kvldp_mean_high", lab)]
            assert lo <= m <= hi  # the interval is in collection units, around the estimate
            checked.append(key)
        # every key has its mean checked or is counted as not estimable, and some mean is checked
        not_estimable = samples[("kvldp_means_not_estimable", labels(estimator=estimator, window="all"))]
        assert not_estimable == len(without_mean), (estimator, not_estimable, without_mean)
        assert checked, f"{estimator}: no key's mean was exported"
    for key in collection.keys:
        assert ("kvldp_frequency", labels(key=key, estimator="unbiased", window="5m")) in samples
    assert ("kvldp_last_refit_timestamp_seconds", labels()) in samples
    assert ("kvldp_em_iterations", labels(window="all")) in samples
    assert samples[("kvldp_refit_duration_seconds_count", labels())] >= 1
    assert not any(name.startswith("kvldp_pckv_") for name, _ in samples)  # PCKV's only


async def test_pckv_padded_share_exported_within_four_standard_errors(broker: EmbeddedBroker) -> None:
    """A PCKV collection with ell = 3 on devices holding 0 to 6 pairs: the exported padded
    share is within 4 standard errors of the devices' mean padding probability, in every
    window, and the bound on devices holding ell pairs or more covers their share."""
    collection = unique_collection("pckv_ue", 6, params={"ell": 3})
    users = simulate.simulate(collection, "gaussian", 20_000, seed=17)
    w_pad = slot_weights(users, 3)[1]
    assert 0.05 < w_pad.mean() < 0.95 and np.any(users.sizes > 3)
    samples = await publish_and_scrape(broker.bootstrap_servers, collection, users, seed=17, batch_size=50)
    for window in ("5m", "all"):
        lab = tuple(sorted({"collection": collection.name, "window": window}.items()))
        share, se = (
            samples[("kvldp_pckv_padded_share", lab)],
            samples[("kvldp_pckv_padded_share_stderr", lab)],
        )
        assert 0 < se < 0.05
        assert abs(share - w_pad.mean()) <= 4 * se, (window, share, w_pad.mean(), se)
        assert np.mean(users.sizes >= 3) <= samples[("kvldp_pckv_unpadded_share_upper", lab)] < 1


async def test_record_then_replay_into_a_fresh_broker_gives_identical_statistics(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    collection = unique_collection("pckv_grr", 7, windows=["1m", "1h", "all"])
    users = simulate.simulate(collection, "gaussian_pckv", 12_000, seed=3)
    first = Aggregator(collection, broker.bootstrap_servers, metrics_port=0, log=lambda _: None)
    stop, task = await start(first)
    async with Collector(collection, broker.bootstrap_servers, rng=np.random.default_rng(3)) as sdk:
        await sdk.publish_users(users.rows(0, 6000), simulate.device_ids(6000), batch_size=1)
        await sdk.publish_users(users.rows(6000, 12_000), simulate.device_ids(6000), batch_size=250)
    await wait_for(lambda: first.state.reports_total == 12_000, 60, "first aggregator")
    stop.set()
    await task
    path = tmp_path / "run.rec"
    assert (
        await record(collection, broker.bootstrap_servers, path, from_beginning=True, idle_timeout=1.5)
        == 6024
    )
    with EmbeddedBroker(0) as fresh:
        second = Aggregator(collection, fresh.bootstrap_servers, metrics_port=0, log=lambda _: None)
        stop2, task2 = await start(second)
        assert await replay(path, fresh.bootstrap_servers) == 6024
        await wait_for(lambda: second.state.reports_total == 12_000, 60, "replayed reports folded")
        stop2.set()
        await task2
    assert second.state.all_stats() == first.state.all_stats()
    now = 2**62  # far future: both states have exactly the same buckets, windows included
    for name, stats in first.state.window_stats(now).items():
        assert second.state.window_stats(now)[name] == stats


async def test_record_finds_every_partition_on_apache_kafka(
    apache_kafka: ApacheKafka, tmp_path: Path
) -> None:
    """A consumer started on Apache Kafka knows no topic (Tansu tells it every one), and its
    ``topics()`` does not teach it: ``record`` asks the cluster for the partitions."""
    bootstrap = apache_kafka.bootstrap_servers
    collection = unique_collection("kvue", 3, partitions=3)
    await ensure_topics(bootstrap, collection)
    async with Collector(collection, bootstrap) as sdk:
        await sdk.report_many([{"k0": 1.0}] * 30, [f"device-{i}" for i in range(30)])
    assert (
        await record(collection, bootstrap, tmp_path / "run.rec", from_beginning=True, idle_timeout=1.0) == 30
    )


async def test_record_without_from_beginning_records_only_new_messages(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """The old messages are not recorded, the last batch of each partition included (the
    embedded broker answers a request for the latest offset with that batch's first)."""
    collection = unique_collection("kvue", 3, partitions=2)
    await ensure_topics(broker.bootstrap_servers, collection)
    async with Collector(collection, broker.bootstrap_servers) as sdk:
        await sdk.report_many([{"k0": 1.0}] * 40, [f"old-{i}" for i in range(40)])
    path = tmp_path / "new.rec"
    recording = asyncio.create_task(
        record(collection, broker.bootstrap_servers, path, from_beginning=False, idle_timeout=2.0)
    )
    async with Collector(collection, broker.bootstrap_servers) as sdk:
        # new reports, one every 0.2 s: the recorder knows where each partition ends well
        # before the last ones, and stops 2 s after the last
        for i in range(25):
            await sdk.report_many([{"k1": 1.0}], [f"new-{i}"])
            await asyncio.sleep(0.2)
    count = await recording
    with path.open("rb") as stream:
        _, records = read_recording(stream)
        keys = [r.key.decode() for r in records if r.key is not None]
    assert len(keys) == count > 0
    assert all(k.startswith("new-") for k in keys), keys
    assert "new-24" in keys


async def test_record_refuses_to_overwrite_a_file_without_force(tmp_path: Path) -> None:
    toml = collection_toml(unique_collection("kvue", 3), tmp_path / "c.toml")
    existing = tmp_path / "run.rec"
    existing.write_bytes(b"a recording of another collection")
    args = ["record", "--collection", str(toml), "--out", str(existing), "--bootstrap-servers", "127.0.0.1:1"]
    done = await asyncio.to_thread(run_kvldp, *args, "--idle-timeout", "0.5")
    assert done.returncode == 2 and existing.read_bytes() == b"a recording of another collection"
    assert done.stderr.strip().splitlines() == [
        f"kvldp: error: --out {existing} exists; give --force to overwrite it"
    ]


async def test_two_aggregators_of_a_collection_refuse_to_share_a_state_dir(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    collection = unique_collection("kvue", 3)
    other = unique_collection("kvue", 3)
    state = tmp_path / "state"
    first = Aggregator(
        collection, broker.bootstrap_servers, state_dir=state, metrics_port=0, log=lambda _: None
    )
    stop, task = await start(first)
    second = Aggregator(
        collection, broker.bootstrap_servers, state_dir=state, metrics_port=0, log=lambda _: None
    )
    with pytest.raises(KvldpError, match=f"another aggregator of collection {collection.name} uses it"):
        await second.run(asyncio.Event())
    # another collection's aggregator has a checkpoint of its own there
    neighbour = Aggregator(
        other, broker.bootstrap_servers, state_dir=state, metrics_port=0, log=lambda _: None
    )
    stop_n, task_n = await start(neighbour)
    stop.set()
    stop_n.set()
    await task
    await task_n
    # once the first has stopped, the directory is free again
    third = Aggregator(
        collection, broker.bootstrap_servers, state_dir=state, metrics_port=0, log=lambda _: None
    )
    stop3, task3 = await start(third)
    stop3.set()
    await task3


async def produce_file(
    toml: Path, data: Path, broker: EmbeddedBroker, *args: str
) -> subprocess.CompletedProcess[str]:
    """``kvldp produce --from-csv data`` to the test broker."""
    return await asyncio.to_thread(
        run_kvldp,
        "produce",
        "--collection",
        str(toml),
        "--from-csv",
        str(data),
        "--bootstrap-servers",
        broker.bootstrap_servers,
        *args,
    )


async def test_cli_produce_csv_and_offline_aggregate(broker: EmbeddedBroker, tmp_path: Path) -> None:
    collection = unique_collection("kvue", 3)
    toml = collection_toml(collection, tmp_path / "c.toml")
    csv = tmp_path / "devices.csv"
    rows = ["device,key,value"] + [f"d{i},k{i % 3},{(i % 11) * 0.9}" for i in range(300)]
    rows += [f"d{i},k{(i + 1) % 3},5" for i in range(299, 300)]
    csv.write_text("\n".join(rows) + "\n")
    done = await produce_file(toml, csv, broker, "--batch-size", "50")
    assert done.returncode == 0, done.stderr
    payload = await asyncio.to_thread(
        record_and_fold, toml, tmp_path / "csv.rec", env={"KVLDP_BOOTSTRAP_SERVERS": broker.bootstrap_servers}
    )
    assert payload["reports_total"] == 300 and payload["rejected"] == {}
    assert set(payload["windows"]["all"]["estimators"]["unbiased"]["frequency"]) == {"k0", "k1", "k2"}


@pytest.mark.parametrize(
    ("last_row", "message"),
    [
        ("d4999,k1,nan", "value 'nan' is not finite"),
        ("d4999,k1,12.5", "value 12.5 is outside the collection's value_range [0, 10]"),
        ("d4999,k9,1.0", "key 'k9' is not a key of the collection"),
    ],
)
async def test_a_bad_row_late_in_a_csv_publishes_nothing(
    broker: EmbeddedBroker, tmp_path: Path, last_row: str, message: str
) -> None:
    """A file far longer than one chunk of sent reports (4,096 devices), bad on its last
    line: one line naming file:line, and not one report on the topic."""
    collection = unique_collection("kvue", 3)  # value_range [0, 10], no clipping
    await ensure_topics(broker.bootstrap_servers, collection)
    toml = collection_toml(collection, tmp_path / "c.toml")
    csv = tmp_path / "devices.csv"
    csv.write_text(
        "\n".join(["device,key,value", *(f"d{i},k{i % 3},1.5" for i in range(4999)), last_row]) + "\n"
    )
    done = await produce_file(toml, csv, broker)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kvldp: error: {csv}:5001: {message}"), lines
    recorded = await record(
        collection, broker.bootstrap_servers, tmp_path / "r.rec", from_beginning=True, idle_timeout=1.0
    )
    assert recorded == 0


async def test_a_csv_without_device_rows_is_refused(broker: EmbeddedBroker, tmp_path: Path) -> None:
    collection = unique_collection("kvue", 3)
    toml = collection_toml(collection, tmp_path / "c.toml")
    csv = tmp_path / "devices.csv"
    csv.write_text("device,key,value\n")
    done = await produce_file(toml, csv, broker)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"kvldp: error: {csv}: no device rows to publish (the file holds a header at most)"
    ]


async def test_one_device_is_one_report(broker: EmbeddedBroker, tmp_path: Path) -> None:
    toml = collection_toml(unique_collection("kvue", 3), tmp_path / "c.toml")
    csv = tmp_path / "devices.csv"
    csv.write_text("device,key,value\nd1,k0,1.5\n")
    done = await produce_file(toml, csv, broker)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("published 1 report to ")


async def test_cli_produce_ratings_file(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """A MovieLens-style ratings file (tab separated, a timestamp column, rows not grouped
    by user, items outside the collection) publishes one report per user."""
    collection = unique_collection("kvue", 3)
    toml = collection_toml(collection, tmp_path / "c.toml")
    ratings = tmp_path / "u.data"
    rows = ["user_id\titem_id\trating\ttimestamp"]
    items = ["k0", "k1", "k2", "other"]
    # user u holds two items, its rows apart: (u, items[u % 4]) first, (u, items[(u + 1) % 4]) later
    rows += [f"u{u}\t{items[(u + half) % 4]}\t{1 + u % 5}\t0" for half in (0, 1) for u in range(120)]
    ratings.write_text("\n".join(rows) + "\n")
    done = await produce_file(toml, ratings, broker)
    assert done.returncode == 0, done.stderr
    assert "published 120 reports" in done.stderr


async def test_cli_errors_are_one_clear_line(broker: EmbeddedBroker, tmp_path: Path) -> None:
    collection = unique_collection("kvue", 3)
    toml = collection_toml(collection, tmp_path / "c.toml")
    bad_mech = tmp_path / "bad.toml"
    bad_mech.write_text(toml.read_text().replace('mechanism = "kvue"', 'mechanism = "nope"'))
    produce = ["produce", "--collection", str(toml), "--simulate", "uniform", "--users", "10"]
    cases = [
        ([*produce, "--bootstrap-servers", "127.0.0.1:1"], "cannot reach Kafka at 127.0.0.1:1"),
        (produce, "no Kafka address"),
        (
            [
                "aggregate",
                "--collection",
                str(tmp_path / "missing.toml"),
                "--bootstrap-servers",
                "x:1",
                "--metrics-port",
                "0",
            ],
            "does not exist",
        ),
        (
            ["aggregate", "--collection", str(bad_mech), "--bootstrap-servers", "x:1", "--metrics-port", "0"],
            "mechanism: unknown mechanism",
        ),
        (["broker", "--port", broker.bootstrap_servers.rsplit(":", 1)[1]], "already in use"),
    ]
    for argv, message in cases:
        done = await asyncio.to_thread(run_kvldp, *argv, unset=("KVLDP_BOOTSTRAP_SERVERS",), timeout=60)
        assert done.returncode == 2, (argv, done.returncode, done.stderr)
        assert done.stderr.startswith("kvldp: error: ") and message in done.stderr, (argv, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
    port_owner = Aggregator(collection, broker.bootstrap_servers, metrics_port=0, log=lambda _: None)
    stop, task = await start(port_owner)
    try:
        busy = await asyncio.to_thread(
            run_kvldp,
            "aggregate",
            "--collection",
            str(toml),
            "--bootstrap-servers",
            broker.bootstrap_servers,
            "--metrics-port",
            str(port_owner.bound_port),
        )
        assert busy.returncode == 2 and busy.stderr.count("\n") == 1, busy.stderr
        assert busy.stderr == (
            f"kvldp: error: metrics port {port_owner.bound_port} on 127.0.0.1 is already in use\n"
        )
    finally:
        stop.set()
        await task


async def test_broker_command_prints_its_address_and_stops_cleanly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "kvldp", "broker", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = await asyncio.to_thread(proc.stdout.readline)
    assert line.startswith("bootstrap=127.0.0.1:")
    bootstrap = line.strip().split("=", 1)[1]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    await producer.send_and_wait("probe", b"x")
    await producer.stop()
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 20) == 0
    proc.stdout.close()
    assert proc.stderr is not None
    proc.stderr.close()


async def test_demo_runs_to_completion_and_serves_metrics(tmp_path: Path) -> None:
    """The memoized demo fleet over 3 periods: every report folded, and the spent epsilon
    per device shown as the devices and the server count it (the same numbers)."""
    done = await asyncio.to_thread(
        run_kvldp,
        *("demo", "--users", "2000", "--periods", "3", "--rate", "50000", "--metrics-port", "0"),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "6000/6000 reports folded" in done.stdout
    assert "hamburger" in done.stdout and "metrics: http://127.0.0.1:" in done.stdout
    spent = re.search(
        r"epsilon spent per device: median (\S+), max (\S+)\s+\(server's count: median (\S+), max (\S+)\)",
        done.stdout,
    )
    assert spent is not None, done.stdout
    median, top, server_median, server_top = map(float, spent.groups())
    # epsilon 2 per new state; with churn 0.1 most devices never change over 3 periods. The
    # server counts distinct payloads, fewer when two states of a device happen to give one
    assert median == server_median == 2.0 and 2.0 <= server_top <= top <= 6.0


async def test_demo_of_an_instantaneous_collection_shows_the_servers_upper_bound(tmp_path: Path) -> None:
    """With instantaneous_epsilon the server sees no states, only reports: the demo's spent
    line gives its figure as an upper bound, reports x the per-send bound c (every device
    reported once per period), next to the devices' own count (epsilon per state)."""
    toml = tmp_path / "irr.toml"
    toml.write_text(
        'name = "demo-irr"\nmechanism = "grr"\nepsilon = 3.0\nkey_count = 6\n'
        'value_range = [-1.0, 1.0]\n[privacy]\nmemoize = true\nreport_period = "1h"\n'
        "instantaneous_epsilon = 1.5\n"
    )
    randomizer = load_collection(toml).instantaneous_randomizer
    assert randomizer is not None
    per_send = randomizer.send_bound(3.0)
    done = await asyncio.to_thread(
        run_kvldp,
        *("demo", "--collection", str(toml), "--users", "500", "--periods", "2"),
        *("--rate", "50000", "--metrics-port", "0"),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "1000/1000 reports folded" in done.stdout
    spent = re.search(
        r"epsilon spent per device: median (\S+), max (\S+)\s+"
        r"\(server's upper bound \(instantaneous randomization\): median (\S+), max (\S+)\)",
        done.stdout,
    )
    assert spent is not None, done.stdout
    median, top, server_median, server_top = map(float, spent.groups())
    assert median == 3.0 and top <= 6.0
    assert server_median == server_top == pytest.approx(2 * per_send)
    assert "server's count" not in done.stdout


async def test_sdk_report_api_normalises_and_publishes(broker: EmbeddedBroker) -> None:
    """A device's ``report({name: raw value})`` and a gateway's ``report_many``: names map to
    keys, values pass through value_range, bad input is refused before anything is sent."""
    collection = unique_collection("kvue", 3)
    agg = Aggregator(collection, broker.bootstrap_servers, metrics_port=0, log=lambda _: None)
    stop, task = await start(agg)
    try:
        async with Collector(collection, broker.bootstrap_servers, device_id="phone-1") as sdk:
            await sdk.report({"k0": 2.5, "k2": 10.0})
            await sdk.report_many([{"k1": 0.0}, {}, {"k0": 7.0}], ["a", "b", "c"])
            await sdk.report_many([{"k1": 1.0}] * 40, batch_size=16)
            with pytest.raises(ValueError, match="outside value_range"):
                await sdk.report({"k0": 10.5})
            with pytest.raises(ValueError, match="not a key"):
                await sdk.report({"nope": 1.0})
            assert sdk.sent_reports == 44 and sdk.sent_messages == 1 + 3 + 3
        await wait_for(lambda: agg.state.reports_total == 44, 30, "the SDK's reports")
    finally:
        stop.set()
        await task
    assert sum(agg.state.rejected_totals().values()) == 0


async def test_a_reset_topic_starts_a_new_epoch(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """A checkpoint says partition 0 continues at offset 500 (with 7 reports folded), but the
    (recreated) topic holds 5 records: the aggregator says so, keeps the 7 and folds the 5."""
    from kvldp.aggregator.state import AggregatorState

    collection = unique_collection("kvue", 3, partitions=1)
    ahead = AggregatorState(collection)
    earlier = collection.mechanism.perturb_many(
        simulate.simulate(collection, "uniform", 7, seed=3), np.random.default_rng(3)
    )
    ahead.fold_reports(0, earlier, None)
    ahead.partition(0).next_offset = 500
    CheckpointStore(tmp_path, collection).save(CheckpointStore(tmp_path, collection).take(ahead))
    lines: list[str] = []
    agg = Aggregator(
        collection,
        broker.bootstrap_servers,
        metrics_port=0,
        state_dir=tmp_path,
        log=lines.append,
        refit_interval=0.5,
    )
    stop, task = await start(agg)
    try:
        async with Collector(collection, broker.bootstrap_servers) as sdk:
            await sdk.report_many([{"k0": 1.0}] * 5)
        await wait_for(lambda: agg.state.reports_total == 12, 30, "the 5 reports of the new epoch")
        assert any("was reset" in line for line in lines)
        assert agg.state.resets_total == 1 and agg.state.partition(0).next_offset == 5
        samples = await asyncio.to_thread(scrape, agg.bound_port)
        assert samples[("kvldp_topic_resets_total", (("collection", collection.name),))] == 1
    finally:
        stop.set()
        await task
    assert agg.state.reports_total == 12


#: the series a conditional mean is exported with: all of them, or none when not estimable
MEAN_SERIES = ("mean", "mean_stderr", "mean_low", "mean_high")


@pytest.mark.parametrize(
    ("mechanism", "conditions"),
    [("ioh_hrr", ["all_pairs"]), ("ioh", ["k2 | k0=1, k1=0", "k3 | k0=0"])],
)
async def test_conditional_metrics_stream_end_to_end(
    broker: EmbeddedBroker, mechanism: str, conditions: list[str]
) -> None:
    """Joint-state collections through Kafka: kvldp_conditional_* exported for every
    condition, each within 5 standard errors of the simulated population's truth, with
    its 95% interval's ends; a mean not exported has none of its series (not estimable,
    not lost), and at least one mean is checked."""
    collection = unique_collection(mechanism, 4, conditions=conditions, estimators=["unbiased"])
    users = simulate.simulate(collection, "conditional", 60_000, seed=21)
    truth = simulate.truth(collection, users)["conditional"]
    samples = await publish_and_scrape(broker.bootstrap_servers, collection, users, seed=21, batch_size=200)
    queries = collection.conditional_queries()
    assert len(truth) == len(queries) == (24 if mechanism == "ioh_hrr" else 2)
    names = list(collection.keys)
    checked: list[str] = []
    not_estimable: list[str] = []
    for q in queries:
        condition = ",".join(f"{names[k]}={v}" for k, v in q.condition.pairs())
        lab = tuple(
            sorted(
                {
                    "collection": collection.name,
                    "key": names[q.target],
                    "condition": condition,
                    "estimator": "unbiased",
                    "window": "all",
                }.items()
            )
        )
        expected = truth[q.format(names)]
        f, fs = (
            samples[("kvldp_conditional_frequency", lab)],
            samples[("kvldp_conditional_frequency_stderr", lab)],
        )
        assert abs(f - expected["frequency"]) < 5 * fs, (q.format(names), f, expected, fs)
        lo, hi = (
            samples[("kvldp_conditional_frequency_low", lab)],
            samples[("kvldp_conditional_frequency_high", lab)],
        )
        assert 0.0 <= lo <= hi <= 1.0
        assert expected["mean"] is not None, q.format(names)  # some device meets it and holds the key
        if ("kvldp_conditional_mean", lab) not in samples:
            # not estimable (its holders are too few to bound the mean): no series of it at all
            assert not [m for m in MEAN_SERIES if (f"kvldp_conditional_{m}", lab) in samples], lab
            not_estimable.append(q.format(names))
            continue
        m, ms = samples[("kvldp_conditional_mean", lab)], samples[("kvldp_conditional_mean_stderr", lab)]
        assert abs(m - expected["mean"]) < 5 * ms, (q.format(names), m, expected, ms)
        assert samples[("kvldp_conditional_mean_low", lab)] <= samples[("kvldp_conditional_mean_high", lab)]
        checked.append(q.format(names))
    assert checked, f"no conditional mean was exported (not estimable: {not_estimable})"


async def test_the_readmes_first_produce_prints_no_warning(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """The README's collection and its first ``kvldp produce``: one line, the summary (no
    warning about a later run, none about ell, which kvldp advise chose for it)."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    toml_text = readme.split("<!-- doc-test: save as c.toml -->\n```toml\n", 1)[1].split("```", 1)[0]
    name = f"readme-{time.time_ns() % 10**9}"
    toml = tmp_path / "c.toml"
    toml.write_text(toml_text.replace('name = "checkout"', f'name = "{name}"'))
    done = await asyncio.to_thread(
        run_kvldp,
        "produce", "--collection", str(toml), "--simulate", "gaussian", "--users", "2000",
        "--bootstrap-servers", broker.bootstrap_servers,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == [f"published 2000 reports to kvldp.{name}.reports"]
