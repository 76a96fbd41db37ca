"""Studies: experiments that are not a grid of scored estimates (model.Experiment), with
their own rows, tables and plots, run by ``kvldp evaluate --experiment NAME`` like the
grids and written alike to NAME/: results.csv, README.md (title, source, command,
notes, then the study's own tables) and PNG plots."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvldp.common.files.atomic_file import write_atomically, write_csv
from kvldp.experiments.model import Row

#: what a study's report adds below its header: (Markdown lines, plots written into the folder)
Body = Callable[[list[Row], Path], tuple[list[str], list[Path]]]


@dataclass(frozen=True)
class Study:
    """A study: its ``run(quick, seed, show_progress)`` giving rows, and ``body`` writing
    its tables and plots."""

    name: str
    title: str
    source: str
    notes: str
    run: Callable[[bool, int, bool], list[Row]]
    body: Body


def write(study: Study, rows: list[Row], out: Path, command: str) -> list[Path]:
    """Write results.csv, README.md and the study's plots into ``out``; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    csv_path = out / "results.csv"
    write_csv(csv_path, columns, ({k: _text(r.get(k)) for k in columns} for r in rows))
    lines, plots = study.body(rows, out)
    header = [
        f"# {study.name}: {study.title}",
        "",
        f"Source: {study.source}.",
        "",
        f"Made by `{command}`.",
        "",
    ]
    text = "\n".join([*header, study.notes.strip(), "", *lines, ""])
    md_path = out / "README.md"
    write_atomically(md_path, text.encode("utf-8"), mode=0o644)
    return [csv_path, md_path, *plots]


def _text(value: object) -> object:
    if isinstance(value, float):
        return f"{value:.6g}" if value == value else ""
    return "" if value is None else value


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None without the ``plots`` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def saved_plot(plt: Any, fig: Any, path: Path, lines: list[str]) -> tuple[list[str], list[Path]]:
    """Save ``fig`` (laid out) to ``path`` and close it: the report's ``lines`` followed by
    the plot's section, and the plot's path (a study body's result)."""
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return [*lines, "", "## Plot", "", f"![{path.name}]({path.name})"], [path]


#: the line a report carries when matplotlib is missing
NO_PLOTS = (
    "Plots: not drawn — matplotlib is missing (install the `plots` extra: `pip install 'kvldp[plots]'`)."
)
