"""A real Prometheus (Debian's package, installed by `make test`) scrapes real aggregators;
every PromQL expression of the provisioned dashboard returns finite data, and the
frequencies Prometheus stores are the aggregator's own. One aggregator serves /metrics
over TLS with basic auth, scraped with the matching Prometheus configuration; a third one
serves a collection with instantaneous_epsilon, whose spent epsilon is the upper-bound
histogram the dashboard reads next to the exact one. The
gateway's panels are checked against a real gateway in test_prometheus_gateway. A
Prometheus that cannot start fails support.prometheus.start_prometheus at once, in its
own words."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import trustme

from kvldp import dashboard
from kvldp.aggregator.service import Aggregator
from kvldp.broker.tansu import BrokerError, EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.producer.collector import Collector
from kvldp.sim import simulate
from kvldp.web.security import HttpSecurity

from support.pipeline import eventually, unique_collection, wait_for
from support.prometheus import get, promql, start_prometheus, wait_for_data

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    assert path, (
        "prometheus is not installed: `make test` installs Debian's package (apt-get install -y prometheus)"
    )
    return path


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """A throw-away CA and a certificate for 127.0.0.1 (ca.pem, cert.pem, key.pem)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(paths[0]))
    cert.cert_chain_pems[0].write_to_path(str(paths[1]))
    cert.private_key_pem.write_to_path(str(paths[2]))
    yield paths


def dashboard_expressions(collections: str) -> list[str]:
    """Every PromQL expression of the dashboard, with the template variables filled in."""
    substitutions = {"$collection": collections, "$window": "all", "$estimator": "unbiased"}
    out = []
    for panel in dashboard.build()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for key, value in substitutions.items():
                expr = expr.replace(key, value)
            assert "$" not in expr, expr
            out.append(expr)
    return out


def variable_selectors(collections: str) -> list[tuple[str, str]]:
    """label_values(selector, label) of every template variable, filled in."""
    out = []
    for variable in dashboard.build()["templating"]["list"]:
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["definition"])
        assert match, variable["definition"]
        out.append((match.group(1).replace("$collection", collections), match.group(2)))
    return out


async def keep_reporting(collection: Collection, bootstrap: str) -> None:
    """A few reports every half second, from new devices, until cancelled."""
    async with Collector(collection, bootstrap) as sdk:
        for round_ in range(10_000):
            await sdk.report_many([{"k0": 1.0}] * 5, [f"late-{round_}-{i}" for i in range(5)])
            await asyncio.sleep(0.5)


async def test_every_dashboard_query_returns_finite_data_from_a_real_prometheus(
    broker: EmbeddedBroker, prometheus_binary: str, tls: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    ca_pem, cert_pem, key_pem = tls
    plain = unique_collection(
        "kvue",
        5,
        privacy={"lifetime_epsilon": 1000.0},  # a device book: the spent-epsilon histogram
        estimators=["unbiased", "em", "normsub"],
        windows=["1m", "all"],
        max_reports_per_device=100,
    )
    secured = unique_collection(
        "ioh_hrr", 4, estimators=["unbiased"], windows=["1m", "all"], conditions=["all_pairs"]
    )
    # every send randomized again: the spent-epsilon histogram's upper bound
    instantaneous = unique_collection(
        "kvue",
        3,
        privacy={"memoize": True, "instantaneous_epsilon": 1.0},
        estimators=["unbiased"],
        windows=["all"],
    )
    password = "s3cret-" + secured.name
    (tmp_path / "password").write_text(password)
    security = HttpSecurity(str(cert_pem), str(key_pem), "prometheus", password)
    aggs = [
        Aggregator(
            plain,
            broker.bootstrap_servers,
            metrics_port=0,
            refit_interval=0.5,
            log=lambda _: None,
            state_dir=tmp_path / "state",  # checkpoint metrics
        ),
        Aggregator(
            secured,
            broker.bootstrap_servers,
            metrics_port=0,
            refit_interval=0.5,
            log=lambda _: None,
            security=security,
        ),
        Aggregator(instantaneous, broker.bootstrap_servers, metrics_port=0, log=lambda _: None),
    ]
    stops = [asyncio.Event() for _ in aggs]
    tasks = [asyncio.create_task(a.run(s)) for a, s in zip(aggs, stops, strict=True)]
    prom: subprocess.Popen[bytes] | None = None
    try:
        await wait_for(lambda: all(a.bound_port for a in aggs), 30, "aggregators listening")
        # a collection with max_reports_per_device, or memoized, takes one report per message
        sends = (
            (plain, "gaussian", 5_000, 1),
            (secured, "conditional", 20_000, 100),
            (instantaneous, "gaussian", 500, 1),
        )
        for collection, dataset, n, batch_size in sends:
            users = simulate.simulate(collection, dataset, n, seed=5)
            async with Collector(
                collection, broker.bootstrap_servers, rng=np.random.default_rng(5), warn_unsaved=False
            ) as sdk:
                await sdk.publish_users(users, simulate.device_ids(users.n_users), batch_size=batch_size)
        counts = [n for _, _, n, _ in sends]
        await wait_for(lambda: [a.state.reports_total for a in aggs] == counts, 60, "every report folded")

        # TLS and basic auth on the secured aggregator's /metrics
        context = ssl.create_default_context(cafile=str(ca_pem))
        secured_url = f"https://127.0.0.1:{aggs[1].bound_port}/metrics"
        assert (await asyncio.to_thread(get, secured_url, context))[0] == 401
        assert (await asyncio.to_thread(get, secured_url, context, ("prometheus", "wrong")))[0] == 401
        status, body = await asyncio.to_thread(get, secured_url, context, ("prometheus", password))
        assert status == 200 and b"kvldp_conditional_frequency" in body
        with pytest.raises(OSError):  # plain HTTP to the TLS port: refused or reset
            await asyncio.to_thread(get, f"http://127.0.0.1:{aggs[1].bound_port}/metrics")

        config = tmp_path / "prometheus.yml"
        config.write_text(
            json.dumps(
                {  # JSON is YAML
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": "kvldp-plain",
                            "static_configs": [{"targets": [f"127.0.0.1:{aggs[0].bound_port}"]}],
                        },
                        {
                            "job_name": "kvldp-instantaneous",
                            "static_configs": [{"targets": [f"127.0.0.1:{aggs[2].bound_port}"]}],
                        },
                        {
                            "job_name": "kvldp-secured",
                            "scheme": "https",
                            "tls_config": {"ca_file": str(ca_pem), "server_name": "127.0.0.1"},
                            "basic_auth": {
                                "username": "prometheus",
                                "password_file": str(tmp_path / "password"),
                            },
                            "static_configs": [{"targets": [f"127.0.0.1:{aggs[1].bound_port}"]}],
                        },
                    ],
                }
            )
        )
        prom, port = await start_prometheus(prometheus_binary, config, tmp_path)

        async def all_up() -> bool:
            series = await asyncio.to_thread(promql, port, "up")
            return len(series) == len(aggs) and all(s["value"][1] == "1" for s in series)

        await eventually(all_up, 60, "every target up")
        # devices keep reporting while Prometheus scrapes (checkpoints happen only when
        # there is something new) until every panel has data — rate() and
        # histogram_quantile() need two samples — then stop, so that the estimates settle
        # for the comparison below
        trickle = asyncio.create_task(keep_reporting(plain, broker.bootstrap_servers))
        collections = f"{plain.name}|{secured.name}|{instantaneous.name}"
        # PrivKVM's round panels are checked on a privkvm aggregator in test_demo_rounds, the
        # gateway's on a real gateway in test_prometheus_gateway
        panels = [
            e
            for e in dashboard_expressions(collections)
            if "kvldp_round" not in e and "kvldp_gateway_" not in e
        ]
        await wait_for_data(prom, port, panels, timeout=90)
        trickle.cancel()
        await asyncio.gather(trickle, return_exceptions=True)
        # every device of the instantaneous collection sent once: its bound is the per-send c
        randomizer = instantaneous.instantaneous_randomizer
        assert randomizer is not None
        (top,) = await asyncio.to_thread(
            promql,
            port,
            "histogram_quantile(1, sum by (collection, le) (kvldp_device_privacy_spent_epsilon_upper_bound"
            f'_bucket{{collection="{instantaneous.name}"}}))',
        )
        assert float(top["value"][1]) == pytest.approx(randomizer.send_bound(instantaneous.epsilon))
        for selector, label in variable_selectors(collections):
            series = await asyncio.to_thread(promql, port, selector)
            assert series and all(label in s["metric"] for s in series), selector

        # what Prometheus stores is what the aggregator publishes as JSON
        async def agreed() -> bool:
            """Whether Prometheus stores exactly the aggregator's current unbiased estimates."""
            _, body = await asyncio.to_thread(get, f"http://127.0.0.1:{aggs[0].bound_port}/estimates")
            own = json.loads(body)["windows"]["all"]["estimators"]["unbiased"]
            for metric, field in (("kvldp_frequency", "frequency"), ("kvldp_mean", "mean")):
                expr = f'{metric}{{collection="{plain.name}", window="all", estimator="unbiased"}}'
                series = await asyncio.to_thread(promql, port, expr)
                stored = {s["metric"]["key"]: float(s["value"][1]) for s in series}
                if stored != {k: v for k, v in own[field].items() if v is not None}:
                    return False
            return True

        # both are re-read on every attempt: the last trickled reports may still be refitting
        await eventually(agreed, 30, "Prometheus to store the aggregator's JSON estimates")
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=20)
        for stop in stops:
            stop.set()
        await asyncio.gather(*tasks)


async def test_a_prometheus_that_cannot_start_is_reported_with_its_output(
    prometheus_binary: str, tmp_path: Path
) -> None:
    """start_prometheus fails as soon as Prometheus exits, with Prometheus's own words."""
    config = tmp_path / "prometheus.yml"
    config.write_text("scrape_configs: [{job_name: 12, static_configs: nope}]\n")
    with pytest.raises(
        BrokerError, match=r"^Prometheus exited at start \(status 2\): .*Error loading config"
    ):
        await start_prometheus(prometheus_binary, config, tmp_path, timeout=30)
