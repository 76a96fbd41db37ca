"""``kvldp mechanisms``: list the registered mechanisms, their privacy notion and parameters."""

from __future__ import annotations

import argparse

from kvldp.cli.flags import Subparsers, emit
from kvldp.common.mechanisms import get, names


def register(sub: Subparsers) -> None:
    p = sub.add_parser("mechanisms", help="list the mechanisms, their privacy notion and parameters")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_mechanisms)


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
    emit(rows, args.json, text)
    return 0
