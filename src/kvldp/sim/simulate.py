"""Simulated devices: the evaluation datasets as a device population of a collection.

Dataset values live in [-1, 1]; they are the normalised values a device would hold
after the SDK mapped its raw values through ``value_range``. The truth written for
comparison reports means in the collection's units, like the aggregator's exports.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.estimation.conditional import conditional_truths
from kvldp.sim.datasets import generate


def simulate(collection: Collection, dataset: str, users: int, seed: int) -> KVData:
    """``users`` devices over the collection's keys drawn from ``dataset``."""
    return generate(dataset, users, collection.d, seed).users


def device_ids(count: int, prefix: str = "device") -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


def truth(collection: Collection, users: KVData) -> dict[str, Any]:
    """``{"users": N, "frequency": {key: f}, "mean": {key: m}}``, means in collection units,
    plus ``"conditional": {query: {"frequency": f, "mean": m}}`` for the collection's
    conditions."""
    freq, mean = users.truth()
    raw = collection.raw_mean(mean)

    def finite(value: float) -> float | None:
        return float(value) if np.isfinite(value) else None

    out: dict[str, Any] = {
        "users": users.n_users,
        "frequency": {k: float(f) for k, f in zip(collection.keys, freq, strict=True)},
        "mean": {k: finite(m) for k, m in zip(collection.keys, raw, strict=True)},
    }
    queries = collection.conditional_queries()
    if queries:
        names = list(collection.keys)
        conditional = {}
        for q, (f, m) in zip(queries, conditional_truths(users, queries), strict=True):
            conditional[q.format(names)] = {
                "frequency": finite(f),
                "mean": finite(float(collection.raw_mean(np.array([m]))[0])),
            }
        out["conditional"] = conditional
    return out
