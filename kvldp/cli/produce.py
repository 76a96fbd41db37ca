"""``kvldp produce``: publish simulated devices or a CSV of real device data.

A single pass goes through :func:`kvldp.pipeline.produce`; ``--periods`` simulates a fleet
reporting once per period (:mod:`kvldp.producer.fleet`) and says what each device spent.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from kvldp.cli.flags import Subparsers, fraction, positive_float, positive_int
from kvldp.common.errors import KvldpError
from kvldp.kafka_cli import add_kafka_args
from kvldp.producer import datasets


def register(sub: Subparsers) -> None:
    p = sub.add_parser("produce", help="publish simulated devices or a CSV of real device data")
    p.add_argument("--collection", required=True, help="collection file (TOML)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--simulate", metavar="DATASET", help=f"one of: {', '.join(datasets.names())}")
    source.add_argument(
        "--from-csv",
        metavar="FILE",
        help="device,key,value rows (one device's rows together), or a ratings file user,item,rating "
        "(comma or tab separated, extra columns ignored; items outside the collection's keys dropped)",
    )
    p.add_argument("--users", type=positive_int, help="simulated devices (with --simulate)")
    p.add_argument("--seed", type=int, help="seed the simulated data and perturbation (tests, demos)")
    p.add_argument(
        "--batch-size", type=positive_int, default=1, help="reports per Kafka message (gateway mode)"
    )
    p.add_argument("--rate", type=positive_float, help="reports per second (default: as fast as possible)")
    p.add_argument(
        "--truth",
        metavar="FILE",
        help="write the simulated population's true statistics (JSON; with --periods, the last period's)",
    )
    p.add_argument(
        "--periods",
        type=positive_int,
        help="with --simulate: the fleet reports once per period, P periods up to now "
        "(period: the collection's report_period, else 1h)",
    )
    p.add_argument(
        "--churn",
        type=fraction,
        help="with --periods: fraction of devices that redraw their pairs each period (default 0.1)",
    )
    add_kafka_args(p)
    p.set_defaults(func=cmd_produce)


def cmd_produce(args: argparse.Namespace) -> int:
    if args.periods is not None:
        return _produce_periods(args)
    if args.churn is not None:
        raise KvldpError("--churn goes with --periods P")
    from kvldp.pipeline import produce

    return produce(args)


def _produce_periods(args: argparse.Namespace) -> int:
    """A simulated fleet reporting once per period (kvldp.producer.fleet); a summary line per
    period and the epsilon spent per device on stderr. ``--truth`` is the last period's."""
    import asyncio

    from kvldp.common.collection_file import load_collection
    from kvldp.kafka_cli import kafka_settings
    from kvldp.pipeline import _until, run_async
    from kvldp.producer import simulate
    from kvldp.producer.batching import check_batching
    from kvldp.producer.collector import Collector
    from kvldp.producer.fleet import FleetSimulation, PeriodReport
    from kvldp.progress import Progress

    if not args.simulate:
        raise KvldpError("--periods simulates a fleet: use it with --simulate DATASET, not --from-csv")
    if not args.users:
        raise KvldpError("--simulate needs --users N")
    collection = load_collection(args.collection)
    check_batching(collection, args.batch_size)
    kafka = kafka_settings(args)
    sim = FleetSimulation(
        collection,
        args.simulate,
        args.users,
        args.periods,
        churn=0.1 if args.churn is None else args.churn,
        seed=args.seed or 0,
    )
    rng = np.random.default_rng(args.seed) if args.seed is not None else None

    async def publish(stop: asyncio.Event) -> tuple[int, np.ndarray]:
        async with Collector(collection, kafka_config=kafka, rng=rng, clock=sim.clock) as sdk:
            with Progress(args.users * args.periods, f"produce {collection.name}") as bar:

                def said(report: PeriodReport) -> None:  # below the bar, which goes on drawing
                    print(f"\n{report}" if bar.enabled else report, file=sys.stderr)

                work = sim.run(sdk, args.batch_size, rate=args.rate, on_progress=bar.advance, on_period=said)
                await _until(stop, work)
            return sdk.sent_reports, sim.spent(sdk)

    sent, spent = run_async(publish, kafka)
    if args.truth:
        Path(args.truth).write_text(json.dumps(simulate.truth(collection, sim.population), indent=1))
    print(
        f"published {sent} reports to {collection.reports_topic}; epsilon spent per device: "
        f"median {float(np.median(spent)):g}, max {float(spent.max()):g}",
        file=sys.stderr,
    )
    return 0
