"""``kvldp demo``: the whole pipeline on one machine, watched live (:mod:`kvldp.demo`)."""

from __future__ import annotations

import argparse

from kvldp.cli.flags import Subparsers, fraction, port_number, positive_float, positive_int
from kvldp.kafka.command_line import add_kafka_args


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "demo", help="embedded broker + simulated devices + aggregator + metrics, with a live table"
    )
    p.add_argument("--collection", help="collection file (default: the built-in demo collection)")
    p.add_argument("--dataset", default="gaussian")
    p.add_argument("--users", type=positive_int, default=50_000, help="simulated devices")
    p.add_argument(
        "--periods",
        type=positive_int,
        default=5,
        help="periods the fleet reports in, an hour apart (default 5)",
    )
    p.add_argument(
        "--churn", type=fraction, default=0.1, help="fraction of devices whose pairs change each period"
    )
    p.add_argument("--rate", type=positive_float, default=20_000.0, help="simulated reports per second")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=100,
        help="reports per Kafka message (collections that memoize or have a report_period: 1)",
    )
    p.add_argument("--metrics-port", type=port_number, default=9108, help="0 = any free port")
    p.add_argument("--seed", type=int, default=0)
    add_kafka_args(p)  # a cluster named here replaces the embedded broker
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from kvldp.demo import run_demo

    return run_demo(args)
