"""The ``kvldp`` command line: one entry point, one subcommand per job.

Input errors (:class:`common.errors.KvldpError`) print one line on stderr and exit
with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from common.audit import audit
from common.errors import KvldpError
from common.mechanisms import create, get, names
from common.params import parse_assignments
from kvldp import bench
from kvldp.evaluate import evaluate
from producer import datasets


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text}")
    return value


def _int_list(text: str) -> list[int]:
    return [_positive_int(t) for t in text.split(",") if t.strip()]


def _mechanism_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mechanism", required=True, help=f"one of: {', '.join(names())}")
    p.add_argument("--epsilon", type=_positive_float, required=True, help="privacy budget per report")
    p.add_argument("--keys", type=_positive_int, required=True, help="number of keys d")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="mechanism parameter (repeatable)")


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


def cmd_evaluate(args: argparse.Namespace) -> int:
    mech = create(args.mechanism, args.keys, args.epsilon, **parse_assignments(args.param))
    if args.estimator not in mech.estimator_names:
        raise KvldpError(
            f"{mech.name} has no estimator {args.estimator!r} (available: {', '.join(mech.estimator_names)})"
        )
    try:
        data = datasets.generate(args.dataset, args.users, args.keys, args.seed)
    except ValueError as exc:
        raise KvldpError(str(exc)) from None
    result = evaluate(mech, args.estimator, data, args.repeats, args.seed, show_progress=not args.json)
    text = "\n".join(f"{k}: {v}" for k, v in result.items())
    _emit(result, args.json, text)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    chosen = args.mechanism or None
    if chosen:
        for name in chosen:
            get(name)
    if args.bench == "fold":
        rows = bench.bench_fold(chosen, args.reports, args.keys, args.epsilon, args.seed)
        columns = ["mechanism", "keys", "reports", "seconds", "reports_per_second"]
    else:
        rows = bench.bench_estimate(chosen, args.keys_list, args.users, args.epsilon, args.seed)
        columns = ["mechanism", "keys", "estimator", "seconds", "em_iterations", "note"]
    _emit(rows, args.json, bench.format_table(rows, columns))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from kvldp.demo import run_demo

    return run_demo(args)


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
    _mechanism_args(p)
    p.add_argument("--exhaustive", action="store_true", help="enumerate every input (small d only)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("evaluate", help="simulate, perturb, fold, estimate and score against the truth")
    _mechanism_args(p)
    p.add_argument("--estimator", default="unbiased", help="unbiased, em, em4 (privkv), normsub, paper")
    p.add_argument("--dataset", default="gaussian", help=f"one of: {', '.join(datasets.names())}")
    p.add_argument("--users", type=_positive_int, default=100_000)
    p.add_argument("--repeats", type=_positive_int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_evaluate)

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
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)

    p = sub.add_parser("demo", help="simulate a collection and watch the estimates converge")
    p.add_argument("--mechanism", default="kvue")
    p.add_argument("--dataset", default="gaussian")
    p.add_argument("--users", type=_positive_int, default=200_000)
    p.add_argument("--keys", type=_positive_int, default=8)
    p.add_argument("--epsilon", type=_positive_float, default=2.0)
    p.add_argument("--batch", type=_positive_int, default=10_000, help="reports folded between refits")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--param", action="append", metavar="NAME=VALUE")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    np.seterr(all="warn")
    try:
        return int(args.func(args))
    except KvldpError as exc:
        print(f"kvldp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvldp: interrupted", file=sys.stderr)
        return 130
