"""The demo of devices reporting once per period, the built-in collection's kind.

A simulated fleet of ``--users`` devices reports once per period for ``--periods``
periods (a ``--churn`` fraction redraws its pairs before each later period; periods are
stamped an hour apart, ending at the current time), at ``--rate`` reports per second.
The built-in collection memoizes (``[privacy]``): a device whose state did not change
re-sends its report and spends nothing, and the aggregator counts each device once, at
its latest report. The table shows every key's estimate +- standard error next to the
true value (:class:`Truth`), and the median and maximum epsilon spent per device, as the
devices count it and as the server does (a collection with ``instantaneous_epsilon``: the
server's upper bound, :func:`kvldp.demo.live.spent_line`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import numpy as np

from kvldp.aggregator.service import Aggregator
from kvldp.common.config.collection import Collection
from kvldp.demo.estimate_cells import frequency_cell, mean_cell
from kvldp.demo.live import demo_broker, spent_line, start_aggregator, stop_aggregator, watch
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.main_loop import run_async
from kvldp.producer.collector import Collector
from kvldp.producer.device_state import tracks_privacy
from kvldp.sim import simulate
from kvldp.sim.fleet import FleetSimulation


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
        true_mean = "-" if tm is None else f"{tm:9.3f}"
        lines.append(
            f"{key:<12} {tf:7.4f} {frequency_cell(estimate, i)}   {true_mean:>9} "
            f"{mean_cell(collection, estimate, i)}"
        )
    folded = aggregator.state.reports_total
    filled = round(30 * min(folded, target) / max(target, 1))
    lines.append(
        f"[{'#' * filled}{'-' * (30 - filled)}] {folded}/{target} reports folded"
        "   (estimator: unbiased, window: all)"
    )
    lines.append(spent)
    return "\n".join(lines)


def run_periods_demo(collection: Collection, args: argparse.Namespace, external: KafkaConfig | None) -> int:
    """The demo of a collection whose devices report once per period (see the module docstring)."""
    fleet = FleetSimulation(collection, args.dataset, args.users, args.periods, args.churn, args.seed)
    truth = Truth(collection)
    target = args.users * args.periods
    # devices of a memoized or period-limited collection each send their own message
    batch_size = 1 if tracks_privacy(collection) and args.batch_size > 1 else args.batch_size
    live = sys.stdout.isatty()
    with demo_broker(external, args.metrics_port) as kafka:

        async def main(stop: asyncio.Event) -> None:
            aggregator, agg_stop, agg_task = await start_aggregator(collection, kafka, args.metrics_port)
            memo = "memoized" if collection.privacy.memoize else "not memoized"
            print(
                f"{collection.name}: {collection.mechanism_name}, epsilon={collection.epsilon:g} per report "
                f"({memo}), {args.users} simulated devices x {args.periods} periods "
                f"(churn {args.churn:g}) at {args.rate:g} reports/s (Ctrl-C stops)\n"
            )
            async with Collector(
                collection,
                kafka_config=kafka,
                rng=np.random.default_rng(args.seed),
                clock=fleet.clock,
                warn_unsaved=external is not None,  # the embedded broker's topics are new: nothing to refuse
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
                    spent = spent_line(fleet.spent(sdk), aggregator.state.device_spent(), collection)
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
