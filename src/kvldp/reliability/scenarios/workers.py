"""Scale-out workers that come and go, and the merged state they leave in the state topic.

The ``scale_out`` and ``state_compaction`` scenarios run ``kvldp aggregate --role worker``
processes beside one exporter and add, stop (SIGTERM) and SIGKILL them in a cycle while
reports stream in; both then read the snapshot of every partition back from the state
topic and merge them, as the exporter does, to check the statistics exactly.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from kvldp.aggregator.state import AggregatorState
from kvldp.aggregator.statetopic import StateFollower, decode
from kvldp.common.config.collection import Collection
from kvldp.reliability.processes import AggregatorProcess
from kvldp.reliability.scenarios.outcome import Outcome

#: the cycle of actions on the workers
ACTIONS = ("sigkill", "add", "sigterm", "add", "add", "sigkill", "sigterm", "sigkill", "add")
#: seconds the exporter may take to read a merged state
CATCH_UP_S = 30.0


class WorkerPool:
    """The workers of one collection: ``<name>-w0``, ``-w1``, ... in order of start."""

    def __init__(self, path: Path, bootstrap: str, workdir: Path, prefix: str, rng: random.Random) -> None:
        self.path = path
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.prefix = prefix
        self.rng = rng
        self.workers: list[AggregatorProcess] = []

    def alive(self) -> list[AggregatorProcess]:
        return [w for w in self.workers if w.alive()]

    async def add(self) -> AggregatorProcess:
        """Start one more worker and wait until it serves its metrics."""
        worker = AggregatorProcess(
            self.path, self.bootstrap, self.workdir, f"{self.prefix}-w{len(self.workers)}", role="worker"
        )
        self.workers.append(worker.start())
        await worker.ready()
        return worker

    async def step(self, out: Outcome, action: str, most: int = 4, fewest: int = 1) -> str:
        """Add a worker, SIGKILL one or stop one (SIGTERM) at random, keeping between
        ``fewest`` and ``most`` alive (an action that would cross a bound is traded for
        its opposite); returns the action taken."""
        alive = self.alive()
        if (action == "add" and len(alive) >= most) or (action != "add" and len(alive) <= fewest):
            action = "sigterm" if action == "add" else "add"
        if action == "add":
            await self.add()
        elif action == "sigkill":
            self.rng.choice(alive).kill()
        else:
            victim = self.rng.choice(alive)
            out.check(victim.stop() == 0, f"{victim.name} stopped cleanly")
        return action

    def stop(self, out: Outcome) -> None:
        """Stop every worker still alive, each cleanly."""
        for worker in self.alive():
            out.check(worker.stop() == 0, f"{worker.name} stopped cleanly")


async def merged_snapshots(collection: Collection, bootstrap: str) -> AggregatorState:
    """The current snapshot of every partition, read from the state topic and merged."""
    follower = StateFollower(collection, bootstrap, pieces=False)
    await follower.start()
    task = asyncio.create_task(follower.follow())
    try:
        if not await follower.caught_up(timeout=CATCH_UP_S):
            raise TimeoutError(f"{collection.state_topic} was not read to its end in {CATCH_UP_S:.0f} s")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await follower.stop()
    merged = AggregatorState(collection)
    for p, entry in follower.snapshots.items():
        merged.partitions[p] = decode(collection, p, entry.value, rows=False)
    return merged
