"""``kvldp broker``: the embedded Kafka-compatible broker (Tansu) in the foreground."""

from __future__ import annotations

import argparse
import signal
import time

from kvldp.broker.tansu import EmbeddedBroker
from kvldp.cli.flags import FileToRead, Subparsers, port_number
from kvldp.common.errors import KvldpError


def register(sub: Subparsers) -> None:
    p = sub.add_parser("broker", help="run the embedded Kafka-compatible broker (Tansu) in the foreground")
    p.add_argument("--port", type=port_number, default=9092, help="port on 127.0.0.1 (0 = any free port)")
    p.add_argument(
        "--tls-cert",
        metavar="PEM",
        type=FileToRead,
        help="serve TLS on --port with this certificate (a stunnel4 proxy in front of the broker)",
    )
    p.add_argument("--tls-key", metavar="PEM", type=FileToRead, help="private key of --tls-cert")
    p.set_defaults(func=cmd_broker)


def cmd_broker(args: argparse.Namespace) -> int:
    return run_broker(args.port, args.tls_cert, args.tls_key)


def run_broker(port: int, tls_cert: str | None = None, tls_key: str | None = None) -> int:
    """The embedded broker in the foreground until Ctrl-C; with a certificate and key,
    behind a TLS endpoint (clients then use ``security.protocol=SSL``)."""
    broker = EmbeddedBroker(port, tls_cert=tls_cert, tls_key=tls_key).start()
    print(f"bootstrap={broker.bootstrap_servers}", flush=True)
    if broker.tls:
        print("security.protocol=SSL (set ssl.ca.location to the CA of the certificate)", flush=True)
    stopped = False

    def stop(*_: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        while not stopped and broker.alive():
            time.sleep(0.2)  # signals interrupt the sleep; the loop also notices a dead broker
    finally:
        died = not broker.alive()
        tail = broker.log_tail()
        broker.stop()
    if died and not stopped:
        raise KvldpError(f"the broker exited unexpectedly: {tail}")
    return 0
