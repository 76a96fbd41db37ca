"""The ``budget_ledger`` scenario: the per-device privacy budget ledger and device book
across a SIGKILL, over-spending devices, new devices, the next day and a closed window.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.data.schema import Report
from kvldp.common.messages.wire import WireFormat
from kvldp.reliability.processes import AggregatorProcess, Samples, total
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.readback import read_topic
from kvldp.reliability.scenarios.waits import (
    checkpointed_after,
    drain,
    has_folded,
    until,
)
from kvldp.reliability.traffic import Message, publish


async def budget_ledger(
    bootstrap: str, workdir: Path, devices: int = 300, limit: int = 2, seed: int = 6
) -> Outcome:
    """``limit`` reports per device per day: the ledger survives a SIGKILL, refuses the
    excess as ``budget_exceeded``, opens a new window on the next day and refuses reports
    stamped in a closed window. The collection has a privacy table, so the aggregator keeps
    a device book too: every device's spent epsilon survives the SIGKILL exactly, and the
    checkpoint keeps the books and the remembered report ids in segments beside a head
    that holds neither."""
    out = Outcome("budget_ledger")
    # waits grow with the fleet: a million devices are millions of single-report messages
    patience = 60 + devices / 5_000
    collection, path = make_collection(
        workdir,
        "budget",
        "kvue",
        4,
        privacy={"lifetime_epsilon": 1e9},
        partitions=2,
        max_reports_per_device=limit,
        budget_window="1d",
    )
    sends = partial(_sends, WireFormat(collection), np.random.default_rng(seed))
    day = 86_400_000
    # the first day is yesterday, so that the next one is today: a record stamped ahead of
    # the aggregator's clock is refused as record_future (aggregate.max_record_lead)
    now = int(time.time() * 1000) - day
    ids = [f"phone-{i}" for i in range(devices)]
    fresh = [f"tablet-{i}" for i in range(devices // 3)]
    state_dir = workdir / f"{collection.name}.state"
    proc = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-a", state_dir=state_dir).start()
    await proc.ready()
    await publish(bootstrap, collection.reports_topic, sends(ids, limit, now))
    out.check(await until(lambda: has_folded(proc, devices * limit), patience), "the budgeted reports folded")
    mark = time.time()
    out.check(await until(lambda: checkpointed_after(proc, mark), 30), "checkpointed")
    proc.kill()
    proc = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-b", state_dir=state_dir).start()
    await proc.ready()
    phase2 = (
        sends(ids, 2, now)  # over budget: refused, though the aggregator restarted
        + sends(fresh, 1, now)  # new devices: admitted
        + sends(ids[:50], limit, now + day)  # the next day: a fresh budget
        + sends(ids[50:60], 1, now - 3 * day)  # stamped in a closed window: refused
    )
    await publish(bootstrap, collection.reports_topic, phase2)
    admitted = devices * limit + len(fresh) + 50 * limit
    refused = 2 * devices + 10
    samples = await drain(
        out, proc, ("kvldp_reports_total", "kvldp_reports_rejected_total"), admitted + refused, patience
    )
    budget = _check_ledger(out, samples, collection, admitted, refused, devices + len(fresh))
    head, segments = _check_checkpoint(out, state_dir, collection.name, ids)
    letters = await read_topic(bootstrap, collection.dlq_topic, refused)
    out.check(
        len(letters) == refused and all(dict(h)["reason"] == b"budget_exceeded" for _, h in letters),
        "the refused messages are dead-lettered as budget_exceeded",
    )
    out.figures.update(
        devices=devices + len(fresh),
        limit=limit,
        admitted=admitted,
        refused=refused,
        privacy_budget_epsilon=budget,
        checkpoint_head_bytes=head,
        checkpoint_segment_bytes=segments,
    )
    return out


def _sends(wire: WireFormat, rng: np.random.Generator, ids: list[str], count: int, ts: int) -> list[Message]:
    """``count`` random single-report messages of each of ``ids``, stamped ``ts``."""
    out: list[Message] = []
    for _ in range(count):
        for device in ids:
            report: Report = {"j": int(rng.integers(0, 4)), "s": int(rng.integers(0, 3))}
            out.append(
                Message(device.encode(), wire.encode_report(report, rid=int(rng.integers(1, 2**63))), ts, 1)
            )
    return out


def _check_ledger(
    out: Outcome, samples: Samples, collection: Collection, admitted: int, refused: int, devices: int
) -> float | None:
    """The aggregator's counters after the second phase: what it admitted and refused as
    ``budget_exceeded``, the budget it exports and every device's spent epsilon (each
    admitted report once). Returns the exported budget."""
    name = (("collection", collection.name),)
    out.check(
        total(samples, "kvldp_reports_total") == admitted,
        f"{total(samples, 'kvldp_reports_total')} admitted = {admitted}",
    )
    exceeded = samples.get(
        ("kvldp_reports_rejected_total", (("collection", collection.name), ("reason", "budget_exceeded"))), 0
    )
    out.check(exceeded == refused, f"budget_exceeded {exceeded} = {refused}")
    limit = collection.aggregate.max_reports_per_device
    budget = samples.get(("kvldp_privacy_budget_epsilon", name))
    out.check(
        budget == collection.epsilon * limit,
        f"kvldp_privacy_budget_epsilon {budget} = {collection.epsilon * limit}",
    )
    spent = (
        samples.get(("kvldp_device_privacy_spent_epsilon_count", name)),
        samples.get(("kvldp_device_privacy_spent_epsilon_sum", name)),
    )
    booked = (devices, collection.epsilon * admitted)
    out.check(spent == booked, f"spent epsilon (devices, sum) {spent} = {booked}: every admitted report once")
    return budget


def _check_checkpoint(out: Outcome, state_dir: Path, name: str, ids: list[str]) -> tuple[int, int]:
    """The checkpoint keeps the device books and report ids in segments, its head holds
    neither, and no device id is stored. Returns the bytes of the head and of the segments."""
    head = (state_dir / f"{name}.checkpoint").read_bytes()
    segments = [p.read_bytes() for p in sorted((state_dir / f"{name}.segments").iterdir())]
    bound = 64 * 1024  # the statistics, counters and filters' settings, whatever the fleet
    out.check(
        len(head) < bound and sum(map(len, segments)) > 8 * len(ids),
        f"the checkpoint head holds no per-device rows or report ids ({len(head)} bytes < {bound}); "
        f"its {len(segments)} segments do ({sum(map(len, segments))} bytes)",
    )
    stored = [head, *segments]
    out.check(not any(d.encode() in b for d in ids[:20] for b in stored), "no device id is stored")
    return len(head), sum(map(len, segments))
