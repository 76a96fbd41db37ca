"""``kvldp broker``: the embedded Kafka-compatible broker (Tansu) in the foreground."""

from __future__ import annotations

import argparse

from kvldp.cli.flags import Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("broker", help="run the embedded Kafka-compatible broker (Tansu) in the foreground")
    p.add_argument("--port", type=int, default=9092, help="port on 127.0.0.1 (0 = any free port)")
    p.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="serve TLS on --port with this certificate (a stunnel4 proxy in front of the broker)",
    )
    p.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    p.set_defaults(func=cmd_broker)


def cmd_broker(args: argparse.Namespace) -> int:
    from kvldp.pipeline import run_broker

    return run_broker(args.port, args.tls_cert, args.tls_key)
