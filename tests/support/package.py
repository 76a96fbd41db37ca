"""The kvldp package as its source files: where the repository is, and every module by
its dotted name (read from ``src/kvldp``, never by importing it)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: the one directory the package's modules live in
PACKAGE = REPO / "src" / "kvldp"


def source_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name, from its files under ``src/kvldp``."""
    modules: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = source_modules()
