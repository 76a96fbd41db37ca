"""``kvldp broker``: the embedded Kafka-compatible broker (Tansu), or with ``--apache`` a
real Apache Kafka cluster on loopback, in the foreground."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

from kvldp.broker.tansu import EmbeddedBroker
from kvldp.cli.flags import FileToRead, Subparsers, port_number, positive_int
from kvldp.common.errors import KvldpError


def register(sub: Subparsers) -> None:
    p = sub.add_parser("broker", help="run the embedded Kafka-compatible broker (Tansu) in the foreground")
    p.add_argument(
        "--port",
        type=port_number,
        default=9092,
        help="port on 127.0.0.1 (0 = any free port; with --apache, node 1's, the others' are free ones)",
    )
    p.add_argument(
        "--tls-cert",
        metavar="PEM",
        type=FileToRead,
        help="serve TLS on --port with this certificate (a stunnel4 proxy in front of the broker); "
        "with --apache, an SSL listener of every node, on free ports, printed as bootstrap=",
    )
    p.add_argument("--tls-key", metavar="PEM", type=FileToRead, help="private key of --tls-cert")
    p.add_argument(
        "--apache",
        action="store_true",
        help="run Apache Kafka instead (KRaft, on 127.0.0.1; its jars come from `make kafka`)",
    )
    p.add_argument(
        "--nodes",
        type=positive_int,
        help="with --apache: the number of nodes, each broker and controller (default 1)",
    )
    p.set_defaults(func=cmd_broker)


def cmd_broker(args: argparse.Namespace) -> int:
    if args.apache:
        if bool(args.tls_cert) != bool(args.tls_key):
            raise KvldpError("--tls-cert and --tls-key go together")
        return run_apache_kafka(args.nodes or 1, args.port, args.tls_cert, args.tls_key)
    if args.nodes is not None:
        raise KvldpError("--nodes is for Apache Kafka: add --apache")
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


def _interrupted(*_: object) -> NoReturn:
    """SIGTERM or SIGINT, while Apache Kafka starts or runs: unwind, stopping the nodes on
    the way (a second signal is ignored, so that the stopping finishes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def run_apache_kafka(
    nodes: int, port: int = 0, tls_cert: str | None = None, tls_key: str | None = None
) -> int:
    """Apache Kafka in the foreground until SIGTERM or Ctrl-C, node 1 on ``port`` (0: a
    free one) and the others on free ports: once the cluster accepts
    writes, ``bootstrap=...`` (every node's address; with a certificate and key, every
    node's SSL listener, and a line saying so), then ``node=ID pid=PID`` for each
    node and a line saying it is ready. A node that dies is reported on stderr and the
    others keep running (a failover to try); when none runs, kvldp fails."""
    from kvldp.broker.apache_kafka import ApacheKafka, KafkaTls  # aiokafka and the JVM, only when asked for

    tls = KafkaTls(Path(tls_cert), Path(tls_key)) if tls_cert and tls_key else None
    before = {signum: signal.signal(signum, _interrupted) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ApacheKafka(nodes, port, tls=tls) as cluster:
            if tls is None:
                print(f"bootstrap={cluster.bootstrap_servers}", flush=True)
            else:
                print(f"bootstrap={cluster.tls_bootstrap_servers}", flush=True)
                print("security.protocol=SSL (set ssl.ca.location to the CA of the certificate)", flush=True)
            for node_id, pid in cluster.pids.items():
                print(f"node={node_id} pid={pid}", flush=True)
            print(f"ready: {nodes} node(s) accept writes, started in {cluster.started_in_s:.1f}s", flush=True)
            running = set(cluster.pids)
            while running:
                time.sleep(0.2)  # a signal raises out of the sleep
                for node_id in sorted(running - set(cluster.pids)):
                    print(
                        f"kvldp: node {node_id} exited; the others keep running", file=sys.stderr, flush=True
                    )
                running &= set(cluster.pids)
            raise KvldpError("every Apache Kafka node exited")
    except KeyboardInterrupt:
        return 0
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
