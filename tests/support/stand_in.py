"""A stand-in for the aggregator's aiokafka consumer over one partition's log, and an
aggregator wired to it: the broker surprises (a lagging high watermark, retention past
the aggregator's position, a recreated topic) replayed deterministically, without a broker.

:class:`StandInConsumer` has the methods :class:`~kvldp.aggregator.service.Aggregator`
calls and answers as aiokafka 0.14 does with ``auto_offset_reset="none"``: a fetch at an
offset outside ``[log start, log end]`` raises ``OffsetOutOfRangeError({tp: offset})``
and leaves the position where it was; ``beginning_offsets`` and ``end_offsets`` answer
the true log bounds, while a fetch's high watermark, and (more than KIP-207 lets a broker
do) the next ``end_offsets`` answer, can be made to dip once (:meth:`StandInConsumer.dip`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
from aiokafka import TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from kvldp.aggregator.service import Aggregator
from kvldp.common.config.collection import Collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.stats import Stats
from kvldp.common.messages.wire import WireFormat

from support import Rec

#: the records' timestamp, and the aggregator's clock a second later
STAMP_MS = 1_700_000_000_000


class StandInConsumer:
    """One partition's log (records from ``start`` to ``end``) and a consumer's position in it."""

    def __init__(self, tp: TopicPartition, batch: int = 40) -> None:
        self.tp = tp
        self.batch = batch
        self.log: dict[int, Rec] = {}
        self.start = 0
        self.end = 0
        self.position: int | None = None
        self.seeks = 0
        self.fetches = 0
        self._highwater: int | None = None
        self._dip: int | None = None
        self._listed_dip: int | None = None

    # the log, as a broker changes it
    def append(self, records: list[tuple[bytes, bytes]]) -> None:
        for key, value in records:
            self.log[self.end] = Rec(self.end, STAMP_MS, key, value)
            self.end += 1

    def delete_before(self, offset: int) -> None:
        """Move the log start to ``offset`` (retention, or delete-records)."""
        for o in range(self.start, min(offset, self.end)):
            self.log.pop(o, None)
        self.start = max(self.start, min(offset, self.end))

    def recreate(self) -> None:
        """The topic deleted and created again: an empty log from offset 0."""
        self.log.clear()
        self.start = self.end = 0

    def dip(self, highwater: int, listed: bool = False) -> None:
        """The next fetch's high watermark is ``highwater`` (a new leader catching up);
        with ``listed``, so is the next ``end_offsets`` answer."""
        self._dip = highwater
        self._listed_dip = highwater if listed else None

    # what the aggregator calls
    def assignment(self) -> set[TopicPartition]:
        return {self.tp}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        assert tp == self.tp and offset >= 0
        self.seeks += 1
        self.position = offset

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._highwater

    async def getmany(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Rec]]:
        self.fetches += 1
        assert self.position is not None, "fetch before any seek"
        if not self.start <= self.position <= self.end:
            raise OffsetOutOfRangeError({self.tp: self.position})
        self._highwater = self.end if self._dip is None else self._dip
        self._dip = None
        stop = min(self.end, self.position + self.batch)
        records = [self.log[o] for o in range(self.position, stop)]
        self.position = stop
        return {self.tp: records} if records else {}

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.start for tp in partitions}

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        end, self._listed_dip = (self.end if self._listed_dip is None else self._listed_dip), None
        return {tp: end for tp in partitions}

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        return None

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {self.tp.partition}


class Reports:
    """Valid report records of ``collection`` with distinct report ids, and the statistics
    each one folds to (so an oracle can sum what should have been folded)."""

    def __init__(self, collection: Collection, seed: int) -> None:
        self.collection = collection
        self.wire = WireFormat(collection)
        self.rng = np.random.default_rng(seed)
        self.ids = itertools.count(1)
        self.stats: dict[bytes, dict[str, np.ndarray]] = {}

    def make(self, n: int) -> list[tuple[bytes, bytes]]:
        mech = self.collection.mechanism
        keys = self.rng.integers(0, self.collection.mechanism.d, n)
        values = self.rng.uniform(-1.0, 1.0, n)
        pairs = [{int(k): float(v)} for k, v in zip(keys, values, strict=True)]
        batch = mech.perturb_many(KVData.from_pairs(self.collection.mechanism.d, pairs), self.rng)
        rids = np.fromiter((next(self.ids) for _ in range(n)), dtype=np.uint64, count=n)
        values_bytes = self.wire.encode_many(batch, STAMP_MS, rids)
        out = []
        for i, value in enumerate(values_bytes):
            one = {k: v[i : i + 1] for k, v in batch.items()}
            self.stats[value] = mech.new_stats().fold(one, check=False).arrays
            out.append((f"device-{int(rids[i])}".encode(), value))
        return out

    def total(self, values: Iterator[bytes]) -> dict[str, np.ndarray]:
        """The statistics of these records' reports, summed."""
        total = {k: np.zeros_like(v) for k, v in self.collection.mechanism.new_stats().arrays.items()}
        for value in values:
            for k, v in self.stats[value].items():
                total[k] = total[k] + v
        return total


async def no_topic_admin(*args: object, **kwargs: object) -> list[str]:
    """Stands in for :func:`kvldp.aggregator.topics.ensure_topics` (a reset asks for the
    topics again): there is no broker to ask."""
    return []


def same_stats(stats: Stats, expected: dict[str, np.ndarray]) -> bool:
    return all(np.array_equal(stats.arrays[k], v) for k, v in expected.items())


def aggregator(collection: Collection, consumer: StandInConsumer, lines: list[str]) -> Aggregator:
    """An aggregator (role all, no state directory) reading through ``consumer``."""
    agg = Aggregator(
        collection, "127.0.0.1:1", metrics_port=0, log=lines.append, clock=lambda: STAMP_MS / 1000 + 1
    )
    agg._consumer = consumer  # type: ignore[assignment]
    return agg
