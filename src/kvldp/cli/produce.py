"""``kvldp produce``: publish simulated devices or a CSV of real device data.

A single pass publishes every device once; ``--periods`` simulates a fleet
reporting once per period (:mod:`kvldp.sim.fleet`) and says what each device spent.
The reports go to Kafka, or with ``--endpoint URL --token-file FILE`` to ``kvldp
gateway`` over HTTPS (:class:`Sink`). The devices' privacy states live in memory for one
run, or with ``--state-dir DIR`` one locked file per device there
(:class:`kvldp.producer.device_state.Fleet`), so that runs one after another, or at
once, keep one account per device.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvldp.attacks.fakes import ATTACKS
from kvldp.cli.flags import (
    DirectoryToWrite,
    FileToRead,
    FileToWrite,
    Subparsers,
    fraction,
    open_fraction,
    positive_float,
    positive_int,
    unit_value,
)
from kvldp.common.errors import KvldpError
from kvldp.kafka.command_line import add_kafka_args, kafka_settings
from kvldp.sim import datasets

if TYPE_CHECKING:
    from kvldp.attacks.target import Target
    from kvldp.common.config.collection import Collection
    from kvldp.common.data.kvdata import KVData
    from kvldp.kafka.client_config import KafkaConfig
    from kvldp.producer.bearer_token import TokenFile
    from kvldp.producer.collector import Collector
    from kvldp.producer.device_state import FleetSummary


def register(sub: Subparsers) -> None:
    p = sub.add_parser("produce", help="publish simulated devices or a CSV of real device data")
    p.add_argument("--collection", required=True, help="collection file (TOML)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--simulate", metavar="DATASET", help=f"one of: {', '.join(datasets.names())}")
    source.add_argument(
        "--from-csv",
        metavar="FILE",
        type=FileToRead,
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
        type=FileToWrite,
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
    p.add_argument(
        "--fake-fraction",
        type=open_fraction,
        metavar="BETA",
        help="with --simulate: add fake devices, a fraction BETA of all devices, sending the reports of "
        "--attack; interleaved with the genuine devices under ordinary device ids (docs/attacks.md)",
    )
    p.add_argument(
        "--attack", choices=ATTACKS, help="with --fake-fraction: what the fake devices send (default m2ga)"
    )
    p.add_argument(
        "--targets",
        type=positive_int,
        metavar="R",
        help="with --fake-fraction: the R least frequent keys of the population are the targets (default 1)",
    )
    p.add_argument(
        "--target-mean",
        type=unit_value,
        metavar="M",
        help="with --fake-fraction: value the fakes promote (default +1)",
    )
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="send to kvldp gateway at URL (https://host[:port][/path]) instead of Kafka; with --token-file",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        type=FileToRead,
        help="with --endpoint: the bearer token of every report, or a JSON object of device id to token "
        "(read again when the file changes)",
    )
    p.add_argument(
        "--ca-file",
        metavar="FILE",
        type=FileToRead,
        help="with --endpoint: the CA (PEM) the gateway's certificate must chain to (default: the system's)",
    )
    p.add_argument(
        "--delivery-timeout",
        type=positive_float,
        metavar="SECONDS",
        help="give up on a message Kafka (or the gateway) has not acknowledged after this long "
        "(default: the SDK's request timeout, 30 s); the command then says what was acknowledged "
        "and exits with status 2",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        type=DirectoryToWrite,
        help="keep each device's privacy state (secret, memo table, ledger) in its own file under DIR "
        "(created if missing), changed under the file's lock, so that runs one after another or at once "
        "over the same devices keep one account per device (default: in memory, for this run: a later run "
        "over the same devices within the report period or budget window sends reports the aggregator "
        "refuses as budget_exceeded)",
    )
    add_kafka_args(p)
    p.set_defaults(func=cmd_produce)


@dataclass(frozen=True)
class Sink:
    """Where ``kvldp produce`` sends: Kafka (``kafka``), or the gateway at ``endpoint``
    with the tokens of ``tokens`` and the CA of ``ca_file``."""

    kafka: KafkaConfig | None = None
    endpoint: str | None = None
    tokens: TokenFile | None = None
    ca_file: str | None = None

    def collector(self, collection: Collection, **options: Any) -> Collector:
        from kvldp.producer.collector import Collector

        if self.kafka is not None:
            return Collector(collection, kafka_config=self.kafka, **options)
        return Collector(
            collection,
            endpoint=self.endpoint,
            token_for=self.tokens,
            ca_file=self.ca_file,
            **options,
        )

    @property
    def who(self) -> str:
        """What acknowledges the reports, in the command's summary."""
        return "Kafka" if self.kafka is not None else "the gateway"

    @property
    def where(self) -> KafkaConfig | str:
        """What a connection failure names."""
        return self.kafka if self.kafka is not None else f"the gateway at {self.endpoint}"

    def destination(self, collection: Collection) -> str:
        return collection.reports_topic if self.endpoint is None else f"{self.endpoint} ({collection.name})"


def sdk_options(args: argparse.Namespace) -> dict[str, Any]:
    """The collector's ``request_timeout`` when ``--delivery-timeout`` gives one, and its
    ``state_dir`` when ``--state-dir`` does. The SDK's warning that the devices' counts are
    kept in memory is off: it speaks of a later run within the report period, not of the
    one in front of it, and ``--state-dir``'s help says it."""
    options: dict[str, Any] = {"warn_unsaved": False}
    if args.delivery_timeout is not None:
        options["request_timeout"] = args.delivery_timeout
    if args.state_dir is not None:
        options["state_dir"] = Path(args.state_dir)
    return options


def sink(args: argparse.Namespace, collection: Collection) -> Sink:
    """The sink the flags name; one-line errors for flags that do not go together, an
    unreadable token file, or a collection that must follow rounds in Kafka."""
    if args.endpoint is None:
        for flag in ("token_file", "ca_file"):
            if getattr(args, flag) is not None:
                raise KvldpError(f"--{flag.replace('_', '-')} goes with --endpoint URL")
        return Sink(kafka=kafka_settings(args))
    from kvldp.common.messages.control_record import is_interactive
    from kvldp.producer.bearer_token import TokenFile
    from kvldp.producer.gateway_client import reports_url

    kafka_flags = ("bootstrap_servers", "kafka_config", "kafka_option")
    clash = next((flag for flag in kafka_flags if getattr(args, flag)), None)
    if clash is not None:
        name = "-X" if clash == "kafka_option" else f"--{clash.replace('_', '-')}"
        raise KvldpError(f"--endpoint sends through the gateway: {name} is for Kafka, give one of them")
    if args.token_file is None:
        raise KvldpError("--endpoint needs --token-file FILE (the devices' bearer tokens)")
    if is_interactive(collection):
        raise KvldpError(
            f"--endpoint: collection {collection.name} reports in rounds, which devices follow on its "
            "control topic in Kafka"
        )
    reports_url(args.endpoint, collection.name)
    return Sink(endpoint=args.endpoint, tokens=TokenFile(args.token_file), ca_file=args.ca_file)


def cmd_produce(args: argparse.Namespace) -> int:
    if args.fake_fraction is None:
        stray = [f for f in ("attack", "targets", "target_mean") if getattr(args, f) is not None]
        if stray:
            raise KvldpError(f"--{stray[0].replace('_', '-')} goes with --fake-fraction BETA")
    elif args.periods is not None or not args.simulate:
        raise KvldpError("--fake-fraction goes with --simulate DATASET, without --periods")
    if args.periods is not None:
        return _produce_periods(args)
    if args.churn is not None:
        raise KvldpError("--churn goes with --periods P")
    return _produce_once(args)


def _produce_once(args: argparse.Namespace) -> int:
    """Every device reports once: simulated devices (an interactive collection's fleet
    follows its rounds instead) or the devices of a CSV file."""
    import asyncio

    from kvldp.cli.produce_summary import Publishing
    from kvldp.common.config.collection_file import load_collection
    from kvldp.common.messages.control_record import is_interactive
    from kvldp.kafka.main_loop import until_stopped
    from kvldp.producer.batching import check_batching
    from kvldp.progress import Progress
    from kvldp.sim import simulate

    collection = load_collection(args.collection)
    check_batching(collection, args.batch_size)
    to = sink(args, collection)
    rng = np.random.default_rng(args.seed) if args.seed is not None else None
    options = {"rng": rng, **sdk_options(args)}
    if args.simulate:
        if not args.users:
            raise KvldpError("--simulate needs --users N")
        try:
            users = simulate.simulate(collection, args.simulate, args.users, args.seed or 0)
        except ValueError as exc:
            raise KvldpError(str(exc)) from None
        if args.truth:
            _write_truth(Path(args.truth), simulate.truth(collection, users))
        if args.fake_fraction is not None:
            return _produce_with_fakes(args, collection, to, users)
        if is_interactive(collection):
            if args.rate:
                raise KvldpError(
                    f"--rate: collection {collection.name} reports in rounds, paced by its round_period"
                )
            assert to.kafka is not None
            return _produce_rounds(collection, to.kafka, users, rng, sdk_options(args))
        run = Publishing(to.who, planned=users.n_users)

        async def publish(stop: asyncio.Event) -> None:
            async with run.follow(to.collector(collection, **options)) as sdk:
                with Progress(users.n_users, f"produce {collection.name}") as bar:
                    await until_stopped(
                        stop,
                        sdk.publish_users(
                            users,
                            simulate.device_ids(users.n_users),
                            batch_size=args.batch_size,
                            rate=args.rate,
                            on_progress=bar.advance,
                        ),
                    )

        run.run(publish, to.where)
    else:
        if args.truth:
            raise KvldpError("--truth needs --simulate (a CSV's truth is the CSV)")
        source = Path(args.from_csv)

        run = Publishing(to.who)

        async def publish_csv(stop: asyncio.Event) -> None:
            async with run.follow(to.collector(collection, **options)) as sdk:
                await until_stopped(stop, _publish_csv(sdk, source, args.batch_size))

        run.run(publish_csv, to.where)
    return run.finish(
        lambda: f"{to.destination(collection)}{unsent_note(collection, run.outcomes)}",
    )


def unsent_note(collection: Collection, outcomes: FleetSummary) -> str:
    """The reports the devices' rules kept back, each kind named with its rule (empty when
    every report went): a device does not send what the aggregator would refuse."""
    from kvldp.common.spec.privacy import format_duration

    aggregate, cap = collection.aggregate, collection.privacy.lifetime_epsilon
    window = format_duration(aggregate.budget_window_s)
    kinds = (
        (outcomes.skipped_period, f"their device already reported in this report_period ({window})"),
        (
            outcomes.skipped_budget,
            f"their device already sent the aggregator's max_reports_per_device="
            f"{aggregate.max_reports_per_device} in this budget_window ({window}), "
            "so the aggregator would refuse them as budget_exceeded",
        ),
        (outcomes.exhausted, f"their device would pass lifetime_epsilon={cap}"),
    )
    return "".join(f"; {count} not sent, nothing spent: {why}" for count, why in kinds if count)


def _produce_with_fakes(args: argparse.Namespace, collection: Collection, to: Sink, users: KVData) -> int:
    """Genuine devices and fake ones (:mod:`kvldp.attacks`), shuffled together and keyed
    ``device-0`` ... ``device-(N-1)`` in that order, published through the SDK in blocks.
    The genuine reports and the fakes are exactly those of ``kvldp attack --repeats 1``
    with the same ``--seed`` (default 0), so the aggregator's statistics equal its
    in-process statistics with fakes."""
    import asyncio

    from kvldp.attacks.experiment import fake_count, fake_rng, genuine_reports, genuine_rng
    from kvldp.attacks.fakes import fake_reports
    from kvldp.attacks.target import InvalidTarget, choose_targets
    from kvldp.cli.produce_summary import Publishing
    from kvldp.common.data.schema import concat
    from kvldp.common.messages.control_record import is_interactive
    from kvldp.kafka.main_loop import until_stopped
    from kvldp.progress import Progress
    from kvldp.sim import simulate

    mechanism = collection.mechanism
    if not mechanism.collects_values:
        raise KvldpError(
            f"--fake-fraction: {mechanism.name} collects no values; the key-value attacks do not apply"
        )
    if collection.privacy.as_table():
        raise KvldpError(
            f"--fake-fraction: collection {collection.name} has a [privacy] table; fakes are simulated "
            "without one (the spending rule would change which genuine reports go)"
        )
    if args.rate:
        raise KvldpError("--rate goes without --fake-fraction (the fakes are sent as fast as possible)")
    seed = args.seed or 0
    frequency, _ = users.truth()
    try:
        target = choose_targets(
            frequency, args.targets or 1, 1.0 if args.target_mean is None else args.target_mean, seed
        )
    except InvalidTarget as exc:
        raise KvldpError(str(exc)) from None
    attack = args.attack or "m2ga"
    n_fakes = fake_count(users.n_users, args.fake_fraction)
    order = np.random.default_rng([seed, 0x1D]).permutation(users.n_users + n_fakes)
    if is_interactive(collection):
        assert to.kafka is not None
        return _produce_rounds_with_fakes(
            collection, to.kafka, users, order, seed, attack, n_fakes, target, sdk_options(args)
        )
    genuine = genuine_reports(mechanism, users, genuine_rng(seed, 0))
    fakes = fake_reports(mechanism, attack, n_fakes, target, fake_rng(seed, 0))
    everyone = concat([genuine, fakes])
    everyone = {name: column[order] for name, column in everyone.items()}
    ids = simulate.device_ids(order.size)
    block = 4096
    run = Publishing(to.who, planned=order.size)

    async def publish(stop: asyncio.Event) -> None:
        async with run.follow(to.collector(collection, **sdk_options(args))) as sdk:
            with Progress(order.size, f"produce {collection.name}") as bar:

                async def send_all() -> None:
                    for start in range(0, order.size, block):
                        part = {name: column[start : start + block] for name, column in everyone.items()}
                        await sdk.publish_reports(part, ids[start : start + block], args.batch_size)
                        bar.advance(min(block, order.size - start))

                await until_stopped(stop, send_all())

    run.run(publish, to.where)
    return run.finish(
        lambda: (
            f"{to.destination(collection)}, {n_fakes} of them from fake devices "
            f"({attack}, targets {', '.join(collection.keys[int(k)] for k in target.keys)}, "
            f"target mean {target.mean:g})"
        ),
    )


def _produce_rounds_with_fakes(
    collection: Collection,
    kafka: KafkaConfig,
    users: KVData,
    order: np.ndarray,
    seed: int,
    attack: str,
    n_fakes: int,
    target: Target,
    options: dict[str, Any],
) -> int:
    """PrivKVM's rounds with fake devices in every round: the genuine fleet follows the
    control topic as without fakes (its generator that of ``kvldp attack``), and after its
    reports of each round the fakes send theirs, built on the round's published means.
    Device ids are ``device-i`` for i in the shuffled ``order`` (genuine ones first in it)."""
    import asyncio

    from kvldp.attacks.experiment import fake_rng, genuine_rng
    from kvldp.attacks.fakes import Round, fake_reports
    from kvldp.cli.produce_summary import Publishing
    from kvldp.common.messages.control_record import Control, interactive_mechanism
    from kvldp.kafka.main_loop import until_stopped
    from kvldp.producer.collector import Collector
    from kvldp.sim import simulate
    from kvldp.sim.round_fleet import RoundFleet, RoundReport

    mechanism = collection.mechanism
    ids = simulate.device_ids(order.size)
    genuine_ids = [ids[i] for i in order[: users.n_users]]
    fake_ids = [ids[i] for i in order[users.n_users :]]
    f_rng = fake_rng(seed, 0)
    needed = interactive_mechanism(collection).round_min_reports
    if needed < order.size:
        print(
            f"warning: round_min_reports={needed} is below the {order.size} devices: a round may close "
            "before every report is in, and the statistics then differ from kvldp attack's",
            file=sys.stderr,
        )

    run = Publishing("Kafka")

    async def publish(stop: asyncio.Event) -> None:
        sdk = Collector(collection, kafka_config=kafka, rng=genuine_rng(seed, 0), **options)
        async with run.follow(sdk):

            async def fakes(control: Control) -> None:
                batch = fake_reports(
                    mechanism, attack, n_fakes, target, f_rng, Round(control.round, control.means)
                )
                await sdk.publish_reports(batch, fake_ids)

            def said(report: RoundReport) -> None:
                print(f"{report} (and {n_fakes} fake devices)", file=sys.stderr)

            await until_stopped(stop, RoundFleet(users, genuine_ids).run(sdk, on_round=said, also=fakes))

    run.run(publish, kafka)
    return run.finish(
        lambda: (
            f"{collection.reports_topic}, {n_fakes} per round from fake "
            f"devices ({attack}, targets {', '.join(collection.keys[int(k)] for k in target.keys)}, "
            f"target mean {target.mean:g})"
        ),
    )


def _produce_rounds(
    collection: Collection,
    kafka: KafkaConfig,
    users: KVData,
    rng: np.random.Generator | None,
    options: dict[str, Any],
) -> int:
    """A simulated fleet following an interactive collection's rounds to the end: a line
    per round, then the epsilon each device spent."""
    import asyncio

    from kvldp.cli.produce_summary import Publishing
    from kvldp.common.messages.control_record import control_topic, interactive_mechanism
    from kvldp.kafka.main_loop import until_stopped
    from kvldp.producer.collector import Collector
    from kvldp.progress import Progress
    from kvldp.sim import simulate
    from kvldp.sim.round_fleet import RoundFleet, RoundReport

    mechanism = interactive_mechanism(collection)
    if users.n_users < mechanism.round_min_reports:
        print(
            f"warning: {users.n_users} devices are fewer than round_min_reports={mechanism.round_min_reports}: "
            "rounds close only once other devices report too",
            file=sys.stderr,
        )
    ids = simulate.device_ids(users.n_users)
    fleet = RoundFleet(users, ids)

    run = Publishing("Kafka")  # how many reports the rounds take is known only at their end

    async def publish(stop: asyncio.Event) -> list[float]:
        sdk = Collector(collection, kafka_config=kafka, rng=rng, **options)
        async with run.follow(sdk):
            print(
                f"following {control_topic(collection)} ({mechanism.rounds} rounds at most)", file=sys.stderr
            )
            with Progress(users.n_users * mechanism.rounds, f"produce {collection.name}") as bar:

                def said(report: RoundReport) -> None:
                    print(f"\n{report}" if bar.enabled and bar.terminal else report, file=sys.stderr)

                await until_stopped(stop, fleet.run(sdk, on_round=said, on_progress=bar.advance))
            return [sdk.privacy_spent(device) for device in ids]

    spent = run.run(publish, kafka)
    return run.finish(
        lambda: (
            f"{collection.reports_topic}; epsilon spent per device: "
            f"median {float(np.median(spent)):g}, max {max(spent):g} (of {collection.epsilon:g})"
        ),
    )


def _write_truth(path: Path, truth: dict[str, Any]) -> None:
    """The population's true statistics as JSON, written whole or not at all."""
    from kvldp.common.files.atomic_file import write_atomically

    write_atomically(path, json.dumps(truth, indent=1).encode(), mode=0o644)


async def _publish_csv(sdk: Collector, path: Path, batch_size: int, chunk: int = 4096) -> None:
    """Publish the devices of a device or ratings file: read through once first, so that a
    bad row anywhere (malformed, an unknown key, a value outside the collection's range
    unless it clips) stops the command before anything is sent or spent."""
    collection = sdk.collection
    value_range = None if collection.clip_values else collection.value_range
    devices_in_file = 0
    for _ in _file_devices(path, frozenset(collection.keys), value_range):
        devices_in_file += 1
    if not devices_in_file:
        raise KvldpError(f"{path}: no device rows to publish (the file holds a header at most)")
    ids: list[str] = []
    devices: list[dict[str, float]] = []
    for device, pairs in _file_devices(path, frozenset(collection.keys), value_range):
        ids.append(device)
        devices.append(pairs)
        if len(devices) >= chunk:
            await sdk.report_many(devices, ids, batch_size=batch_size)
            ids, devices = [], []
    if devices:
        await sdk.report_many(devices, ids, batch_size=batch_size)


def _file_devices(
    path: Path, keys: frozenset[str], value_range: tuple[float, float] | None
) -> Iterator[tuple[str, dict[str, float]]]:
    """The devices of a ``device,key,value`` file (checked row by row, naming the line)
    or of a ratings file (read whole; a rating outside ``value_range`` names its user
    and item)."""
    from kvldp.sim.csvsource import check_range, read_devices
    from kvldp.sim.ratings import is_ratings_file, read_ratings

    if not is_ratings_file(path):
        yield from read_devices(path, keys, value_range)
        return
    for user, ratings in read_ratings(path).devices(keys):
        for item, rating in ratings.items():
            check_range(rating, value_range, f"{path}: the rating of {item!r} by user {user!r}")
        yield user, ratings


def _produce_periods(args: argparse.Namespace) -> int:
    """A simulated fleet reporting once per period (kvldp.sim.fleet); a summary line per
    period and the epsilon spent per device on stderr. ``--truth`` is the last period's."""
    import asyncio

    from kvldp.cli.produce_summary import Publishing
    from kvldp.common.config.collection_file import load_collection
    from kvldp.kafka.main_loop import until_stopped
    from kvldp.producer.batching import check_batching
    from kvldp.progress import Progress
    from kvldp.sim import simulate
    from kvldp.sim.fleet import FleetSimulation, PeriodReport

    if not args.simulate:
        raise KvldpError("--periods simulates a fleet: use it with --simulate DATASET, not --from-csv")
    if not args.users:
        raise KvldpError("--simulate needs --users N")
    collection = load_collection(args.collection)
    check_batching(collection, args.batch_size)
    to = sink(args, collection)
    sim = FleetSimulation(
        collection,
        args.simulate,
        args.users,
        args.periods,
        churn=0.1 if args.churn is None else args.churn,
        seed=args.seed or 0,
    )
    rng = np.random.default_rng(args.seed) if args.seed is not None else None

    run = Publishing(to.who, planned=args.users * args.periods)

    async def publish(stop: asyncio.Event) -> np.ndarray:
        sdk = to.collector(collection, rng=rng, clock=sim.clock, **sdk_options(args))
        async with run.follow(sdk):
            with Progress(args.users * args.periods, f"produce {collection.name}") as bar:

                def said(report: PeriodReport) -> None:  # below the bar, which goes on drawing
                    print(f"\n{report}" if bar.enabled and bar.terminal else report, file=sys.stderr)

                work = sim.run(sdk, args.batch_size, rate=args.rate, on_progress=bar.advance, on_period=said)
                await until_stopped(stop, work)
            return sim.spent(sdk)

    spent = run.run(publish, to.where)
    if args.truth:
        _write_truth(Path(args.truth), simulate.truth(collection, sim.population))
    return run.finish(
        lambda: (
            f"{to.destination(collection)}; epsilon spent per device: "
            f"median {float(np.median(spent)):g}, max {float(spent.max()):g}"
            f"{unsent_note(collection, run.outcomes)}"
        ),
    )
