"""A real Prometheus (Debian's package) scrapes a real ``kvldp gateway`` (in-process, on
the embedded broker) while devices report through it with the SDK and a client with a
bad token is refused: every gateway panel of the provisioned dashboard returns finite
data, the status panel tells the 202s from the 401s, and what Prometheus stores is the
gateway's own count. The other panels are checked against real aggregators in
test_prometheus."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest

from kvldp import dashboard
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.gateway.endpoint import Gateway, GatewaySettings
from kvldp.gateway.signing import generate, load_private_key, sign_token
from kvldp.gateway.tokens import KeySource, TokenVerifier
from kvldp.kafka.client_config import KafkaConfig
from kvldp.producer.collector import Collector

from support.pipeline import eventually, unique_collection, wait_for
from support.prometheus import get, promql, start_prometheus, wait_for_data

pytestmark = pytest.mark.asyncio

AUDIENCE = "kvldp-dashboard-test"


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    assert path, (
        "prometheus is not installed: `make test` installs Debian's package (apt-get install -y prometheus)"
    )
    return path


def gateway_expressions(collection: str) -> list[str]:
    """The PromQL of the dashboard's gateway panels, for ``collection``."""
    out = []
    for panel in dashboard.build()["panels"]:
        for target in panel["targets"]:
            if "kvldp_gateway_" in target["expr"]:
                out.append(target["expr"].replace("$collection", collection))
    return out


async def keep_reporting(collection: Collection, base: str, keys: Path) -> None:
    """Every fifth of a second: two reports from new devices through the SDK, and one
    post with a token signed by a key the gateway does not know (401), until cancelled."""
    key, kid = load_private_key(keys / "own" / "private.pem")
    stranger, stranger_kid = load_private_key(keys / "stranger" / "private.pem")
    url = f"{base}/v1/collections/{collection.name}/reports"
    async with (
        Collector(
            collection,
            endpoint=base,
            token_for=lambda device: sign_token(key, kid, device, AUDIENCE, 300),
            allow_http=True,
        ) as sdk,
        aiohttp.ClientSession() as session,
    ):
        for round_ in range(100_000):
            await sdk.report_many([{"k0": 1.0}, {"k1": 2.0}], [f"phone-{round_}-a", f"phone-{round_}-b"])
            bad = sign_token(stranger, stranger_kid, f"phone-{round_}-a", AUDIENCE, 300)
            headers = {"Authorization": f"Bearer {bad}", "Content-Type": "application/msgpack"}
            async with session.post(url, data=b"\x80", headers=headers) as response:
                assert response.status == 401
            await asyncio.sleep(0.2)


async def test_every_gateway_panel_returns_data_from_a_real_prometheus(
    broker: EmbeddedBroker, prometheus_binary: str, tmp_path: Path
) -> None:
    collection = unique_collection("kvue", 4)
    generate(tmp_path / "keys" / "own")
    generate(tmp_path / "keys" / "stranger")
    verifier = TokenVerifier(KeySource.open(str(tmp_path / "keys" / "own" / "jwks.json")), AUDIENCE)
    gateway = Gateway(
        [collection],
        KafkaConfig.plaintext(broker.bootstrap_servers),
        verifier,
        "127.0.0.1",
        0,
        GatewaySettings(device_rate=100.0, device_burst=100.0),
    )
    stop = asyncio.Event()
    serving = asyncio.create_task(gateway.run(stop))
    prom: subprocess.Popen[bytes] | None = None
    trickle: asyncio.Task[None] | None = None
    try:
        await wait_for(lambda: gateway.bound_port is not None or serving.done(), 30, "the gateway to start")
        assert not serving.done()
        base = f"http://127.0.0.1:{gateway.bound_port}"
        config = tmp_path / "prometheus.yml"
        scrape = {
            "job_name": "kvldp-gateway",
            "static_configs": [{"targets": [base.removeprefix("http://")]}],
        }
        config.write_text(  # JSON is YAML
            json.dumps({"global": {"scrape_interval": "1s"}, "scrape_configs": [scrape]})
        )
        prom, port = await start_prometheus(prometheus_binary, config, tmp_path)

        async def up() -> bool:
            series = await asyncio.to_thread(promql, port, "up")
            return len(series) == 1 and series[0]["value"][1] == "1"

        await eventually(up, 60, "the gateway scraped")
        trickle = asyncio.create_task(keep_reporting(collection, base, tmp_path / "keys"))
        panels = gateway_expressions(collection.name)
        assert len(panels) == 5, panels
        await wait_for_data(prom, port, panels, timeout=90)
        trickle.cancel()
        await asyncio.gather(trickle, return_exceptions=True)

        (requests,) = [e for e in panels if "kvldp_gateway_requests_total" in e]
        statuses = {s["metric"]["status"] for s in await asyncio.to_thread(promql, port, requests)}
        assert statuses == {"202", "401"}
        (errors,) = [e for e in panels if "produce_errors" in e]
        assert [float(s["value"][1]) for s in await asyncio.to_thread(promql, port, errors)] == [0.0]

        # what Prometheus stores is the gateway's own count of accepted reports
        async def agreed() -> bool:
            _, body = await asyncio.to_thread(get, f"{base}/metrics")
            line = f'kvldp_gateway_reports_total{{collection="{collection.name}"}} '
            (own,) = [float(x.removeprefix(line)) for x in body.decode().splitlines() if x.startswith(line)]
            expr = f'kvldp_gateway_reports_total{{collection="{collection.name}"}}'
            stored = await asyncio.to_thread(promql, port, expr)
            return own > 0 and [float(s["value"][1]) for s in stored] == [own]

        await eventually(agreed, 30, "Prometheus to store the gateway's count")
    finally:
        if trickle is not None:
            trickle.cancel()
            await asyncio.gather(trickle, return_exceptions=True)
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=20)
        stop.set()
        await serving
