"""Waiting on a running ``kvldp aggregate`` process through its metrics.

The scenarios poll a process's Prometheus counters (reports folded, rejected, duplicates,
the last checkpoint) until they reach a target or a timeout, then go on with the next
hostile step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from functools import partial

from kvldp.reliability.processes import AggregatorProcess, Samples, total
from kvldp.reliability.scenarios.outcome import Outcome


async def until(check: Callable[[], Awaitable[bool]], timeout: float, poll: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(poll)
    return False


async def joined(proc: AggregatorProcess, partitions: int) -> bool:
    """The process has fetched from every partition (its lag is known for each)."""
    samples = await asyncio.to_thread(proc.samples)
    return sum(1 for (name, _) in samples if name == "kvldp_consumer_lag_messages") >= partitions


async def folded(proc: AggregatorProcess, name: str = "kvldp_reports_total") -> float:
    return total(await asyncio.to_thread(proc.samples), name)


async def has_folded(proc: AggregatorProcess, count: int, name: str = "kvldp_reports_total") -> bool:
    return await folded(proc, name) >= count


async def folded_sum(proc: AggregatorProcess, names: tuple[str, ...]) -> float:
    """The sum of the process's counters ``names``."""
    samples = await asyncio.to_thread(proc.samples)
    return sum(total(samples, n) for n in names)


async def sum_reached(proc: AggregatorProcess, names: tuple[str, ...], count: int) -> bool:
    return await folded_sum(proc, names) >= count


async def drain(
    out: Outcome, proc: AggregatorProcess, names: tuple[str, ...], count: int, timeout: float
) -> Samples:
    """Wait until the process's counters ``names`` add up to ``count``, then stop it
    cleanly; returns its last metrics."""
    out.check(
        await until(partial(sum_reached, proc, names, count), timeout), f"{proc.name} processed {count}"
    )
    samples = await asyncio.to_thread(proc.samples)
    out.check(proc.stop() == 0, f"{proc.name} shut down cleanly")
    return samples


async def checkpointed_after(proc: AggregatorProcess, mark: float) -> bool:
    samples = await asyncio.to_thread(proc.samples)
    return total(samples, "kvldp_last_checkpoint_timestamp_seconds") > mark


async def sent(progress: list[int], count: int) -> bool:
    """:func:`~kvldp.reliability.traffic.publish`'s progress has reached ``count`` messages."""
    return progress[0] >= count
