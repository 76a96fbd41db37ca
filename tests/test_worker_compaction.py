"""Workers compact their time buckets on the rule of role ``all``: a worker's snapshot
stays bounded however long it runs, and the exporter's merge of compacted snapshots
gives exactly role all's statistics and estimates (they are integer counts)."""

from __future__ import annotations

import numpy as np
import pytest

from kvldp.aggregator.ingest import plan
from kvldp.aggregator.merged import MergedExporter
from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.statetopic import decode
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import row
from kvldp.common.messages.wire import WireFormat

from support import Rec
from support.snapshots import single_snapshot

TABLE = {
    "name": "compacted",
    "mechanism": "kvue",
    "epsilon": 1.0,
    "key_count": 3,
    "value_range": [0.0, 1.0],
    "aggregate": {"windows": ["10s", "1m", "all"], "partitions": 2},
}
#: simulated seconds, and the seconds between two fetches (each a housekeeping tick)
HORIZON_S, STEP_S, PER_STEP = 1_000_000, 1_000, 12
#: a never-dialled address: nothing here connects
NOWHERE = "127.0.0.1:9"


class FakeClock:
    """Wall-clock seconds that move only when told."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def reports(c: Collection, wire: WireFormat, n: int, rng: np.random.Generator) -> list[bytes]:
    batch = c.mechanism.perturb_many(KVData.from_pairs(3, [{0: 0.5, 2: -0.5}, {1: 0.25}] * (n // 2)), rng)
    return [wire.encode_report(row(batch, wire.fields, i)) for i in range(n)]


def fold(agg: Aggregator, p: int, values: list[bytes], stamps: np.ndarray) -> None:
    start = agg.state.partition(p).next_offset
    recs = [
        Rec(start + i, int(t), b"d%d" % i, v) for i, (v, t) in enumerate(zip(values, stamps, strict=True))
    ]
    work = plan(agg.state, agg.wire, p, recs)
    assert work is not None and not work.rejected
    work.apply(agg.state)


@pytest.mark.asyncio
async def test_a_worker_snapshot_stays_bounded_and_the_merge_equals_role_all() -> None:
    c = parse_collection(TABLE)
    clock = FakeClock(1.7e9)
    quiet = {"log": lambda _: None, "clock": clock}
    workers = [Aggregator(c, NOWHERE, role="worker", **quiet) for _ in range(2)]  # type: ignore[arg-type]
    whole = Aggregator(c, NOWHERE, role="all", **quiet)  # type: ignore[arg-type]
    rng = np.random.default_rng(11)
    values = reports(c, whole.wire, PER_STEP, rng)
    biggest = {"worker": 0, "all": 0}
    for _ in range(HORIZON_S // STEP_S):
        clock.now += STEP_S
        now_ms = int(clock.now * 1000)
        for p, worker in enumerate(workers):  # each its own partition, many buckets per fetch
            stamps = now_ms - rng.integers(0, STEP_S * 1000, PER_STEP)
            fold(worker, p, values, stamps)
            fold(whole, p, values, stamps)
            await worker._housekeeping()  # what the refit timer runs: no Kafka without a consumer
            biggest["worker"] = max(biggest["worker"], len(single_snapshot(c, p, worker.state.partition(p))))
        whole.compact()
        biggest["all"] = max(
            biggest["all"], *(len(single_snapshot(c, p, s)) for p, s in whole.state.partitions.items())
        )
    limit = whole.state.retention_ms // whole.state.bucket_ms + 1  # type: ignore[operator]
    assert all(len(s.buckets) <= limit for w in workers for s in w.state.partitions.values())
    assert biggest["worker"] <= biggest["all"] < 4096
    assert whole.state.reports_total == 2 * PER_STEP * (HORIZON_S // STEP_S)

    exporter = MergedExporter(c, NOWHERE, **quiet)  # type: ignore[arg-type]
    await exporter.follower.stop()  # never started: nothing is read from Kafka here
    for p, worker in enumerate(workers):  # through the state topic's bytes
        exporter.state.partitions[p] = decode(c, p, single_snapshot(c, p, worker.state.partition(p)))
    clock.now += 0.5  # between fetches: the 10 s window holds only part of the last one
    now_ms = int(clock.now * 1000)
    assert exporter.state.window_stats(now_ms) == whole.state.window_stats(now_ms)
    await exporter.exporter.refresh(exporter.state)
    await whole.exporter.refresh(whole.state)
    merged, alone = exporter.exporter.snapshot, whole.exporter.snapshot
    assert merged is not None and alone is not None
    assert merged.to_json()["windows"] == alone.to_json()["windows"]
    assert merged.fits["1m"].n_reports > 0
