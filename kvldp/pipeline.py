"""The streaming commands: ``broker``, ``produce``, ``aggregate``, ``record``, ``replay``.

Each takes its Kafka settings from :mod:`kvldp.kafka_cli` (``--kafka-config``,
``--bootstrap-servers`` and their environment variables), checks its own input files
before connecting, and turns the failures a user can fix (no address, unreachable
broker, TLS or SASL refused, port in use, bad files) into one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import signal
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from aiokafka.errors import KafkaConnectionError, KafkaError

from kvldp.aggregator.exporter import HttpSecurity, load_basic_auth
from kvldp.aggregator.merged import MergedExporter
from kvldp.aggregator.offline import estimates_json, fold_recording
from kvldp.aggregator.service import Aggregator
from kvldp.broker import EmbeddedBroker, port_in_use
from kvldp.common.collection import Collection
from kvldp.common.collection_file import load_collection
from kvldp.common.control import control_topic, interactive_mechanism, is_interactive
from kvldp.common.errors import KvldpError
from kvldp.common.kafka_config import KafkaConfig
from kvldp.common.kvdata import KVData
from kvldp.common.recording import InvalidRecording, read_recording
from kvldp.kafka_cli import kafka_settings
from kvldp.producer import simulate
from kvldp.producer.batching import check_batching
from kvldp.producer.collector import Collector
from kvldp.producer.csvsource import read_devices
from kvldp.producer.ratings import is_ratings_file, read_ratings
from kvldp.producer.recording import record, replay
from kvldp.producer.round_fleet import RoundFleet, RoundReport
from kvldp.progress import Progress

T = TypeVar("T")


def run_async(make: Callable[[asyncio.Event], Awaitable[T]], kafka: KafkaConfig | str | None = None) -> T:
    """Run a coroutine with Ctrl-C/SIGTERM setting its stop event; map Kafka and socket
    failures to one-line errors."""

    async def main() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            return await make(stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    where = kafka.describe() if isinstance(kafka, KafkaConfig) else kafka
    try:
        return asyncio.run(main())
    except KafkaConnectionError as exc:
        if "Unable to bootstrap" in str(exc):
            raise KvldpError(
                f"cannot reach Kafka at {where}: no broker answered (is it running, is the address right?)"
            ) from None
        raise KvldpError(f"cannot reach Kafka at {where}: {exc}") from None
    except KafkaError as exc:
        raise KvldpError(f"Kafka error at {where}: {exc}") from None
    except ssl.SSLError as exc:
        raise KvldpError(f"TLS error with Kafka at {where}: {exc.reason or exc}") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise KvldpError(f"address already in use: {exc.strerror}") from None
        raise


# ---------------------------------------------------------------------- broker
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


# ---------------------------------------------------------------------- produce
def produce(args: argparse.Namespace) -> int:
    collection = load_collection(args.collection)
    check_batching(collection, args.batch_size)
    kafka = kafka_settings(args)
    rng = np.random.default_rng(args.seed) if args.seed is not None else None
    if args.simulate:
        if not args.users:
            raise KvldpError("--simulate needs --users N")
        try:
            users = simulate.simulate(collection, args.simulate, args.users, args.seed or 0)
        except ValueError as exc:
            raise KvldpError(str(exc)) from None
        if args.truth:
            Path(args.truth).write_text(json.dumps(simulate.truth(collection, users), indent=1))
        if is_interactive(collection):
            if args.rate:
                raise KvldpError(
                    f"--rate: collection {collection.name} reports in rounds, paced by its round_period"
                )
            return _produce_rounds(collection, kafka, users, rng)

        async def publish(stop: asyncio.Event) -> int:
            async with Collector(collection, kafka_config=kafka, rng=rng) as sdk:
                with Progress(users.n_users, f"produce {collection.name}") as bar:
                    await _until(
                        stop,
                        sdk.publish_users(
                            users,
                            simulate.device_ids(users.n_users),
                            batch_size=args.batch_size,
                            rate=args.rate,
                            on_progress=bar.advance,
                        ),
                    )
                return sdk.sent_reports

        sent = run_async(publish, kafka)
    else:
        if args.truth:
            raise KvldpError("--truth needs --simulate (a CSV's truth is the CSV)")
        source = Path(args.from_csv)
        if not source.is_file():
            raise KvldpError(f"CSV file {str(source)!r} does not exist")

        async def publish_csv(stop: asyncio.Event) -> int:
            async with Collector(collection, kafka_config=kafka, rng=rng) as sdk:
                await _until(stop, _publish_csv(sdk, source, args.batch_size))
                return sdk.sent_reports

        sent = run_async(publish_csv, kafka)
    print(f"published {sent} reports to {collection.reports_topic}", file=sys.stderr)
    return 0


def _produce_rounds(
    collection: Collection, kafka: KafkaConfig, users: KVData, rng: np.random.Generator | None
) -> int:
    """A simulated fleet following an interactive collection's rounds to the end: a line
    per round, then the epsilon each device spent."""
    mechanism = interactive_mechanism(collection)
    if users.n_users < mechanism.round_min_reports:
        print(
            f"warning: {users.n_users} devices are fewer than round_min_reports={mechanism.round_min_reports}: "
            "rounds close only once other devices report too",
            file=sys.stderr,
        )
    ids = simulate.device_ids(users.n_users)
    fleet = RoundFleet(users, ids)

    async def publish(stop: asyncio.Event) -> tuple[int, list[float]]:
        async with Collector(collection, kafka_config=kafka, rng=rng) as sdk:
            print(
                f"following {control_topic(collection)} ({mechanism.rounds} rounds at most)", file=sys.stderr
            )
            with Progress(users.n_users * mechanism.rounds, f"produce {collection.name}") as bar:

                def said(report: RoundReport) -> None:
                    print(f"\n{report}" if bar.enabled else report, file=sys.stderr)

                await _until(stop, fleet.run(sdk, on_round=said, on_progress=bar.advance))
            return sdk.sent_reports, [sdk.privacy_spent(device) for device in ids]

    sent, spent = run_async(publish, kafka)
    print(
        f"published {sent} reports to {collection.reports_topic}; epsilon spent per device: "
        f"median {float(np.median(spent)):g}, max {max(spent):g} (of {collection.epsilon:g})",
        file=sys.stderr,
    )
    return 0


async def _until(stop: asyncio.Event, work: Awaitable[object]) -> None:
    """Run ``work`` unless Ctrl-C comes first (then cancel it)."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


async def _publish_csv(sdk: Collector, path: Path, batch_size: int, chunk: int = 4096) -> None:
    keys = frozenset(sdk.collection.keys)
    ids: list[str] = []
    devices: list[dict[str, float]] = []
    source = read_ratings(path).devices(keys) if is_ratings_file(path) else read_devices(path, keys)
    for device, pairs in source:
        ids.append(device)
        devices.append(pairs)
        if len(devices) >= chunk:
            await sdk.report_many(devices, ids, batch_size=batch_size)
            ids, devices = [], []
    if devices:
        await sdk.report_many(devices, ids, batch_size=batch_size)


# ---------------------------------------------------------------------- aggregate
def aggregate(args: argparse.Namespace) -> int:
    collection = load_collection(args.collection)
    if args.from_file:
        path = Path(args.from_file)
        if not path.is_file():
            raise KvldpError(f"recording {str(path)!r} does not exist")
        print(json.dumps(estimates_json(collection, fold_recording(collection, path)), allow_nan=False))
        return 0
    kafka = kafka_settings(args)
    if args.metrics_port and port_in_use(args.metrics_port, args.metrics_host):
        raise KvldpError(f"metrics port {args.metrics_port} on {args.metrics_host} is already in use")

    if args.role != "all" and args.state_dir:
        raise KvldpError(
            f"--state-dir is for --role all; a {args.role} keeps its state in {collection.state_topic}"
        )
    security = metrics_security(args)
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

    run_async(serve, kafka)
    return 0


def metrics_security(args: argparse.Namespace) -> HttpSecurity:
    """TLS (certificate and key files) and basic auth (a user:password file) for /metrics."""
    if bool(args.metrics_tls_cert) != bool(args.metrics_tls_key):
        raise KvldpError("--metrics-tls-cert and --metrics-tls-key go together")
    for path in (args.metrics_tls_cert, args.metrics_tls_key):
        if path and not Path(path).is_file():
            raise KvldpError(f"TLS file {path!r} does not exist")
    user = password = None
    if args.metrics_basic_auth_file:
        user, password = load_basic_auth(args.metrics_basic_auth_file)
    return HttpSecurity(args.metrics_tls_cert, args.metrics_tls_key, user, password)


# ---------------------------------------------------------------------- record / replay
def record_topic(args: argparse.Namespace) -> int:
    collection = load_collection(args.collection)
    kafka = kafka_settings(args)

    async def go(stop: asyncio.Event) -> int:
        try:
            return await record(collection, kafka, Path(args.out), args.from_beginning, args.idle_timeout)
        except FileNotFoundError as exc:
            raise KvldpError(str(exc)) from None

    count = run_async(go, kafka)
    print(f"recorded {count} messages of {collection.reports_topic} to {args.out}", file=sys.stderr)
    return 0


def replay_file(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not path.is_file():
        raise KvldpError(f"recording {str(path)!r} does not exist")
    try:
        with path.open("rb") as stream:
            read_recording(stream)  # the header, before anything connects
    except InvalidRecording as exc:
        raise KvldpError(f"{path}: {exc}") from None
    kafka = kafka_settings(args)
    count = run_async(lambda stop: replay(path, kafka, args.speed, args.topic), kafka)
    print(f"replayed {count} messages from {path}", file=sys.stderr)
    return 0


def collection_or_demo(path: str | None, default: dict[str, Any]) -> Collection:
    """The collection file given, or the built-in one."""
    from kvldp.common.collection_file import parse_collection

    return load_collection(path) if path else parse_collection(default, source="built-in demo collection")
