"""Every module, package and class of kvldp says what it is, and none says when.

A docstring describes the code as it is: what it is and why. Words that date it — the
issue or session that wrote it, what it does "now" — go stale the day after, so they
are refused outright (a docstring that means the present time says "the current time").
"""

from __future__ import annotations

import ast
import re

import pytest

from support.package import MODULES, REPO

DATED = re.compile(r"\b(issues?|sessions?|now)\b", re.IGNORECASE)


def documented() -> list[tuple[str, str, str | None]]:
    """(where, what, docstring) of every module and class."""
    out = []
    for module, path in sorted(MODULES.items()):
        tree = ast.parse(path.read_text(), str(path))
        where = str(path.relative_to(REPO))
        out.append((where, module, ast.get_docstring(tree)))
        out += [
            (f"{where}:{node.lineno}", f"{module}.{node.name}", ast.get_docstring(node))
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
        ]
    return out


DOCUMENTED = documented()


def test_the_walk_sees_modules_and_classes() -> None:
    names = {what for _, what, _ in DOCUMENTED}
    assert {
        "kvldp.common.messages.wire",
        "kvldp.common.messages.wire.WireFormat",
        "kvldp.producer.collector.Collector",
    } <= names


@pytest.mark.parametrize("kind", ["module", "class"])
def test_every_module_and_class_has_a_docstring(kind: str) -> None:
    missing = [
        f"{where} {what}"
        for where, what, doc in DOCUMENTED
        if not doc and (":" in where) == (kind == "class")
    ]
    assert not missing, missing


def test_no_docstring_dates_itself() -> None:
    dated = [
        f"{where} {what}: {line.strip()}"
        for where, what, doc in DOCUMENTED
        for line in (doc or "").splitlines()
        if DATED.search(line)
    ]
    assert not dated, dated
