"""PrivKVM's live rounds, watched: ``kvldp demo`` on an interactive collection runs its
rounds to the end (and refuses a fleet too small to close one), and the dashboard's round
panels and spent-epsilon panel return data from a real Prometheus scraping a real
aggregator whose rounds ran."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from kvldp import dashboard
from kvldp.aggregator.service import Aggregator
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import collection_toml, parse_collection
from kvldp.producer.collector import Collector
from kvldp.sim import simulate
from kvldp.sim.round_fleet import RoundFleet

from support import run_kvldp
from support.pipeline import start, wait_for
from support.prometheus import promql, start_prometheus, wait_for_data

pytestmark = pytest.mark.asyncio

ROUNDS = 3
MIN_REPORTS = 400


def rounds_collection(name: str) -> Collection:
    return parse_collection(
        {
            "name": name,
            "mechanism": "privkvm",
            "epsilon": 4.0,
            "keys": ["hamburger", "fries", "pepsi", "salad"],
            "value_range": [0.0, 20.0],
            "params": {"rounds": ROUNDS, "round_period": "1s", "round_min_reports": MIN_REPORTS},
            "aggregate": {
                "refit_interval_s": 0.5,
                "estimators": ["unbiased", "paper"],
                "windows": ["all"],
                "partitions": 2,
            },
        }
    )


def run_demo(toml: Path, users: int) -> subprocess.CompletedProcess[str]:
    return run_kvldp(
        "demo", "--collection", str(toml), "--users", str(users), "--metrics-port", "0", timeout=60
    )


async def test_demo_follows_the_rounds_to_the_end(tmp_path: Path) -> None:
    """Every round closes on the whole fleet, every report is folded, both estimators are
    shown next to the truth, and each device spent exactly epsilon by both counts."""
    toml = tmp_path / "rounds.toml"
    toml.write_text(collection_toml(rounds_collection("demo-rounds")))
    users = MIN_REPORTS  # no round can close before all of its reports are folded
    done = await asyncio.to_thread(run_demo, toml, users)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "epsilon=4 over 3 rounds" in out and "control topic kvldp.demo-rounds.control" in out
    assert "unbiased mean" in out and "paper mean" in out and "hamburger" in out
    for r in range(1, ROUNDS + 1):
        assert re.search(
            rf"^round {r}: {users} reports in \S+ s; published means \S+ from the true", out, re.M
        )
    assert f"rounds complete after {ROUNDS} of {ROUNDS}" in out
    assert f"{users * ROUNDS}/{users * ROUNDS} reports folded   (estimates through round {ROUNDS};" in out
    assert "epsilon spent per device: median 4, max 4   (server's count: median 4, max 4)" in out


async def test_demo_refuses_a_fleet_that_cannot_close_a_round(tmp_path: Path) -> None:
    toml = tmp_path / "rounds.toml"
    toml.write_text(collection_toml(rounds_collection("demo-small")))
    done = await asyncio.to_thread(run_demo, toml, MIN_REPORTS - 1)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert f"round_min_reports = {MIN_REPORTS}" in line and f"--users {MIN_REPORTS} or more" in line


def round_panel_expressions(collection: str) -> list[str]:
    """The dashboard's expressions over the round metrics and the spent-epsilon histogram,
    for one collection (not over its upper bound, which only collections with
    instantaneous_epsilon export)."""
    out = []
    for panel in dashboard.build()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$collection", collection)
            if "upper_bound" in expr:
                continue
            if "kvldp_round" in expr or "kvldp_device_privacy_spent_epsilon" in expr:
                assert "$" not in expr, expr
                out.append(expr)
    return out


async def test_round_panels_return_data_from_a_real_prometheus(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed: `make test` installs Debian's package"
    collection = rounds_collection(f"rounds-prom-{int(time.time() * 1000) % 100000}")
    users = simulate.simulate(collection, "gaussian", MIN_REPORTS, seed=3)
    aggregator = Aggregator(collection, broker.bootstrap_servers, metrics_port=0, log=lambda _: None)
    stop, task = await start(aggregator)
    prom: subprocess.Popen[bytes] | None = None
    try:
        async with Collector(collection, broker.bootstrap_servers, rng=np.random.default_rng(3)) as sdk:
            reports = await RoundFleet(users, simulate.device_ids(users.n_users)).run(sdk)
        assert [r.summary.sent for r in reports] == [MIN_REPORTS] * ROUNDS
        await wait_for(lambda: aggregator.state.reports_total == MIN_REPORTS * ROUNDS, 30, "every report")

        config = tmp_path / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": "kvldp-rounds",
                            "static_configs": [{"targets": [f"127.0.0.1:{aggregator.bound_port}"]}],
                        }
                    ],
                }
            )
        )
        prom, port = await start_prometheus(binary, config, tmp_path)

        await wait_for_data(prom, port, round_panel_expressions(collection.name))

        async def values(expr: str) -> dict[str, float]:
            """The series of ``expr`` by their ``round`` label (or "" without one)."""
            series = await asyncio.to_thread(promql, port, expr)
            return {s["metric"].get("round", ""): float(s["value"][1]) for s in series}

        selector = f'{{collection="{collection.name}"}}'
        assert await values(f"kvldp_round{selector}") == {"": ROUNDS}
        assert await values(f"kvldp_rounds_complete{selector}") == {"": 1.0}
        assert await values(f"kvldp_round_reports{selector}") == {
            str(r): MIN_REPORTS for r in range(1, ROUNDS + 1)
        }
        (table,) = [e for e in round_panel_expressions(collection.name) if "kvldp_round_mean" in e]
        means = await asyncio.to_thread(promql, port, table)
        assert len(means) == collection.d * ROUNDS
        assert {s["metric"]["series"] for s in means} == {f"{collection.name} {k}" for k in collection.keys}
        # every device reported in every round: it spent epsilon, the upper bucket bound
        (top,) = await asyncio.to_thread(
            promql,
            port,
            "histogram_quantile(1, sum by (collection, le) "
            f'(kvldp_device_privacy_spent_epsilon_bucket{{collection="{collection.name}"}}))',
        )
        assert float(top["value"][1]) == pytest.approx(collection.epsilon)
    finally:
        if prom is not None:
            prom.terminate()
            await asyncio.to_thread(prom.wait, 20)
        stop.set()
        await task
