"""``kvldp gateway``: the HTTPS ingestion gateway for devices that cannot reach Kafka
(:mod:`kvldp.gateway`).

The gateway's modules (aiokafka, aiohttp, PyJWT) are imported when the command runs, not
when ``kvldp --help`` builds the parser."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource

from kvldp.cli.flags import FileToRead, Subparsers, port_number, positive_float, positive_int
from kvldp.common.errors import KvldpError
from kvldp.common.files.path_checks import readable_file
from kvldp.kafka.command_line import add_kafka_args, kafka_settings

logger = logging.getLogger("kvldp.gateway")
#: descriptors the process needs beside its client connections (Kafka, files, the listener)
SPARE_DESCRIPTORS = 256


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "gateway", help="accept device reports over HTTP(S) with JWT device identity, produce them to Kafka"
    )
    p.add_argument(
        "--collection",
        action="append",
        required=True,
        metavar="TOML",
        help="a collection file; repeat for every collection this gateway serves",
    )
    p.add_argument(
        "--jwks",
        required=True,
        metavar="FILE_OR_URL",
        help="the devices' token keys: a JWKS file or https URL",
    )
    p.add_argument("--audience", required=True, help="the 'aud' every device token must carry")
    p.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 exposes it)")
    p.add_argument("--port", type=port_number, default=8080, help="0 = any free port")
    p.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve /metrics on this port only (plain HTTP; 0 = any free port) instead of beside the reports",
    )
    p.add_argument("--metrics-host", default="127.0.0.1", help="bind address of --metrics-port")
    p.add_argument(
        "--tls-cert", metavar="PEM", type=FileToRead, help="serve HTTPS with this certificate chain"
    )
    p.add_argument("--tls-key", metavar="PEM", type=FileToRead, help="private key of --tls-cert")
    add_kafka_args(p)
    p.add_argument(
        "--device-rate", type=positive_float, default=1.0, help="requests per second per device (default 1)"
    )
    p.add_argument(
        "--device-burst",
        type=positive_int,
        default=10,
        help="requests a device may make at once (default 10)",
    )
    p.add_argument(
        "--max-connections", type=positive_int, default=10_000, help="open connections (default 10000)"
    )
    p.add_argument(
        "--produce-timeout",
        type=positive_float,
        default=10.0,
        help="seconds Kafka has to acknowledge a report before the answer is 503 (default 10)",
    )
    p.set_defaults(func=cmd_gateway)


def cmd_gateway(args: argparse.Namespace) -> int:
    from kvldp import startup_heap
    from kvldp.common.config.collection_file import load_collection
    from kvldp.gateway.endpoint import Gateway, GatewaySettings
    from kvldp.gateway.tokens import KeySource, TokenVerifier
    from kvldp.kafka.main_loop import run_async
    from kvldp.web.security import HttpSecurity

    if bool(args.tls_cert) != bool(args.tls_key):
        raise KvldpError("--tls-cert and --tls-key go together")
    if "://" not in args.jwks:  # a file, checked like the other paths (a URL is fetched later)
        readable_file(args.jwks, "--jwks")
    if not args.audience.strip():
        raise KvldpError("--audience must not be empty")
    collections = [load_collection(path) for path in args.collection]
    verifier = TokenVerifier(KeySource.open(args.jwks), args.audience)
    kafka = kafka_settings(args)
    settings = GatewaySettings(
        device_rate=args.device_rate,
        device_burst=float(args.device_burst),
        produce_timeout=args.produce_timeout,
        max_connections=args.max_connections,
        metrics_address=None if args.metrics_port is None else (args.metrics_host, args.metrics_port),
    )
    security = HttpSecurity(args.tls_cert, args.tls_key)
    gateway = Gateway(collections, kafka, verifier, args.host, args.port, settings, security)
    gateway.security.ssl_context()  # a certificate that cannot be loaded is named before Kafka is reached
    _raise_descriptor_limit(args.max_connections + SPARE_DESCRIPTORS)
    scheme = "https" if args.tls_cert else "http"

    def ready(g: Gateway) -> None:
        print(f"gateway={scheme}://{args.host}:{g.bound_port}", flush=True)
        if g.metrics_port is not None:
            print(f"metrics=http://{args.metrics_host}:{g.metrics_port}", flush=True)

    async def serve(stop: asyncio.Event) -> None:
        await gateway.run(stop, ready)

    startup_heap.freeze()  # a long-running service: see kvldp.startup_heap
    run_async(serve, kafka)
    return 0


def _raise_descriptor_limit(wanted: int) -> None:
    """Raise the soft limit on open files towards ``wanted`` (up to the hard limit); warn
    when connections up to ``--max-connections`` would not fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft != resource.RLIM_INFINITY and soft < wanted:
        logger.warning(
            "open-file limit %d is below --max-connections + %d: raise it (ulimit -n) or lower --max-connections",
            soft,
            SPARE_DESCRIPTORS,
        )
