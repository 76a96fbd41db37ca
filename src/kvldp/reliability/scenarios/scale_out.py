"""The ``scale_out`` scenario: workers added, stopped and SIGKILLed in a cycle beside
one exporter while canary reports (one per statistics cell) stream in.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import numpy as np

from kvldp.aggregator.state import AggregatorState
from kvldp.aggregator.statetopic import StateFollower, decode
from kvldp.common.collection import Collection
from kvldp.common.wire import WireFormat
from kvldp.reliability.oracle import replay_oracle
from kvldp.reliability.processes import AggregatorProcess
from kvldp.reliability.scenarios.checks import compare, fold_parts
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.waits import (
    folded,
    has_folded,
    until,
)
from kvldp.reliability.traffic import canaries, publish

ACTIONS = ("sigkill", "add", "sigterm", "add", "add", "sigkill", "sigterm", "sigkill", "add")


async def scale_out(
    bootstrap: str, workdir: Path, slots: int = 20_000, cycles: int = 5, batch: int = 10, seed: int = 2
) -> Outcome:
    """3 workers and 1 exporter; workers added, stopped and SIGKILLed in a cycle while
    canary reports (one per statistics cell) stream in."""
    out = Outcome("scale_out")
    collection, path = make_collection(workdir, "scale", "grr", slots, partitions=6)
    messages = canaries(collection, batch, seed)
    cells = WireFormat(collection).fields[0].high
    rng = random.Random(seed)
    started = time.monotonic()
    exporter = AggregatorProcess(
        path, bootstrap, workdir, f"{collection.name}-exporter", role="exporter"
    ).start()
    await exporter.ready()
    workers: list[AggregatorProcess] = []

    async def add() -> None:
        w = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-w{len(workers)}", role="worker")
        workers.append(w.start())
        await w.ready()

    for _ in range(3):
        await add()
    producer = asyncio.create_task(
        publish(bootstrap, collection.reports_topic, messages, rate=len(messages) / (cycles * 5.0))
    )
    log = []
    for step in range(cycles):
        await asyncio.sleep(rng.uniform(2.0, 5.0))
        action = ACTIONS[step % len(ACTIONS)]
        alive = [w for w in workers if w.alive()]
        if (action == "add" and len(alive) >= 4) or (action != "add" and len(alive) <= 1):
            action = "sigterm" if action == "add" else "add"
        if action == "add":
            await add()
        elif action == "sigkill":
            rng.choice(alive).kill()
        else:
            victim = rng.choice(alive)
            out.check(victim.stop() == 0, f"{victim.name} stopped cleanly")
        log.append(action)
    await producer
    while len([w for w in workers if w.alive()]) < 3:
        await add()
    done = await until(lambda: has_folded(exporter, cells), 180)
    out.check(done, f"the exporter merged all {cells} canaries")
    await asyncio.sleep(2.0)
    exported = await folded(exporter)
    out.figures["seconds"] = round(time.monotonic() - started, 1)
    merged = await _merged_snapshots(collection, bootstrap)
    for w in workers:
        if w.alive():
            out.check(w.stop() == 0, f"{w.name} stopped cleanly")
    out.check(exporter.stop() == 0, "exporter stopped cleanly")
    oracle = await replay_oracle(collection, bootstrap, workdir)
    counts = merged.all_stats().arrays["counts"][:cells]
    out.check(
        int(counts.max(initial=0)) <= 1, f"no canary counted twice (max cell {int(counts.max(initial=0))})"
    )
    out.check(
        counts.size == cells and int(counts.min()) >= 1,
        f"no canary lost ({int(np.sum(counts == 0))} cells empty)",
    )
    out.check(exported == cells, f"exported kvldp_reports_total {exported} = {cells}")
    compare(out, merged, oracle, fold_parts(collection, [{"y": np.arange(cells)}]))
    out.figures.update(
        canaries=cells, partitions=collection.aggregate.partitions, actions=log, workers_started=len(workers)
    )
    return out


async def _merged_snapshots(collection: Collection, bootstrap: str) -> AggregatorState:
    """The current snapshot of every partition, read from the state topic and merged."""
    follower = StateFollower(collection, bootstrap)
    await follower.start()
    task = asyncio.create_task(follower.follow())
    try:
        await follower.caught_up(timeout=30.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await follower.stop()
    merged = AggregatorState(collection)
    for p, entry in follower.snapshots.items():
        merged.partitions[p] = decode(collection, p, entry.value)
    return merged
