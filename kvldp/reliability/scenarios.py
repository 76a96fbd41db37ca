"""The reliability scenarios (issue 6), each checked against an oracle.

Every scenario drives the real ``kvldp aggregate`` processes against a real broker,
does something hostile to them (SIGKILLs, rebalances, resends, garbage, a broker that
forgets everything), then compares the aggregator's integer statistics with

* the **linear-replay oracle** — the same topic recorded and folded in one clean pass —
  and, where the scenario makes its own data,
* an **independent fold** of the reports it published, computed without Kafka.

A scenario returns an :class:`Outcome`: the figures it measured and the checks that
failed (none, when it passes). ``tests/reliability`` runs each at a fast scale in
``make test``; ``kvldp bench reliability`` runs the full scale.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from kvldp.aggregator.state import AggregatorState, CheckpointStore
from kvldp.aggregator.statetopic import StateFollower, decode
from kvldp.broker import EmbeddedBroker, free_port
from kvldp.common.collection import Collection, collection_toml, parse_collection
from kvldp.common.schema import Report, ReportBatch
from kvldp.common.stats import Stats
from kvldp.common.wire import REASONS, WireFormat
from kvldp.reliability import NAMES
from kvldp.reliability.hostile import ANY, HostileFactory
from kvldp.reliability.oracle import replay_oracle
from kvldp.reliability.processes import AggregatorProcess, Samples, total
from kvldp.reliability.traffic import Message, canaries, publish, report_batches


@dataclass
class Outcome:
    """What a scenario measured, and which of its checks failed."""

    name: str
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)

    @property
    def passed(self) -> bool:
        return not self.failures


def make_collection(
    workdir: Path, label: str, mechanism: str, d: int, **aggregate: Any
) -> tuple[Collection, Path]:
    """A collection with a fresh name (its own topics and group), written for the CLI."""
    table = {
        "name": f"rel-{label}-{secrets.token_hex(3)}",
        "mechanism": mechanism,
        "epsilon": 1.0,
        "key_count": d,
        "value_range": [0.0, 1.0],
        "aggregate": {"windows": ["all"], "estimators": ["unbiased"], "refit_interval_s": 1.0, **aggregate},
    }
    collection = parse_collection(table)
    path = workdir / f"{collection.name}.toml"
    path.write_text(collection_toml(collection))
    return collection, path


async def until(check: Callable[[], Awaitable[bool]], timeout: float, poll: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(poll)
    return False


async def folded(proc: AggregatorProcess, name: str = "kvldp_reports_total") -> float:
    return total(await asyncio.to_thread(proc.samples), name)


def fold_parts(collection: Collection, parts: list[ReportBatch]) -> Stats:
    stats = collection.mechanism.new_stats()
    for part in parts:
        stats.fold(part)
    return stats


def _compare(outcome: Outcome, got: AggregatorState, oracle: AggregatorState, expected: Stats | None) -> None:
    outcome.check(got.all_stats() == oracle.all_stats(), "statistics equal the linear-replay oracle")
    if expected is not None:
        outcome.check(
            got.all_stats() == expected, "statistics equal the independent fold of the published reports"
        )
    offsets = {p: s.next_offset for p, s in got.partitions.items() if s.next_offset}
    outcome.check(
        offsets == {p: s.next_offset for p, s in oracle.partitions.items() if s.next_offset},
        f"every partition read to its end: {offsets}",
    )
    outcome.figures["reports_folded"] = got.reports_total
    outcome.figures["oracle_reports"] = oracle.reports_total


# ---------------------------------------------------------------------- 1. SIGKILLs
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
        await until(partial(_joined, proc, collection.aggregate.partitions), 60, poll=0.1)
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
    done = await until(lambda: _reached(final, reports), 120)
    out.check(done, f"all {reports} reports folded after the last restart")
    await asyncio.sleep(1.5)  # a double count arriving late would show now
    out.figures["seconds"] = round(time.monotonic() - started, 1)
    out.check(final.stop() == 0, "clean shutdown")
    state = CheckpointStore(state_dir, collection).load()
    out.check(state is not None, "a checkpoint exists")
    oracle = await replay_oracle(collection, bootstrap, workdir)
    if state is not None:
        _compare(out, state, oracle, expected)
        out.check(not state.rejected_totals(), "nothing rejected")
    out.figures.update(kills=kills, messages=len(messages), reports=reports, folded_at_each_kill=at_kill)
    out.check(
        all(a < b for a, b in zip([0, *at_kill], at_kill, strict=False)) and at_kill[-1] < reports,
        f"every kill landed mid-stream, after its process had folded something: {at_kill}",
    )
    return out


async def _joined(proc: AggregatorProcess, partitions: int) -> bool:
    """The process has fetched from every partition (its lag is known for each)."""
    samples = await asyncio.to_thread(proc.samples)
    return sum(1 for (name, _) in samples if name == "kvldp_consumer_lag_messages") >= partitions


async def _reached(proc: AggregatorProcess, count: int, name: str = "kvldp_reports_total") -> bool:
    return await folded(proc, name) >= count


# ---------------------------------------------------------------------- 2. scale-out
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
    done = await until(lambda: _reached(exporter, cells), 180)
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
    _compare(out, merged, oracle, fold_parts(collection, [{"y": np.arange(cells)}]))
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


# ---------------------------------------------------------------------- 3. duplicates
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
    """The documented rule, one report at a time (the scenario's independent oracle)."""
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
    once, across a SIGKILL; without ids they cannot be told apart and are all folded."""
    out = Outcome("duplicates")
    rng = np.random.default_rng(seed)
    horizon = 5_000
    tagged, tagged_path = make_collection(workdir, "dup-rid", "kvue", 6, partitions=1, dedup_horizon=horizon)
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
    # 1. with ids, and a SIGKILL halfway
    state_dir = workdir / f"{tagged.name}.state"
    proc = AggregatorProcess(tagged_path, bootstrap, workdir, f"{tagged.name}-a", state_dir=state_dir).start()
    await proc.ready()
    half = len(stream) // 2
    await publish(bootstrap, tagged.reports_topic, stream[:half])
    await until(lambda: _reached(proc, 1), 60)
    await asyncio.sleep(1.0)
    proc.kill()
    proc = AggregatorProcess(tagged_path, bootstrap, workdir, f"{tagged.name}-b", state_dir=state_dir).start()
    await proc.ready()
    await publish(bootstrap, tagged.reports_topic, stream[half:])
    samples = await _drain(
        out, proc, ("kvldp_reports_total", "kvldp_duplicates_total"), reports + resent_reports, 120
    )
    state = CheckpointStore(state_dir, tagged).load()
    assert state is not None
    _compare(out, state, await replay_oracle(tagged, bootstrap, workdir), expected)
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
    plain_samples = await _drain(out, proc, ("kvldp_reports_total",), reports + resent_reports, 120)
    out.check(
        total(plain_samples, "kvldp_reports_total") == reports + resent_reports
        and total(plain_samples, "kvldp_duplicates_total") == 0,
        "without ids every resend is folded as a fresh report",
    )
    out.figures.update(
        reports=reports,
        messages_published=len(stream),
        resent_reports=resent_reports,
        duplicates_dropped=state.duplicates_total,
        late_resends_folded=resent_reports - expected_dups,
        untagged_folded=int(total(plain_samples, "kvldp_reports_total")),
    )
    return out


async def _drain(
    out: Outcome, proc: AggregatorProcess, names: tuple[str, ...], count: int, timeout: float
) -> Samples:
    """Wait until the process's counters ``names`` add up to ``count``, then stop it
    cleanly; returns its last metrics."""
    out.check(
        await until(partial(_sum_reached, proc, names, count), timeout), f"{proc.name} processed {count}"
    )
    samples = await asyncio.to_thread(proc.samples)
    out.check(proc.stop() == 0, f"{proc.name} shut down cleanly")
    return samples


async def _sum_reached(proc: AggregatorProcess, names: tuple[str, ...], count: int) -> bool:
    samples = await asyncio.to_thread(proc.samples)
    return sum(total(samples, n) for n in names) >= count


# ---------------------------------------------------------------------- 4. hostile input
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
    await until(lambda: _reached(proc, sum(m.reports for m in warmup)), 60)
    rss_before = proc.rss_bytes()
    started = time.monotonic()
    await publish(bootstrap, collection.reports_topic, stream)
    reached = await until(
        lambda: _sum_reached(
            proc, ("kvldp_reports_total", "kvldp_reports_rejected_total"), reports + hostile
        ),
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
    letters = await _read_topic(bootstrap, collection.dlq_topic, hostile)
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
    _compare(out, state, oracle, traffic.stats)
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


async def _read_topic(
    bootstrap: str, topic: str, expected: int, idle: float = 3.0
) -> list[tuple[bytes | None, list[tuple[str, bytes]]]]:
    """(value, headers) of every record of ``topic`` (until ``expected`` or idle)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 << 20,
    )
    await consumer.start()
    out: list[tuple[bytes | None, list[tuple[str, bytes]]]] = []
    try:
        last = time.monotonic()
        while time.monotonic() - last < idle and len(out) < expected:
            fetched = await consumer.getmany(timeout_ms=300)
            for records in fetched.values():
                out += [(r.value, list(r.headers)) for r in records]
                last = time.monotonic()
        await asyncio.sleep(0.5)  # anything beyond the expected count?
        for records in (await consumer.getmany(timeout_ms=500)).values():
            out += [(r.value, list(r.headers)) for r in records]
    finally:
        await consumer.stop()
    return out


# ---------------------------------------------------------------------- 5. broker restart
async def broker_restart(workdir: Path, reports: int = 40_000, batch: int = 50, seed: int = 5) -> Outcome:
    """The (in-memory) broker restarts mid-stream and forgets every topic; the aggregator
    (with checkpoints, and SIGKILLed once afterwards) resumes by itself."""
    out = Outcome("broker_restart")
    port = free_port()
    broker = EmbeddedBroker(port).start()
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
        out.check(await until(lambda: _reached(proc, before_reports), 60), "first half folded")
        mark = time.time()
        out.check(await until(lambda: _checkpointed_after(proc, mark), 30), "first half checkpointed")
        before = await replay_oracle(collection, bootstrap, workdir, "before")
        broker.stop()
        broker = EmbeddedBroker(port).start()
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
        out.check(await until(lambda: _reached(proc, reports), 120), "every report folded")
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


async def _checkpointed_after(proc: AggregatorProcess, mark: float) -> bool:
    samples = await asyncio.to_thread(proc.samples)
    return total(samples, "kvldp_last_checkpoint_timestamp_seconds") > mark


async def _topic_ready(bootstrap: str, collection: Collection) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="kvldp-reliability")
    try:
        await admin.start()
        return collection.reports_topic in set(await admin.list_topics())
    except Exception:  # the broker is still coming up
        return False
    finally:
        await admin.close()


# ---------------------------------------------------------------------- privacy budget
async def budget_ledger(
    bootstrap: str, workdir: Path, devices: int = 300, limit: int = 2, seed: int = 6
) -> Outcome:
    """``limit`` reports per device per day: the ledger survives a SIGKILL, refuses the
    excess as ``budget_exceeded``, opens a new window on the next day and refuses reports
    stamped in a closed window."""
    out = Outcome("budget_ledger")
    collection, path = make_collection(
        workdir, "budget", "kvue", 4, partitions=2, max_reports_per_device=limit, budget_window="1d"
    )
    wire = WireFormat(collection)
    rng = np.random.default_rng(seed)
    day = 86_400_000
    now = int(time.time() * 1000)

    def sends(ids: list[str], count: int, ts: int) -> list[Message]:
        out_: list[Message] = []
        for _ in range(count):
            for device in ids:
                report: Report = {"j": int(rng.integers(0, 4)), "s": int(rng.integers(0, 3))}
                out_.append(
                    Message(
                        device.encode(), wire.encode_report(report, rid=int(rng.integers(1, 2**63))), ts, 1
                    )
                )
        return out_

    ids = [f"phone-{i}" for i in range(devices)]
    fresh = [f"tablet-{i}" for i in range(devices // 3)]
    state_dir = workdir / f"{collection.name}.state"
    proc = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-a", state_dir=state_dir).start()
    await proc.ready()
    await publish(bootstrap, collection.reports_topic, sends(ids, limit, now))
    out.check(await until(lambda: _reached(proc, devices * limit), 60), "the budgeted reports folded")
    mark = time.time()
    out.check(await until(lambda: _checkpointed_after(proc, mark), 30), "checkpointed")
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
    samples = await _drain(
        out, proc, ("kvldp_reports_total", "kvldp_reports_rejected_total"), admitted + refused, 60
    )
    name = (("collection", collection.name),)
    out.check(
        total(samples, "kvldp_reports_total") == admitted,
        f"{total(samples, 'kvldp_reports_total')} admitted = {admitted}",
    )
    exceeded = samples.get(
        ("kvldp_reports_rejected_total", (("collection", collection.name), ("reason", "budget_exceeded"))), 0
    )
    out.check(exceeded == refused, f"budget_exceeded {exceeded} = {refused}")
    budget = samples.get(("kvldp_privacy_budget_epsilon", name))
    out.check(
        budget == collection.epsilon * limit,
        f"kvldp_privacy_budget_epsilon {budget} = {collection.epsilon * limit}",
    )
    checkpoint = (state_dir / f"{collection.name}.checkpoint").read_bytes()
    out.check(not any(d.encode() in checkpoint for d in ids[:20]), "no device id is stored")
    letters = await _read_topic(bootstrap, collection.dlq_topic, refused)
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
    )
    return out


#: the parameters of each scenario at the fast scale of ``make test`` and at the full scale
#: of ``kvldp bench reliability`` (the issue's figures)
SCALES: dict[str, dict[str, dict[str, Any]]] = {
    "fast": {
        "crash_recovery": {"reports": 100_000, "kills": 5},
        "scale_out": {"slots": 12_000, "cycles": 5},
        "duplicates": {"reports": 20_000},
        "hostile_input": {"hostile": 10_000, "reports": 20_000},
        "broker_restart": {"reports": 40_000},
        "budget_ledger": {"devices": 300},
    },
    "full": {
        "crash_recovery": {"reports": 1_000_000, "kills": 20},
        "scale_out": {"slots": 50_000, "cycles": 20},
        "duplicates": {"reports": 200_000},
        "hostile_input": {"hostile": 10_000, "reports": 200_000},
        "broker_restart": {"reports": 400_000},
        "budget_ledger": {"devices": 3_000},
    },
}

SCENARIOS: dict[str, Callable[..., Awaitable[Outcome]]] = {
    "crash_recovery": crash_recovery,
    "scale_out": scale_out,
    "duplicates": duplicates,
    "hostile_input": hostile_input,
    "broker_restart": broker_restart,
    "budget_ledger": budget_ledger,
}


assert tuple(SCENARIOS) == NAMES and all(set(scale) == set(NAMES) for scale in SCALES.values())


async def run(name: str, scale: str, workdir: Path, bootstrap: str) -> Outcome:
    """One scenario at a scale (``broker_restart`` brings its own broker)."""
    params = SCALES[scale][name]
    if name == "broker_restart":
        return await broker_restart(workdir, **params)
    return await SCENARIOS[name](bootstrap, workdir, **params)
