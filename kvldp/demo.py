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
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import numpy as np

from aggregator.service import Aggregator
from common.collection import Collection
from common.errors import KvldpError
from kvldp.broker import EmbeddedBroker, port_in_use
from kvldp.pipeline import collection_or_demo, run_async
from producer import simulate
from producer.collector import Collector
from producer.device_state import tracks_privacy
from producer.fleet import FleetSimulation

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


def run_demo(args: argparse.Namespace) -> int:
    collection = collection_or_demo(args.collection, DEMO_COLLECTION)
    if args.metrics_port and port_in_use(args.metrics_port):
        raise KvldpError(f"metrics port {args.metrics_port} on 127.0.0.1 is in use (pass --metrics-port)")
    fleet = FleetSimulation(collection, args.dataset, args.users, args.periods, args.churn, args.seed)
    truth = Truth(collection)
    target = args.users * args.periods
    # devices of a memoized or period-limited collection each send their own message
    batch_size = 1 if tracks_privacy(collection) and args.batch_size > 1 else args.batch_size
    live = sys.stdout.isatty()
    with EmbeddedBroker(0) as broker:
        print(f"broker: {broker.bootstrap_servers} (embedded, in memory)")

        async def main(stop: asyncio.Event) -> None:
            aggregator = Aggregator(
                collection, broker.bootstrap_servers, metrics_port=args.metrics_port, log=lambda _: None
            )
            agg_stop = asyncio.Event()
            agg_task = asyncio.create_task(aggregator.run(agg_stop))
            while aggregator.bound_port is None and not agg_task.done():
                await asyncio.sleep(0.05)
            if agg_task.done():
                await agg_task  # raises the start-up error
            print(f"metrics: http://127.0.0.1:{aggregator.bound_port}/metrics   estimates: /estimates")
            memo = "memoized" if collection.privacy.memoize else "not memoized"
            print(
                f"{collection.name}: {collection.mechanism_name}, epsilon={collection.epsilon:g} per report "
                f"({memo}), {args.users} simulated devices x {args.periods} periods "
                f"(churn {args.churn:g}) at {args.rate:g} reports/s (Ctrl-C stops)\n"
            )
            async with Collector(
                collection, broker.bootstrap_servers, rng=np.random.default_rng(args.seed), clock=fleet.clock
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

                drawn = 0
                all_folded_at: float | None = None
                while not stop.is_set():
                    await asyncio.sleep(0.5)
                    if live:
                        text = table()
                        sys.stdout.write(("\x1b[F" * drawn) + text + "\n")
                        sys.stdout.flush()
                        drawn = text.count("\n") + 1
                    if publish.done():
                        if publish.exception() is not None:
                            break
                        if all_folded_at is None and aggregator.state.reports_total >= sdk.sent_reports:
                            all_folded_at = time.time()
                        snap = aggregator.exporter.snapshot
                        if all_folded_at is not None and snap is not None and snap.created > all_folded_at:
                            break  # the estimates include every report
                    if agg_task.done():
                        break
                publish.cancel()
                results = await asyncio.gather(publish, return_exceptions=True)
                if not live:
                    print(table())
            agg_stop.set()
            await agg_task
            for outcome in results:
                if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                    raise outcome

        run_async(main, broker.bootstrap_servers)
    return 0
