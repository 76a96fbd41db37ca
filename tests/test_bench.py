"""``kvldp bench``'s Kafka and memory benchmarks at toy sizes: they run end to end on a
real broker and report what they measured (the figures themselves are measurements,
documented in docs/performance.md, and never asserted)."""

from __future__ import annotations

import json
import math
import resource

import pytest

from kvldp.bench import kafka_throughput
from kvldp.bench.fleet_scale import CONFIGS
from kvldp.bench.mechanism_cost import SCALING_COLUMNS, bench_refit_scaling
from kvldp.cli import main

pytestmark = pytest.mark.slow


def _rate(value: object) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_ingest_drains_and_folds_every_message() -> None:
    # large enough that neither side can get everything in its first fetch (the clock
    # starts there): 20,000 records per getmany, 1 MiB per partition per fetch, and the
    # batched messages (about 10 kB each) fill every partition several times over
    rows = kafka_throughput.bench_ingest(
        messages=50_000, batched_reports=2_000_000, per_message=1_000, repeats=1, seed=3
    )
    assert [r["case"] for r in rows] == ["single-report messages", "1000 reports per message"]
    assert rows[1]["messages"] == 2_000 and rows[1]["reports"] == 2_000_000
    for row in rows:
        assert _rate(row["bare_messages_per_s"]) and _rate(row["kvldp_reports_per_s"]), row
        assert row["met"] is (
            row["ratio"] >= kafka_throughput.INGEST_RATIO_TARGET
            if row["messages"] == row["reports"]
            else row["kvldp_reports_per_s"] >= kafka_throughput.BATCHED_RATE_TARGET
        )


def test_produce_compares_devices_with_a_bare_producer() -> None:
    (row,) = kafka_throughput.bench_produce(messages=2_000, repeats=2, seed=1)
    assert len(row["bare_runs"]) == len(row["kvldp_runs"]) == 2
    assert _rate(row["bare_messages_per_s"]) and _rate(row["kvldp_messages_per_s"])
    assert row["ratio"] == pytest.approx(row["kvldp_messages_per_s"] / row["bare_messages_per_s"])


def test_memory_reads_a_real_aggregator_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "memory", "--reports", "2000,1000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["reports"] for r in rows] == [1_000, 2_000]  # checkpoints in order
    assert all(r["rss_mib"] > 10 for r in rows)
    assert rows[0]["ratio_to_first"] == rows[0]["ratio_to_previous"] == 1.0
    assert rows[1]["ratio_to_previous"] == rows[1]["rss_mib"] / rows[0]["rss_mib"]


def test_gateway_bench_reports_throughput_memory_and_hostile_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "gateway", "--clients", "2", "--requests", "80", "--connections", "40"]
    assert main([*argv, "--repeats", "2", "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)
    assert list(tables) == ["throughput", "memory", "hostile"]
    bare, gateway = tables["throughput"]
    assert (bare["case"], gateway["case"]) == ("bare endpoint", "gateway")
    for row in (bare, gateway):
        assert len(row["runs"]) == 2 and _rate(row["requests_per_s"])
        assert 0 < row["p50_ms"] <= row["p99_ms"]
    assert gateway["ratio"] == pytest.approx(gateway["requests_per_s"] / bare["requests_per_s"])
    for row in (bare, gateway):
        assert len(row["cpu_us_runs"]) == 2 and row["cpu_us_per_request"] > 0
    assert gateway["capacity_ratio"] == pytest.approx(
        bare["cpu_us_per_request"] / gateway["cpu_us_per_request"]
    )
    assert gateway["met"] is (gateway["capacity_ratio"] >= 0.8)
    idle, loaded = tables["memory"]
    assert loaded["connections"] == 40 and idle["rss_mib"] > 10 and loaded["rss_mib"] > 10
    calm, attacked, attackers = tables["hostile"]
    assert calm["errors"] == attacked["errors"] == 0  # well-behaved clients are all accepted
    assert calm["answers"] == attacked["answers"] == "202: 80"
    for refused in ("bad token 401", "expired token 401", "malformed 400", "oversized 413"):
        assert refused in attackers["answers"]


def test_gateway_bench_refuses_more_connections_than_descriptors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit on open files here")
    assert main(["bench", "gateway", "--connections", str(hard)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"--connections {hard} needs an open-file limit of {hard + 256}; the hard limit is {hard}")
    )


def test_refit_scaling_times_every_estimator_at_both_sizes() -> None:
    rows = bench_refit_scaling(["kvue"], 10, 1.0, 1_000, 3_000, seed=0, repeats=1)
    assert {r["estimator"] for r in rows} == {"unbiased", "em", "em (warm)", "normsub", "eb", "robust"}
    for row in rows:
        assert set(SCALING_COLUMNS) <= set(row)
        assert row["ratio"] == pytest.approx(row["seconds_large"] / row["seconds_small"])


def test_memory_checkpoints_are_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "memory", "--reports", "0"])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith(
        "kvldp bench memory: error: argument --reports: expected a positive integer, got 0\n"
    )


def test_rounds_streams_privkvm_live_and_matches_the_in_process_reference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "rounds", "--users", "500", "--keys", "3", "--rounds", "2", "--live-repeats", "1"]
    assert main([*argv, "--reference-repeats", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["rounds"], r["estimator"]) for r in rows] == [(2, "paper"), (2, "unbiased")]
    for row in rows:
        assert row["identical"] is True and row["round_s_median"] > 0.5  # a 1 s round_period
        assert _rate(row["send_s_median"]) and row["live_mse"] >= 0 and row["reference_mse"] > 0


def test_fleet_grows_every_configuration_and_reports_each_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "fleet", "--devices", "12000,6000", "--partitions", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["mechanism"], r["memoize"]) for r in rows] == [c for c in CONFIGS for _ in range(2)]
    for small, large in zip(rows[::2], rows[1::2], strict=True):
        assert (small["devices"], large["devices"]) == (6_000, 12_000)
        assert large["fleet"] == 24_000  # the other partition grown to the largest size
        assert small["new_ratio"] == small["known_ratio"] == 1.0
        for row in (small, large):
            assert _rate(float(row["fetch_new_ms"])) and _rate(float(row["bytes_per_device"])), row
            assert row["base_mib"] > 0 and row["restore_ms"] > 0 and row["handover_ms"] > 0
            assert 1 <= row["pieces"] <= 2 * row["base_mib"] + 1, row  # 512 KiB pieces of the base
            # the checkpoint after one fetch of known devices holds their rows, not the fleet's
            assert 8 <= row["checkpoint_bytes_per_changed_device"] <= 64, row
            assert row["checkpoint_kib"] * 1024 < row["base_mib"] * 2**20 / 2, row
