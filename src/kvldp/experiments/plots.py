"""PNG figures in the papers' style: one figure per panel, a subplot per metric, error
against epsilon (or n) on a log scale, one line per series; the paper's printed numbers
are drawn as hollow markers, analytic predictions ("theory") as dotted lines. matplotlib is the optional ``plots`` extra:
without it the report says so and the CSV and Markdown are still written."""

from __future__ import annotations

import re
from pathlib import Path

from kvldp.common.typed_fields import is_number
from kvldp.experiments.model import PRINTED, THEORY, Experiment, Row


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "panel"


def plot(experiment: Experiment, rows: list[Row], out: Path) -> tuple[list[Path], str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            [],
            "Plots: not drawn — matplotlib is missing (install the `plots` extra: `pip install 'kvldp[plots]'`).",
        )
    paths: list[Path] = []
    for panel in dict.fromkeys(r["panel"] for r in rows):
        mine = [r for r in rows if r["panel"] == panel]
        metrics = [m for m in experiment.metrics if any(_positive(r.get(m.column)) for r in mine)]
        if not metrics:
            continue
        fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.3), squeeze=False)
        for ax, metric in zip(axes[0], metrics, strict=True):
            for series in dict.fromkeys(r["series"] for r in mine):
                ours = [r for r in mine if r["series"] == series]
                pts = _points(ours, metric.column, metric.scale)
                if not pts:
                    continue
                style = "-" if any(r["role"] == "paper" for r in ours) else "--"
                (line,) = ax.plot(*zip(*pts, strict=True), style, marker="o", ms=3, label=series)
                printed = _points(ours, PRINTED.get(metric.column), metric.scale)
                if printed:
                    ax.plot(*zip(*printed, strict=True), "s", mfc="none", color=line.get_color(), ms=6)
                theory = _points(ours, THEORY.get(metric.column), metric.scale)
                if theory:
                    ax.plot(
                        *zip(*theory, strict=True), ":", color=line.get_color(), label=f"{series} (theory)"
                    )
            ax.set_yscale("log" if metric.log else "linear")
            if experiment.log_x:
                ax.set_xscale("log")
            ax.set_xlabel("ε" if experiment.x_name == "epsilon" else experiment.x_name)
            ax.set_title(metric.label, fontsize=9)
            ax.grid(True, which="both", alpha=0.25)
        axes[0][0].legend(fontsize=6)
        fig.suptitle(
            f"{experiment.name}: {panel}" + ("   (□ printed in the paper)" if _has_printed(mine) else ""),
            fontsize=9,
        )
        fig.tight_layout()
        path = out / f"{_slug(panel)}.png"
        fig.savefig(path, dpi=72)
        plt.close(fig)
        paths.append(path)
    return paths, ""


def _positive(value: object) -> bool:
    """Plottable on a log axis; NCR's zeros are dropped too (a rare all-miss repeat average)."""
    return is_number(value) and value > 0


def _points(rows: list[Row], column: str | None, scale: float) -> list[tuple[float, float]]:
    """(x, value / scale) of the rows whose ``column`` is plottable (none without a column)."""
    return [(r["x"], r[column] / scale) for r in rows if column and _positive(r.get(column))]


def _has_printed(rows: list[Row]) -> bool:
    return any(_positive(r.get("paper_mse_frequency")) or _positive(r.get("paper_mse_mean")) for r in rows)
