"""``kvldp attack``: what fake devices do to the estimates, with and without each defense.

A genuine population of a dataset reports through one or more key-value mechanisms
(``--mechanism``, or the mechanism of a ``--collection``); fake devices, a fraction beta of
all devices, send the reports of an attack (:mod:`kvldp.attacks.fakes`). The command
prints, or with ``--out`` writes, the frequency and mean gains of the target keys and the
MSE over all keys per estimator and defense (:mod:`kvldp.attacks.experiment`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kvldp.attacks.fakes import ATTACKS
from kvldp.cli.flags import (
    DirectoryToWrite,
    Subparsers,
    emit,
    open_fraction,
    positive_float,
    positive_int,
    unit_value,
)
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import Mechanism, create, get, names
from kvldp.common.spec.params import parse_assignments
from kvldp.sim import datasets


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "attack",
        help="fake devices against the key-value mechanisms: gains and MSE, with and without defenses",
    )
    p.add_argument("--collection", help="collection file (TOML): its mechanism, keys, epsilon and parameters")
    p.add_argument(
        "--mechanism",
        action="append",
        help="a key-value mechanism (repeatable): " + ", ".join(n for n in names() if get(n).collects_values),
    )
    p.add_argument("--keys", type=positive_int, help="number of keys d (with --mechanism)")
    p.add_argument("--epsilon", type=positive_float, help="privacy budget per report (with --mechanism)")
    p.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="mechanism parameter (repeatable; applied to the mechanisms that have it)",
    )
    p.add_argument(
        "--dataset", help=f"genuine population: one of {datasets.describe()} (default gaussian_pckv)"
    )
    p.add_argument("--users", type=positive_int, help="genuine devices (default 100000; none with csv:)")
    p.add_argument(
        "--attack",
        action="append",
        choices=ATTACKS,
        help="m2ga (maximal gain), rma (random message), rkva (random key-value pair), adaptive "
        "(repeatable; default all)",
    )
    p.add_argument(
        "--fake-fraction",
        type=open_fraction,
        action="append",
        metavar="BETA",
        help="fake devices as a fraction of all devices, in (0, 1) (repeatable; default 0.01)",
    )
    p.add_argument(
        "--targets",
        type=positive_int,
        default=1,
        metavar="R",
        help="number of target keys: the R least frequent keys of the dataset, ties broken by --seed (default 1)",
    )
    p.add_argument(
        "--target-mean",
        type=unit_value,
        default=1.0,
        metavar="M",
        help="value in [-1, 1] the fakes promote (default +1)",
    )
    p.add_argument(
        "--estimator",
        action="append",
        help="estimator (repeatable; default unbiased and em; skipped for a mechanism that lacks it)",
    )
    p.add_argument(
        "--defense",
        action="append",
        help="none, plausibility, robust, detection (repeatable; default none)",
    )
    p.add_argument("--repeats", type=positive_int, default=5, help="collections per setting (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--out",
        metavar="DIR",
        type=DirectoryToWrite,
        help="write results.csv, README.md and gains.png into DIR",
    )
    p.set_defaults(func=cmd_attack)


def _mechanisms(args: argparse.Namespace) -> list[Mechanism]:
    """The mechanisms of ``--collection`` or ``--mechanism``/``--keys``/``--epsilon``."""
    if args.collection:
        given = [f for f in ("mechanism", "keys", "epsilon", "param") if getattr(args, f) is not None]
        if given:
            raise KvldpError(f"--collection names its mechanism; drop --{', --'.join(given)}")
        from kvldp.common.config.collection_file import load_collection

        mechs = [load_collection(args.collection).mechanism]
    else:
        missing = [f for f in ("mechanism", "keys", "epsilon") if getattr(args, f) is None]
        if missing:
            raise KvldpError(f"attack needs --collection FILE or --{', --'.join(missing)}")
        params = parse_assignments(args.param)
        known = {p.name for n in args.mechanism for p in get(n).params_spec}
        unknown = sorted(set(params) - known)
        if unknown:
            raise KvldpError(f"no mechanism given has the parameter {unknown[0]!r}")
        mechs = []
        for name in dict.fromkeys(args.mechanism):
            mine = {k: v for k, v in params.items() if k in {p.name for p in get(name).params_spec}}
            mechs.append(create(name, args.keys, args.epsilon, **mine))
    for mech in mechs:
        if not mech.collects_values:
            raise KvldpError(f"{mech.name} collects no values: the key-value attacks do not apply")
    return mechs


def cmd_attack(args: argparse.Namespace) -> int:
    from kvldp.attacks import defenses, experiment, results_table
    from kvldp.attacks.target import choose_targets

    mechs = _mechanisms(args)
    d = mechs[0].d
    estimators = args.estimator or ["unbiased", "em"]
    for e in estimators:
        if not any(e in m.estimator_names for m in mechs):
            raise KvldpError(f"no mechanism given has the estimator {e!r}")
    chosen = [defenses.get(name) for name in dict.fromkeys(args.defense or ["none"])]
    for x in chosen:
        if not any(x.applies(m) for m in mechs):
            raise KvldpError(f"defense {x.name} applies to none of the mechanisms given ({x.summary})")
    dataset = args.dataset or "gaussian_pckv"
    from_file = dataset.startswith(datasets.CSV_PREFIX)
    users = args.users if args.users is not None or from_file else 100_000
    try:
        population = datasets.generate(dataset, users, d, args.seed).users
    except ValueError as exc:
        raise KvldpError(str(exc)) from None
    frequency, _ = population.truth()
    target = choose_targets(frequency, args.targets, args.target_mean, args.seed)
    betas = args.fake_fraction or [0.01]
    rows = experiment.run(
        mechs,
        args.attack or list(ATTACKS),
        betas,
        chosen,
        estimators,
        population,
        target,
        args.repeats,
        args.seed,
    )
    if args.out:
        command = "kvldp attack " + " ".join(
            [
                *(f"--mechanism {m.name}" for m in mechs),
                f"--keys {d}",
                f"--epsilon {mechs[0].epsilon:g}",
                *(f"--param {p}" for p in args.param or []),
                f"--dataset {dataset}",
                f"--users {population.n_users}",
                *(f"--fake-fraction {b:g}" for b in betas),
                f"--targets {args.targets}",
                *(f"--estimator {e}" for e in estimators),
                *(f"--defense {x.name}" for x in chosen),
                f"--repeats {args.repeats}",
                f"--out {args.out}",
            ]
        )
        setting = (
            f"Genuine population: `{dataset}`, n = {population.n_users:,}, d = {d}; target keys "
            f"{target.keys.tolist()} (true frequencies {[round(float(f), 5) for f in frequency[target.keys]]}), "
            f"target mean m* = {target.mean:g}."
        )
        paths = results_table.write(rows, Path(args.out), command, setting)
        emit(
            {"rows": len(rows), "files": [str(p) for p in paths]},
            args.json,
            "\n".join(f"wrote {p}" for p in paths),
        )
        return 0
    emit([results_table.record(r) for r in rows], args.json, results_table.table(rows))
    return 0
