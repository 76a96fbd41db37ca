"""Prometheus's ``promtool`` for the deploy stack's alert rules (Debian's prometheus
package, which ``make test`` installs): checking a rules file, and running a rule unit
test written as a dict (JSON is YAML)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any


def promtool_path() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is not installed: `make test` installs Debian's prometheus package"
    return path


def check_rules(promtool: str, rules: Path) -> None:
    """``promtool check rules``: the file parses and every expression is valid."""
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def run_rule_tests(
    promtool: str,
    rules: Path,
    workdir: Path,
    interval: str,
    series: dict[str, str],
    checks: list[dict[str, Any]],
) -> None:
    """``promtool test rules`` of ``rules``: ``series`` (name{labels} to values, one per
    ``interval``) evaluated every ``interval``, each alert of ``checks`` as expected."""
    tests = {
        "rule_files": [str(rules.resolve())],
        "evaluation_interval": interval,
        "tests": [
            {
                "interval": interval,
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "alert_rule_test": checks,
            }
        ],
    }
    path = workdir / f"{rules.stem}-test.yml"
    path.write_text(json.dumps(tests))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
