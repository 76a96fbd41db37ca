"""Helpers of the streaming tests: collections, waiting, metrics parsing, the replay oracle."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from aggregator.offline import fold_recording
from aggregator.state import AggregatorState
from common.collection import Collection, parse_collection
from producer.recording import record

_counter = 0


def unique_collection(mechanism: str = "kvue", d: int = 6, **aggregate: Any) -> Collection:
    """A collection with a name no other test uses (topics and consumer groups are per name)."""
    global _counter
    _counter += 1
    table: dict[str, Any] = {
        "name": f"t{_counter}-{mechanism}-{int(time.time() * 1000) % 100000}",
        "mechanism": mechanism,
        "epsilon": 2.0,
        "key_count": d,
        "value_range": [0.0, 10.0],
        "aggregate": {
            "refit_interval_s": 0.5,
            "estimators": ["unbiased", "em"],
            "windows": ["5m", "all"],
            **aggregate,
        },
    }
    return parse_collection(table)


def collection_toml(collection: Collection, path: Path) -> Path:
    """Write a collection back as TOML (for the CLI subprocess tests)."""
    agg = collection.aggregate
    windows = ", ".join(f'"{w.name}"' for w in agg.windows)
    estimators = ", ".join(f'"{e}"' for e in agg.estimators)
    path.write_text(
        f'name = "{collection.name}"\nmechanism = "{collection.mechanism_name}"\nepsilon = {collection.epsilon}\n'
        f"key_count = {collection.d}\nvalue_range = [{collection.value_range[0]}, {collection.value_range[1]}]\n"
        f"[aggregate]\nrefit_interval_s = {agg.refit_interval_s}\nestimators = [{estimators}]\n"
        f"windows = [{windows}]\npartitions = {agg.partitions}\n"
    )
    return path


async def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)


async def eventually(fetch: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await fetch():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.2)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """All samples of an aggregator's /metrics, keyed by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def oracle(collection: Collection, bootstrap: str, tmp: Path) -> AggregatorState:
    """The linear-replay oracle: record the whole topic and fold it in one clean pass."""
    path = tmp / f"{collection.name}.oracle.rec"
    await record(collection, bootstrap, path, from_beginning=True, idle_timeout=1.5)
    return fold_recording(collection, path)
