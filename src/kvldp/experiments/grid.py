"""Run an experiment grid and write its CSV, Markdown report and PNG plots.

Populations are generated once per (dataset, users, keys) and shared by every cell of
the grid, as in the papers (the repeats re-run the mechanisms' randomness, not the
data). A cell's perturbation seed comes from the run seed and its mechanism
configuration in its setting (panel, x, data, mechanism, parameters), not from the
estimator: series that read one mechanism with different estimators (Algorithm 4, EM,
Norm-Sub, empirical Bayes) are scored on the same reports, so their differences are
the estimators', not Monte-Carlo noise between independent runs.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvldp.common.files.atomic_file import write_atomically, write_csv
from kvldp.common.mechanisms import create
from kvldp.evaluation.prediction import predict
from kvldp.evaluation.scoring import evaluate
from kvldp.experiments.model import Cell, Experiment, Row
from kvldp.experiments.plots import plot
from kvldp.experiments.report import markdown
from kvldp.progress import Progress
from kvldp.sim import datasets

CSV_FIXED = (
    "experiment", "panel", "x", "series", "role", "dataset", "users", "keys", "epsilon", "mechanism",
    "params", "estimator", "repeats", "mse_frequency", "mse_mean", "mae_frequency", "mae_mean",
    "undefined_means", "paper_mse_frequency", "paper_mse_mean", "predicted_mse_frequency",
    "predicted_mse_mean", "seconds",
)  # fmt: skip


def run(
    experiment: Experiment,
    quick: bool,
    seed: int = 0,
    show_progress: bool = True,
    dataset_override: str | None = None,
) -> list[Row]:
    """Score every cell of the grid (``dataset_override`` replaces every cell's dataset)."""
    cells = experiment.cells(quick)
    if dataset_override is not None:
        cells = _override(experiment, cells, dataset_override)
    populations: dict[tuple[str, int | None, int], datasets.Dataset] = {}
    rows: list[Row] = []
    with Progress(sum(c.repeats for c in cells), experiment.name) as bar:
        bar.enabled = bar.enabled and show_progress
        for cell in cells:
            key = (cell.dataset, cell.users, cell.keys)
            if key not in populations:
                populations[key] = datasets.generate(
                    cell.dataset, cell.users, cell.keys, experiment.data_seed
                )
            rows.append(_run_cell(experiment, cell, populations[key], report_seed(seed, cell)))
            bar.advance(cell.repeats)
    return rows


def report_seed(seed: int, cell: Cell) -> int:
    """The perturbation seed of ``cell``: shared by the cells that differ only in estimator."""
    reports = (cell.panel, cell.x, cell.dataset, cell.users, cell.keys, cell.epsilon, cell.mechanism)
    text = json.dumps([*reports, dict(cell.params)], sort_keys=True, default=str)
    return seed * 100_003 + zlib.crc32(text.encode("utf-8"))


def _override(experiment: Experiment, cells: list[Cell], dataset: str) -> list[Cell]:
    """The grid on one ratings file: panels that differed only by their synthetic data
    collapse into one per key count, and the ``advise`` series (picked for the synthetic
    populations) are left out. A grid over n cannot take a file of fixed size."""
    if experiment.x_name == "users":
        raise ValueError(f"{experiment.name} varies the number of users; a ratings file has a fixed number")
    name = Path(dataset[len(datasets.CSV_PREFIX) :]).name
    several = len({c.keys for c in cells}) > 1
    unique: dict[tuple[float, str, int], Cell] = {}
    for c in cells:
        if c.series.startswith("advise"):
            continue
        panel = f"{name}, d={c.keys}" if several else name
        unique.setdefault(
            (c.x, c.series, c.keys),
            replace(
                c, panel=panel, dataset=dataset, users=None, paper_mse_frequency=None, paper_mse_mean=None
            ),
        )
    return list(unique.values())


def _run_cell(experiment: Experiment, cell: Cell, data: datasets.Dataset, seed: int) -> Row:
    mech = create(cell.mechanism, cell.keys, cell.epsilon, **dict(cell.params))
    true_f, true_m = data.users.truth()
    extra = experiment.extra(true_f, true_m) if experiment.extra is not None else None
    queries = experiment.queries(cell.keys) if experiment.queries is not None else []
    started = time.perf_counter()
    result = evaluate(mech, cell.estimator, data, cell.repeats, seed, False, queries, extra)
    row: Row = {
        "experiment": experiment.name,
        "panel": cell.panel,
        "x": cell.x,
        "series": cell.series,
        "role": cell.role,
        "dataset": cell.dataset,
        "users": data.users.n_users,
        "keys": cell.keys,
        "epsilon": cell.epsilon,
        "mechanism": cell.mechanism,
        "params": json.dumps(dict(cell.params), sort_keys=True),
        "estimator": cell.estimator,
        "repeats": cell.repeats,
        "paper_mse_frequency": cell.paper_mse_frequency,
        "paper_mse_mean": cell.paper_mse_mean,
    }
    skip = {
        "mechanism",
        "notion",
        "estimator",
        "dataset",
        "users",
        "keys",
        "epsilon",
        "params",
        "repeats",
        "seed",
    }
    row.update({k: v for k, v in result.items() if k not in skip and not isinstance(v, list)})
    if cell.theory:
        theory = predict(mech, data.users, cell.estimator).average()
        row["predicted_mse_frequency"] = theory[0]
        row["predicted_mse_mean"] = theory[1] if mech.collects_values else None
    row["seconds"] = time.perf_counter() - started
    return row


def write(experiment: Experiment, rows: list[Row], out: Path, command: str) -> list[Path]:
    """Write ``results.csv``, ``README.md`` and the plots into ``out``; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    columns = list(CSV_FIXED) + sorted({k for r in rows for k in r} - set(CSV_FIXED))
    csv_path = out / "results.csv"
    write_csv(csv_path, columns, ({k: _cell_text(r.get(k)) for k in columns} for r in rows))
    pngs, plot_note = plot(experiment, rows, out)
    md_path = out / "README.md"
    text = markdown(experiment, rows, command, [p.name for p in pngs], plot_note)
    write_atomically(md_path, text.encode("utf-8"), mode=0o644)
    return [csv_path, md_path, *pngs]


def _cell_text(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else value
