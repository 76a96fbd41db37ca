"""The kvldp package: one path per module, layered imports, no circle, no repeated names.

* **One path per module.** The package lives in ``src/kvldp`` and nowhere else: the
  repository tracks no symbolic link, nothing on ``sys.path`` (of the tests or of the
  ``kvldp`` command) reaches a module under a second name, and the repository's root,
  which holds ``src`` and ``tests``, is not on it.
* **Layers.** ``lint-imports`` (import-linter, run by ``make lint``) checks the contracts
  of ``pyproject.toml``: each layer of ``docs/architecture.md`` imports only the layers
  below it, each room of ``kvldp.common`` only the rooms below it, ``kvldp.common`` no
  Kafka client, web server, metrics or plots, and no package or module takes part in an
  import circle. Import-linter reads every import statement, lazy ones inside functions
  included. The tests here prove that each contract fails when its rule is broken, on a
  copy of the package with one import added.
* **Names.** A file name is used once in the package (``__init__``, ``__main__`` aside),
  unless it is a command and the package that implements it (``kvldp.cli.bench`` and
  ``kvldp.bench``).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from support import run
from support.package import MODULES, PACKAGE, REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
#: command modules named for the package that implements their command
COMMAND_AND_PACKAGE = {"bench", "broker", "demo", "gateway", "mechanisms"}


def test_the_walk_sees_the_whole_package() -> None:
    assert {"kvldp.cli", "kvldp.common.messages.wire", "kvldp.producer.collector", "kvldp.aggregator"} <= set(
        MODULES
    )
    assert len(MODULES) > 100


# ------------------------------------------------------------------ one path per module
def test_the_repository_tracks_no_symbolic_link() -> None:
    listed = run(["git", "ls-files", "--stage"], cwd=REPO, check=True).stdout.splitlines()
    links = [line.split("\t", 1)[1] for line in listed if line.startswith("120000 ")]
    assert not links, links
    assert not [p for p in PACKAGE.rglob("*") if p.is_symlink()]


def second_names(path_entries: list[str]) -> list[str]:
    """Every (entry, module) where a module file of the package lies under a ``sys.path``
    entry by another name than its own: the way one file becomes two modules."""
    wrong = []
    for entry in path_entries:
        root = Path(entry or ".").resolve()
        for name, path in MODULES.items():
            if root in path.parents:
                parts = path.relative_to(root).with_suffix("").parts
                as_named = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                if as_named != name:
                    wrong.append(f"{entry}: {as_named}")
    return wrong


def test_a_second_name_is_seen() -> None:
    # the repository's root would make src.kvldp.common.errors of kvldp.common.errors,
    # and the package's own directory common.errors: both are caught
    assert "src.kvldp.common.errors" in {w.split(": ")[1] for w in second_names([str(REPO)])}
    assert "common.errors" in {w.split(": ")[1] for w in second_names([str(PACKAGE)])}
    assert second_names([str(PACKAGE.parent)]) == []


def test_no_module_is_importable_under_a_second_name_in_the_tests() -> None:
    assert not second_names(sys.path)
    assert (
        Path(importlib.import_module("kvldp.common.errors").__file__ or "") == MODULES["kvldp.common.errors"]
    )
    for other in ("common", "producer", "aggregator", "src", "src.kvldp"):
        assert importlib.util.find_spec(other.split(".")[0]) is None, other


def test_no_module_is_importable_under_a_second_name_in_the_command() -> None:
    # the kvldp entry point's sys.path: its own directory (the venv's bin), then the
    # interpreter's path, which `python -P` prints without adding the working directory
    script = Path(sys.executable).with_name("kvldp")
    code = "import json, sys; print(json.dumps(sys.path))"
    printed = run([sys.executable, "-P", "-c", code], cwd=REPO, check=True).stdout
    entries = [str(script.parent), *json.loads(printed)]
    assert not second_names(entries)
    assert REPO not in [Path(e).resolve() for e in entries]


# ------------------------------------------------------------------ layers and circles
def lint_imports(source: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the repository's contracts on the package under ``source/src``."""
    return run(
        [str(LINT_IMPORTS), "--no-cache", str(REPO / "pyproject.toml")],
        cwd=source,
        env={"PYTHONPATH": str(source / "src")},
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "src" / "kvldp", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def add_import(copy: Path, module: str, statement: str) -> None:
    path = copy / "src" / MODULES[module].relative_to(PACKAGE.parent)
    path.write_text(path.read_text() + f"\n{statement}\n")


def test_the_contracts_hold(copy: Path) -> None:
    linted = lint_imports(copy)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "4 kept, 0 broken" in linted.stdout


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        # the device SDK and the service never import each other
        ("kvldp.producer.pairs", "from kvldp.aggregator import service", "each layer imports only"),
        # a lazy import inside a function counts as well
        (
            "kvldp.aggregator.dedup",
            "def _f():\n    import kvldp.producer.collector",
            "each layer imports only",
        ),
        # the pure library imports no kvldp package above it
        ("kvldp.common.data.stats", "import kvldp.kafka.client_config", "each layer imports only"),
        ("kvldp.common.data.stats", "import aiokafka", "kvldp.common runs on a device"),
        # a room of kvldp.common imports no room above it
        ("kvldp.common.files.path_checks", "import kvldp.common.messages.wire", "each room of kvldp.common"),
        # a circle inside one package
        ("kvldp.common.errors", "import kvldp.common.messages.wire", "no import circle"),
    ],
)
def test_each_contract_fails_when_its_rule_is_broken(
    copy: Path, module: str, statement: str, contract: str
) -> None:
    add_import(copy, module, statement)
    linted = lint_imports(copy)
    assert linted.returncode == 1, linted.stdout + linted.stderr
    assert contract in linted.stdout and "BROKEN" in linted.stdout.split(contract, 1)[1].splitlines()[0]


# ------------------------------------------------------------------ names
def test_a_file_name_is_used_once() -> None:
    stems = Counter(p.stem for p in MODULES.values() if p.stem not in {"__init__", "__main__"})
    packages = {p.parent.name for p in MODULES.values() if p.name == "__init__.py"}
    repeated = sorted(s for s, count in stems.items() if count > 1)
    assert not repeated, repeated
    # a module named like a package: only a command and the package behind it
    clashes = {s for s in stems if s in packages}
    assert clashes == COMMAND_AND_PACKAGE, clashes
    assert all(f"kvldp.cli.{name}" in MODULES for name in clashes)
