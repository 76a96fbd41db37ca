"""The SDK's input: devices' key-name pairs as normalised user data, device ids as Kafka keys.

A caller hands the SDK raw pairs (key name -> value in the collection's units) and device
ids; the mechanisms take :class:`~kvldp.common.data.kvdata.KVData` of key indices and values
in [-1, 1], and Kafka takes a byte key per record. These two conversions are shared by
:class:`~kvldp.producer.collector.Collector` and by simulators and benchmarks that
publish without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.spec.collection_fields import InvalidCollection


def device_key(device_id: str | bytes | int) -> bytes:
    if isinstance(device_id, bytes):
        return device_id
    return str(device_id).encode()


def users_from_pairs(collection: Collection, devices: Iterable[Mapping[str, float]]) -> KVData:
    """Raw pairs (key name -> raw value) of many devices as normalised user data: names
    become key indices and values pass through the collection's ``value_range``."""
    index = collection.key_index()
    indptr = [0]
    keys: list[int] = []
    raw: list[float] = []
    for pairs in devices:
        for name, value in pairs.items():
            try:
                keys.append(index[name])
            except KeyError:
                raise InvalidCollection(
                    f"key {name!r} is not a key of collection {collection.name}"
                ) from None
            raw.append(float(value))
        indptr.append(len(keys))
    key_arr = np.asarray(keys, dtype=np.int64)
    values = collection.normalise(np.asarray(raw, dtype=np.float64))
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    order = np.lexsort((key_arr, rows))  # KVData wants keys sorted within each user
    return KVData(collection.d, np.asarray(indptr, dtype=np.int64), key_arr[order], values[order])
