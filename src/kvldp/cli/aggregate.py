"""``kvldp aggregate``: consume a collection and export its estimates to Prometheus, or fold
a recording offline (:mod:`kvldp.aggregator.offline`).

The service modules (aiokafka, aiohttp, prometheus-client) are imported when the command runs,
not when ``kvldp --help`` builds the parser."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

from kvldp.cli.flags import DirectoryToWrite, FileToRead, Subparsers, port_number, positive_float
from kvldp.common.errors import KvldpError
from kvldp.kafka.command_line import add_kafka_args, kafka_settings

if TYPE_CHECKING:
    from kvldp.web.security import HttpSecurity


def register(sub: Subparsers) -> None:
    p = sub.add_parser("aggregate", help="consume a collection, export its estimates to Prometheus")
    p.add_argument("--collection", required=True, help="collection file (TOML)")
    add_kafka_args(p)
    p.add_argument("--metrics-host", default="127.0.0.1", help="bind address (0.0.0.0 exposes it)")
    p.add_argument("--metrics-port", type=port_number, default=9108, help="0 = any free port")
    p.add_argument(
        "--metrics-tls-cert",
        metavar="PEM",
        type=FileToRead,
        help="serve /metrics over TLS with this certificate",
    )
    p.add_argument(
        "--metrics-tls-key", metavar="PEM", type=FileToRead, help="private key of --metrics-tls-cert"
    )
    p.add_argument(
        "--metrics-basic-auth-file",
        metavar="FILE",
        type=FileToRead,
        help="require HTTP basic auth; FILE holds user:password",
    )
    p.add_argument(
        "--role",
        choices=("all", "worker", "exporter"),
        default="all",
        help="all: one process does everything (default); worker: join the consumer group, fold "
        "the assigned partitions, publish snapshots to the state topic; exporter: merge the "
        "snapshots, refit, serve the estimates (see docs/reliability.md)",
    )
    p.add_argument(
        "--state-dir",
        type=DirectoryToWrite,
        help="checkpoint directory for --role all (default: in memory only)",
    )
    p.add_argument(
        "--refit-interval", type=positive_float, help="seconds between refits (default: the collection's)"
    )
    p.add_argument(
        "--from-file",
        metavar="PATH",
        type=FileToRead,
        help="fold a recording offline and print the estimates as JSON",
    )
    p.set_defaults(func=cmd_aggregate)


def cmd_aggregate(args: argparse.Namespace) -> int:
    from kvldp import startup_heap
    from kvldp.aggregator.merged import MergedExporter
    from kvldp.aggregator.offline import estimates_json, fold_recording
    from kvldp.aggregator.service import Aggregator
    from kvldp.broker.child_process import port_in_use
    from kvldp.common.config.collection_file import load_collection
    from kvldp.kafka.main_loop import run_async

    collection = load_collection(args.collection)
    if args.from_file:
        path = Path(args.from_file)
        print(json.dumps(estimates_json(collection, fold_recording(collection, path)), allow_nan=False))
        return 0
    # every flag is checked before the metrics port is probed: a refused command line is
    # refused the same whether or not the port is taken
    kafka = kafka_settings(args)
    if args.role != "all" and args.state_dir:
        raise KvldpError(
            f"--state-dir is for --role all; a {args.role} keeps its state in {collection.state_topic}"
        )
    security = metrics_security(args)
    if args.metrics_port and port_in_use(args.metrics_port, args.metrics_host):
        raise KvldpError(f"metrics port {args.metrics_port} on {args.metrics_host} is already in use")
    scheme = "https" if security.certfile else "http"

    def ready(a: Aggregator | MergedExporter) -> None:
        print(f"metrics={scheme}://{args.metrics_host}:{a.bound_port}/metrics", flush=True)

    async def serve(stop: asyncio.Event) -> None:
        if args.role == "exporter":
            merged = MergedExporter(
                collection,
                kafka,
                args.metrics_host,
                args.metrics_port,
                args.refit_interval,
                security=security,
            )
            await merged.run(stop, ready)
            return
        agg = Aggregator(
            collection,
            kafka,
            args.metrics_host,
            args.metrics_port,
            args.state_dir,
            args.refit_interval,
            security=security,
            role=args.role,
        )
        await agg.run(stop, ready)

    startup_heap.freeze()  # a long-running service: see kvldp.startup_heap
    run_async(serve, kafka)
    return 0


def metrics_security(args: argparse.Namespace) -> HttpSecurity:
    """TLS (certificate and key files) and basic auth (a user:password file) for /metrics."""
    from kvldp.web.security import HttpSecurity, load_basic_auth

    if bool(args.metrics_tls_cert) != bool(args.metrics_tls_key):
        raise KvldpError("--metrics-tls-cert and --metrics-tls-key go together")
    user = password = None
    if args.metrics_basic_auth_file:
        user, password = load_basic_auth(args.metrics_basic_auth_file)
    return HttpSecurity(args.metrics_tls_cert, args.metrics_tls_key, user, password)
