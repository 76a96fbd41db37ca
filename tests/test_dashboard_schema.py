"""The generated dashboard is valid for the Grafana that ``deploy/docker-compose.yml``
runs, by Grafana's own schema of it.

Grafana publishes its dashboard schema for each release as TypeScript types, npm's
``@grafana/schema`` (generated from the CUE kinds Grafana's backend is built from; the
package ships no JSON schema). ``tests/support/grafana_schema/package-lock.json`` pins
the release of the compose file's Grafana and the TypeScript compiler; ``make
grafana-schema`` installs both into ``.cache/grafana-schema``. The test writes the
dashboard out as TypeScript object literals, typed with
``tests/support/grafana_schema/dashboard.ts`` (the dashboard by ``Dashboard``, each
panel by ``Panel`` with its plugin's options and custom field config), and has ``tsc``
check them: every key must be one the schema declares, every value of its type (enum
values included), every required field there. Queries are checked as Grafana's
``DataQuery``; what is particular to a Prometheus query (``expr``, ``legendFormat``,
...) belongs to the Prometheus plugin, which the package does not describe
(tests/test_prometheus.py runs every expression against a real Prometheus).

The same run checks broken copies of the dashboard, each of which must fail, so that a
check that accepts anything cannot pass.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvldp import dashboard

from support.package import REPO

SCHEMA = REPO / "tests" / "support" / "grafana_schema"
MODULES = REPO / ".cache" / "grafana-schema" / "node_modules"
COMPOSE = REPO / "deploy" / "docker-compose.yml"

#: broken copies of the dashboard, by name: each must fail the check
BROKEN: dict[str, Callable[[dict[str, Any]], object]] = {
    "unit_not_a_string": lambda b: b["panels"][0]["fieldConfig"]["defaults"].update(unit=1),
    "threshold_mode_unknown": lambda b: b["panels"][18]["fieldConfig"]["defaults"]["thresholds"].update(
        mode="absolut"
    ),
    "grid_without_height": lambda b: b["panels"][2]["gridPos"].pop("h"),
    "panel_key_unknown": lambda b: b["panels"][3].update(legend="bottom"),
    "stat_option_unknown": lambda b: b["panels"][4]["options"].update(textMode="values"),
    "bargauge_option_missing": lambda b: b["panels"][6]["options"].pop("displayMode"),
    "timeseries_custom_unknown": lambda b: b["panels"][18]["fieldConfig"]["defaults"]["custom"].update(
        thresholdsStyle={"mode": "lines"}
    ),
    "transformation_without_id": lambda b: b["panels"][7]["transformations"][0].pop("id"),
    "query_without_ref": lambda b: b["panels"][0]["targets"][0].pop("refId"),
    "variable_refresh_unknown": lambda b: b["templating"]["list"][0].update(refresh=7),
    "dashboard_key_unknown": lambda b: b.update(theme="dark"),
}


def typescript(board: dict[str, Any]) -> str:
    """``board`` as TypeScript: the dashboard without its panels as a ``Board``, then
    each panel as the ``Panels`` type of its kind."""
    rest = {key: value for key, value in board.items() if key != "panels"}
    lines = [
        f"import type {{ Board, Panels }} from {json.dumps(str(SCHEMA / 'dashboard'))};",
        f"export const dashboard: Board = {json.dumps(rest, indent=2)};",
    ]
    lines += [
        f"export const panel{i}: Panels[{json.dumps(panel['type'])}] = {json.dumps(panel, indent=2)};"
        for i, panel in enumerate(board["panels"])
    ]
    return "\n".join(lines) + "\n"


def tsc_errors(sources: dict[str, str], where: Path) -> dict[str, list[str]]:
    """Type-check ``sources`` (file name: TypeScript) in one run of tsc; its errors by
    file name."""
    for name, text in sources.items():
        (where / name).write_text(text)
    modules = str(MODULES / "@grafana" / "schema")
    config = {
        "compilerOptions": {
            "strict": True,
            "noEmit": True,
            "skipLibCheck": True,
            "module": "commonjs",
            "moduleResolution": "node10",
            "target": "es2022",
            "types": [],
            "paths": {"@grafana/schema": [modules], "@grafana/schema/*": [f"{modules}/*"]},
        },
        "files": sorted(sources),
    }
    (where / "tsconfig.json").write_text(json.dumps(config))
    node = shutil.which("node")
    assert node, "node is not installed: make grafana-schema installs Debian's nodejs"
    done = subprocess.run(
        [
            node,
            str(MODULES / "typescript" / "bin" / "tsc"),
            "-p",
            str(where / "tsconfig.json"),
            "--pretty",
            "false",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        match = re.match(r"(\S+?\.ts)\(\d+,\d+\): error ", line)
        if match:
            errors.setdefault(Path(match.group(1)).name, []).append(line)
        elif line.startswith(("error ", "tsconfig")):
            errors.setdefault("tsconfig.json", []).append(line)
    assert done.returncode == (2 if errors else 0), done.stdout + done.stderr
    return errors


@pytest.fixture(scope="module")
def installed() -> None:
    assert (MODULES / "typescript" / "bin" / "tsc").is_file(), (
        "Grafana's schema is not installed: run make grafana-schema (make test does)"
    )


def test_the_schema_is_the_one_of_the_compose_files_grafana(installed: None) -> None:
    (image,) = re.findall(r"image:\s*grafana/grafana:(\S+)", COMPOSE.read_text())
    pinned = json.loads((SCHEMA / "package.json").read_text())["devDependencies"]["@grafana/schema"]
    installed_version = json.loads((MODULES / "@grafana" / "schema" / "package.json").read_text())["version"]
    assert image == pinned == installed_version


def test_the_dashboard_is_valid_by_grafanas_schema_and_broken_copies_are_not(
    installed: None, tmp_path: Path
) -> None:
    board = dashboard.build()
    sources = {"dashboard.ts": typescript(board)}
    for name, breaks in BROKEN.items():
        broken = copy.deepcopy(board)
        breaks(broken)
        sources[f"broken_{name}.ts"] = typescript(broken)
    errors = tsc_errors(sources, tmp_path)
    assert "dashboard.ts" not in errors, "\n".join(errors["dashboard.ts"])
    assert sorted(errors) == sorted(name for name in sources if name != "dashboard.ts"), errors
