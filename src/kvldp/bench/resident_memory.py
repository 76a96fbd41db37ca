"""``kvldp bench memory``: the aggregator's resident memory must stop growing with reports.

A real ``kvldp aggregate`` process folds a fresh collection on an embedded broker; its
RSS (``/proc/<pid>/status``) is read once it has folded each checkpoint's worth of
reports, every time after the fold has settled (two refit intervals with nothing new).

The statistics are fixed-size arrays. What grows is the de-duplication memory, by
design and to a bound: each partition remembers the report ids of the last
``dedup_window`` of record time, at most ``dedup_max_ids`` of them (the benchmark
collection keeps the defaults: 5 minutes, 2,000,000 ids per partition, 4 partitions, 80
to 100 bytes an id). A benchmark topic's reports all fall within one window, so that
memory is full once about 8,000,000 reports are folded. The default checkpoints are
10^5 reports (before), 10^7 (full) and 2x10^7; ``ratio_to_previous`` of the last, the
figure kvldp's target (at most 1.1) is judged on, is what 10^7 more reports added once nothing should
grow: anything beyond noise would be a leak.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from kvldp.bench.kafka_throughput import STALL_S, bench_collection, fill
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection_file import collection_toml
from kvldp.kafka.client_config import KafkaConfig
from kvldp.reliability.processes import AggregatorProcess, total

#: reports per message while filling (the fill is not what is measured)
PER_MESSAGE = 1000
#: reports simulated and published per step (bounds the bench's own memory)
STEP = 1_000_000
REFIT_S = 0.5

MEMORY_COLUMNS = ["reports", "rss_mib", "ratio_to_first", "ratio_to_previous"]


async def _folded(proc: AggregatorProcess, reports: int) -> None:
    """Wait until ``proc`` has folded ``reports`` reports, then two quiet refits."""
    deadline = time.monotonic() + STALL_S
    while total(await asyncio.to_thread(proc.samples), "kvldp_reports_total") < reports:
        if not proc.alive():
            raise RuntimeError(f"the aggregator exited: {proc.log_tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the aggregator did not fold {reports} reports in {STALL_S:.0f} s")
        await asyncio.sleep(0.2)
    await asyncio.sleep(2 * REFIT_S)


async def _measure(bootstrap: str, checkpoints: list[int], seed: int, workdir: Path) -> list[dict[str, Any]]:
    collection = bench_collection("memory")
    path = workdir / "collection.toml"
    path.write_text(collection_toml(collection))
    proc = AggregatorProcess(path, bootstrap, workdir, refit_interval=REFIT_S).start()
    rows: list[dict[str, Any]] = []
    try:
        await proc.ready()
        published = 0
        for target in checkpoints:
            while published < target:
                step = min(STEP, target - published)
                await fill(collection, KafkaConfig.plaintext(bootstrap), step, PER_MESSAGE, seed + published)
                published += step
            await _folded(proc, target)
            mib = proc.rss_bytes() / 2**20
            first, previous = (rows[0]["rss_mib"], rows[-1]["rss_mib"]) if rows else (mib, mib)
            rows.append(
                {
                    "reports": target,
                    "rss_mib": mib,
                    "ratio_to_first": mib / first,
                    "ratio_to_previous": mib / previous,
                }
            )
    finally:
        proc.stop()
    return rows


def bench_memory(checkpoints: list[int] | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """RSS of one aggregator process after each checkpoint (default 1e5, 1e7 and 2e7 reports)."""
    points = sorted(checkpoints or [100_000, 10_000_000, 20_000_000])
    with EmbeddedBroker(0) as broker, tempfile.TemporaryDirectory(prefix="kvldp-bench-memory-") as tmp:
        return asyncio.run(_measure(broker.bootstrap_servers, points, seed, Path(tmp)))
