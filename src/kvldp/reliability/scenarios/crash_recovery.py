"""The ``crash_recovery`` scenario: the aggregator SIGKILLed at random moments while
reports stream in, restarted each time from its checkpoints.
"""

from __future__ import annotations

import asyncio
import random
import time
from functools import partial
from pathlib import Path

from kvldp.aggregator.state import CheckpointStore
from kvldp.reliability.oracle import replay_oracle
from kvldp.reliability.processes import AggregatorProcess
from kvldp.reliability.scenarios.checks import compare
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.waits import (
    folded,
    has_folded,
    joined,
    until,
)
from kvldp.reliability.traffic import publish, report_batches


async def crash_recovery(
    bootstrap: str, workdir: Path, reports: int = 100_000, kills: int = 5, batch: int = 100, seed: int = 1
) -> Outcome:
    """``reports`` in batch messages while the aggregator is SIGKILLed ``kills`` times at
    random moments and restarted from its checkpoints."""
    out = Outcome("crash_recovery")
    collection, path = make_collection(workdir, "kills", "kvue", 8, windows=["1m", "all"])
    traffic = report_batches(collection, reports, batch, seed)
    messages, expected = traffic.messages, traffic.stats
    state_dir = workdir / f"{collection.name}.state"
    rng = random.Random(seed)
    started = time.monotonic()
    size = -(-len(messages) // (kills + 1))
    segments = [messages[i : i + size] for i in range(0, len(messages), size)]
    at_kill: list[int] = []
    for k in range(kills):
        proc = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-{k}", state_dir=state_dir)
        await proc.start().ready()
        # once the process owns its partitions (a rejoin first waits out the dead member),
        # stream a segment over ~3 s and kill at a random moment inside it
        await until(partial(joined, proc, collection.aggregate.partitions), 60, poll=0.1)
        segment = segments[k]
        sending = asyncio.create_task(
            publish(bootstrap, collection.reports_topic, segment, rate=len(segment) / 3.0)
        )
        await asyncio.sleep(rng.uniform(0.2, 2.8))
        at_kill.append(int(await folded(proc)))
        proc.kill()
        await sending
    final = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-final", state_dir=state_dir)
    await final.start().ready()
    for segment in segments[kills:]:
        await publish(bootstrap, collection.reports_topic, segment)
    done = await until(lambda: has_folded(final, reports), 120)
    out.check(done, f"all {reports} reports folded after the last restart")
    await asyncio.sleep(1.5)  # time for a late double count to show up
    out.figures["seconds"] = round(time.monotonic() - started, 1)
    out.check(final.stop() == 0, "clean shutdown")
    state = CheckpointStore(state_dir, collection).load()
    out.check(state is not None, "a checkpoint exists")
    oracle = await replay_oracle(collection, bootstrap, workdir)
    if state is not None:
        compare(out, state, oracle, expected)
        out.check(not state.rejected_totals(), "nothing rejected")
    out.figures.update(kills=kills, messages=len(messages), reports=reports, folded_at_each_kill=at_kill)
    out.check(
        all(a < b for a, b in zip([0, *at_kill], at_kill, strict=False)) and at_kill[-1] < reports,
        f"every kill landed mid-stream, after its process had folded something: {at_kill}",
    )
    return out
