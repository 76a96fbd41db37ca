"""The import graph of the kvldp package: a DAG, layered, and under the one name ``kvldp``.

Read from the source (every ``import`` statement, including those inside functions, so a
lazy import cannot hide a circle), never by importing the code:

* no circle: the module graph has no strongly connected component of more than one
  module, inside a package or across packages;
* layers: ``kvldp.common`` imports no other kvldp package; ``kvldp.producer`` (the device
  SDK) and ``kvldp.aggregator`` (the service) import only ``kvldp.common``, never each
  other; the rest of ``kvldp`` (command line, demo, benchmarks, experiments) sits on top.
  Between those four packages the graph is therefore a DAG too;
* one name: nothing imports ``common``, ``producer`` or ``aggregator`` as top-level
  modules, which are repository directories and are not installed.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: repository directory -> the package it is installed as
PACKAGES = {
    "common": "kvldp.common",
    "producer": "kvldp.producer",
    "aggregator": "kvldp.aggregator",
    "kvldp": "kvldp",
}
#: package -> the kvldp packages it may import (besides itself)
LAYERS = {
    "kvldp.common": set(),
    "kvldp.producer": {"kvldp.common"},
    "kvldp.aggregator": {"kvldp.common"},
    "kvldp": {"kvldp.common", "kvldp.producer", "kvldp.aggregator"},
}


def source_modules() -> dict[str, Path]:
    """Every module of the installed package, by dotted name, from the repository's files
    (the symlinks ``kvldp/common`` etc. are not walked twice)."""
    modules: dict[str, Path] = {}
    for directory, package in PACKAGES.items():
        for root, dirs, files in os.walk(REPO / directory):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not Path(root, d).is_symlink()]
            for name in files:
                if not name.endswith(".py"):
                    continue
                parts = Path(root, name).relative_to(REPO / directory).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                modules[".".join((package, *parts))] = Path(root, name)
    return modules


MODULES = source_modules()


def imported_names(module: str) -> Iterator[tuple[str, int]]:
    """Every absolute module name ``module`` imports (``from P import n`` yields ``P.n``
    as well as ``P``), with its line."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base, node.lineno
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def dependencies(module: str) -> set[str]:
    """The kvldp modules ``module`` imports: each name resolved to the longest module it
    names (``from kvldp.common import wire`` is the module ``kvldp.common.wire``)."""
    out = set()
    for name, _ in imported_names(module):
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def package_of(module: str) -> str:
    return next(
        (
            p
            for p in ("kvldp.common", "kvldp.producer", "kvldp.aggregator")
            if module == p or module.startswith(p + ".")
        ),
        "kvldp",
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


GRAPH = {module: dependencies(module) for module in MODULES}


def test_the_walk_sees_the_whole_package() -> None:
    # the modules the rest of this file reasons about are really there
    assert {"kvldp.cli", "kvldp.common.wire", "kvldp.producer.collector", "kvldp.aggregator"} <= set(MODULES)
    assert len(MODULES) > 100
    assert "kvldp.common.wire" in GRAPH["kvldp.producer.collector"]


def test_circles_are_found() -> None:
    # the detector itself, on a graph with one circle of three and a self-free tail
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    found = circles(GRAPH)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_each_package_imports_only_the_layers_below_it(package: str) -> None:
    allowed = LAYERS[package] | {package}
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if package_of(module) == package
        for target in targets
        if package_of(target) not in allowed
    )
    assert not wrong, wrong


def test_nothing_imports_the_repository_directories_by_their_own_names() -> None:
    tests = sorted((REPO / "tests").rglob("*.py"))
    wrong = sorted(
        f"{path.relative_to(REPO)}:{node.lineno} imports {name}"
        for path in [*MODULES.values(), *tests]
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0)
        for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        if name.split(".")[0] in {"common", "producer", "aggregator"}
    )
    assert not wrong, wrong
