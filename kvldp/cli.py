"""The ``kvldp`` command line: one entry point, one subcommand per job.

Input errors (:class:`kvldp.common.errors.KvldpError`) print one line on stderr and exit
with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kvldp.bench import mechanisms as bench_mechanisms
from kvldp.bench.table import format_table
from kvldp.common.audit import audit
from kvldp.common.conditional import parse_query
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import create, get, names
from kvldp.common.params import parse_assignments
from kvldp.evaluate import evaluate
from kvldp.kafka_cli import add_kafka_args
from kvldp.producer import datasets
from kvldp.reliability import NAMES as SCENARIO_NAMES


def _number_flag(
    cast: type[int] | type[float], ok: Callable[[Any], bool], wanted: str
) -> Callable[[str], Any]:
    """An argparse type: ``cast`` the text, then require ``ok`` of the value."""

    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if cast is int else 'a number'}, got {text!r}"
            ) from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text}")
        return value

    return parse


_positive_int = _number_flag(int, lambda v: v >= 1, "a positive integer")
_non_negative_int = _number_flag(int, lambda v: v >= 0, "a non-negative integer")
_positive_float = _number_flag(float, lambda v: 0 < v < float("inf"), "a positive finite number")
_fraction = _number_flag(float, lambda v: 0.0 <= v <= 1.0, "a fraction in [0, 1]")


def _int_list(text: str) -> list[int]:
    return [_positive_int(t) for t in text.split(",") if t.strip()]


def _two_ints(text: str) -> tuple[int, int]:
    values = _int_list(text)
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected two comma-separated counts, got {text!r}")
    return values[0], values[1]


def _emit(payload: Any, as_json: bool, text: str) -> None:
    print(json.dumps(payload, indent=None if as_json else 2, allow_nan=False) if as_json else text)


def cmd_mechanisms(args: argparse.Namespace) -> int:
    rows = []
    for name in names():
        cls = get(name)
        params = [{"name": p.name, "default": p.default, "doc": p.doc} for p in cls.params_spec]
        rows.append(
            {
                "mechanism": name,
                "notion": cls.notion,
                "summary": cls.summary,
                "params": params,
                "collects_values": cls.collects_values,
            }
        )
    text = "\n".join(f"{r['mechanism']:<10} {r['notion']:<5} {r['summary']}" for r in rows)
    _emit(rows, args.json, text)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    if args.collection is not None:
        if args.mechanism is not None:
            raise KvldpError("audit takes --mechanism or --collection, not both")
        return _audit_collection(args)
    if args.reports is not None or args.changes is not None:
        raise KvldpError("--reports and --changes go with --collection FILE")
    missing = [flag for flag in ("mechanism", "epsilon", "keys") if getattr(args, flag) is None]
    if missing:
        raise KvldpError(f"audit needs --{', --'.join(missing)} (or --collection FILE)")
    mech = create(args.mechanism, args.keys, args.epsilon, **parse_assignments(args.param))
    result = audit(mech, exhaustive=True if args.exhaustive else None)
    payload = result.to_dict()
    text = (
        f"{result.mechanism}: max log ratio {result.max_log_ratio:.12g} vs epsilon {result.epsilon:g} "
        f"({result.notion}{', eta ' + format(result.eta, 'g') if result.eta is not None else ''}) "
        f"-> {'ok' if result.ok else 'VIOLATION'}"
    )
    _emit(payload, args.json, text)
    return 0 if result.ok else 1


def _audit_collection(args: argparse.Namespace) -> int:
    """A collection's lifetime worst case over ``--reports`` reports with ``--changes``
    state changes (kvldp.common.privacy), plus the exact per-report audit of its mechanism."""
    from kvldp.common.collection import load_collection
    from kvldp.common.privacy import lifetime_audit

    given = [f"--{flag}" for flag in ("epsilon", "keys", "param") if getattr(args, flag) is not None]
    if given:
        raise KvldpError(f"--collection brings its mechanism; drop {', '.join(given)}")
    if args.reports is None:
        raise KvldpError("--collection needs --reports T (reports a device sends over its lifetime)")
    collection = load_collection(args.collection)
    changes = 0 if args.changes is None else args.changes
    life = lifetime_audit(collection.epsilon, collection.privacy, args.reports, changes)
    result = audit(collection.mechanism, exhaustive=True if args.exhaustive else None)
    payload = {
        "collection": collection.name,
        "mechanism": collection.mechanism_name,
        "per_report_epsilon": life.per_report_epsilon,
        "memoize": life.memoize,
        "report_period_s": collection.privacy.report_period_s,
        "reports": life.reports,
        "changes": life.changes,
        "cap": life.cap,
        "charged": life.charged,
        "refused": life.refused,
        "lifetime_epsilon": life.lifetime_epsilon,
        "max_log_ratio": result.max_log_ratio if math.isfinite(result.max_log_ratio) else "inf",
        "ok": result.ok,
    }
    cap = "no cap" if life.cap is None else f"cap {life.cap:g}"
    text = (
        f"{collection.name} ({collection.mechanism_name}, epsilon {life.per_report_epsilon:g} per report, "
        f"memoize {'on' if life.memoize else 'off'}, {cap}): {life.reports} reports with {life.changes} "
        f"state changes spend at most {life.lifetime_epsilon:g} ({life.charged} charged, {life.refused} "
        f"refused); per-report audit {'ok' if result.ok else 'VIOLATION'}"
    )
    _emit(payload, args.json, text)
    return 0 if result.ok else 1


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.experiment:
        given = [
            f
            for f in ("mechanism", "epsilon", "keys", "param", "estimator", "users", "repeats", "query")
            if getattr(args, f) is not None
        ]
        if given:
            raise KvldpError(f"--experiment runs a fixed grid; drop --{', --'.join(given)}")
        return cmd_experiment(args)
    if args.quick or args.out:
        raise KvldpError("--quick and --out go with --experiment NAME")
    missing = [flag for flag in ("mechanism", "epsilon", "keys") if getattr(args, flag) is None]
    if missing:
        raise KvldpError(f"evaluate needs --{', --'.join(missing)} (or --experiment NAME)")
    mech = create(args.mechanism, args.keys, args.epsilon, **parse_assignments(args.param))
    estimator = args.estimator or "unbiased"
    if estimator not in mech.estimator_names:
        raise KvldpError(
            f"{mech.name} has no estimator {estimator!r} (available: {', '.join(mech.estimator_names)})"
        )
    dataset = args.dataset or "gaussian"
    from_file = dataset.startswith(datasets.CSV_PREFIX)
    users = args.users if args.users is not None or from_file else 100_000
    try:
        data = datasets.generate(dataset, users, args.keys, args.seed)
    except ValueError as exc:
        raise KvldpError(str(exc)) from None
    names = [f"k{i}" for i in range(mech.d)]
    queries = [parse_query(text, names) for text in args.query or []]
    result = evaluate(mech, estimator, data, args.repeats or 1, args.seed, not args.json, queries)
    text = "\n".join(f"{k}: {v}" for k, v in result.items())
    _emit(result, args.json, text)
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from kvldp.experiments import EXPERIMENTS
    from kvldp.experiments.runner import run, write

    experiment = EXPERIMENTS.get(args.experiment)
    if experiment is None:
        raise KvldpError(f"unknown experiment {args.experiment!r} (known: {', '.join(EXPERIMENTS)})")
    override = args.dataset
    if override is not None and not override.startswith(datasets.CSV_PREFIX):
        raise KvldpError("--experiment takes --dataset csv:PATH only (the grids name their synthetic data)")
    try:
        rows = run(experiment, args.quick, args.seed, not args.json, override)
    except ValueError as exc:
        raise KvldpError(str(exc)) from None
    out = Path(args.out) if args.out else Path("results") / experiment.name
    command = " ".join(
        [
            "kvldp evaluate",
            f"--experiment {experiment.name}",
            *(["--quick"] if args.quick else []),
            *([f"--dataset {override}"] if override else []),
            *([f"--seed {args.seed}"] if args.seed else []),
        ]
    )
    paths = write(experiment, rows, out, command)
    _emit(
        {"experiment": experiment.name, "cells": len(rows), "files": [str(p) for p in paths]},
        args.json,
        "\n".join(f"wrote {p}" for p in paths),
    )
    return 0


def cmd_advise(args: argparse.Namespace) -> int:
    from kvldp.advise import advise

    ranking = advise(args.keys, args.epsilon, args.keys_per_device, args.users, args.objective)
    payload = {"ranking": [a.to_dict() for a in ranking]}
    width = max(len(a.mechanism) for a in ranking) + 12
    lines = [f"{'mechanism':<{width}} {'MSE(f)':>10} {'MSE(m)':>10}  why"]
    for a in ranking:
        label = a.mechanism + "".join(f" {k}={v}" for k, v in a.params.items())
        lines.append(
            f"{label:<{width}} {a.predicted_mse_frequency:>10.3g} {a.predicted_mse_mean:>10.3g}  {a.why}"
        )
    for entry in payload["ranking"]:  # an undefined prediction is null in JSON, never NaN
        for field in ("predicted_mse_frequency", "predicted_mse_mean"):
            if not math.isfinite(entry[field]):
                entry[field] = None
    _emit(payload, args.json, "\n".join(lines))
    return 0


def cmd_bench_reliability(args: argparse.Namespace) -> int:
    from kvldp.reliability.runner import markdown, rows, run_scenarios

    keep = Path(args.keep) if args.keep else None
    table = rows(run_scenarios(args.scenario or list(SCENARIO_NAMES), args.scale, keep), args.scale)
    if args.markdown:
        Path(args.markdown).write_text(markdown(table))
    if args.json:
        print(json.dumps(table, indent=1, default=str))
    else:
        print(format_table(table, ["scenario", "scale", "passed", "seconds"]))
        for row in table:
            figures = ", ".join(f"{k}={v}" for k, v in row["figures"].items())
            print(f"\n{row['scenario']}: {figures}")
            for failure in row["failures"]:
                print(f"  FAILED: {failure}")
    return 0 if all(row["passed"] for row in table) else 1


def cmd_bench(args: argparse.Namespace) -> int:
    chosen = args.mechanism or None
    if chosen:
        for name in chosen:
            get(name)
    if args.bench == "fold":
        rows = bench_mechanisms.bench_fold(chosen, args.reports, args.keys, args.epsilon, args.seed)
        columns = ["mechanism", "keys", "reports", "seconds", "reports_per_second"]
    elif args.scaling:
        small, large = args.scaling
        rows = bench_mechanisms.bench_refit_scaling(
            chosen, max(args.keys_list), args.epsilon, small, large, args.seed
        )
        columns = bench_mechanisms.SCALING_COLUMNS
    else:
        rows = bench_mechanisms.bench_estimate(chosen, args.keys_list, args.users, args.epsilon, args.seed)
        columns = ["mechanism", "keys", "estimator", "seconds", "em_iterations", "note"]
    _emit(rows, args.json, format_table(rows, columns))
    return 0


def cmd_bench_kafka(args: argparse.Namespace) -> int:
    """ingest, produce and memory: kvldp against a baseline measured in the same run."""
    from kvldp.bench import kafka, memory
    from kvldp.kafka_cli import external_kafka

    if args.bench == "ingest":
        rows = kafka.bench_ingest(
            args.messages,
            args.batched_reports,
            args.per_message,
            args.repeats,
            args.seed,
            external_kafka(args),
        )
        columns = kafka.INGEST_COLUMNS
    elif args.bench == "produce":
        rows = kafka.bench_produce(args.messages, args.repeats, args.seed, external_kafka(args))
        columns = kafka.PRODUCE_COLUMNS
    else:
        rows = memory.bench_memory(args.reports, args.seed)
        columns = memory.MEMORY_COLUMNS
    _emit(rows, args.json, format_table(rows, columns))
    return 0


def cmd_bench_rounds(args: argparse.Namespace) -> int:
    """PrivKVM's rounds live against the in-process reference."""
    from kvldp.bench import rounds

    rows = rounds.bench_rounds(
        args.users, args.keys, args.epsilon, args.rounds, args.live_repeats, args.reference_repeats, args.seed
    )
    _emit(rows, args.json, format_table(rows, rounds.ROUNDS_COLUMNS))
    return 0


def cmd_bench_peers(args: argparse.Namespace) -> int:
    from kvldp.bench.peers import COLUMNS, bench_peers

    rows = bench_peers(
        args.mechanism or ["grr", "oue", "olh"], args.keys, args.epsilon, args.users, args.repeats, args.seed
    )
    _emit(rows, args.json, format_table(rows, COLUMNS))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from kvldp.demo import run_demo

    return run_demo(args)


def cmd_broker(args: argparse.Namespace) -> int:
    from kvldp.pipeline import run_broker

    return run_broker(args.port, args.tls_cert, args.tls_key)


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

    from kvldp.common.collection import load_collection
    from kvldp.kafka_cli import kafka_settings
    from kvldp.pipeline import _until, run_async
    from kvldp.producer import simulate
    from kvldp.producer.collector import Collector, check_batching
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


def cmd_aggregate(args: argparse.Namespace) -> int:
    from kvldp.pipeline import aggregate

    return aggregate(args)


def cmd_record(args: argparse.Namespace) -> int:
    from kvldp.pipeline import record_topic

    return record_topic(args)


def cmd_replay(args: argparse.Namespace) -> int:
    from kvldp.pipeline import replay_file

    return replay_file(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvldp", description="Key-value telemetry under local differential privacy."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("mechanisms", help="list the mechanisms, their privacy notion and parameters")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_mechanisms)

    p = sub.add_parser(
        "audit", help="exact privacy audit: max ln Pr[z|x]/Pr[z|x'] over all inputs and outputs"
    )
    p.add_argument("--mechanism", help=f"one of: {', '.join(names())}")
    p.add_argument("--epsilon", type=_positive_float, help="privacy budget per report (with --mechanism)")
    p.add_argument("--keys", type=_positive_int, help="number of keys d (with --mechanism)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="mechanism parameter (repeatable)")
    p.add_argument(
        "--collection",
        metavar="FILE",
        help="instead of --mechanism: audit a collection file, per report and over a device's lifetime",
    )
    p.add_argument("--reports", type=_non_negative_int, help="with --collection: reports a device sends (T)")
    p.add_argument(
        "--changes",
        type=_non_negative_int,
        help="with --collection: how many of them change the device's state (K, default 0)",
    )
    p.add_argument("--exhaustive", action="store_true", help="enumerate every input (small d only)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser(
        "evaluate", help="simulate, perturb, fold, estimate and score against the truth (or a paper's grid)"
    )
    p.add_argument("--experiment", help="run a paper's whole grid (see docs/results/README.md)")
    p.add_argument("--out", help="output folder of --experiment (default: results/NAME/)")
    p.add_argument("--quick", action="store_true", help="--experiment at reduced n and repeats (< 1 minute)")
    p.add_argument("--mechanism", help=f"one of: {', '.join(names())}")
    p.add_argument("--epsilon", type=_positive_float, help="privacy budget per report")
    p.add_argument("--keys", type=_positive_int, help="number of keys d")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="mechanism parameter (repeatable)")
    p.add_argument("--estimator", help="unbiased (default), em, em4 (privkv), normsub, paper")
    p.add_argument("--dataset", help=f"one of: {datasets.describe()} (default gaussian)")
    p.add_argument("--users", type=_positive_int, help="simulated users (default 100000; none with csv:)")
    p.add_argument("--repeats", type=_positive_int, help="collections simulated and scored (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--query",
        action="append",
        metavar="TEXT",
        help='conditional query over keys k0..k{d-1}, e.g. "k2 | k1=1" (repeatable; ioh, ioh_oue, ioh_hrr)',
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("advise", help="rank the key-value mechanisms for a deployment by predicted MSE")
    p.add_argument("--keys", type=_positive_int, required=True, help="number of keys d")
    p.add_argument("--epsilon", type=_positive_float, required=True, help="privacy budget per report")
    p.add_argument("--keys-per-device", type=_positive_int, required=True, help="keys a device holds (L)")
    p.add_argument("--users", type=_positive_int, default=100_000, help="devices reporting (default 100000)")
    p.add_argument(
        "--objective",
        default="sum",
        choices=("sum", "frequency", "mean"),
        help="rank by MSE(f) + MSE(m) (default)",
    )
    p.add_argument("--json", action="store_true", help='print {"ranking": [...]} best first')
    p.set_defaults(func=cmd_advise)

    p = sub.add_parser("bench", help="benchmarks (measurements, not tests)")
    bsub = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    b = bsub.add_parser("fold", help="reports folded per second, per mechanism")
    b.add_argument("--reports", type=_positive_int, default=1_000_000)
    b.add_argument("--keys", type=_positive_int, default=100)
    b.add_argument("--epsilon", type=_positive_float, default=1.0)
    b.add_argument("--mechanism", action="append", help="restrict to this mechanism (repeatable)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)
    b = bsub.add_parser("estimate", help="refit time per mechanism, estimator and key count")
    b.add_argument("--keys", dest="keys_list", type=_int_list, default=[10, 100, 1000], help="comma list")
    b.add_argument("--users", type=_positive_int, default=100_000)
    b.add_argument("--epsilon", type=_positive_float, default=1.0)
    b.add_argument("--mechanism", action="append", help="restrict to this mechanism (repeatable)")
    b.add_argument(
        "--scaling",
        type=_two_ints,
        metavar="SMALL,LARGE",
        help="instead: refit time on statistics of SMALL and LARGE reports (e.g. 10000,10000000) at the largest --keys",
    )
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)

    b = bsub.add_parser("ingest", help="aggregator fold rate vs a bare aiokafka drain of the same topic")
    b.add_argument("--messages", type=_positive_int, default=500_000, help="single-report messages")
    b.add_argument(
        "--batched-reports", type=_positive_int, default=5_000_000, help="reports in batched messages"
    )
    b.add_argument("--per-message", type=_positive_int, default=1000, help="reports per batched message")
    b.add_argument("--repeats", type=_positive_int, default=3)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    add_kafka_args(b)  # a cluster named here replaces the embedded broker
    b.set_defaults(func=cmd_bench_kafka)
    b = bsub.add_parser("produce", help="simulated devices vs a bare producer sending the same bytes")
    b.add_argument("--messages", type=_positive_int, default=200_000)
    b.add_argument("--repeats", type=_positive_int, default=3)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    add_kafka_args(b)
    b.set_defaults(func=cmd_bench_kafka)
    b = bsub.add_parser("memory", help="aggregator resident memory after 1e5 and 1e7 reports")
    b.add_argument(
        "--reports", type=_int_list, default=[100_000, 10_000_000], help="comma list of checkpoints"
    )
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_kafka)
    b = bsub.add_parser(
        "rounds", help="PrivKVM rounds streamed live: MSE against the in-process reference, time per round"
    )
    b.add_argument("--users", type=_positive_int, default=20_000)
    b.add_argument("--keys", type=_positive_int, default=10)
    b.add_argument("--epsilon", type=_positive_float, default=4.0)
    b.add_argument("--rounds", type=_int_list, default=[1, 3, 10], help="comma list of round counts c")
    b.add_argument("--live-repeats", type=_positive_int, default=5, help="live runs per c")
    b.add_argument("--reference-repeats", type=_positive_int, default=50, help="in-process runs per c")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_rounds)
    b = bsub.add_parser(
        "peers", help="grr/oue/olh aggregation time and MSE vs pure-ldp and multi-freq-ldpy (make bench-deps)"
    )
    b.add_argument("--mechanism", action="append", choices=("grr", "oue", "olh"))
    b.add_argument("--keys", type=_positive_int, default=100)
    b.add_argument("--epsilon", type=_positive_float, default=1.0)
    b.add_argument("--users", type=_positive_int, default=100_000)
    b.add_argument("--repeats", type=_positive_int, default=5)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_peers)

    b = bsub.add_parser(
        "reliability",
        help="crash, rebalance, resend, hostile-input and broker-restart scenarios against their oracles",
    )
    b.add_argument(
        "--scenario", action="append", choices=SCENARIO_NAMES, help="run only this one (repeatable)"
    )
    b.add_argument(
        "--scale", choices=("fast", "full"), default="full", help="full: the figures of docs/reliability.md"
    )
    b.add_argument("--keep", metavar="DIR", help="keep logs, recordings and checkpoints here")
    b.add_argument("--markdown", metavar="PATH", help="also write the figures as Markdown")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_reliability)

    p = sub.add_parser(
        "demo", help="embedded broker + simulated devices + aggregator + metrics, with a live table"
    )
    p.add_argument("--collection", help="collection file (default: the built-in demo collection)")
    p.add_argument("--dataset", default="gaussian")
    p.add_argument("--users", type=_positive_int, default=50_000, help="simulated devices")
    p.add_argument(
        "--periods",
        type=_positive_int,
        default=5,
        help="periods the fleet reports in, an hour apart (default 5)",
    )
    p.add_argument(
        "--churn", type=_fraction, default=0.1, help="fraction of devices whose pairs change each period"
    )
    p.add_argument("--rate", type=_positive_float, default=20_000.0, help="simulated reports per second")
    p.add_argument(
        "--batch-size",
        type=_positive_int,
        default=100,
        help="reports per Kafka message (collections that memoize or have a report_period: 1)",
    )
    p.add_argument("--metrics-port", type=int, default=9108)
    p.add_argument("--seed", type=int, default=0)
    add_kafka_args(p)  # a cluster named here replaces the embedded broker
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("broker", help="run the embedded Kafka-compatible broker (Tansu) in the foreground")
    p.add_argument("--port", type=int, default=9092, help="port on 127.0.0.1 (0 = any free port)")
    p.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="serve TLS on --port with this certificate (a stunnel4 proxy in front of the broker)",
    )
    p.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    p.set_defaults(func=cmd_broker)

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
    p.add_argument("--users", type=_positive_int, help="simulated devices (with --simulate)")
    p.add_argument("--seed", type=int, help="seed the simulated data and perturbation (tests, demos)")
    p.add_argument(
        "--batch-size", type=_positive_int, default=1, help="reports per Kafka message (gateway mode)"
    )
    p.add_argument("--rate", type=_positive_float, help="reports per second (default: as fast as possible)")
    p.add_argument(
        "--truth",
        metavar="FILE",
        help="write the simulated population's true statistics (JSON; with --periods, the last period's)",
    )
    p.add_argument(
        "--periods",
        type=_positive_int,
        help="with --simulate: the fleet reports once per period, P periods up to now "
        "(period: the collection's report_period, else 1h)",
    )
    p.add_argument(
        "--churn",
        type=_fraction,
        help="with --periods: fraction of devices that redraw their pairs each period (default 0.1)",
    )
    add_kafka_args(p)
    p.set_defaults(func=cmd_produce)

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
        "--refit-interval", type=_positive_float, help="seconds between refits (default: the collection's)"
    )
    p.add_argument(
        "--from-file", metavar="PATH", help="fold a recording offline and print the estimates as JSON"
    )
    p.set_defaults(func=cmd_aggregate)

    p = sub.add_parser("record", help="write a collection's raw report messages to a file")
    p.add_argument("--collection", required=True)
    p.add_argument("--out", required=True, metavar="PATH")
    p.add_argument(
        "--from-beginning", action="store_true", help="start at the oldest message (default: new ones)"
    )
    p.add_argument(
        "--idle-timeout", type=_positive_float, default=5.0, help="stop after this many idle seconds"
    )
    add_kafka_args(p)
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("replay", help="re-publish a recording (same keys, values and timestamps)")
    p.add_argument("path", metavar="PATH")
    p.add_argument(
        "--speed",
        type=float,
        default=0.0,
        help="pace by the recorded timestamps, x times faster (0: flat out)",
    )
    p.add_argument("--topic", help="target topic (default: the recorded one)")
    add_kafka_args(p)
    p.set_defaults(func=cmd_replay)
    return parser


def configure_logging() -> None:
    """Warnings and errors of kvldp's own modules on stderr; client libraries stay quiet
    unless KVLDP_LOG_LEVEL asks for more (their connection errors become our one-line
    messages instead of a burst of log records)."""
    level = os.environ.get("KVLDP_LOG_LEVEL", "").upper()
    logging.basicConfig(level=level or logging.WARNING, format="kvldp: %(levelname)s %(name)s: %(message)s")
    if not level:
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging()
    np.seterr(all="warn", under="ignore")  # underflow to 0 is benign (EM's vanishing states)
    try:
        return int(args.func(args))
    except KvldpError as exc:
        print(f"kvldp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvldp: interrupted", file=sys.stderr)
        return 130
