"""Simulated devices: the evaluation datasets as a device population of a collection.

Dataset values live in [-1, 1]; they are the normalised values a device would hold
after the SDK mapped its raw values through ``value_range``. The truth written for
comparison reports means in the collection's units, like the aggregator's exports.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.collection import Collection
from common.kvdata import KVData
from producer.datasets import generate


def simulate(collection: Collection, dataset: str, users: int, seed: int) -> KVData:
    """``users`` devices over the collection's keys drawn from ``dataset``."""
    return generate(dataset, users, collection.d, seed).users


def device_ids(count: int, prefix: str = "device") -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


def truth(collection: Collection, users: KVData) -> dict[str, Any]:
    """``{"users": N, "frequency": {key: f}, "mean": {key: m}}``, means in collection units."""
    freq, mean = users.truth()
    raw = collection.raw_mean(mean)
    return {
        "users": users.n_users,
        "frequency": {k: float(f) for k, f in zip(collection.keys, freq, strict=True)},
        "mean": {
            k: (float(m) if np.isfinite(m) else None) for k, m in zip(collection.keys, raw, strict=True)
        },
    }
