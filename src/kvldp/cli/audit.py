"""``kvldp audit``: the exact privacy audit of a mechanism, or of a collection over a
device's lifetime.

With ``--mechanism`` it bounds one report (:func:`kvldp.common.guarantees.privacy_audit.audit`); with
``--collection`` it adds the lifetime worst case of the collection's memoization and
budget cap (:mod:`kvldp.common.spec.privacy`), and names the rule, keeper and horizon of every
epsilon figure (:mod:`kvldp.common.guarantees.epsilon_rules`). A collection with instantaneous
randomization is audited twice: one report on the composed channel (the device's model
composed with the randomizer), one state on the device's memoized report. Exit status 1
reports a violation.
"""

from __future__ import annotations

import argparse
import math

from kvldp.cli.flags import Subparsers, emit, non_negative_int, positive_float, positive_int
from kvldp.common.errors import KvldpError
from kvldp.common.guarantees.privacy_audit import audit
from kvldp.common.mechanisms import create, names
from kvldp.common.spec.params import parse_assignments


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "audit", help="exact privacy audit: max ln Pr[z|x]/Pr[z|x'] over all inputs and outputs"
    )
    p.add_argument("--mechanism", help=f"one of: {', '.join(names())}")
    p.add_argument("--epsilon", type=positive_float, help="privacy budget per report (with --mechanism)")
    p.add_argument("--keys", type=positive_int, help="number of keys d (with --mechanism)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="mechanism parameter (repeatable)")
    p.add_argument(
        "--collection",
        metavar="FILE",
        help="instead of --mechanism: audit a collection file, per report and over a device's lifetime",
    )
    p.add_argument("--reports", type=non_negative_int, help="with --collection: reports a device sends (T)")
    p.add_argument(
        "--changes",
        type=non_negative_int,
        help="with --collection: how many of them change the device's state (K, default 0)",
    )
    p.add_argument("--exhaustive", action="store_true", help="enumerate every input (small d only)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_audit)


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
    emit(payload, args.json, text)
    return 0 if result.ok else 1


def _audit_collection(args: argparse.Namespace) -> int:
    """A collection's lifetime worst case over ``--reports`` reports with ``--changes``
    state changes (kvldp.common.spec.privacy), plus the exact per-report audit of its mechanism."""
    from kvldp.common.config.collection_file import load_collection
    from kvldp.common.guarantees.epsilon_rules import epsilon_figures
    from kvldp.common.spec.privacy import lifetime_audit

    given = [f"--{flag}" for flag in ("epsilon", "keys", "param") if getattr(args, flag) is not None]
    if given:
        raise KvldpError(f"--collection brings its mechanism; drop {', '.join(given)}")
    if args.reports is None:
        raise KvldpError("--collection needs --reports T (reports a device sends over its lifetime)")
    collection = load_collection(args.collection)
    changes = 0 if args.changes is None else args.changes
    life = lifetime_audit(collection.epsilon, collection.privacy, args.reports, changes)
    exhaustive = True if args.exhaustive else None
    result = audit(collection.estimation_mechanism, exhaustive=exhaustive)
    composition = collection.estimation_mechanism.composition
    state = None if composition is None else audit(collection.mechanism, exhaustive=exhaustive)
    ok = result.ok and (state is None or state.ok)
    figures = epsilon_figures(collection, life)
    payload: dict[str, object] = {
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
        "max_log_ratio": _finite(result.max_log_ratio),
        "ok": ok,
        "epsilon": {figure.name: figure.to_dict() for figure in figures},
    }
    per_report = f"epsilon {life.per_report_epsilon:g} per report"
    audits = f"per-report audit {'ok' if result.ok else 'VIOLATION'}"
    if composition is not None and state is not None:
        payload["instantaneous_epsilon"] = result.epsilon
        payload["per_state_max_log_ratio"] = _finite(state.max_log_ratio)
        payload["randomizer"] = composition.randomizer.describe()
        per_report = f"epsilon {result.epsilon:g} per report and {life.per_report_epsilon:g} per state"
        audits = f"audits per report {'ok' if result.ok else 'VIOLATION'} and per state {'ok' if state.ok else 'VIOLATION'}"
    cap = "no cap" if life.cap is None else f"cap {life.cap:g}"
    text = (
        f"{collection.name} ({collection.mechanism_name}, {per_report}, "
        f"memoize {'on' if life.memoize else 'off'}, {cap}): {life.reports} reports with {life.changes} "
        f"state changes spend at most {life.lifetime_epsilon:g} ({life.charged} charged, {life.refused} "
        f"refused); {audits}"
    )
    text += "".join(f"\n  {figure}" for figure in figures)
    emit(payload, args.json, text)
    return 0 if ok else 1


def _finite(value: float) -> float | str:
    """A log ratio as JSON: ``"inf"`` where it is infinite."""
    return value if math.isfinite(value) else "inf"
