"""``kvldp demo``: the whole pipeline on one machine, watched live.

It starts the embedded broker on a free port, the aggregator (metrics on
http://127.0.0.1:9108/metrics by default) and simulated devices publishing at
``--rate``; a terminal table shows every key's estimate +- standard error next to the
true value of the simulated population, with a progress bar, until ``--users``
reports are folded or Ctrl-C. The broker is stopped on the way out, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import numpy as np

from aggregator.service import Aggregator
from common.collection import Collection
from common.errors import KvldpError
from kvldp.broker import EmbeddedBroker, port_in_use
from kvldp.pipeline import collection_or_demo, run_async
from producer import simulate
from producer.collector import Collector

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
}


def render(collection: Collection, aggregator: Aggregator, truth: dict[str, Any], target: int) -> str:
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
    return "\n".join(lines)


def run_demo(args: argparse.Namespace) -> int:
    collection = collection_or_demo(args.collection, DEMO_COLLECTION)
    if args.metrics_port and port_in_use(args.metrics_port):
        raise KvldpError(f"metrics port {args.metrics_port} on 127.0.0.1 is in use (pass --metrics-port)")
    try:
        users = simulate.simulate(collection, args.dataset, args.users, args.seed)
    except ValueError as exc:
        raise KvldpError(str(exc)) from None
    truth = simulate.truth(collection, users)
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
            print(
                f"{collection.name}: {collection.mechanism_name}, epsilon={collection.epsilon:g}, "
                f"{users.n_users} simulated devices at {args.rate:g} reports/s (Ctrl-C stops)\n"
            )
            async with Collector(
                collection, broker.bootstrap_servers, rng=np.random.default_rng(args.seed)
            ) as sdk:
                publish = asyncio.create_task(
                    sdk.publish_users(
                        users, simulate.device_ids(users.n_users), batch_size=args.batch_size, rate=args.rate
                    )
                )
                drawn = 0
                while not stop.is_set():
                    await asyncio.sleep(0.5)
                    if live:
                        table = render(collection, aggregator, truth, users.n_users)
                        sys.stdout.write(("\x1b[F" * drawn) + table + "\n")
                        sys.stdout.flush()
                        drawn = table.count("\n") + 1
                    snap = aggregator.exporter.snapshot
                    if snap is not None and snap.fits["all"].n_reports >= users.n_users:
                        break
                    if agg_task.done():
                        break
                publish.cancel()
                await asyncio.gather(publish, return_exceptions=True)
            agg_stop.set()
            await agg_task
            if not live:
                print(render(collection, aggregator, truth, users.n_users))

        run_async(main, broker.bootstrap_servers)
    return 0
