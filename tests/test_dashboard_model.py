"""The dashboard built with Grafana's Foundation SDK loses nothing of the hand-written
one it replaced.

``tests/data/dashboard_reference.json`` holds that dashboard (the committed
``deploy/grafana/dashboards/kvldp.json`` as the hand-written builder wrote it), read
into this file's terms: the dashboard's settings; each template variable's name, label,
type, data source, query, definition, refresh, sort, multi, includeAll and allValue; and
for each panel, by id: its title, type, grid position, data source, description, unit,
thresholds, custom field config, overrides, links, transformations, options and the list
of its queries (refId, expr, legendFormat, instant, range, format, data source). The
reference is a file of data rather than a dashboard written out again here, so that it
is the old dashboard itself, not a second copy of the new one's code.

Everything compares equal, but for what the SDK adds of its own: Grafana's defaults.
Panel options and custom field config are compared as "every value of the reference is
there, unchanged": the SDK writes the plugin's default for each option the reference
left to Grafana (a stat panel's ``graphMode``: ``area``). A panel whose options the
reference left empty has none. A deliberate change to the dashboard changes the
reference with it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvldp import dashboard

REFERENCE = json.loads((Path(__file__).parent / "data" / "dashboard_reference.json").read_text())
#: the dashboard-level settings compared
SETTINGS = ("uid", "title", "tags", "timezone", "schemaVersion", "version", "refresh", "time", "editable")
#: the fields of a template variable compared
VARIABLE = (
    "name",
    "label",
    "type",
    "datasource",
    "query",
    "definition",
    "refresh",
    "sort",
    "multi",
    "includeAll",
    "allValue",
)


def query_terms(target: dict[str, Any]) -> dict[str, Any]:
    """A panel's query, absent flags read as Grafana reads them (a range query, one
    series per label set)."""
    return {
        "refId": target["refId"],
        "expr": target["expr"],
        "legendFormat": target.get("legendFormat"),
        "instant": target.get("instant", False),
        "range": target.get("range", True),
        "format": target.get("format", "time_series"),
        "datasource": target.get("datasource"),
    }


def panel_terms(panel: dict[str, Any]) -> dict[str, Any]:
    """What a panel shows and how, in the terms of the reference."""
    field_config = panel.get("fieldConfig", {})
    defaults = field_config.get("defaults", {})
    return {
        "title": panel["title"],
        "type": panel["type"],
        "gridPos": panel["gridPos"],
        "datasource": panel.get("datasource"),
        "description": panel.get("description"),
        "unit": defaults.get("unit"),
        "thresholds": defaults.get("thresholds"),
        "custom": defaults.get("custom", {}),
        "overrides": field_config.get("overrides", []),
        "links": panel.get("links", []),
        "transformations": panel.get("transformations", []),
        "options": panel.get("options", {}),
        "targets": [query_terms(t) for t in panel.get("targets", [])],
    }


def terms(board: dict[str, Any]) -> dict[str, Any]:
    """A dashboard in the terms of the reference: settings, variables, panels by id
    (as a string, as JSON keys are) in the dashboard's order."""
    return {
        "settings": {**{key: board.get(key) for key in SETTINGS}, "links": board.get("links", [])},
        "variables": [{key: v.get(key) for key in VARIABLE} for v in board["templating"]["list"]],
        "panels": {str(p["id"]): panel_terms(p) for p in board["panels"]},
    }


def missing(reference: Any, built: Any, path: str) -> list[str]:
    """Where ``built`` lacks or changes a value of ``reference`` (objects: every key of
    the reference; anything else: equal, of the same JSON type)."""
    if isinstance(reference, dict) and isinstance(built, dict):
        return [
            problem
            for key, value in reference.items()
            for problem in (
                missing(value, built[key], f"{path}.{key}") if key in built else [f"{path}.{key}: missing"]
            )
        ]
    if reference != built or type(reference) is not type(built):
        return [f"{path}: {built!r} instead of {reference!r}"]
    return []


def panel_differences(reference: dict[str, Any], built: dict[str, Any]) -> list[str]:
    """How a built panel differs from the reference's: options and custom field
    config must hold every value of the reference, everything else must be equal."""
    problems = []
    for key, value in reference.items():
        if key in ("options", "custom"):
            problems += missing(value, built[key], key)
        elif built[key] != value:
            problems.append(f"{key}: {built[key]!r} instead of {value!r}")
    return problems


def differences(board: dict[str, Any]) -> list[str]:
    """Everything in which ``board`` departs from the reference."""
    built = terms(board)
    problems = [
        f"settings.{key}: {built['settings'][key]!r} instead of {value!r}"
        for key, value in REFERENCE["settings"].items()
        if built["settings"][key] != value
    ]
    if built["variables"] != REFERENCE["variables"]:
        problems.append(f"variables: {built['variables']!r} instead of {REFERENCE['variables']!r}")
    if list(built["panels"]) != list(REFERENCE["panels"]):
        problems.append(f"panels: ids {list(built['panels'])} instead of {list(REFERENCE['panels'])}")
    for pid, panel in REFERENCE["panels"].items():
        if pid in built["panels"]:
            problems += [f"panel {pid}: {p}" for p in panel_differences(panel, built["panels"][pid])]
    return problems


def test_the_reference_is_the_whole_old_dashboard() -> None:
    assert len(REFERENCE["panels"]) == 26
    assert [v["name"] for v in REFERENCE["variables"]] == ["collection", "window", "estimator"]
    queries = [t for p in REFERENCE["panels"].values() for t in p["targets"]]
    assert len(queries) == 44 and all(t["expr"] and t["refId"] for t in queries)
    assert sum(1 for p in REFERENCE["panels"].values() if p["thresholds"]) == 2
    assert sum(1 for p in REFERENCE["panels"].values() if p["transformations"]) == 4


@pytest.mark.parametrize("pid", list(REFERENCE["panels"]))
def test_every_panel_keeps_its_queries_and_settings(pid: str) -> None:
    built = terms(dashboard.build())["panels"]
    assert pid in built, f"panel {pid} is gone"
    assert panel_differences(REFERENCE["panels"][pid], built[pid]) == []


def test_the_dashboard_keeps_its_settings_variables_and_panel_order() -> None:
    assert differences(dashboard.build()) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda b: b["panels"][0]["targets"][0].update(expr="up"), "panel 1: targets:"),
        (lambda b: b["panels"][7]["targets"][1].update(refId="Z"), "panel 8: targets:"),
        (lambda b: b["panels"][6]["targets"][0].pop("instant"), "panel 7: targets:"),
        (lambda b: b["panels"][7]["targets"][0].pop("format"), "panel 8: targets:"),
        (lambda b: b["panels"][3]["fieldConfig"]["defaults"].update(unit="ms"), "panel 4: unit:"),
        (
            lambda b: b["panels"][18]["fieldConfig"]["defaults"]["thresholds"]["steps"].pop(),
            "panel 19: thresholds:",
        ),
        (
            lambda b: b["panels"][18]["fieldConfig"]["defaults"].pop("custom"),
            "panel 19: custom.thresholdsStyle: missing",
        ),
        (lambda b: b["panels"][15]["options"].update(textMode="value"), "panel 16: options.textMode"),
        (lambda b: b["panels"][17]["transformations"].clear(), "panel 18: transformations:"),
        (lambda b: b["panels"][2]["gridPos"].update(w=9), "panel 3: gridPos:"),
        (lambda b: b["panels"][4].update(description="?"), "panel 5: description:"),
        (lambda b: b["panels"][4].update(links=[{"title": "x", "url": "/"}]), "panel 5: links:"),
        (lambda b: b["panels"].pop(), "panels: ids"),
        (lambda b: b["templating"]["list"][0].update(includeAll=False), "variables:"),
        (lambda b: b.update(refresh="1m"), "settings.refresh:"),
    ],
)
def test_a_lost_or_changed_part_is_found(change: Callable[[dict[str, Any]], object], expected: str) -> None:
    """The comparison finds what it must: each change made to a copy of the built
    dashboard is reported."""
    board = copy.deepcopy(dashboard.build())
    change(board)
    found = differences(board)
    assert any(problem.startswith(expected) for problem in found), found
