"""``kvldp demo``: the whole pipeline on one machine, watched live.

It starts the embedded broker on a free port, the aggregator (metrics on
http://127.0.0.1:9108/metrics by default) and a simulated fleet of ``--users`` devices
reporting once per period for ``--periods`` periods (a ``--churn`` fraction redraws its
pairs before each later period; periods are stamped an hour apart, ending now), at
``--rate`` reports per second. The built-in collection memoizes (``[privacy]``): a device
whose state did not change re-sends its report and spends nothing, and the aggregator
counts each device once, at its latest report. A terminal table shows every key's
estimate +- standard error next to the true value, and the median and maximum epsilon
spent per device, as the devices count it and as the server does, until every report
is folded or Ctrl-C. The broker is stopped on the way out, whatever happens.

Given a cluster (``--kafka-config``, ``--bootstrap-servers`` or their environment
variables), the demo runs there instead of on an embedded broker, under a collection
name of its own (``demo-<6 hex>``) so that its topics start empty.

An interactive collection (``--collection`` with mechanism ``privkvm``) runs in rounds
instead: the aggregator closes a round by the collection's policy and publishes the next
means on the control topic, and the ``--users`` devices (fixed pairs drawn from
``--dataset``) follow it, each reporting once in every round until the control record
says the rounds are complete. ``--periods``, ``--churn``, ``--rate`` and
``--batch-size`` do not apply (the rounds set the pace, and every report is its own
message). A round closes only once it holds ``round_min_reports`` reports, so a fleet
smaller than that would wait forever: the demo refuses ``--users`` below it, in one line,
rather than pick another fleet size than the one asked for. The table shows the open
round and the reports in it, a line per closed round with how far its published means
are from the truth, the estimates (``unbiased`` and ``paper`` when the collection has
them) +- standard error next to the true values, and the epsilon spent per device by the
devices' and the server's count; it ends once the rounds are complete and every report
is folded (or refused as late for its round).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kvldp.aggregator.service import Aggregator
from kvldp.broker import EmbeddedBroker, port_in_use
from kvldp.common.collection import Collection
from kvldp.common.control import control_topic, interactive_mechanism, is_interactive
from kvldp.common.errors import KvldpError
from kvldp.common.estimate import Estimate
from kvldp.common.kafka_config import KafkaConfig
from kvldp.kafka_cli import external_kafka
from kvldp.pipeline import collection_or_demo, run_async
from kvldp.producer import simulate
from kvldp.producer.collector import Collector
from kvldp.producer.device_state import tracks_privacy
from kvldp.producer.fleet import FleetSimulation
from kvldp.producer.round_fleet import RoundFleet

DEMO_COLLECTION: dict[str, Any] = {
    "name": "demo",
    "mechanism": "kvue",
    "epsilon": 2.0,
    "keys": ["hamburger", "fries", "pepsi", "salad", "nuggets", "coffee", "icecream", "wrap"],
    "value_range": [0.0, 20.0],
    "aggregate": {
        "refit_interval_s": 1,
        "estimators": ["unbiased", "em", "normsub"],
        "windows": ["1m", "all"],
        "partitions": 4,
    },
    "privacy": {"memoize": True, "report_period": "1h"},
}


class Truth:
    """What the 'all' window estimates: the devices' latest state when the collection
    memoizes (each device counted once), else every device-period so far."""

    def __init__(self, collection: Collection) -> None:
        self.collection = collection
        self.holders = np.zeros(collection.d)
        self.sums = np.zeros(collection.d)
        self.rows = 0
        self.latest: dict[str, Any] = {}

    def period(self, simulation: FleetSimulation) -> None:
        users = simulation.population
        self.latest = simulate.truth(self.collection, users)
        present, values = users.to_dense()
        self.holders += present.sum(axis=0)
        self.sums += np.where(present, values, 0.0).sum(axis=0)
        self.rows += users.n_users

    def table(self) -> dict[str, Any]:
        if self.collection.privacy.memoize or not self.rows:
            return self.latest
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.collection.raw_mean(self.sums / self.holders)
        keys = self.collection.keys
        return {
            "frequency": {k: float(f) for k, f in zip(keys, self.holders / self.rows, strict=True)},
            "mean": {k: float(m) if np.isfinite(m) else None for k, m in zip(keys, mean, strict=True)},
        }


def spent_line(device: np.ndarray, server: np.ndarray) -> str:
    """Median and maximum epsilon spent per device, by the devices' and the server's count."""
    if not device.size:
        return "epsilon spent per device: -"
    text = f"epsilon spent per device: median {np.median(device):g}, max {device.max():g}"
    if server.size:
        text += f"   (server's count: median {np.median(server):g}, max {server.max():g})"
    return text


def render(
    collection: Collection, aggregator: Aggregator, truth: dict[str, Any], target: int, spent: str
) -> str:
    """The table: key, true and estimated frequency and mean (+- one standard error)."""
    snapshot = aggregator.exporter.snapshot
    estimate = None
    if snapshot is not None and "all" in snapshot.fits:
        fits = snapshot.fits["all"].estimates
        estimate = fits.get("unbiased") or next(iter(fits.values()))
    head = f"{'key':<12} {'true f':>7} {'estimate f':>17}   {'true mean':>9} {'estimate mean':>19}"
    lines = [head, "-" * len(head)]
    for i, key in enumerate(collection.keys):
        tf, tm = truth["frequency"][key], truth["mean"][key]
        cells = [f"{key:<12} {tf:7.4f}"]
        if estimate is None:
            cells.append(f"{'...':>17}   {'' if tm is None else format(tm, '9.3f'):>9} {'...':>19}")
        else:
            f, fs = estimate.frequency[i], estimate.frequency_stderr[i]
            m = collection.raw_mean(estimate.mean[i : i + 1])[0]
            ms = collection.raw_scale(estimate.mean_stderr[i : i + 1])[0]
            mean_text = "undefined" if not np.isfinite(m) else f"{m:9.3f} ± {ms:7.3f}"
            true_mean = "-" if tm is None else f"{tm:9.3f}"
            cells.append(f"{f:8.4f} ± {fs:6.4f}   {true_mean:>9} {mean_text:>19}")
        lines.append(" ".join(cells))
    folded = aggregator.state.reports_total
    filled = round(30 * min(folded, target) / max(target, 1))
    lines.append(
        f"[{'#' * filled}{'-' * (30 - filled)}] {folded}/{target} reports folded"
        "   (estimator: unbiased, window: all)"
    )
    lines.append(spent)
    return "\n".join(lines)


@contextlib.contextmanager
def demo_broker(external: KafkaConfig | None) -> Iterator[KafkaConfig]:
    """The cluster the demo runs on: the one the command line names, else an embedded
    broker for the demo's lifetime."""
    if external is not None:
        print(f"broker: {external.describe()} (external)")
        yield external
        return
    with EmbeddedBroker(0) as broker:
        print(f"broker: {broker.bootstrap_servers} (embedded, in memory)")
        yield KafkaConfig.plaintext(broker.bootstrap_servers)


def demo_collection(args: argparse.Namespace, external: KafkaConfig | None) -> Collection:
    """The demo's collection; on an external cluster under a name of its own, so that its
    topics start empty and no earlier run's reports are folded in."""
    collection = collection_or_demo(args.collection, DEMO_COLLECTION)
    if external is None:
        return collection
    return dataclasses.replace(collection, name=f"{collection.name}-{secrets.token_hex(3)}")


async def start_aggregator(
    collection: Collection, kafka: KafkaConfig, metrics_port: int
) -> tuple[Aggregator, asyncio.Event, asyncio.Task[None]]:
    """The aggregator running (its metrics address printed), its stop event and its task."""
    aggregator = Aggregator(collection, kafka, metrics_port=metrics_port, log=lambda _: None)
    agg_stop = asyncio.Event()
    agg_task = asyncio.create_task(aggregator.run(agg_stop))
    while aggregator.bound_port is None and not agg_task.done():
        await asyncio.sleep(0.05)
    if agg_task.done():
        await agg_task  # raises the start-up error
    print(f"metrics: http://127.0.0.1:{aggregator.bound_port}/metrics   estimates: /estimates")
    return aggregator, agg_stop, agg_task


async def stop_aggregator(
    agg_stop: asyncio.Event, agg_task: asyncio.Task[None], failure: BaseException | None
) -> None:
    """Stop the aggregator (it leaves its final state), then raise what stopped the demo."""
    agg_stop.set()
    await agg_task
    if failure is not None:
        raise failure


async def watch(
    stop: asyncio.Event,
    publish: asyncio.Task[Any],
    aggregator: Aggregator,
    agg_task: asyncio.Task[None],
    sdk: Collector,
    accounted: Callable[[], int],
    table: Callable[[], str],
    live: bool,
) -> BaseException | None:
    """Redraw ``table`` every half second (on a terminal) until the fleet is done, the
    aggregator has ``accounted`` for every report sent and a refit came after that, or
    Ctrl-C; then print the table once if it was not drawn live. Returns the fleet's failure,
    if any."""
    drawn = 0
    all_folded_at: float | None = None
    while not stop.is_set():
        await asyncio.sleep(0.5)
        if live:
            text = table()  # each line is cleared to its end: lines shrink and move
            sys.stdout.write(("\x1b[F" * drawn) + text.replace("\n", "\x1b[K\n") + "\x1b[K\n")
            sys.stdout.flush()
            drawn = text.count("\n") + 1
        if publish.done():
            if publish.exception() is not None:
                break
            if all_folded_at is None and accounted() >= sdk.sent_reports:
                all_folded_at = time.time()
            snap = aggregator.exporter.snapshot
            if all_folded_at is not None and snap is not None and snap.created > all_folded_at:
                break  # the estimates include every report
        if agg_task.done():
            break
    publish.cancel()
    outcome: Any = (await asyncio.gather(publish, return_exceptions=True))[0]
    if not live:
        print(table())
    failed = isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError)
    return outcome if failed else None


def run_demo(args: argparse.Namespace) -> int:
    external = external_kafka(args)
    collection = demo_collection(args, external)
    if args.metrics_port and port_in_use(args.metrics_port):
        raise KvldpError(f"metrics port {args.metrics_port} on 127.0.0.1 is in use (pass --metrics-port)")
    if is_interactive(collection):
        return run_rounds_demo(collection, args, external)
    fleet = FleetSimulation(collection, args.dataset, args.users, args.periods, args.churn, args.seed)
    truth = Truth(collection)
    target = args.users * args.periods
    # devices of a memoized or period-limited collection each send their own message
    batch_size = 1 if tracks_privacy(collection) and args.batch_size > 1 else args.batch_size
    live = sys.stdout.isatty()
    with demo_broker(external) as kafka:

        async def main(stop: asyncio.Event) -> None:
            aggregator, agg_stop, agg_task = await start_aggregator(collection, kafka, args.metrics_port)
            memo = "memoized" if collection.privacy.memoize else "not memoized"
            print(
                f"{collection.name}: {collection.mechanism_name}, epsilon={collection.epsilon:g} per report "
                f"({memo}), {args.users} simulated devices x {args.periods} periods "
                f"(churn {args.churn:g}) at {args.rate:g} reports/s (Ctrl-C stops)\n"
            )
            async with Collector(
                collection, kafka_config=kafka, rng=np.random.default_rng(args.seed), clock=fleet.clock
            ) as sdk:
                truth.period(fleet)
                publish = asyncio.create_task(
                    fleet.run(
                        sdk,
                        batch_size=batch_size,
                        rate=args.rate,
                        on_period=lambda _: truth.period(fleet),
                    )
                )

                def table() -> str:
                    spent = spent_line(fleet.spent(sdk), aggregator.state.device_spent())
                    return render(collection, aggregator, truth.table(), target, spent)

                failure = await watch(
                    stop,
                    publish,
                    aggregator,
                    agg_task,
                    sdk,
                    lambda: aggregator.state.reports_total,
                    table,
                    live,
                )
            await stop_aggregator(agg_stop, agg_task, failure)

        run_async(main, kafka)
    return 0


# ---------------------------------------------------------------------- rounds
#: the estimators the rounds table shows, when the collection has them
ROUND_ESTIMATORS = ("unbiased", "paper")


def check_round_fleet(collection: Collection, users: int) -> None:
    """Refuse a fleet too small for a round ever to close."""
    need = interactive_mechanism(collection).round_min_reports
    if users < need:
        raise KvldpError(
            f"collection {collection.name} closes a round once it holds round_min_reports = {need} "
            f"reports and each device reports once per round, so --users {users} would never close "
            f"one: pass --users {need} or more"
        )


def shown_estimators(collection: Collection) -> list[str]:
    configured = list(collection.aggregate.estimators)
    return [name for name in ROUND_ESTIMATORS if name in configured] or configured[:1]


def mean_cell(collection: Collection, estimate: Estimate | None, i: int) -> str:
    """Estimated mean of key ``i`` +- one standard error, in collection units (19 wide)."""
    if estimate is None:
        return f"{'...':>19}"
    m = collection.raw_mean(estimate.mean[i : i + 1])[0]
    ms = collection.raw_scale(estimate.mean_stderr[i : i + 1])[0]
    if not np.isfinite(m):
        return f"{'undefined':>19}"
    return f"{m:9.3f} ± {ms:7.3f}" if np.isfinite(ms) else f"{m:19.3f}"


def round_lines(
    collection: Collection, aggregator: Aggregator, truth: dict[str, Any], started_ms: int
) -> list[str]:
    """A line per closed round (its reports, how long it was open, how far its published
    means are from the true means), then the open round."""
    rounds = aggregator.state.rounds
    assert rounds is not None
    mechanism = interactive_mechanism(collection)
    per_round = aggregator.state.all_stats().arrays["counts"].sum(axis=(1, 2))
    true_mean = np.array([np.nan if truth["mean"][k] is None else truth["mean"][k] for k in collection.keys])
    known = np.isfinite(true_mean)
    opened = [started_ms, *rounds.closed_ms]
    lines = []
    for r in range(rounds.closed):
        line = (
            f"round {r + 1}: {int(per_round[r])} reports in {(rounds.closed_ms[r] - opened[r]) / 1000:.1f} s"
        )
        if known.any():
            published = collection.raw_mean(rounds.published[r + 1])
            off = float(np.mean(np.abs(published[known] - true_mean[known])))
            line += f"; published means {off:.3f} from the true means on average"
        lines.append(line)
    if rounds.complete:
        lines.append(f"rounds complete after {rounds.closed} of {mechanism.rounds}")
    else:
        open_s = max(0.0, time.time() - rounds.opened_ms / 1000)
        lines.append(
            f"round {rounds.open_round + 1} of {mechanism.rounds} open for {open_s:.1f} s: "
            f"{rounds.open_reports} reports (it closes with {mechanism.round_min_reports} or more, "
            f"once open {mechanism.round_period_s:g} s)"
        )
    return lines


def render_rounds(
    collection: Collection,
    aggregator: Aggregator,
    truth: dict[str, Any],
    target: int,
    started_ms: int,
    spent: str,
) -> str:
    """The rounds table: key, true and estimated frequency and mean (+- one standard error)
    for each shown estimator; the rounds so far; reports folded; epsilon spent."""
    names = shown_estimators(collection)
    snapshot = aggregator.exporter.snapshot
    window = "all"
    estimates: dict[str, Estimate] = {}
    if snapshot is not None and snapshot.fits:
        window = window if window in snapshot.fits else next(iter(snapshot.fits))
        estimates = {n: e for n, e in snapshot.fits[window].estimates.items() if n in names}
    head = f"{'key':<12} {'true f':>7} {'estimate f':>17}   {'true mean':>9}" + "".join(
        f" {name + ' mean':>19}" for name in names
    )
    lines = [head, "-" * len(head)]
    first = estimates.get(names[0])
    for i, key in enumerate(collection.keys):
        tf, tm = truth["frequency"][key], truth["mean"][key]
        if first is None:
            f_text = f"{'...':>17}"
        else:
            f_text = f"{first.frequency[i]:8.4f} ± {first.frequency_stderr[i]:6.4f}"
        true_mean = "-" if tm is None else f"{tm:9.3f}"
        means = "".join(f" {mean_cell(collection, estimates.get(name), i)}" for name in names)
        lines.append(f"{key:<12} {tf:7.4f} {f_text}   {true_mean:>9}{means}")
    lines.append("")
    lines.extend(round_lines(collection, aggregator, truth, started_ms))
    rounds = aggregator.state.rounds
    assert rounds is not None
    folded = aggregator.state.reports_total
    refused = sum(aggregator.state.rejected_totals().values())
    filled = round(30 * min(folded, target) / max(target, 1))
    lines.append(
        f"[{'#' * filled}{'-' * (30 - filled)}] {folded}/{target} reports folded"
        + (f", {refused} refused" if refused else "")
        + f"   (estimates through round {max(1, rounds.closed)}; estimator f: {names[0]}, window: {window})"
    )
    lines.append(spent)
    return "\n".join(lines)


def run_rounds_demo(collection: Collection, args: argparse.Namespace, external: KafkaConfig | None) -> int:
    """The demo of an interactive collection (see the module docstring)."""
    check_round_fleet(collection, args.users)
    mechanism = interactive_mechanism(collection)
    try:
        users = simulate.simulate(collection, args.dataset, args.users, args.seed)
    except ValueError as exc:
        raise KvldpError(str(exc)) from None
    truth = simulate.truth(collection, users)
    ids = simulate.device_ids(users.n_users)
    fleet = RoundFleet(users, ids)
    target = users.n_users * mechanism.rounds
    costs = ", ".join(f"{mechanism.round_epsilon(r):g}" for r in range(mechanism.rounds))
    live = sys.stdout.isatty()
    with demo_broker(external) as kafka:

        async def main(stop: asyncio.Event) -> None:
            aggregator, agg_stop, agg_task = await start_aggregator(collection, kafka, args.metrics_port)
            assert aggregator.state.rounds is not None
            started_ms = aggregator.state.rounds.opened_ms
            print(
                f"{collection.name}: {collection.mechanism_name}, epsilon={collection.epsilon:g} over "
                f"{mechanism.rounds} rounds (per round: {costs}), {args.users} simulated devices reporting "
                f"once per round; control topic {control_topic(collection)} (Ctrl-C stops)\n"
            )
            async with Collector(collection, kafka_config=kafka, rng=np.random.default_rng(args.seed)) as sdk:
                publish = asyncio.create_task(fleet.run(sdk))

                def table() -> str:
                    device = np.array([sdk.privacy_spent(device) for device in ids])
                    spent = spent_line(device, aggregator.state.device_spent())
                    return render_rounds(collection, aggregator, truth, target, started_ms, spent)

                def accounted() -> int:  # folded, or refused as late for its round
                    state = aggregator.state
                    return state.reports_total + sum(state.rejected_totals().values())

                failure = await watch(stop, publish, aggregator, agg_task, sdk, accounted, table, live)
            await stop_aggregator(agg_stop, agg_task, failure)

        run_async(main, kafka)
    return 0
