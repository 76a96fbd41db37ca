"""The demo of an interactive collection (mechanism ``privkvm``), which runs in rounds.

The aggregator closes a round by the collection's policy and publishes the next means on
the control topic, and the ``--users`` devices (fixed pairs drawn from ``--dataset``)
follow it, each reporting once in every round until the control record says the rounds
are complete. ``--periods``, ``--churn``, ``--rate`` and ``--batch-size`` do not apply
(the rounds set the pace, and every report is its own message). A round closes only once
it holds ``round_min_reports`` reports, so a fleet smaller than that would wait forever:
the demo refuses ``--users`` below it, in one line, rather than pick another fleet size
than the one asked for. The table shows the open round and the reports in it, a line per
closed round with how far its published means are from the truth, the estimates
(``unbiased`` and ``paper`` when the collection has them) +- standard error next to the
true values, and the epsilon spent per device by the devices' and the server's count; it
ends once the rounds are complete and every report is folded (or refused as late for its
round).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import numpy as np

from kvldp.aggregator.service import Aggregator
from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.messages.control_record import control_topic, interactive_mechanism
from kvldp.demo.estimate_cells import frequency_cell, mean_cell
from kvldp.demo.live import demo_broker, spent_line, start_aggregator, stop_aggregator, watch
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.main_loop import run_async
from kvldp.producer.collector import Collector
from kvldp.sim import simulate
from kvldp.sim.round_fleet import RoundFleet

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
        f_text = frequency_cell(first, i)
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
    with demo_broker(external, args.metrics_port) as kafka:

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
                    spent = spent_line(device, aggregator.state.device_spent(), collection)
                    return render_rounds(collection, aggregator, truth, target, started_ms, spent)

                def accounted() -> int:  # folded, or refused as late for its round
                    state = aggregator.state
                    return state.reports_total + sum(state.rejected_totals().values())

                failure = await watch(stop, publish, aggregator, agg_task, sdk, accounted, table, live)
            await stop_aggregator(agg_stop, agg_task, failure)

        run_async(main, kafka)
    return 0
