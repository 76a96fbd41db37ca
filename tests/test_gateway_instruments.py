"""The gateway's own counts expose what prometheus_client's counters and histogram would.

:class:`kvldp.gateway.instruments.GatewayMetrics` keeps plain counts and builds metric
families on each scrape. Fed the same answers, bodies and reports as prometheus_client's
``Counter`` and ``Histogram`` families of the same names, every sample of the exposition
must be equal (the histogram's ``_created`` series excepted: the gateway's has none).
"""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvldp.gateway.instruments import LATENCY_BUCKETS, GatewayMetrics

COLLECTIONS = ["checkout", "phones"]


def _reference(collections: list[str]) -> tuple[CollectorRegistry, dict[str, Counter | Histogram]]:
    registry = CollectorRegistry()
    family: dict[str, Counter | Histogram] = {
        "requests": Counter("kvldp_gateway_requests", "", ["collection", "status"], registry=registry),
        "seconds": Histogram(
            "kvldp_gateway_request_seconds", "", ["collection"], buckets=LATENCY_BUCKETS, registry=registry
        ),
        "bytes": Counter("kvldp_gateway_request_bytes", "", ["collection"], registry=registry),
        "errors": Counter("kvldp_gateway_produce_errors", "", ["collection"], registry=registry),
        "reports": Counter("kvldp_gateway_reports", "", ["collection"], registry=registry),
    }
    for name in collections:
        for key in ("seconds", "bytes", "errors", "reports"):
            family[key].labels(name)
    return registry, family


def _samples(exposition: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_the_exposition_is_prometheus_clients() -> None:
    rng = np.random.default_rng(7)
    ours = GatewayMetrics(COLLECTIONS)
    registry, theirs = _reference(COLLECTIONS)
    for _ in range(2_000):
        collection = str(rng.choice([*COLLECTIONS, ""]))
        status = int(rng.choice([202, 400, 401, 404, 413, 429, 503]))
        # latencies spread over every bucket, some exactly on a bound
        seconds = float(rng.choice([rng.exponential(0.05), rng.choice(LATENCY_BUCKETS), 45.0]))
        ours.answered(collection, status, seconds)
        theirs["requests"].labels(collection, str(status)).inc()
        theirs["seconds"].labels(collection).observe(seconds)
        if collection and status == 202:
            size, reports = int(rng.integers(20, 4_000)), int(rng.integers(1, 50))
            ours.received(collection, size)
            ours.accepted(collection, reports)
            theirs["bytes"].labels(collection).inc(size)
            theirs["reports"].labels(collection).inc(reports)
        if collection and status == 503:
            ours.unavailable(collection)
            theirs["errors"].labels(collection).inc()
    expected = _samples(generate_latest(registry))
    got = _samples(ours.exposition())
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == value, key


def test_every_collection_starts_at_zero_and_counters_carry_their_created_time() -> None:
    text = GatewayMetrics(COLLECTIONS).exposition().decode()
    for name in COLLECTIONS:
        assert f'kvldp_gateway_produce_errors_total{{collection="{name}"}} 0.0' in text
        assert f'kvldp_gateway_request_seconds_count{{collection="{name}"}} 0.0' in text
        assert f'kvldp_gateway_reports_created{{collection="{name}"}}' in text
