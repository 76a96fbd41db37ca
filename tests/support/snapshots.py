"""A partition's whole snapshot in one message, rows inline, as the tests build them to
read back with :func:`kvldp.aggregator.statetopic.decode`."""

from __future__ import annotations

from kvldp.aggregator.state import AggregatorState, PartitionState
from kvldp.common.config.collection import Collection


def single_snapshot(collection: Collection, partition: int, state: PartitionState) -> bytes:
    single = AggregatorState(collection)
    single.partitions[partition] = state
    return single.to_bytes()
