"""``kvldp bench``: the benchmarks, one sub-subcommand each (measurements, not tests).

``fold`` and ``estimate`` time the mechanisms in process (:mod:`kvldp.bench.mechanism_cost`);
``ingest``, ``produce``, ``memory`` and ``gateway`` measure kvldp on Kafka against a
baseline run alongside; ``fleet`` grows one partition's per-device state to millions of
devices (:mod:`kvldp.bench.fleet_scale`); ``rounds`` streams PrivKVM's rounds live; ``peers`` compares with other LDP
libraries; ``reliability`` runs the failure scenarios of :mod:`kvldp.reliability`. Each
prints a table, or its rows as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kvldp.bench import mechanism_cost
from kvldp.bench.table import format_table
from kvldp.cli.flags import (
    DirectoryToWrite,
    FileToWrite,
    Subparsers,
    emit,
    int_list,
    positive_float,
    positive_int,
    two_ints,
)
from kvldp.common.files.atomic_file import write_atomically
from kvldp.common.mechanisms import get
from kvldp.kafka.command_line import add_kafka_args
from kvldp.reliability import NAMES as SCENARIO_NAMES


def register(sub: Subparsers) -> None:
    p = sub.add_parser("bench", help="benchmarks (measurements, not tests)")
    bsub = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    _register_mechanism_costs(bsub)
    _register_kafka(bsub)
    _register_gateway(bsub)
    _register_fleet(bsub)
    _register_rounds(bsub)
    _register_peers(bsub)
    _register_reliability(bsub)


def _register_mechanism_costs(bsub: Subparsers) -> None:
    """``fold`` and ``estimate``: the mechanisms timed in process."""
    b = bsub.add_parser("fold", help="reports folded per second, per mechanism")
    b.add_argument("--reports", type=positive_int, default=1_000_000)
    b.add_argument("--keys", type=positive_int, default=100)
    b.add_argument("--epsilon", type=positive_float, default=1.0)
    b.add_argument("--mechanism", action="append", help="restrict to this mechanism (repeatable)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)
    b = bsub.add_parser("estimate", help="refit time per mechanism, estimator and key count")
    b.add_argument("--keys", dest="keys_list", type=int_list, default=[10, 100, 1000], help="comma list")
    b.add_argument("--users", type=positive_int, default=100_000)
    b.add_argument("--epsilon", type=positive_float, default=1.0)
    b.add_argument("--mechanism", action="append", help="restrict to this mechanism (repeatable)")
    b.add_argument(
        "--scaling",
        type=two_ints,
        metavar="SMALL,LARGE",
        help="instead: refit time on statistics of SMALL and LARGE reports (e.g. 10000,10000000) at the largest --keys",
    )
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)


def _register_kafka(bsub: Subparsers) -> None:
    """``ingest``, ``produce`` and ``memory``: kvldp on Kafka against a bare client."""
    b = bsub.add_parser("ingest", help="aggregator fold rate vs a bare aiokafka drain of the same topic")
    b.add_argument("--messages", type=positive_int, default=500_000, help="single-report messages")
    b.add_argument(
        "--batched-reports", type=positive_int, default=5_000_000, help="reports in batched messages"
    )
    b.add_argument("--per-message", type=positive_int, default=1000, help="reports per batched message")
    b.add_argument("--repeats", type=positive_int, default=3)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    add_kafka_args(b)  # a cluster named here replaces the embedded broker
    b.set_defaults(func=cmd_bench_kafka)
    b = bsub.add_parser("produce", help="simulated devices vs a bare producer sending the same bytes")
    b.add_argument("--messages", type=positive_int, default=200_000)
    b.add_argument("--repeats", type=positive_int, default=3)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    add_kafka_args(b)
    b.set_defaults(func=cmd_bench_kafka)
    b = bsub.add_parser("memory", help="aggregator resident memory after 1e5, 1e7 and 2e7 reports")
    b.add_argument(
        "--reports",
        type=int_list,
        default=[100_000, 10_000_000, 20_000_000],
        help="comma list of checkpoints",
    )
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_kafka)


def _register_gateway(bsub: Subparsers) -> None:
    """``gateway``: kvldp gateway against a bare aiohttp endpoint."""
    b = bsub.add_parser(
        "gateway", help="reports/s through kvldp gateway vs a bare aiohttp endpoint; memory; hostile clients"
    )
    b.add_argument("--clients", type=positive_int, default=16, help="concurrent keep-alive clients")
    b.add_argument("--requests", type=positive_int, default=10_000, help="requests per run")
    b.add_argument("--connections", type=positive_int, default=10_000, help="open connections for memory")
    b.add_argument("--repeats", type=positive_int, default=15, help="alternating bare/gateway runs")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_gateway)


def _register_fleet(bsub: Subparsers) -> None:
    """``fleet``: one partition's per-device state grown to millions of devices."""
    b = bsub.add_parser(
        "fleet", help="fetch fold time, bytes per device, checkpoint and restore as a partition's fleet grows"
    )
    b.add_argument(
        "--devices",
        type=int_list,
        default=[10_000, 100_000, 1_000_000, 2_000_000],
        help="comma list of devices in the measured partition",
    )
    b.add_argument(
        "--partitions",
        type=positive_int,
        default=5,
        help="partitions grown to the largest size (the fleet held)",
    )
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_fleet)


def _register_rounds(bsub: Subparsers) -> None:
    """``rounds``: PrivKVM's rounds streamed live against the in-process reference."""
    b = bsub.add_parser(
        "rounds", help="PrivKVM rounds streamed live: MSE against the in-process reference, time per round"
    )
    b.add_argument("--users", type=positive_int, default=20_000)
    b.add_argument("--keys", type=positive_int, default=10)
    b.add_argument("--epsilon", type=positive_float, default=4.0)
    b.add_argument("--rounds", type=int_list, default=[1, 3, 10], help="comma list of round counts c")
    b.add_argument("--live-repeats", type=positive_int, default=5, help="live runs per c")
    b.add_argument("--reference-repeats", type=positive_int, default=50, help="in-process runs per c")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_rounds)


def _register_peers(bsub: Subparsers) -> None:
    """``peers``: the frequency oracles against other LDP libraries."""
    b = bsub.add_parser(
        "peers", help="grr/oue/olh aggregation time and MSE vs pure-ldp and multi-freq-ldpy (make bench-deps)"
    )
    b.add_argument("--mechanism", action="append", choices=("grr", "oue", "olh"))
    b.add_argument("--keys", type=positive_int, default=100)
    b.add_argument("--epsilon", type=positive_float, default=1.0)
    b.add_argument("--users", type=positive_int, default=100_000)
    b.add_argument("--repeats", type=positive_int, default=5)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_peers)


def _register_reliability(bsub: Subparsers) -> None:
    """``reliability``: the failure scenarios against their oracles."""
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
    b.add_argument(
        "--keep", metavar="DIR", type=DirectoryToWrite, help="keep logs, recordings and checkpoints here"
    )
    b.add_argument("--markdown", metavar="PATH", type=FileToWrite, help="also write the figures as Markdown")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_reliability)


def cmd_bench(args: argparse.Namespace) -> int:
    chosen = args.mechanism or None
    if chosen:
        for name in chosen:
            get(name)
    if args.bench == "fold":
        rows = mechanism_cost.bench_fold(chosen, args.reports, args.keys, args.epsilon, args.seed)
        columns = ["mechanism", "keys", "reports", "seconds", "reports_per_second"]
    elif args.scaling:
        small, large = args.scaling
        rows = mechanism_cost.bench_refit_scaling(
            chosen, max(args.keys_list), args.epsilon, small, large, args.seed
        )
        columns = mechanism_cost.SCALING_COLUMNS
    else:
        rows = mechanism_cost.bench_estimate(chosen, args.keys_list, args.users, args.epsilon, args.seed)
        columns = ["mechanism", "keys", "estimator", "seconds", "em_iterations", "note"]
    emit(rows, args.json, format_table(rows, columns))
    return 0


def cmd_bench_kafka(args: argparse.Namespace) -> int:
    """ingest, produce and memory: kvldp against a baseline measured in the same run."""
    from kvldp import startup_heap
    from kvldp.bench import kafka_throughput, resident_memory
    from kvldp.kafka.command_line import external_kafka

    if args.bench == "ingest":
        startup_heap.freeze()  # as `kvldp aggregate` does: both sides run in a process like the service's
        rows = kafka_throughput.bench_ingest(
            args.messages,
            args.batched_reports,
            args.per_message,
            args.repeats,
            args.seed,
            external_kafka(args),
        )
        columns = kafka_throughput.INGEST_COLUMNS
    elif args.bench == "produce":
        rows = kafka_throughput.bench_produce(args.messages, args.repeats, args.seed, external_kafka(args))
        columns = kafka_throughput.PRODUCE_COLUMNS
    else:
        rows = resident_memory.bench_memory(args.reports, args.seed)
        columns = resident_memory.MEMORY_COLUMNS
    emit(rows, args.json, format_table(rows, columns))
    return 0


def cmd_bench_gateway(args: argparse.Namespace) -> int:
    """The gateway against a bare endpoint, its memory under connections, hostile clients."""
    from kvldp.bench import gateway_load as g

    tables = g.bench_gateway(args.clients, args.requests, args.connections, args.repeats, args.seed)
    if args.json:
        print(json.dumps(tables, indent=1, default=str))
        return 0
    columns = {"throughput": g.GATEWAY_COLUMNS, "memory": g.MEMORY_COLUMNS, "hostile": g.HOSTILE_COLUMNS}
    print("\n\n".join(format_table(rows, columns[name]) for name, rows in tables.items()))
    return 0


def cmd_bench_fleet(args: argparse.Namespace) -> int:
    """One partition's per-device state from thousands to millions of devices."""
    from kvldp.bench.fleet_scale import COLUMNS, bench_fleet

    rows = bench_fleet(args.devices, args.partitions, args.seed)
    emit(rows, args.json, format_table(rows, COLUMNS))
    return 0


def cmd_bench_rounds(args: argparse.Namespace) -> int:
    """PrivKVM's rounds live against the in-process reference."""
    from kvldp.bench import live_rounds

    rows = live_rounds.bench_rounds(
        args.users, args.keys, args.epsilon, args.rounds, args.live_repeats, args.reference_repeats, args.seed
    )
    emit(rows, args.json, format_table(rows, live_rounds.ROUNDS_COLUMNS))
    return 0


def cmd_bench_peers(args: argparse.Namespace) -> int:
    from kvldp.bench.peers import COLUMNS, bench_peers

    rows = bench_peers(
        args.mechanism or ["grr", "oue", "olh"], args.keys, args.epsilon, args.users, args.repeats, args.seed
    )
    emit(rows, args.json, format_table(rows, COLUMNS))
    return 0


def cmd_bench_reliability(args: argparse.Namespace) -> int:
    from kvldp.reliability.suite import markdown, rows, run_scenarios

    keep = Path(args.keep) if args.keep else None
    table = rows(run_scenarios(args.scenario or list(SCENARIO_NAMES), args.scale, keep), args.scale)
    if args.markdown:
        write_atomically(Path(args.markdown), markdown(table).encode(), mode=0o644)
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
