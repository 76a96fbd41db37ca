"""The ``duplicates`` scenario: messages re-published as a retrying producer would, with
report ids (counted once, across a SIGKILL that lands while the aggregator folds them)
and without (all folded).

Its independent oracle applies the documented de-duplication rule one report at a time.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from kvldp.aggregator.state import CheckpointStore
from kvldp.reliability.oracle import replay_oracle
from kvldp.reliability.processes import AggregatorProcess, total
from kvldp.reliability.scenarios.checks import compare, fold_parts
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.waits import (
    drain,
    folded_sum,
    joined,
    sum_reached,
    until,
)
from kvldp.reliability.traffic import Message, publish, report_batches

#: seconds over which the first half of the stream is published, so that the kill can land
#: while the aggregator is still folding it
STREAM_SECONDS = 3.0
#: the counters of the reports an aggregator has processed: folded, or dropped as duplicates
PROCESSED = ("kvldp_reports_total", "kvldp_duplicates_total")


def _with_resends(
    messages: list[Message], fraction: float, rng: np.random.Generator, late: float = 0.0, late_gap: int = 0
) -> tuple[list[Message], list[int]]:
    """``messages`` with a ``fraction`` of them sent again 1-500 messages later (and a
    ``late`` fraction more than ``late_gap`` messages later); returns the stream and, for
    each of its messages, the index of the original."""
    n = len(messages)
    order: list[tuple[float, int]] = [(float(i), i) for i in range(n)]
    for i in rng.choice(n, size=int(fraction * n), replace=False):
        order.append((i + rng.integers(1, 500) + 0.5, int(i)))
    for i in rng.choice(n, size=int(late * n), replace=False):
        order.append((i + late_gap + rng.integers(1, 500) + 0.5, int(i)))
    order.sort()
    return [messages[i] for _, i in order], [i for _, i in order]


def _sequential_dedup(rid_lists: list[np.ndarray[Any, Any]], horizon: int) -> list[np.ndarray[Any, Any]]:
    """The documented rule with ``dedup_max_ids = dedup_horizon`` (the last ``horizon``
    tagged reports), one report at a time (the scenario's independent oracle)."""
    window: deque[int] = deque(maxlen=horizon)
    seen: Counter[int] = Counter()
    keep = []
    for rids in rid_lists:
        mask = np.ones(rids.shape[0], dtype=bool)
        for j, rid in enumerate(rids.tolist()):
            if rid == 0:
                continue
            if seen[rid] > 0:
                mask[j] = False
            if len(window) == horizon:
                old = window.popleft()
                seen[old] -= 1
            window.append(rid)
            seen[rid] += 1
        keep.append(mask)
    return keep


async def duplicates(
    bootstrap: str, workdir: Path, reports: int = 20_000, fraction: float = 0.1, seed: int = 3
) -> Outcome:
    """10% of messages re-published (producer retries). With report ids they are counted
    once, across a SIGKILL while the first half streams in; without ids they cannot be
    told apart and are all folded."""
    out = Outcome("duplicates")
    rng = np.random.default_rng(seed)
    horizon = 5_000
    # the whole stream is stamped within seconds, inside any dedup_window: a cap equal to the
    # horizon leaves the count alone to decide, which the oracle follows report by report
    tagged, tagged_path = make_collection(
        workdir, "dup-rid", "kvue", 6, partitions=1, dedup_horizon=horizon, dedup_max_ids=horizon
    )
    plain, plain_path = make_collection(workdir, "dup-none", "kvue", 6, partitions=1)
    # mostly single-report messages (devices), some gateway batches of 5
    singles = report_batches(tagged, reports // 2, 1, seed)
    batches = report_batches(tagged, reports - reports // 2, 5, seed + 1)
    originals = singles.messages + batches.messages
    parts = singles.parts + batches.parts
    rids = singles.rids + batches.rids
    stream, index = _with_resends(originals, fraction, rng, late=0.01, late_gap=2 * horizon)
    keep = _sequential_dedup([rids[i] for i in index], horizon)
    expected = fold_parts(
        tagged, [{k: v[m] for k, v in parts[i].items()} for i, m in zip(index, keep, strict=True)]
    )
    expected_dups = int(sum(int(np.sum(~m)) for m in keep))
    resent_reports = sum(parts[i]["j"].shape[0] for i in index) - reports
    # 1. with ids, and a SIGKILL in the middle of folding the first half: once the process
    # owns its partition, that half streams over ~3 s, and the kill comes as soon as the
    # process has processed some of it
    state_dir = workdir / f"{tagged.name}.state"
    proc = AggregatorProcess(tagged_path, bootstrap, workdir, f"{tagged.name}-a", state_dir=state_dir).start()
    await proc.ready()
    await until(partial(joined, proc, tagged.aggregate.partitions), 60, poll=0.1)
    half = len(stream) // 2
    first_half_reports = sum(parts[i]["j"].shape[0] for i in index[:half])
    sending = asyncio.create_task(
        publish(bootstrap, tagged.reports_topic, stream[:half], rate=half / STREAM_SECONDS)
    )
    await until(partial(sum_reached, proc, PROCESSED, 1), 60, poll=0.1)
    at_kill = int(await folded_sum(proc, PROCESSED))
    proc.kill()
    await sending
    out.check(
        0 < at_kill < first_half_reports,
        f"the kill landed mid-fold: {at_kill} of the first half's {first_half_reports} reports processed",
    )
    proc = AggregatorProcess(tagged_path, bootstrap, workdir, f"{tagged.name}-b", state_dir=state_dir).start()
    await proc.ready()
    await publish(bootstrap, tagged.reports_topic, stream[half:])
    samples = await drain(out, proc, PROCESSED, reports + resent_reports, 120)
    state = CheckpointStore(state_dir, tagged).load()
    assert state is not None
    compare(out, state, await replay_oracle(tagged, bootstrap, workdir), expected)
    out.check(
        state.duplicates_total == expected_dups, f"duplicates {state.duplicates_total} = {expected_dups}"
    )
    out.check(
        total(samples, "kvldp_duplicates_total") == expected_dups, "kvldp_duplicates_total says the same"
    )
    # 2. the same stream without ids
    untagged = report_batches(plain, reports // 2, 1, seed, with_rids=False).messages
    untagged += report_batches(plain, reports - reports // 2, 5, seed + 1, with_rids=False).messages
    plain_msgs = [untagged[i] for i in index]
    proc = AggregatorProcess(plain_path, bootstrap, workdir, f"{plain.name}-a").start()
    await proc.ready()
    await publish(bootstrap, plain.reports_topic, plain_msgs)
    plain_samples = await drain(out, proc, ("kvldp_reports_total",), reports + resent_reports, 120)
    out.check(
        total(plain_samples, "kvldp_reports_total") == reports + resent_reports
        and total(plain_samples, "kvldp_duplicates_total") == 0,
        "without ids every resend is folded as a fresh report",
    )
    out.figures.update(
        reports=reports,
        messages_published=len(stream),
        processed_at_kill=at_kill,
        resent_reports=resent_reports,
        duplicates_dropped=state.duplicates_total,
        late_resends_folded=resent_reports - expected_dups,
        untagged_folded=int(total(plain_samples, "kvldp_reports_total")),
    )
    return out
