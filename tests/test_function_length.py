"""No function or method of kvldp is longer than 100 lines.

A function that long does several jobs at once; split into helpers that each do one,
it can be read, named and tested by job. The length runs from the ``def`` line to the
function's last line, docstring and comments included, and holds for every module of
the package, with no exemptions.
"""

from __future__ import annotations

import ast

from support.package import MODULES, REPO

#: the most lines a function may span
MAX_LINES = 100


def function_lengths() -> list[tuple[str, int]]:
    """(where and dotted name, lines) of every function and method of the package."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, where: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                name = f"{prefix}{child.name}"
                found.append((f"{where}:{child.lineno} {name}", child.end_lineno - child.lineno + 1))
                visit(child, where, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, where, f"{prefix}{child.name}.")
            else:
                visit(child, where, prefix)

    for module, path in sorted(MODULES.items()):
        visit(ast.parse(path.read_text(), str(path)), str(path.relative_to(REPO)), f"{module}.")
    return found


def test_the_walk_sees_functions_and_methods() -> None:
    names = {where.split(" ")[1] for where, _ in function_lengths()}
    assert {"kvldp.producer.collector.Collector.__init__", "kvldp.cli.bench.register"} <= names


def test_no_function_is_longer_than_the_limit() -> None:
    long = [f"{where}: {lines} lines" for where, lines in function_lengths() if lines > MAX_LINES]
    assert not long, f"functions over {MAX_LINES} lines: {long}"
