"""``kvldp evaluate``: score a mechanism against the truth of simulated or CSV data, or run a
paper's whole grid.

One configuration (``--mechanism``, ``--epsilon``, ``--keys``...) is simulated, perturbed,
folded and estimated by :func:`kvldp.evaluation.scoring.evaluate`; ``--experiment NAME`` instead runs
one of the fixed grids of :mod:`kvldp.experiments` and writes its tables and plots;
``--calibration`` measures whether the exported error bars mean what they say
(:mod:`kvldp.evaluation.calibration`) for any mechanisms, estimators, population and ε. The
modes share the command because all answer "how accurate is it".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvldp.cli.flags import DirectoryToWrite, Subparsers, emit, positive_float, positive_int
from kvldp.common.errors import KvldpError
from kvldp.common.estimation.conditional import parse_query
from kvldp.common.files.path_checks import writable_directory
from kvldp.common.mechanisms import create, names
from kvldp.common.spec.params import parse_assignments
from kvldp.evaluation.scoring import evaluate
from kvldp.sim import datasets


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "evaluate", help="simulate, perturb, fold, estimate and score against the truth (or a paper's grid)"
    )
    p.add_argument(
        "--experiment",
        help="run a paper's whole grid, or one of kvldp's studies (see docs/results/README.md)",
    )
    p.add_argument(
        "--calibration",
        action="store_true",
        help="coverage of the exported 95%% intervals and stderr/RMSE, per mechanism × estimator × ε "
        "(default: every mechanism and estimator on its reference population, ε 0.5 1 2 4 8)",
    )
    p.add_argument(
        "--out",
        type=DirectoryToWrite,
        help="output folder of --experiment or --calibration (default: results/NAME/)",
    )
    p.add_argument(
        "--instantaneous-share",
        type=positive_float,
        metavar="S",
        help="with --calibration: calibrate the composed channels of instantaneous randomization, "
        "each mechanism's memoized report at --epsilon randomized again at S times its exact "
        "per-report level (0 < S < 1)",
    )
    p.add_argument("--quick", action="store_true", help="--experiment at reduced n and repeats (< 1 minute)")
    p.add_argument(
        "--mechanism", action="append", help=f"one of: {', '.join(names())} (repeatable with --calibration)"
    )
    p.add_argument(
        "--epsilon",
        type=positive_float,
        action="append",
        help="privacy budget per report (repeatable with --calibration)",
    )
    p.add_argument("--keys", type=positive_int, help="number of keys d")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="mechanism parameter (repeatable)")
    p.add_argument(
        "--estimator",
        action="append",
        help=f"one of: {', '.join(_estimators())}; `kvldp mechanisms` lists each mechanism's "
        "(default unbiased; repeatable with --calibration)",
    )
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
    if args.calibration:
        if args.experiment or args.query or args.quick:
            raise KvldpError("--calibration goes without --experiment, --query and --quick")
        return cmd_calibration(args)
    if args.instantaneous_share is not None:
        raise KvldpError("--instantaneous-share goes with --calibration")
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
    dataset = args.dataset or "gaussian"
    from_file = dataset.startswith(datasets.CSV_PREFIX)
    needed = ("mechanism", "epsilon") if from_file else ("mechanism", "epsilon", "keys")
    missing = [flag for flag in needed if getattr(args, flag) is None]
    if missing:
        raise KvldpError(f"evaluate needs --{', --'.join(missing)} (or --experiment NAME, or --calibration)")
    repeated = [flag for flag in ("mechanism", "epsilon", "estimator") if len(getattr(args, flag) or []) > 1]
    if repeated:
        raise KvldpError(f"--{', --'.join(repeated)} may be repeated only with --calibration")
    users = args.users if args.users is not None or from_file else 100_000
    try:  # a ratings file's items are the keys unless --keys takes its most rated
        data = datasets.generate(dataset, users, args.keys, args.seed)
    except ValueError as exc:
        raise KvldpError(str(exc)) from None
    mech = create(args.mechanism[0], data.users.d, args.epsilon[0], **parse_assignments(args.param))
    estimator = args.estimator[0] if args.estimator else "unbiased"
    if estimator not in mech.estimator_names:
        raise KvldpError(
            f"{mech.name} has no estimator {estimator!r} (available: {', '.join(mech.estimator_names)})"
        )
    names = [f"k{i}" for i in range(mech.d)]
    queries = [parse_query(text, names) for text in args.query or []]
    result = evaluate(mech, estimator, data, args.repeats or 1, args.seed, not args.json, queries)
    text = "\n".join(f"{k}: {v}" for k, v in result.items())
    emit(result, args.json, text)
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from kvldp.experiments import EXPERIMENTS, STUDIES
    from kvldp.experiments.grid import run, write

    if args.experiment in STUDIES:
        return cmd_study(args)
    experiment = EXPERIMENTS.get(args.experiment)
    if experiment is None:
        known = ", ".join([*EXPERIMENTS, *STUDIES])
        raise KvldpError(f"unknown experiment {args.experiment!r} (known: {known})")
    override = args.dataset
    if override is not None and not override.startswith(datasets.CSV_PREFIX):
        raise KvldpError("--experiment takes --dataset csv:PATH only (the grids name their synthetic data)")
    # the default folder is checked like --out, before the grid runs
    out = (
        Path(args.out)
        if args.out
        else writable_directory(Path("results") / experiment.name, "--out (default)")
    )
    try:
        rows = run(experiment, args.quick, args.seed, not args.json, override)
    except ValueError as exc:
        raise KvldpError(str(exc)) from None
    paths = write(experiment, rows, out, _command(experiment.name, args, override))
    return _wrote(experiment.name, "cells", len(rows), paths, args.json)


def cmd_study(args: argparse.Namespace) -> int:
    """A study (kvldp.experiments.study): its own populations, so no --dataset."""
    from kvldp.experiments import STUDIES
    from kvldp.experiments.study import write

    study = STUDIES[args.experiment]
    if args.dataset is not None:
        raise KvldpError(f"{study.name} draws its own populations; drop --dataset")
    out = Path(args.out) if args.out else writable_directory(Path("results") / study.name, "--out (default)")
    rows = study.run(args.quick, args.seed, not args.json)
    paths = write(study, rows, out, _command(study.name, args))
    return _wrote(study.name, "rows", len(rows), paths, args.json)


def _command(name: str, args: argparse.Namespace, dataset: str | None = None) -> str:
    """The command that remakes an experiment's results, as its report states it."""
    return " ".join(
        [
            "kvldp evaluate",
            f"--experiment {name}",
            *(["--quick"] if args.quick else []),
            *([f"--dataset {dataset}"] if dataset else []),
            *([f"--seed {args.seed}"] if args.seed else []),
        ]
    )


def _wrote(name: str, unit: str, count: int, paths: list[Path], as_json: bool) -> int:
    """Say which files an experiment wrote (JSON with ``--json``): the command's result."""
    emit(
        {"experiment": name, unit: count, "files": [str(p) for p in paths]},
        as_json,
        "\n".join(f"wrote {p}" for p in paths),
    )
    return 0


def _estimators() -> list[str]:
    """Every estimator some mechanism offers, the default first."""
    offered = {e for n in names() for e in create(n, 4, 1.0).estimator_names}
    return ["unbiased", *sorted(offered - {"unbiased"})]


def cmd_calibration(args: argparse.Namespace) -> int:
    from kvldp.common.mechanisms import get
    from kvldp.evaluation.calibration import EPSILONS, calibrate, reference_population
    from kvldp.experiments.calibration_report import CalibrationRow, write
    from kvldp.experiments.calibration_verdict import verdict, verdict_table

    share = args.instantaneous_share
    if share is not None and not share < 1.0:
        raise KvldpError(f"--instantaneous-share must lie below 1, got {share:g}")
    # privkvm is interactive: never memoized, so never randomized again
    mechanisms = args.mechanism or [n for n in names() if share is None or n != "privkvm"]
    epsilons = args.epsilon or list(EPSILONS)
    repeats = args.repeats or 24
    if repeats < 2:
        raise KvldpError("--calibration needs --repeats of at least 2 collections (a spread needs two)")
    params = parse_assignments(args.param)
    rows: list[CalibrationRow] = []
    populations: dict[tuple[str, int | None, int | None], datasets.Dataset] = {}
    for name in mechanisms:
        cls = get(name)
        probe = create(name, min(args.keys or 2, cls.max_keys or 2), 1.0, **params)
        estimators = args.estimator or list(probe.estimator_names)
        unknown = [e for e in estimators if e not in probe.estimator_names]
        if unknown:
            raise KvldpError(
                f"{name} has no estimator {unknown[0]!r} (available: {', '.join(probe.estimator_names)})"
            )
        dataset, reference_keys = reference_population(name, cls.max_keys, cls.collects_values)
        dataset = args.dataset or dataset
        from_file = dataset.startswith(datasets.CSV_PREFIX)
        # a ratings file's items are the keys unless --keys takes its most rated
        asked = args.keys or (None if from_file else reference_keys)
        users = args.users if args.users is not None or from_file else 100_000
        if (dataset, users, asked) not in populations:
            try:
                populations[dataset, users, asked] = datasets.generate(dataset, users, asked, args.seed)
            except ValueError as exc:
                raise KvldpError(str(exc)) from None
        population = populations[dataset, users, asked].users
        keys = population.d
        for epsilon in epsilons:
            mech = create(name, keys, epsilon, **params)
            if share is not None:
                mech = mech.composed(share * mech.claimed_epsilon())
            for estimator in estimators:
                result = calibrate(mech, estimator, population, repeats, args.seed, not args.json)
                rows.append(CalibrationRow(result, dataset, population.n_users, keys))
    if args.json:
        emit([{**r.record(), **verdict(r).as_record()} for r in rows], True, "")
    else:
        print(verdict_table(rows))
    if args.out:
        command = "kvldp evaluate --calibration" + "".join(
            f" --{flag} {value}"
            for flag in ("mechanism", "estimator", "epsilon")
            for value in getattr(args, flag) or []
        )
        if share is not None:
            command += f" --instantaneous-share {share:g}"
        paths = write(rows, Path(args.out), command)
        for path in paths:
            print(f"wrote {path}", file=sys.stderr)
    return 0
