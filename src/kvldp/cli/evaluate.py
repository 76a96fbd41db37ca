"""``kvldp evaluate``: score a mechanism against the truth of simulated or CSV data, or run a
paper's whole grid.

One configuration (``--mechanism``, ``--epsilon``, ``--keys``...) is simulated, perturbed,
folded and estimated by :func:`kvldp.evaluation.scoring.evaluate`; ``--experiment NAME`` instead runs
one of the fixed grids of :mod:`kvldp.experiments` and writes its tables and plots. The two
modes share the command because both answer "how accurate is it".
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kvldp.cli.flags import Subparsers, emit, positive_float, positive_int
from kvldp.common.conditional import parse_query
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import create, names
from kvldp.common.params import parse_assignments
from kvldp.evaluation.scoring import evaluate
from kvldp.sim import datasets


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "evaluate", help="simulate, perturb, fold, estimate and score against the truth (or a paper's grid)"
    )
    p.add_argument("--experiment", help="run a paper's whole grid (see docs/results/README.md)")
    p.add_argument("--out", help="output folder of --experiment (default: results/NAME/)")
    p.add_argument("--quick", action="store_true", help="--experiment at reduced n and repeats (< 1 minute)")
    p.add_argument("--mechanism", help=f"one of: {', '.join(names())}")
    p.add_argument("--epsilon", type=positive_float, help="privacy budget per report")
    p.add_argument("--keys", type=positive_int, help="number of keys d")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="mechanism parameter (repeatable)")
    p.add_argument("--estimator", help="unbiased (default), em, em4 (privkv), normsub, paper")
    p.add_argument("--dataset", help=f"one of: {datasets.describe()} (default gaussian)")
    p.add_argument("--users", type=positive_int, help="simulated users (default 100000; none with csv:)")
    p.add_argument("--repeats", type=positive_int, help="collections simulated and scored (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--query",
        action="append",
        metavar="TEXT",
        help='conditional query over keys k0..k{d-1}, e.g. "k2 | k1=1" (repeatable; ioh, ioh_oue, ioh_hrr)',
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_evaluate)


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
    emit(result, args.json, text)
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from kvldp.experiments import EXPERIMENTS
    from kvldp.experiments.grid import run, write

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
    emit(
        {"experiment": experiment.name, "cells": len(rows), "files": [str(p) for p in paths]},
        args.json,
        "\n".join(f"wrote {p}" for p in paths),
    )
    return 0
