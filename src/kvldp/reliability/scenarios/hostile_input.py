"""The ``hostile_input`` scenario: malformed messages of every kind from
:mod:`kvldp.reliability.hostile` spread through a stream of good ones; each must be
dead-lettered with its bytes, reason and source.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import numpy as np

from kvldp.aggregator.state import CheckpointStore
from kvldp.common.config.collection import Collection
from kvldp.common.messages.wire import REASONS, WireFormat
from kvldp.reliability.hostile import ANY, HostileFactory
from kvldp.reliability.oracle import replay_oracle
from kvldp.reliability.processes import AggregatorProcess, total
from kvldp.reliability.scenarios.checks import compare
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.readback import read_topic
from kvldp.reliability.scenarios.waits import (
    has_folded,
    sum_reached,
    until,
)
from kvldp.reliability.traffic import Message, publish, report_batches


async def hostile_input(
    bootstrap: str, workdir: Path, hostile: int = 10_000, reports: int = 20_000, seed: int = 4
) -> Outcome:
    """``hostile`` malformed messages of every kind spread through a stream of good ones."""
    out = Outcome("hostile_input")
    collection, path = make_collection(workdir, "hostile", "pckv_ue", 16, partitions=2)
    traffic = report_batches(collection, reports, 20, seed)
    warmup, rest = traffic.messages[:100], traffic.messages[100:]
    factory = HostileFactory(WireFormat(collection), int(time.time() * 1000))
    bad = factory.make(hostile, seed)
    rng = np.random.default_rng(seed)
    keys = [f"attacker-{int(k)}".encode() for k in rng.integers(0, 1000, size=hostile)]
    stream: list[Message] = rest + [
        Message(key, h.value, h.timestamp_ms) for key, h in zip(keys, bad, strict=True)
    ]
    order = rng.permutation(len(stream))
    stream = [stream[i] for i in order]
    state_dir = workdir / f"{collection.name}.state"
    proc = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-a", state_dir=state_dir).start()
    await proc.ready()
    await publish(bootstrap, collection.reports_topic, warmup)
    await until(lambda: has_folded(proc, sum(m.reports for m in warmup)), 60)
    rss_before = proc.rss_bytes()
    started = time.monotonic()
    await publish(bootstrap, collection.reports_topic, stream)
    reached = await until(
        lambda: sum_reached(proc, ("kvldp_reports_total", "kvldp_reports_rejected_total"), reports + hostile),
        180,
    )
    out.check(reached, "every message processed")
    out.figures["seconds"] = round(time.monotonic() - started, 1)
    await asyncio.sleep(1.0)
    rss_after = proc.rss_bytes()
    samples = await asyncio.to_thread(proc.samples)
    out.check(proc.alive(), "the aggregator never crashed")
    out.check(proc.stop() == 0, "clean shutdown")
    out.check("Traceback" not in proc.log_path.read_text(errors="replace"), "no traceback in the log")
    letters = await read_topic(bootstrap, collection.dlq_topic, hostile)
    out.check(len(letters) == hostile, f"exactly {hostile} dead letters (got {len(letters)})")
    out.check(
        all(_good_headers(dict(h), collection) for _, h in letters),
        "every dead letter names its reason and source",
    )
    sent = Counter((h.value, h.reason) for h in bad if h.reason != ANY)
    got = Counter((v, dict(hd)["reason"].decode()) for v, hd in letters)
    out.check(
        not (sent - got),
        f"each hostile message dead-lettered with its original bytes and reason: missing {list((sent - got).items())[:3]}",
    )
    out.check(
        Counter(h.value for h in bad) == Counter(v for v, _ in letters),
        "dead-letter bytes are exactly the hostile bytes",
    )
    oracle = await replay_oracle(collection, bootstrap, workdir)
    state = CheckpointStore(state_dir, collection).load()
    assert state is not None
    compare(out, state, oracle, traffic.stats)
    out.check(
        state.rejected_totals() == oracle.rejected_totals(), "rejections equal the oracle's, reason by reason"
    )
    out.check(
        total(samples, "kvldp_reports_total") == reports, "kvldp_reports_total counts every good report"
    )
    growth = (rss_after - rss_before) / 2**20
    out.check(growth < 50, f"RSS growth {growth:.1f} MB < 50 MB")
    reasons = Counter(dict(hd)["reason"].decode() for _, hd in letters)
    out.figures.update(
        hostile=hostile,
        kinds=len(factory.kinds),
        good_reports=reports,
        rss_before_mb=round(rss_before / 2**20, 1),
        rss_growth_mb=round(growth, 1),
        reasons=dict(sorted(reasons.items())),
    )
    return out


def _good_headers(headers: dict[str, bytes], collection: Collection) -> bool:
    try:
        return (
            headers["reason"].decode() in REASONS
            and bool(headers["detail"])
            and headers["source_topic"].decode() == collection.reports_topic
            and 0 <= int(headers["source_partition"]) < collection.aggregate.partitions
            and int(headers["source_offset"]) >= 0
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return False
