"""The ``scale_out`` scenario: workers added, stopped and SIGKILLed in a cycle beside
one exporter while canary reports (one per statistics cell) stream in.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import numpy as np

from kvldp.common.messages.wire import WireFormat
from kvldp.reliability.oracle import replay_oracle
from kvldp.reliability.processes import AggregatorProcess
from kvldp.reliability.scenarios.checks import check_canaries, compare, fold_parts
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.waits import (
    folded,
    has_folded,
    until,
)
from kvldp.reliability.scenarios.workers import ACTIONS, WorkerPool, merged_snapshots
from kvldp.reliability.traffic import canaries, publish


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
    pool = WorkerPool(path, bootstrap, workdir, collection.name, rng)
    for _ in range(3):
        await pool.add()
    producer = asyncio.create_task(
        publish(bootstrap, collection.reports_topic, messages, rate=len(messages) / (cycles * 5.0))
    )
    log = []
    for step in range(cycles):
        await asyncio.sleep(rng.uniform(2.0, 5.0))
        log.append(await pool.step(out, ACTIONS[step % len(ACTIONS)]))
    await producer
    while len(pool.alive()) < 3:
        await pool.add()
    done = await until(lambda: has_folded(exporter, cells), 180)
    out.check(done, f"the exporter merged all {cells} canaries")
    await asyncio.sleep(2.0)
    exported = await folded(exporter)
    out.figures["seconds"] = round(time.monotonic() - started, 1)
    merged = await merged_snapshots(collection, bootstrap)
    pool.stop(out)
    out.check(exporter.stop() == 0, "exporter stopped cleanly")
    oracle = await replay_oracle(collection, bootstrap, workdir)
    check_canaries(out, merged, cells)
    out.check(exported == cells, f"exported kvldp_reports_total {exported} = {cells}")
    compare(out, merged, oracle, fold_parts(collection, [{"y": np.arange(cells)}]))
    out.figures.update(
        canaries=cells,
        partitions=collection.aggregate.partitions,
        actions=log,
        workers_started=len(pool.workers),
    )
    return out
