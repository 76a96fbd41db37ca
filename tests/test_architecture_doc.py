"""docs/architecture.md names real code: every dotted ``kvldp.…`` name in it resolves.

The document walks one report from the device to the metric, naming each function it
passes through; a rename or a move that forgets the document fails here.
"""

from __future__ import annotations

import importlib
import re

import pytest

from support.package import MODULES, REPO

DOC = (REPO / "docs" / "architecture.md").read_text()
#: backticked dotted names under kvldp (topic names such as kvldp.checkout.reports excepted)
NAMES = sorted(
    {
        name
        for name in re.findall(r"`(kvldp(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`", DOC)
        if not re.fullmatch(r"kvldp\.(<name>|checkout|<c>)\..*", name)
    }
)


def resolve(name: str) -> object:
    """Import the longest module prefix of ``name`` and walk the rest as attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in MODULES:
            target: object = importlib.import_module(module)
            for attribute in parts[cut:]:
                target = getattr(target, attribute)
            return target
    raise LookupError(f"no kvldp module in {name}")


def test_the_walk_names_enough_functions() -> None:
    walk = DOC[DOC.index("## One report, from device to metric") : DOC.index("## Streaming semantics")]
    assert len([n for n in NAMES if n in walk]) >= 25


@pytest.mark.parametrize("name", NAMES)
def test_every_name_resolves(name: str) -> None:
    assert resolve(name) is not None
