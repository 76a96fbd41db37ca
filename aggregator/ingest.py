"""From fetched records to a fold: decode, validate, bucket — no I/O, no mutation.

The consumer calls :func:`plan` for each partition's fetched records, writes the
plan's rejected records to the dead-letter topic, and only once those writes are
acknowledged applies the plan to the state (:meth:`Plan.apply`). A record is never
folded twice: records below the partition's ``next_offset`` are dropped here.
Everything per report is columnar numpy; the only Python loop is over messages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from aggregator.state import AggregatorState
from common.primitives import IntArray
from common.schema import ReportBatch
from common.wire import WireFormat


class Record(Protocol):
    """What a fetched Kafka record (or a recorded one) offers."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


@dataclass(frozen=True)
class Rejected:
    """A record that goes to the dead-letter topic, with its reason."""

    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    detail: str


@dataclass(frozen=True)
class Plan:
    """The effect of one fetch of one partition, ready to apply."""

    partition: int
    reports: ReportBatch
    buckets: IntArray | None
    next_offset: int
    rejected: list[Rejected]

    @property
    def n_reports(self) -> int:
        return next(iter(self.reports.values())).shape[0] if self.reports else 0

    def apply(self, state: AggregatorState) -> None:
        counts = Counter(r.reason for r in self.rejected)
        state.fold(self.partition, self.reports, self.buckets, self.next_offset, counts)


def plan(state: AggregatorState, wire: WireFormat, partition: int, records: Sequence[Record]) -> Plan | None:
    """Decode the records at or after the partition's next offset; None if there are none."""
    start = state.partition(partition).next_offset
    fresh = [r for r in records if r.offset >= start]
    if not fresh:
        return None
    decoded = wire.decode([r.value for r in fresh])
    timestamps = np.fromiter((r.timestamp for r in fresh), dtype=np.int64, count=len(fresh))
    buckets = state.buckets_of(timestamps[decoded.message])
    rejected = [
        Rejected(fresh[i].offset, fresh[i].key, fresh[i].value, reason, detail)
        for i, reason, detail in decoded.rejected
    ]
    return Plan(partition, decoded.reports, buckets, fresh[-1].offset + 1, rejected)
