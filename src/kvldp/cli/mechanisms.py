"""``kvldp mechanisms``: list the registered mechanisms, their privacy notion, estimators
and parameters (name, default, allowed values, meaning), read from the mechanism classes."""

from __future__ import annotations

import argparse
import json

from kvldp.cli.flags import Subparsers, emit
from kvldp.common.mechanisms import get, names


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "mechanisms", help="list the mechanisms, their privacy notion, estimators and parameters"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_mechanisms)


def cmd_mechanisms(args: argparse.Namespace) -> int:
    rows = []
    lines = []
    for name in names():
        cls = get(name)
        # an instance's, for the classes that decide per instance (none depends on d, epsilon
        # or the parameters)
        estimators = cls(2, 1.0).estimator_names
        params = [
            {"name": p.name, "default": p.default, "allowed": p.allowed, "doc": p.doc}
            for p in cls.params_spec
        ]
        rows.append(
            {
                "mechanism": name,
                "notion": cls.notion,
                "summary": cls.summary,
                "params": params,
                "estimators": list(estimators),
                "collects_values": cls.collects_values,
            }
        )
        lines.append(f"{name:<10} {cls.notion:<5} {cls.summary}")
        lines.append(f"{'':<17}estimators: {', '.join(estimators)}")
        lines.extend(
            f"{'':<17}{p['name']} = {json.dumps(p['default'])} ({p['allowed']}): {p['doc']}" for p in params
        )
    text = "\n".join(lines) + "\n\nparameters go in the collection's [params] table: name = value"
    emit(rows, args.json, text)
    return 0
