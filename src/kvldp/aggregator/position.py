"""What the broker says about a partition whose reading went off course: reset, records
lost to retention, or nothing at all.

The aggregator reads every partition from its own ``next_offset``. Three things can put
that offset outside the partition's log, and each wants a different answer:

* the topic was reset (an in-memory broker restarted, the topic was recreated): the log
  ends below ``next_offset`` and a new epoch starts at offset 0;
* retention (or ``delete-records``) moved the log start past ``next_offset``: the offsets
  in between can no longer be read; they are counted as lost and reading goes on from
  the log start;
* nothing: a fetch's high watermark can lag for a moment after a leader change (KIP-207),
  so one reading below ``next_offset`` proves nothing, and re-reading the partition on
  it would count every report twice.

So a suspicion (a high watermark below ``next_offset``, an out-of-range answer, records
that start past ``next_offset``) is judged only on the log start and end offsets asked of
the broker (ListOffsets, which the partition's current leader answers and which KIP-207
makes refuse while its high watermark is still catching up); a reset needs the end to
be below ``next_offset`` on two fresh requests.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

#: seconds one ListOffsets request may take before the judgement is left for later
ASK_TIMEOUT = 5.0


class OffsetsSource(Protocol):
    """The part of a consumer that answers with a partition's log start and end."""

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]: ...

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]: ...


class Kind(Enum):
    """What a partition's log says about ``next_offset``."""

    FINE = "fine"  # next_offset is inside the log: read on from it
    LOST = "lost"  # the log starts past next_offset: the offsets in between are gone
    RESET = "reset"  # the log ends below next_offset on two fresh requests
    UNKNOWN = "unknown"  # the broker did not answer: judge again later


@dataclass(frozen=True)
class Verdict:
    """A judgement and the log bounds it was made on (-1: not known)."""

    kind: Kind
    start: int = -1
    end: int = -1

    def lost(self, next_offset: int) -> int:
        """Offsets deleted before they were read."""
        return max(0, self.start - next_offset) if self.kind is Kind.LOST else 0


async def bounds(consumer: OffsetsSource, tp: TopicPartition) -> tuple[int, int] | None:
    """The log start and end offsets of ``tp``, freshly asked; None if the broker did not say."""
    try:
        async with asyncio.timeout(ASK_TIMEOUT):
            start = (await consumer.beginning_offsets([tp]))[tp]
            end = (await consumer.end_offsets([tp]))[tp]
    except (KafkaError, TimeoutError, KeyError):
        return None
    return start, end


async def judge(consumer: OffsetsSource, tp: TopicPartition, next_offset: int) -> Verdict:
    """Where ``next_offset`` stands in ``tp``'s log, on the broker's evidence."""
    first = await bounds(consumer, tp)
    if first is None:
        return Verdict(Kind.UNKNOWN)
    start, end = first
    if start > next_offset:
        return Verdict(Kind.LOST, start, end)
    if end >= next_offset:
        return Verdict(Kind.FINE, start, end)
    again = await bounds(consumer, tp)  # below on a fresh request too, or it was a moment's lag
    if again is None:
        return Verdict(Kind.UNKNOWN)
    start, end = again
    if start > next_offset:
        return Verdict(Kind.LOST, start, end)
    return Verdict(Kind.RESET if end < next_offset else Kind.FINE, start, end)
