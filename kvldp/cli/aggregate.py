"""``kvldp aggregate``: consume a collection and export its estimates to Prometheus, or fold
a recording offline (:func:`kvldp.pipeline.aggregate`)."""

from __future__ import annotations

import argparse

from kvldp.cli.flags import Subparsers, positive_float
from kvldp.kafka_cli import add_kafka_args


def register(sub: Subparsers) -> None:
    p = sub.add_parser("aggregate", help="consume a collection, export its estimates to Prometheus")
    p.add_argument("--collection", required=True, help="collection file (TOML)")
    add_kafka_args(p)
    p.add_argument("--metrics-host", default="127.0.0.1", help="bind address (0.0.0.0 exposes it)")
    p.add_argument("--metrics-port", type=int, default=9108, help="0 = any free port")
    p.add_argument("--metrics-tls-cert", metavar="PEM", help="serve /metrics over TLS with this certificate")
    p.add_argument("--metrics-tls-key", metavar="PEM", help="private key of --metrics-tls-cert")
    p.add_argument(
        "--metrics-basic-auth-file", metavar="FILE", help="require HTTP basic auth; FILE holds user:password"
    )
    p.add_argument(
        "--role",
        choices=("all", "worker", "exporter"),
        default="all",
        help="all: one process does everything (default); worker: join the consumer group, fold "
        "the assigned partitions, publish snapshots to the state topic; exporter: merge the "
        "snapshots, refit, serve the estimates (see docs/reliability.md)",
    )
    p.add_argument("--state-dir", help="checkpoint directory for --role all (default: in memory only)")
    p.add_argument(
        "--refit-interval", type=positive_float, help="seconds between refits (default: the collection's)"
    )
    p.add_argument(
        "--from-file", metavar="PATH", help="fold a recording offline and print the estimates as JSON"
    )
    p.set_defaults(func=cmd_aggregate)


def cmd_aggregate(args: argparse.Namespace) -> int:
    from kvldp.pipeline import aggregate

    return aggregate(args)
