"""The ``broker_restart`` scenario: the in-memory broker restarts mid-stream and forgets
every topic; the aggregator (SIGKILLed once more afterwards) resumes by itself.

It brings its own broker, so it takes no ``bootstrap`` argument.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from kvldp.aggregator.state import CheckpointStore
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.reliability.oracle import replay_oracle
from kvldp.reliability.processes import AggregatorProcess, total
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.waits import (
    checkpointed_after,
    has_folded,
    until,
)
from kvldp.reliability.traffic import publish, report_batches


async def broker_restart(workdir: Path, reports: int = 40_000, batch: int = 50, seed: int = 5) -> Outcome:
    """The (in-memory) broker restarts mid-stream and forgets every topic; the aggregator
    (with checkpoints, and SIGKILLed once afterwards) resumes by itself."""
    out = Outcome("broker_restart")
    broker = EmbeddedBroker(0).start()
    bootstrap = broker.bootstrap_servers
    # 6 partitions: Tansu auto-creates topics with 4 when a client asks first, and the
    # aggregator must fold whatever layout the reborn topic has
    collection, path = make_collection(workdir, "restart", "kvue", 6, partitions=6)
    traffic = report_batches(collection, reports, batch, seed)
    messages, expected = traffic.messages, traffic.stats
    half = len(messages) // 2
    before_reports = sum(m.reports for m in messages[:half])
    state_dir = workdir / f"{collection.name}.state"
    proc = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-a", state_dir=state_dir).start()
    try:
        await proc.ready()
        await publish(bootstrap, collection.reports_topic, messages[:half])
        out.check(await until(lambda: has_folded(proc, before_reports), 60), "first half folded")
        mark = time.time()
        out.check(await until(lambda: checkpointed_after(proc, mark), 30), "first half checkpointed")
        before = await replay_oracle(collection, bootstrap, workdir, "before")
        broker.stop()
        # on the same port, which the clients reconnect to; taken by another process
        # meanwhile, it fails (PortTaken) rather than trust that process's listener
        broker = EmbeddedBroker(broker.port).start()
        started = time.monotonic()
        recreated = await until(lambda: _topic_ready(bootstrap, collection), 90, poll=0.5)
        out.check(recreated, "the reports topic exists again")
        out.figures["seconds_until_topic_exists"] = round(time.monotonic() - started, 1)
        quarter = half + (len(messages) - half) // 2
        await publish(bootstrap, collection.reports_topic, messages[half:quarter])
        proc.kill()  # and once more, on top: the checkpoint spans both epochs
        proc = AggregatorProcess(
            path, bootstrap, workdir, f"{collection.name}-b", state_dir=state_dir
        ).start()
        await proc.ready()
        await publish(bootstrap, collection.reports_topic, messages[quarter:])
        out.check(await until(lambda: has_folded(proc, reports), 120), "every report folded")
        samples = await asyncio.to_thread(proc.samples)
        out.figures["seconds_to_resume"] = round(time.monotonic() - started, 1)
        out.check(proc.stop() == 0, "clean shutdown")
        after = await replay_oracle(collection, bootstrap, workdir, "after")
    finally:
        proc.stop()
        broker.stop()
    state = CheckpointStore(state_dir, collection).load()
    assert state is not None
    both = before.all_stats().add(after.all_stats())
    out.check(state.all_stats() == both, "statistics equal the oracle folds of both epochs")
    out.check(state.all_stats() == expected, "statistics equal the independent fold of every report")
    out.check(state.reports_total == reports, f"{state.reports_total} reports = {reports}")
    resets = total(samples, "kvldp_topic_resets_total")
    out.check(resets == state.resets_total >= 1, f"resets counted ({resets})")
    log = proc.log_path.parent.joinpath(f"{collection.name}-a.log").read_text()
    out.check("was reset" in log, "the reset was logged")
    out.figures.update(reports=reports, partitions_reset=state.resets_total)
    return out


async def _topic_ready(bootstrap: str, collection: Collection) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="kvldp-reliability")
    try:
        await admin.start()
        return collection.reports_topic in set(await admin.list_topics())
    except Exception:  # the broker is still coming up
        return False
    finally:
        await admin.close()
